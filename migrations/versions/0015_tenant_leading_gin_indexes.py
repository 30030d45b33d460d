"""GIN indexes that lead with ``tenant_id``: a small tenant no longer reads every tenant's postings.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-04

Every read of the ``search_terms`` (BM25 candidates), ``tags`` and ``entity_ids`` arrays is
scoped to one tenant (``tenant_id = :tenant AND search_terms && ARRAY[:term]``), but their
GIN indexes held the array elements alone: a bitmap scan read a term's posting list over
ALL tenants, then dropped the other tenants' rows. With 1,000,000 facts across 1,000
tenants, a hybrid retrieval of a tenant of 400 facts spent 287 ms of its 312 ms reading the
posting lists of its ten query terms (28 ms each), held by ~100,000 rows of other tenants.

Each index now also holds ``tenant_id`` (a GIN column through the ``btree_gin``
extension, shipped with PostgreSQL's contrib modules and trusted since PostgreSQL 13, so a
database owner may create it). A scan with both conditions intersects the tenant's entry
with the term's; GIN's fast scan drives the intersection from the shorter posting list
and skips through the longer one. The same hybrid retrieval: 12.9 ms of execution. A
query on the array alone can still use the index (GIN serves any subset of its columns).

Replaced, with the same options (``fastupdate=off`` for ``tags`` and ``entity_ids``):
``facts`` (``search_terms``, ``tags``, ``entity_ids``), ``episodes`` and
``episode_messages`` (``search_terms``).

``CREATE INDEX`` blocks writes to the table while it builds (reads go on): about 5 s per
index at 1,000,000 facts here. On a large live table build the new indexes first with
``CREATE INDEX CONCURRENTLY`` (same names and definitions as below), then run this
migration, which skips indexes that exist. The downgrade restores the single-column
indexes (and leaves the extension installed).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import context, op

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

NO_FASTUPDATE = " WITH (fastupdate = off)"

INDEXES: tuple[tuple[str, str, str, str], ...] = (
    # (table, column, old index, options)
    ("facts", "search_terms", "ix_facts_search_terms_gin", ""),
    ("facts", "tags", "ix_facts_tags_gin", NO_FASTUPDATE),
    ("facts", "entity_ids", "ix_facts_entity_ids_gin", NO_FASTUPDATE),
    ("episodes", "search_terms", "ix_episodes_search_terms_gin", ""),
    ("episode_messages", "search_terms", "ix_episode_messages_search_terms_gin", ""),
)
"""The array GIN indexes this migration makes tenant-leading."""


def new_name(table: str, column: str) -> str:
    """The name of the tenant-leading index of ``table.column``."""
    return f"ix_{table}_tenant_id_{column}_gin"


BTREE_GIN_KEY = "btree_gin_extension"
"""``schema_metadata`` key: ``created`` when this revision installed ``btree_gin``, else
``preexisting`` (then the downgrade leaves the extension in place)."""


def upgrade() -> None:
    # Remember whether this revision installs btree_gin: the downgrade removes only what
    # it created (as revision 0001 does for pgvector).
    offline = context.is_offline_mode()
    preexisting = not offline and (
        op.get_bind()
        .execute(sa.text("SELECT 1 FROM pg_extension WHERE extname = 'btree_gin'"))
        .first()
        is not None
    )
    op.execute("CREATE EXTENSION IF NOT EXISTS btree_gin")
    if not offline:
        op.execute(
            sa.text(
                "INSERT INTO schema_metadata (key, value) VALUES (:k, :v) "
                "ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value"
            ).bindparams(k=BTREE_GIN_KEY, v="preexisting" if preexisting else "created")
        )
    for table, column, old, options in INDEXES:
        op.execute(
            f"CREATE INDEX IF NOT EXISTS {new_name(table, column)} ON {table} "
            f"USING gin (tenant_id, {column}){options}"
        )
        op.execute(f"DROP INDEX IF EXISTS {old}")


def downgrade() -> None:
    """Restore the single-column indexes; drop ``btree_gin`` only if this revision made it.

    A database upgraded before the origin was recorded keeps the extension (it cannot
    tell), and so does one where anything else uses it.
    """
    for table, column, old, options in INDEXES:
        op.execute(f"CREATE INDEX IF NOT EXISTS {old} ON {table} USING gin ({column}){options}")
        op.execute(f"DROP INDEX IF EXISTS {new_name(table, column)}")
    if context.is_offline_mode():
        return
    bind = op.get_bind()
    origin = bind.execute(
        sa.text("DELETE FROM schema_metadata WHERE key = :k RETURNING value"),
        {"k": BTREE_GIN_KEY},
    ).scalar()
    if origin != "created":
        return
    from sqlalchemy.exc import DBAPIError

    from cycgraph_memory.postgres._errors import sqlstate_of

    try:
        with bind.begin_nested():
            bind.execute(sa.text("DROP EXTENSION IF EXISTS btree_gin"))
    except DBAPIError as exc:
        if sqlstate_of(exc) != "2BP01":  # dependent_objects_still_exist
            raise

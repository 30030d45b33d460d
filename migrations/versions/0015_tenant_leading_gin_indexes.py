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

from alembic import op

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


def upgrade() -> None:
    op.execute("CREATE EXTENSION IF NOT EXISTS btree_gin")
    for table, column, old, options in INDEXES:
        op.execute(
            f"CREATE INDEX IF NOT EXISTS {new_name(table, column)} ON {table} "
            f"USING gin (tenant_id, {column}){options}"
        )
        op.execute(f"DROP INDEX IF EXISTS {old}")


def downgrade() -> None:
    for table, column, old, options in INDEXES:
        op.execute(f"CREATE INDEX IF NOT EXISTS {old} ON {table} USING gin ({column}){options}")
        op.execute(f"DROP INDEX IF EXISTS {new_name(table, column)}")

"""64-bit access counters; facts cite only records of their tenant.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-03

* ``facts.access_count`` becomes ``bigint``: ``touch_facts`` no longer stops counting at
  2,147,483,647 (``MAX_ACCESS_COUNT`` is now ``2**63 - 1`` on both backends).
* A GIN index on ``facts.source_episode_ids``: deleting an episode removes its id from the
  facts that cite it through the index (``entity_ids`` already has one, ``theme_id`` a
  b-tree), so a delete never scans the tenant.
* Facts written before this revision may cite entities, episodes or themes that do not
  exist in their tenant (another tenant's ids, or records hard-deleted since). Writes now
  refuse such references (``DanglingReferenceError``), so this revision removes the
  dangling ones once: unknown ids leave ``entity_ids`` / ``source_episode_ids`` (order
  kept) and an unknown ``theme_id`` becomes NULL. The downgrade does not restore them.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import context, op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_SOURCE_EPISODES_GIN = "ix_facts_source_episode_ids_gin"

_CLEANUPS = (
    # Entity ids that are not entities of the fact's tenant leave the array (order kept).
    """
    UPDATE facts f SET entity_ids = ARRAY(
        SELECT u.x FROM unnest(f.entity_ids) WITH ORDINALITY AS u(x, n)
        WHERE EXISTS (SELECT 1 FROM entities e WHERE e.tenant_id = f.tenant_id AND e.id = u.x)
        ORDER BY u.n)
    WHERE EXISTS (
        SELECT 1 FROM unnest(f.entity_ids) AS u(x)
        WHERE NOT EXISTS (
            SELECT 1 FROM entities e WHERE e.tenant_id = f.tenant_id AND e.id = u.x))
    """,
    """
    UPDATE facts f SET source_episode_ids = ARRAY(
        SELECT u.x FROM unnest(f.source_episode_ids) WITH ORDINALITY AS u(x, n)
        WHERE EXISTS (SELECT 1 FROM episodes e WHERE e.tenant_id = f.tenant_id AND e.id = u.x)
        ORDER BY u.n)
    WHERE EXISTS (
        SELECT 1 FROM unnest(f.source_episode_ids) AS u(x)
        WHERE NOT EXISTS (
            SELECT 1 FROM episodes e WHERE e.tenant_id = f.tenant_id AND e.id = u.x))
    """,
    """
    UPDATE facts f SET theme_id = NULL
    WHERE f.theme_id IS NOT NULL AND NOT EXISTS (
        SELECT 1 FROM themes t WHERE t.tenant_id = f.tenant_id AND t.id = f.theme_id)
    """,
)


def _forced_tables() -> list[str]:
    if context.is_offline_mode():
        return ["entities", "episodes", "facts", "themes"]  # as 0006 leaves them
    return list(op.get_bind().execute(
        sa.text(
            "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = current_schema() AND c.relforcerowsecurity "
            "AND c.relname IN ('facts', 'entities', 'episodes', 'themes') ORDER BY c.relname"
        )
    ).scalars().all())


def _remove_dangling_references() -> None:
    # Row-level security (0006) is FORCEd on the tables: even their owner sees only the
    # tenant of the session setting. Lift it for these statements, inside this transaction.
    forced = _forced_tables()
    for table in forced:
        op.execute(f"ALTER TABLE {table} NO FORCE ROW LEVEL SECURITY")
    for sql in _CLEANUPS:
        op.execute(sql)
    for table in forced:
        op.execute(f"ALTER TABLE {table} FORCE ROW LEVEL SECURITY")


def upgrade() -> None:
    op.alter_column(
        "facts", "access_count", type_=sa.BigInteger(), existing_type=sa.Integer(),
        existing_nullable=False,
    )
    op.create_index(
        _SOURCE_EPISODES_GIN, "facts", ["source_episode_ids"], postgresql_using="gin"
    )
    _remove_dangling_references()


def downgrade() -> None:
    op.drop_index(_SOURCE_EPISODES_GIN, table_name="facts")
    # Counters past the 32-bit range are clamped (they were saturated there before 0007).
    op.alter_column(
        "facts", "access_count", type_=sa.Integer(), existing_type=sa.BigInteger(),
        existing_nullable=False,
        postgresql_using="LEAST(access_count, 2147483647)::integer",
    )

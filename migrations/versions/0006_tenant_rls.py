"""Row-level tenant security on every tenant table; messages unique per tenant.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-02

* Every table of the current schema that has a ``tenant_id`` column, found in the catalog
  when this revision runs (so tables created by earlier revisions are covered too), gets
  ``ENABLE`` and ``FORCE ROW LEVEL SECURITY`` and one policy, ``cycgraph_tenant_isolation``:
  a row is visible and writable only when its ``tenant_id`` equals the transaction-local
  setting ``cycgraph.tenant_id`` (which the backends set in every transaction). With the
  setting absent nothing is visible and nothing can be written. Superusers and roles with
  ``BYPASSRLS`` are exempt (Postgres rule); connect the application as an ordinary role
  (README, "Security model"). Tables created by LATER revisions need their own policy.
* ``episode_messages`` gets ``UNIQUE (tenant_id, id)``: a message is stored once per tenant,
  whatever the interleaving of concurrent ingests. A database holding one message id in two
  episodes of a tenant is refused with ``DuplicateRecordError`` (nothing changed; the
  message gives the query that lists them).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

POLICY = "cycgraph_tenant_isolation"
SETTING = "cycgraph.tenant_id"
MESSAGES_UNIQUE = "uq_episode_messages_tenant_id_id"

_TENANT_TABLES = sa.text(
    """
    SELECT c.relname
    FROM pg_class c
    JOIN pg_namespace n ON n.oid = c.relnamespace
    JOIN pg_attribute a ON a.attrelid = c.oid AND a.attname = 'tenant_id' AND NOT a.attisdropped
    WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'p')
    ORDER BY c.relname
    """
)
_POLICY_TABLES = sa.text(
    "SELECT tablename FROM pg_policies "
    "WHERE schemaname = current_schema() AND policyname = :policy ORDER BY tablename"
)


def _quote(name: str) -> str:
    return str(op.get_bind().dialect.identifier_preparer.quote(name))


def upgrade() -> None:
    bind = op.get_bind()
    duplicates = bind.execute(
        sa.text(
            "SELECT count(*) FROM (SELECT 1 FROM episode_messages "
            "GROUP BY tenant_id, id HAVING count(*) > 1) d"
        )
    ).scalar_one()
    if duplicates:
        # A typed library error (not a bare RuntimeError): ``cycgraph-memory db upgrade``
        # reports it as one line; the transaction rolls back, the schema stays at 0005.
        from cycgraph_memory.errors import DuplicateRecordError

        raise DuplicateRecordError(
            f"{duplicates} message ids are stored in more than one episode of a tenant; "
            "delete the extra copies (SELECT tenant_id, id FROM episode_messages GROUP BY "
            "tenant_id, id HAVING count(*) > 1) before upgrading"
        )
    op.create_unique_constraint(MESSAGES_UNIQUE, "episode_messages", ["tenant_id", "id"])

    check = f"tenant_id = current_setting('{SETTING}', true)"
    for table in bind.execute(_TENANT_TABLES).scalars().all():
        name = _quote(table)
        op.execute(f"ALTER TABLE {name} ENABLE ROW LEVEL SECURITY")
        op.execute(f"ALTER TABLE {name} FORCE ROW LEVEL SECURITY")
        op.execute(f"CREATE POLICY {POLICY} ON {name} USING ({check}) WITH CHECK ({check})")


def downgrade() -> None:
    bind = op.get_bind()
    for table in bind.execute(_POLICY_TABLES, {"policy": POLICY}).scalars().all():
        name = _quote(table)
        op.execute(f"DROP POLICY {POLICY} ON {name}")
        op.execute(f"ALTER TABLE {name} NO FORCE ROW LEVEL SECURITY")
        op.execute(f"ALTER TABLE {name} DISABLE ROW LEVEL SECURITY")
    op.drop_constraint(MESSAGES_UNIQUE, "episode_messages", type_="unique")

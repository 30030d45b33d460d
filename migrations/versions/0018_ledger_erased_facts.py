"""Digests of the fact ids a purge erased, so that the ledger never links them again.

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-08

A purge forgets the ledger's links to the facts it erases, but an outcome recorded after
it (a run that used the fact before it was erased, reported late; a retried
``record_outcome``) linked the erased id again, and a later purge no longer found the fact
to unlink it. ``ledger_erased_facts`` keeps one row per fact a purge erased:
``(tenant_id, fact_digest)``, the SHA-256 (hex) of ``fact:<id>``, never the id itself (no
table names an erased record after a purge); ``record_outcome`` records the run but never
links an id whose digest is listed there.

* Append-only like ``gate_audit_log`` and ``erasure_log`` (the same trigger refuses UPDATE,
  DELETE and TRUNCATE): an erasure is not undone by deleting its record.
* Tenant-isolated by the row-level security policy of every tenant table.
* Every role that may insert into ``outcome_run_facts`` (which records outcomes) is granted
  ``SELECT, INSERT`` on the new table, so an application role without default privileges
  keeps recording outcomes after the upgrade.

The table starts empty: the ids erased before this revision are not known (the erasure
log keeps digests of the selector values only, not of the facts they reached). The
downgrade drops the table; after a re-upgrade the ids erased before are not guarded.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0018"
down_revision: str | None = "0017"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TABLE = "ledger_erased_facts"
POLICY = "cycgraph_tenant_isolation"
SETTING = "cycgraph.tenant_id"

_WRITERS = sa.text(
    """
    SELECT DISTINCT CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE r.rolname END
    FROM pg_class c
    CROSS JOIN LATERAL aclexplode(c.relacl) a
    LEFT JOIN pg_roles r ON r.oid = a.grantee
    WHERE c.oid = to_regclass('outcome_run_facts') AND a.privilege_type = 'INSERT'
      AND a.grantee <> c.relowner
    ORDER BY 1
    """
)


def _quote(name: str) -> str:
    return str(op.get_bind().dialect.identifier_preparer.quote(name))


def upgrade() -> None:
    op.create_table(
        TABLE,
        sa.Column("tenant_id", sa.Text(), nullable=False),
        sa.Column("fact_digest", sa.Text(), nullable=False),
        sa.Column("erased_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("tenant_id", "fact_digest", name=f"pk_{TABLE}"),
    )
    op.execute(
        f"CREATE TRIGGER {TABLE}_append_only BEFORE UPDATE OR DELETE ON {TABLE} "
        "FOR EACH ROW EXECUTE FUNCTION cycgraph_refuse_audit_change()"
    )
    op.execute(
        f"CREATE TRIGGER {TABLE}_no_truncate BEFORE TRUNCATE ON {TABLE} "
        "FOR EACH STATEMENT EXECUTE FUNCTION cycgraph_refuse_audit_change()"
    )
    check = f"tenant_id = current_setting('{SETTING}', true)"
    op.execute(f"ALTER TABLE {TABLE} ENABLE ROW LEVEL SECURITY")
    op.execute(f"ALTER TABLE {TABLE} FORCE ROW LEVEL SECURITY")
    op.execute(f"CREATE POLICY {POLICY} ON {TABLE} USING ({check}) WITH CHECK ({check})")
    for role in op.get_bind().execute(_WRITERS).scalars().all():
        grantee = "PUBLIC" if role == "PUBLIC" else _quote(role)
        op.execute(f"GRANT SELECT, INSERT ON {TABLE} TO {grantee}")


def downgrade() -> None:
    op.execute(f"DROP POLICY {POLICY} ON {TABLE}")
    op.execute(f"DROP TRIGGER {TABLE}_no_truncate ON {TABLE}")
    op.execute(f"DROP TRIGGER {TABLE}_append_only ON {TABLE}")
    op.drop_table(TABLE)

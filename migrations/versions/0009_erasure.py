"""Erasure: an append-only erasure log; the one redaction path through the audit trigger.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-03

* ``erasure_log``: one row per purge (criteria, SHA-256 digests of the selector values,
  counts by record type; never erased content). Append-only (the trigger below refuses
  UPDATE, DELETE and TRUNCATE) and tenant-isolated by row-level security.
* ``cycgraph_refuse_audit_change()`` still refuses every change to ``gate_audit_log`` and
  ``erasure_log`` except one: an UPDATE of ``gate_audit_log`` made while the
  transaction-local setting ``cycgraph.audit_redaction`` is ``'on'`` whose only change is
  ``fact_id`` becoming the nil UUID (the redaction of a row naming a purged fact).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

POLICY = "cycgraph_tenant_isolation"
SETTING = "cycgraph.tenant_id"

REDACTING_FUNCTION = """
CREATE OR REPLACE FUNCTION cycgraph_refuse_audit_change() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    -- Nested IFs: plpgsql does not promise to short-circuit AND, and erasure_log rows
    -- have no fact_id.
    IF TG_OP = 'UPDATE' AND TG_TABLE_NAME = 'gate_audit_log' THEN
        IF coalesce(current_setting('cycgraph.audit_redaction', true), '') = 'on'
           AND NEW.fact_id = '00000000-0000-0000-0000-000000000000'::uuid
           AND (NEW.tenant_id, NEW.id, NEW.pass_id, NEW.verdict, NEW.reason, NEW.trials,
                NEW.evidence, NEW.policy, NEW.decided_at)
               IS NOT DISTINCT FROM
               (OLD.tenant_id, OLD.id, OLD.pass_id, OLD.verdict, OLD.reason, OLD.trials,
                OLD.evidence, OLD.policy, OLD.decided_at)
        THEN
            RETURN NEW;
        END IF;
    END IF;
    RAISE EXCEPTION '% is append-only: % refused', TG_TABLE_NAME, TG_OP
        USING ERRCODE = 'CG001';
END;
$$;
"""

# Exactly 0003's body (``END`` without a semicolon), so a downgrade restores the function
# 0003 created, byte for byte (pg_get_functiondef compares equal).
ORIGINAL_FUNCTION = """
CREATE OR REPLACE FUNCTION cycgraph_refuse_audit_change() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'gate_audit_log is append-only: % refused', TG_OP
        USING ERRCODE = 'CG001';
END
$$
"""


def upgrade() -> None:
    op.create_table(
        "erasure_log",
        sa.Column("tenant_id", sa.Text(), nullable=False),
        sa.Column("id", sa.BigInteger(), sa.Identity(always=True), nullable=False),
        sa.Column("erasure_id", sa.Uuid(), nullable=False),
        sa.Column("kind", sa.Text(), nullable=False),
        sa.Column("selector_kinds", postgresql.ARRAY(sa.Text()), nullable=False),
        sa.Column("selector_digests", postgresql.ARRAY(sa.Text()), nullable=False),
        sa.Column("counts", postgresql.JSONB(), nullable=False),
        sa.Column("erased_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("tenant_id", "id", name="pk_erasure_log"),
    )
    op.execute(REDACTING_FUNCTION)
    op.execute(
        "CREATE TRIGGER erasure_log_append_only BEFORE UPDATE OR DELETE ON erasure_log "
        "FOR EACH ROW EXECUTE FUNCTION cycgraph_refuse_audit_change()"
    )
    op.execute(
        "CREATE TRIGGER erasure_log_no_truncate BEFORE TRUNCATE ON erasure_log "
        "FOR EACH STATEMENT EXECUTE FUNCTION cycgraph_refuse_audit_change()"
    )
    check = f"tenant_id = current_setting('{SETTING}', true)"
    op.execute("ALTER TABLE erasure_log ENABLE ROW LEVEL SECURITY")
    op.execute("ALTER TABLE erasure_log FORCE ROW LEVEL SECURITY")
    op.execute(f"CREATE POLICY {POLICY} ON erasure_log USING ({check}) WITH CHECK ({check})")


def downgrade() -> None:
    op.execute(f"DROP POLICY {POLICY} ON erasure_log")
    op.execute("DROP TRIGGER erasure_log_no_truncate ON erasure_log")
    op.execute("DROP TRIGGER erasure_log_append_only ON erasure_log")
    op.drop_table("erasure_log")
    op.execute(ORIGINAL_FUNCTION)

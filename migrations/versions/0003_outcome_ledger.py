"""Outcome ledger (runs + run/fact links) and the append-only gate audit log.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-02

``gate_audit_log`` is append-only in the database itself: a trigger refuses UPDATE,
DELETE and TRUNCATE with SQLSTATE ``CG001`` (mapped to ``AppendOnlyViolationError``).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql as pg

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TZ = sa.DateTime(timezone=True)

REFUSE_FUNCTION = """
CREATE FUNCTION cycgraph_refuse_audit_change() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'gate_audit_log is append-only: % refused', TG_OP
        USING ERRCODE = 'CG001';
END
$$
"""


def upgrade() -> None:
    op.create_table(
        "outcome_runs",
        sa.Column("tenant_id", sa.Text(), nullable=False),
        sa.Column("run_id", sa.Text(), nullable=False),
        sa.Column("score", sa.Double(), nullable=False),
        sa.Column("recorded_at", TZ, nullable=False),
        sa.PrimaryKeyConstraint("tenant_id", "run_id", name="pk_outcome_runs"),
    )
    op.create_table(
        "outcome_run_facts",
        sa.Column("tenant_id", sa.Text(), nullable=False),
        sa.Column("fact_id", sa.Uuid(as_uuid=True), nullable=False),
        sa.Column("run_id", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("tenant_id", "fact_id", "run_id", name="pk_outcome_run_facts"),
        sa.ForeignKeyConstraint(
            ["tenant_id", "run_id"],
            ["outcome_runs.tenant_id", "outcome_runs.run_id"],
            name="fk_outcome_run_facts_tenant_id_run_id_outcome_runs",
            ondelete="CASCADE",
        ),
    )
    op.create_index(
        "ix_outcome_run_facts_tenant_id_run_id", "outcome_run_facts", ["tenant_id", "run_id"]
    )
    op.create_table(
        "gate_audit_log",
        sa.Column("tenant_id", sa.Text(), nullable=False),
        sa.Column("id", sa.BigInteger(), sa.Identity(always=True), nullable=False),
        sa.Column("pass_id", sa.Uuid(as_uuid=True), nullable=False),
        sa.Column("fact_id", sa.Uuid(as_uuid=True), nullable=False),
        sa.Column("verdict", sa.Text(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("trials", sa.Integer(), nullable=False),
        sa.Column("evidence", pg.JSONB(), nullable=True),
        sa.Column("policy", pg.JSONB(), nullable=False),
        sa.Column("decided_at", TZ, nullable=False),
        sa.PrimaryKeyConstraint("tenant_id", "id", name="pk_gate_audit_log"),
    )
    op.create_index("ix_gate_audit_log_tenant_id_pass_id", "gate_audit_log",
                    ["tenant_id", "pass_id"])
    op.create_index("ix_gate_audit_log_tenant_id_fact_id", "gate_audit_log",
                    ["tenant_id", "fact_id"])
    op.execute(REFUSE_FUNCTION)
    op.execute(
        "CREATE TRIGGER gate_audit_log_append_only BEFORE UPDATE OR DELETE ON gate_audit_log "
        "FOR EACH ROW EXECUTE FUNCTION cycgraph_refuse_audit_change()"
    )
    op.execute(
        "CREATE TRIGGER gate_audit_log_no_truncate BEFORE TRUNCATE ON gate_audit_log "
        "FOR EACH STATEMENT EXECUTE FUNCTION cycgraph_refuse_audit_change()"
    )


def downgrade() -> None:
    op.drop_table("gate_audit_log")  # drops its triggers with it
    op.execute("DROP FUNCTION IF EXISTS cycgraph_refuse_audit_change()")
    op.drop_table("outcome_run_facts")
    op.drop_table("outcome_runs")

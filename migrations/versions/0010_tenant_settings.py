"""tenant_settings: small per-tenant records (the calibrated theme thresholds).

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-03

One row per ``(tenant_id, key)`` holding a JSON value. ``MemoryPipeline`` keeps the
tenant's theme calibration under ``theme_calibration`` (thresholds fitted to the tenant's
own vectors, refitted as it doubles). The table gets the same row-level security policy as
every tenant table (migration 0006 covered only the tables that existed then).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql as pg

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

POLICY = "cycgraph_tenant_isolation"
SETTING = "cycgraph.tenant_id"


def upgrade() -> None:
    op.create_table(
        "tenant_settings",
        sa.Column("tenant_id", sa.Text(), nullable=False),
        sa.Column("key", sa.Text(), nullable=False),
        sa.Column("value", pg.JSONB(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("tenant_id", "key", name="pk_tenant_settings"),
    )
    check = f"tenant_id = current_setting('{SETTING}', true)"
    op.execute("ALTER TABLE tenant_settings ENABLE ROW LEVEL SECURITY")
    op.execute("ALTER TABLE tenant_settings FORCE ROW LEVEL SECURITY")
    op.execute(
        f"CREATE POLICY {POLICY} ON tenant_settings USING ({check}) WITH CHECK ({check})"
    )


def downgrade() -> None:
    op.execute(f"DROP POLICY {POLICY} ON tenant_settings")
    op.drop_table("tenant_settings")

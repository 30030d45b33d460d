"""writer_keys: idempotency keys of memory_writer calls.

Revision ID: 0003
Revises: 0001
Create Date: 2026-12-02

One row per ``(tenant_id, idempotency_key)`` with the ids of the facts that write stored;
the primary key makes a repeated or concurrent write with the same key store its facts
once.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql as pg

revision: str = "0003"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "writer_keys",
        sa.Column("tenant_id", sa.Text(), nullable=False),
        sa.Column("idempotency_key", sa.Text(), nullable=False),
        sa.Column("fact_ids", pg.ARRAY(sa.Uuid(as_uuid=True)), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("tenant_id", "idempotency_key", name="pk_writer_keys"),
    )


def downgrade() -> None:
    op.drop_table("writer_keys")

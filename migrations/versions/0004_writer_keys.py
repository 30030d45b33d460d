"""writer_keys: idempotency keys of memory_writer calls; facts fillfactor 80.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-02

One row per ``(tenant_id, idempotency_key)`` with the ids of the facts that write stored;
the primary key makes a repeated or concurrent write with the same key store its facts
once.

``facts`` gets ``fillfactor = 80``: retrieval touches every served fact
(``access_count``, ``last_accessed_at``, neither indexed), and free room on the page lets
Postgres do those updates as HOT updates instead of inserting new entries into every
index of the table, HNSW included. Applies to pages written from now on.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql as pg

revision: str = "0004"
down_revision: str | None = "0003"
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
    op.execute("ALTER TABLE facts SET (fillfactor = 80)")


def downgrade() -> None:
    op.execute("ALTER TABLE facts RESET (fillfactor)")
    op.drop_table("writer_keys")

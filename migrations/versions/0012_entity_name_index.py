"""Index the entity-name match of retrieval: ``(tenant_id, lower(name))`` on ``entities``.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-03

A retrieval that names entities in its question (the ``hybrid`` and ``text`` modes) finds
them with ``tenant_id = :tenant AND lower(name) = ANY(:names)``. No index covered
``lower(name)``, so Postgres read every entity of the tenant and lowercased each name (a
sequential scan of 10,000 entities per call at 100,000 facts). This B-tree answers it
with one index probe per name. The downgrade drops it.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

INDEX = "ix_entities_tenant_id_lower_name"


def upgrade() -> None:
    op.execute(f"CREATE INDEX {INDEX} ON entities (tenant_id, lower(name))")


def downgrade() -> None:
    op.execute(f"DROP INDEX IF EXISTS {INDEX}")

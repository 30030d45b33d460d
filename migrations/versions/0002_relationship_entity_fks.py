"""Relationships reference their entities: foreign keys with ON DELETE CASCADE.

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-02

``(tenant_id, source_id)`` and ``(tenant_id, target_id)`` of ``relationships`` reference
``entities (tenant_id, id)``. A relationship whose endpoint is not an entity of its tenant is
refused (SQLSTATE 23503), and deleting an entity deletes every edge touching it in the same
statement. Edges that already point at a missing entity (left behind by entity deletes
before this revision) are deleted first, and their number is logged.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import context, op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_log = logging.getLogger("alembic.runtime.migration")

FKS = (
    ("fk_relationships_tenant_id_source_id_entities", "source_id"),
    ("fk_relationships_tenant_id_target_id_entities", "target_id"),
)


_DANGLING = sa.text(
    "DELETE FROM relationships r WHERE NOT EXISTS ("
    " SELECT 1 FROM entities e WHERE e.tenant_id = r.tenant_id AND e.id = r.source_id)"
    " OR NOT EXISTS ("
    " SELECT 1 FROM entities e WHERE e.tenant_id = r.tenant_id AND e.id = r.target_id)"
)


def upgrade() -> None:
    if context.is_offline_mode():  # `alembic upgrade --sql`: emit the statement
        op.execute(_DANGLING)
    else:
        result = op.get_bind().execute(_DANGLING)
        if result.rowcount:
            _log.warning("deleted %d relationships whose endpoint entity no longer exists",
                         result.rowcount)
    for name, column in FKS:
        op.create_foreign_key(
            name, "relationships", "entities",
            ["tenant_id", column], ["tenant_id", "id"], ondelete="CASCADE",
        )


def downgrade() -> None:
    for name, _ in reversed(FKS):
        op.drop_constraint(name, "relationships", type_="foreignkey")

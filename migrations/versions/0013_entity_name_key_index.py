"""Index the normalised entity name, so ingest-time resolution reads only the matches.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-03

``MemoryPipeline.ingest`` resolves each new entity against the stored ones with one
``find_entities_by_name_keys`` statement, which narrows by ``entity_type`` and by the name
with every non-alphanumeric character removed
(``regexp_replace(lower(name), '[^[:alnum:]]', '', 'g')``). Only ``(tenant_id,
entity_type)`` was indexed, so the statement evaluated the expression on every entity of
the tenant with those types: an ingest read the whole entity table of its tenant. This
expression index on ``(tenant_id, entity_type, <name key>)`` makes it read the matching
rows only. The downgrade drops it.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

INDEX = "ix_entities_tenant_id_entity_type_name_key"
NAME_KEY = "regexp_replace(lower(name), '[^[:alnum:]]', '', 'g')"


def upgrade() -> None:
    op.execute(f"CREATE INDEX {INDEX} ON entities (tenant_id, entity_type, ({NAME_KEY}))")


def downgrade() -> None:
    op.execute(f"DROP INDEX IF EXISTS {INDEX}")

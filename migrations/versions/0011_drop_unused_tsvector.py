"""Drop the generated ``search_tsv`` columns and their GIN indexes (unused since BM25).

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-03

Migration 0005 added ``search_tsv tsvector GENERATED ALWAYS AS (to_tsvector('english',
content)) STORED`` on ``facts`` and ``episode_messages``, each with a GIN index. Since
migration 0008 every text search ranks with BM25 over ``search_terms`` (the same tokens as
the in-memory backend), and nothing reads ``search_tsv`` any more; every write still paid
for the ``to_tsvector`` call and a second GIN insert. Dropping them makes every fact and
message write cheaper (bulk loads most of all). The downgrade adds them back (the
generated column is recomputed from ``content`` for every row).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql as pg

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_TSV = "to_tsvector('english'::regconfig, content)"
_TABLES = ("facts", "episode_messages")


def upgrade() -> None:
    for table in _TABLES:
        op.execute(f"DROP INDEX IF EXISTS ix_{table}_search_tsv_gin")
        op.drop_column(table, "search_tsv")


def downgrade() -> None:
    for table in _TABLES:
        op.add_column(
            table,
            sa.Column("search_tsv", pg.TSVECTOR(), sa.Computed(_TSV, persisted=True),
                      nullable=True),
        )
        op.create_index(f"ix_{table}_search_tsv_gin", table, ["search_tsv"],
                        postgresql_using="gin")

"""Grounded facts, searchable messages, full-text search.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-02

* ``facts.source_message_ids uuid[]`` (the messages a fact was extracted from) with a GIN
  index;
* ``episode_messages.embedding vector(N)`` (the schema's dimension, read from
  ``schema_metadata``) with an HNSW cosine index, and an index on ``(tenant_id, id)``;
* generated ``search_tsv tsvector`` columns (``to_tsvector('english', content)``) on
  ``facts`` and ``episode_messages``, each with a GIN index.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from pgvector.sqlalchemy import VECTOR
from sqlalchemy.dialects import postgresql as pg

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

MAX_VECTOR_HNSW_DIM = 2000
MAX_HALFVEC_HNSW_DIM = 4000
_TSV = "to_tsvector('english'::regconfig, content)"


def _setting(key: str, default: str) -> str:
    value = op.get_bind().execute(
        sa.text("SELECT value FROM schema_metadata WHERE key = :k"), {"k": key}
    ).scalar()
    return default if value is None else str(value)


def upgrade() -> None:
    dim = int(_setting("embedding_dim", "384"))
    m = int(_setting("hnsw_m", "16"))
    ef = int(_setting("hnsw_ef_construction", "64"))

    op.add_column(
        "facts",
        sa.Column(
            "source_message_ids",
            pg.ARRAY(sa.Uuid(as_uuid=True)),
            nullable=False,
            server_default=sa.text("'{}'::uuid[]"),
        ),
    )
    op.alter_column("facts", "source_message_ids", server_default=None)
    op.create_index(
        "ix_facts_source_message_ids_gin",
        "facts",
        ["source_message_ids"],
        postgresql_using="gin",
    )
    op.add_column(
        "facts",
        sa.Column("search_tsv", pg.TSVECTOR(), sa.Computed(_TSV, persisted=True), nullable=True),
    )
    op.create_index("ix_facts_search_tsv_gin", "facts", ["search_tsv"], postgresql_using="gin")

    op.add_column("episode_messages", sa.Column("embedding", VECTOR(dim), nullable=True))
    op.add_column(
        "episode_messages",
        sa.Column("search_tsv", pg.TSVECTOR(), sa.Computed(_TSV, persisted=True), nullable=True),
    )
    op.create_index(
        "ix_episode_messages_search_tsv_gin",
        "episode_messages",
        ["search_tsv"],
        postgresql_using="gin",
    )
    op.create_index("ix_episode_messages_tenant_id_id", "episode_messages", ["tenant_id", "id"])
    if dim <= MAX_VECTOR_HNSW_DIM:
        op.create_index(
            "ix_episode_messages_embedding_hnsw",
            "episode_messages",
            ["embedding"],
            postgresql_using="hnsw",
            postgresql_with={"m": m, "ef_construction": ef},
            postgresql_ops={"embedding": "vector_cosine_ops"},
        )
    elif dim <= MAX_HALFVEC_HNSW_DIM:
        op.execute(
            "CREATE INDEX ix_episode_messages_embedding_hnsw_halfvec ON episode_messages "
            f"USING hnsw ((embedding::halfvec({dim})) halfvec_cosine_ops) "
            f"WITH (m = {m}, ef_construction = {ef})"
        )


def downgrade() -> None:
    op.execute("DROP INDEX IF EXISTS ix_episode_messages_embedding_hnsw_halfvec")
    op.execute("DROP INDEX IF EXISTS ix_episode_messages_embedding_hnsw")
    op.drop_index("ix_episode_messages_tenant_id_id", table_name="episode_messages")
    op.drop_index("ix_episode_messages_search_tsv_gin", table_name="episode_messages")
    op.drop_column("episode_messages", "search_tsv")
    op.drop_column("episode_messages", "embedding")
    op.drop_index("ix_facts_search_tsv_gin", table_name="facts")
    op.drop_column("facts", "search_tsv")
    op.drop_index("ix_facts_source_message_ids_gin", table_name="facts")
    op.drop_column("facts", "source_message_ids")

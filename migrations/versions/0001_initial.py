"""Initial memory schema: pgvector, entities, relationships, episodes, messages, facts, themes.

Revision ID: 0001
Revises:
Create Date: 2026-12-02

The embedding dimension is fixed here: ``alembic -x embedding_dim=N upgrade head``
(or ``config.attributes["embedding_dim"]``; default 384) and stored in ``schema_metadata``.
Dimensions up to 2000 get HNSW indexes on the ``vector`` column; 2001-4000 get HNSW
expression indexes on ``embedding::halfvec(N)``; wider schemas get no ANN index (exact scan).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import context, op
from pgvector.sqlalchemy import VECTOR
from sqlalchemy.dialects import postgresql as pg

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

DEFAULT_EMBEDDING_DIM = 384
HNSW_M = 16
HNSW_EF_CONSTRUCTION = 64
MAX_VECTOR_HNSW_DIM = 2000
MAX_HALFVEC_HNSW_DIM = 4000
MAX_VECTOR_DIM = 16000

_log = logging.getLogger("alembic.runtime.migration")

TZ = sa.DateTime(timezone=True)
UUID = sa.Uuid(as_uuid=True)
UUIDS = pg.ARRAY(sa.Uuid(as_uuid=True))
EMBEDDED_TABLES = ("entities", "episodes", "facts", "themes")
VECTOR_EXTENSION_KEY = "vector_extension"
"""``schema_metadata`` key: ``created`` when this revision installed pgvector, else
``preexisting`` (then the downgrade leaves the extension in place)."""


def _embedding_dim() -> int:
    raw = context.get_x_argument(as_dictionary=True).get("embedding_dim")
    if raw is None:
        raw = context.config.attributes.get("embedding_dim", DEFAULT_EMBEDDING_DIM)
    try:
        dim = int(raw)
    except (TypeError, ValueError):
        raise ValueError(f"embedding_dim must be an integer, got {raw!r}") from None
    if not 1 <= dim <= MAX_VECTOR_DIM:
        raise ValueError(f"embedding_dim must be in 1..{MAX_VECTOR_DIM}, got {dim}")
    return dim


def _hnsw_option(name: str, default: int, low: int, high: int) -> int:
    raw = context.get_x_argument(as_dictionary=True).get(name)
    if raw is None:
        raw = context.config.attributes.get(name) or default
    try:
        value = int(raw)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be an integer, got {raw!r}") from None
    if not low <= value <= high:
        raise ValueError(f"{name} must be in {low}..{high}, got {value}")
    return value


def _hnsw_params() -> tuple[int, int]:
    """HNSW build parameters: ``-x hnsw_m=N -x hnsw_ef_construction=N`` (pgvector defaults)."""
    m = _hnsw_option("hnsw_m", HNSW_M, 2, 100)
    ef = _hnsw_option("hnsw_ef_construction", HNSW_EF_CONSTRUCTION, 4, 1000)
    if ef < 2 * m:
        raise ValueError(f"hnsw_ef_construction ({ef}) must be >= 2 * hnsw_m ({2 * m})")
    return m, ef


def _ix(table: str, *cols: str) -> None:
    op.create_index(f"ix_{table}_{'_'.join(cols)}", table, list(cols))


def _hnsw(table: str, dim: int, m: int, ef_construction: int) -> None:
    opts = f"WITH (m = {m}, ef_construction = {ef_construction})"
    if dim <= MAX_VECTOR_HNSW_DIM:
        op.create_index(
            f"ix_{table}_embedding_hnsw",
            table,
            ["embedding"],
            postgresql_using="hnsw",
            postgresql_with={"m": m, "ef_construction": ef_construction},
            postgresql_ops={"embedding": "vector_cosine_ops"},
        )
    elif dim <= MAX_HALFVEC_HNSW_DIM:
        op.execute(
            f"CREATE INDEX ix_{table}_embedding_hnsw_halfvec ON {table} USING hnsw "
            f"((embedding::halfvec({dim})) halfvec_cosine_ops) {opts}"
        )
    else:
        _log.warning("embedding_dim=%d > %d: no HNSW index on %s (exact search)",
                     dim, MAX_HALFVEC_HNSW_DIM, table)


def upgrade() -> None:
    dim = _embedding_dim()
    m, ef_construction = _hnsw_params()
    # Remember whether this revision installed pgvector: the downgrade removes only what
    # it created (an application may use the extension too).
    preexisting = not context.is_offline_mode() and (
        op.get_bind()
        .execute(sa.text("SELECT 1 FROM pg_extension WHERE extname = 'vector'"))
        .first()
        is not None
    )
    op.execute("CREATE EXTENSION IF NOT EXISTS vector")

    meta = op.create_table(
        "schema_metadata",
        sa.Column("key", sa.Text(), nullable=False),
        sa.Column("value", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("key", name="pk_schema_metadata"),
    )

    op.create_table(
        "entities",
        sa.Column("tenant_id", sa.Text(), nullable=False),
        sa.Column("id", UUID, nullable=False),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("entity_type", sa.Text(), nullable=False),
        sa.Column("attributes", pg.JSONB(), nullable=False),
        sa.Column("embedding", VECTOR(dim), nullable=True),
        sa.Column("provenance", pg.JSONB(), nullable=False),
        sa.Column("created_at", TZ, nullable=False),
        sa.Column("updated_at", TZ, nullable=False),
        sa.Column("invalidated_at", TZ, nullable=True),
        sa.Column("superseded_by", UUID, nullable=True),
        sa.PrimaryKeyConstraint("tenant_id", "id", name="pk_entities"),
    )
    _ix("entities", "tenant_id", "created_at", "id")
    _ix("entities", "tenant_id", "entity_type")

    op.create_table(
        "relationships",
        sa.Column("tenant_id", sa.Text(), nullable=False),
        sa.Column("id", UUID, nullable=False),
        sa.Column("source_id", UUID, nullable=False),
        sa.Column("target_id", UUID, nullable=False),
        sa.Column("relation_type", sa.Text(), nullable=False),
        sa.Column("weight", sa.Double(), nullable=False),
        sa.Column("attributes", pg.JSONB(), nullable=False),
        sa.Column("valid_from", TZ, nullable=False),
        sa.Column("valid_until", TZ, nullable=True),
        sa.Column("provenance", pg.JSONB(), nullable=False),
        sa.Column("invalidated_by", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("tenant_id", "id", name="pk_relationships"),
    )
    _ix("relationships", "tenant_id", "valid_from", "id")
    _ix("relationships", "tenant_id", "source_id")
    _ix("relationships", "tenant_id", "target_id")

    op.create_table(
        "episodes",
        sa.Column("tenant_id", sa.Text(), nullable=False),
        sa.Column("id", UUID, nullable=False),
        sa.Column("topic", sa.Text(), nullable=False),
        sa.Column("started_at", TZ, nullable=False),
        sa.Column("ended_at", TZ, nullable=False),
        sa.Column("embedding", VECTOR(dim), nullable=True),
        sa.Column("fact_ids", UUIDS, nullable=False),
        sa.Column("provenance", pg.JSONB(), nullable=False),
        sa.Column("invalidated_at", TZ, nullable=True),
        sa.PrimaryKeyConstraint("tenant_id", "id", name="pk_episodes"),
    )
    _ix("episodes", "tenant_id", "started_at", "id")

    op.create_table(
        "episode_messages",
        sa.Column("tenant_id", sa.Text(), nullable=False),
        sa.Column("episode_id", UUID, nullable=False),
        sa.Column("id", UUID, nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("role", sa.Text(), nullable=False),
        sa.Column("content", sa.Text(), nullable=False),
        sa.Column("timestamp", TZ, nullable=False),
        sa.Column("metadata", pg.JSONB(), nullable=False),
        sa.PrimaryKeyConstraint("tenant_id", "episode_id", "id", name="pk_episode_messages"),
        sa.ForeignKeyConstraint(
            ["tenant_id", "episode_id"],
            ["episodes.tenant_id", "episodes.id"],
            name="fk_episode_messages_tenant_id_episode_id_episodes",
            ondelete="CASCADE",
        ),
    )

    op.create_table(
        "facts",
        sa.Column("tenant_id", sa.Text(), nullable=False),
        sa.Column("id", UUID, nullable=False),
        sa.Column("content", sa.Text(), nullable=False),
        sa.Column("source_episode_ids", UUIDS, nullable=False),
        sa.Column("entity_ids", UUIDS, nullable=False),
        sa.Column("theme_id", UUID, nullable=True),
        sa.Column("embedding", VECTOR(dim), nullable=True),
        sa.Column("provenance", pg.JSONB(), nullable=False),
        sa.Column("valid_from", TZ, nullable=False),
        sa.Column("valid_until", TZ, nullable=True),
        sa.Column("invalidated_by", sa.Text(), nullable=True),
        sa.Column("access_count", sa.Integer(), nullable=False),
        sa.Column("last_accessed_at", TZ, nullable=True),
        sa.Column("tags", pg.ARRAY(sa.Text()), nullable=False),
        sa.PrimaryKeyConstraint("tenant_id", "id", name="pk_facts"),
    )
    _ix("facts", "tenant_id", "valid_from", "id")
    _ix("facts", "tenant_id", "theme_id")
    # fastupdate=off keeps tag lookups fast right after bulk loads (no GIN pending list).
    for name, column in (
        ("ix_facts_tags_gin", "tags"),
        ("ix_facts_entity_ids_gin", "entity_ids"),
    ):
        op.create_index(name, "facts", [column], postgresql_using="gin",
                        postgresql_with={"fastupdate": "off"})

    op.create_table(
        "themes",
        sa.Column("tenant_id", sa.Text(), nullable=False),
        sa.Column("id", UUID, nullable=False),
        sa.Column("label", sa.Text(), nullable=False),
        sa.Column("description", sa.Text(), nullable=False),
        sa.Column("fact_ids", UUIDS, nullable=False),
        sa.Column("embedding", VECTOR(dim), nullable=True),
        sa.Column("provenance", pg.JSONB(), nullable=False),
        sa.Column("created_at", TZ, nullable=False),
        sa.Column("invalidated_at", TZ, nullable=True),
        sa.PrimaryKeyConstraint("tenant_id", "id", name="pk_themes"),
    )
    _ix("themes", "tenant_id", "created_at", "id")

    for table in EMBEDDED_TABLES:
        _hnsw(table, dim, m, ef_construction)

    op.bulk_insert(
        meta,
        [
            {"key": "embedding_dim", "value": str(dim)},
            {"key": "hnsw_m", "value": str(m)},
            {"key": "hnsw_ef_construction", "value": str(ef_construction)},
            {"key": "schema_version", "value": revision},
            {"key": VECTOR_EXTENSION_KEY, "value": "preexisting" if preexisting else "created"},
        ],
    )


def downgrade() -> None:
    """Drop our tables; drop ``vector`` only if we created it and nothing else uses it.

    Everything runs in the migration's one transaction (Postgres DDL is transactional), so
    a downgrade that fails half-way leaves the schema exactly as it was.
    """
    offline = context.is_offline_mode()
    origin = None
    if not offline:
        origin = (
            op.get_bind()
            .execute(
                sa.text("SELECT value FROM schema_metadata WHERE key = :k"),
                {"k": VECTOR_EXTENSION_KEY},
            )
            .scalar()
        )
    for table in ("episode_messages", "episodes", "facts", "themes", "relationships",
                  "entities", "schema_metadata"):
        op.drop_table(table)  # drops its indexes and constraints with it
    if offline or origin == "preexisting":
        return  # not ours (or cannot be checked from a SQL script): leave it in place
    _drop_vector_unless_used()


def _drop_vector_unless_used() -> None:
    # Databases migrated before the origin was recorded land here too. A savepoint keeps
    # the transaction usable when the drop is refused because application objects (a
    # table with a vector column, ...) depend on the extension: it then stays.
    from sqlalchemy.exc import DBAPIError

    from cycgraph_memory.postgres._errors import sqlstate_of

    bind = op.get_bind()
    try:
        with bind.begin_nested():
            bind.execute(sa.text("DROP EXTENSION IF EXISTS vector"))
    except DBAPIError as exc:
        if sqlstate_of(exc) != "2BP01":  # dependent_objects_still_exist
            raise
        _log.info("extension vector kept: other objects in this database depend on it")

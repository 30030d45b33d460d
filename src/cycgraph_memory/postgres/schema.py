"""SQLAlchemy 2.x declarative models of the memory schema (the ``...Row`` classes).

These models describe the tables the Alembic migrations create; a test keeps the two in
agreement. The library never calls ``create_all`` on a real database.

Layout principles:

* Every tenant-data table has ``tenant_id`` leading its primary key and its foreign keys, so
  one tenant's rows can never reference another's and the tables can be distributed by
  ``tenant_id`` (e.g. on Citus) without a schema change.
* A relationship's ``(tenant_id, source_id)`` and ``(tenant_id, target_id)`` reference
  ``entities`` with ``ON DELETE CASCADE``: an edge to a missing entity is refused, and
  deleting an entity deletes its edges in the same statement.
* Tags are ``text[]`` with a GIN index; a fact's ``entity_ids`` is ``uuid[]`` with a GIN
  index.
* Embeddings are pgvector ``vector`` columns. The dimension is fixed by the migration
  (``alembic -x embedding_dim=N upgrade head``) and recorded in :class:`SchemaMetadataRow`;
  the models declare a dimension-less ``vector`` so they fit every deployment.
* HNSW cosine indexes (``m=16, ef_construction=64``) on every embedding column. For
  dimensions above 2000 (pgvector's limit for ``vector`` HNSW) the migration instead builds
  an expression index on ``embedding::halfvec(N)``; that index is not modelled here.
* Storage (migration 0014, not modelled here): the ``embedding`` columns of ``themes``,
  ``entities``, ``episodes`` and ``episode_messages`` are ``STORAGE MAIN`` (in the row);
  ``facts`` keeps pgvector's ``EXTERNAL`` and has ``fillfactor = 90`` (room on each page
  for the HOT update of the served facts' access counters).
* Row-level security (migration 0006) limits every ``tenant_id`` table to the tenant named
  by the transaction-local setting ``cycgraph.tenant_id``; it is not modelled here.
* ``schema_metadata`` is deployment-wide (it describes the schema, not tenant data) and is
  therefore the one table without ``tenant_id``.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from functools import lru_cache
from typing import Any

import numpy as np
from pgvector.sqlalchemy import VECTOR
from sqlalchemy import (
    REAL,
    BigInteger,
    DateTime,
    Double,
    ForeignKeyConstraint,
    Identity,
    Index,
    Integer,
    MetaData,
    Text,
    UniqueConstraint,
    Uuid,
    cast,
    text,
    type_coerce,
)
from sqlalchemy.dialects.postgresql import ARRAY, JSONB
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

__all__ = [
    "HNSW_EF_CONSTRUCTION",
    "HNSW_M",
    "MAX_VECTOR_HNSW_DIM",
    "NAMING_CONVENTION",
    "Base",
    "EmbeddingVector",
    "EntityRow",
    "EpisodeRow",
    "ErasureLogRow",
    "FactRow",
    "GateAuditRow",
    "LedgerErasedFactRow",
    "MessageRow",
    "OutcomeRunFactRow",
    "OutcomeRunRow",
    "RelationshipRow",
    "SchemaMetadataRow",
    "TextSearchCorpusRow",
    "TextSearchTermRow",
    "TenantSettingRow",
    "ThemeRow",
    "WriterKeyRow",
    "vector_text",
]

NAMING_CONVENTION: dict[str, str] = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_N_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}
"""Constraint and index naming convention shared by the models and the migrations."""

HNSW_M = 16
"""HNSW graph degree used by every embedding index (pgvector default)."""

HNSW_EF_CONSTRUCTION = 64
"""HNSW build-time candidate list size used by every embedding index (pgvector default)."""

MAX_VECTOR_HNSW_DIM = 2000
"""Widest ``vector`` pgvector can index with HNSW; wider schemas index ``halfvec`` casts."""

@lru_cache(maxsize=64)
def _vector_format(n: int) -> str:
    # 9 significant digits round-trip every float32 exactly; one C-level % call is ~5x
    # faster than pgvector's per-element str() join for 384-d vectors.
    return "[" + ",".join(["%.9g"] * n) + "]"


def vector_text(values: Any) -> str:
    """Return pgvector's text form of a float sequence (exact for float32 values)."""
    if hasattr(values, "tolist"):
        values = values.tolist()
    return _vector_format(len(values)) % tuple(values)


class EmbeddingVector(VECTOR):
    """pgvector ``vector`` with a faster text encoder (the bulk-insert hot path)."""

    cache_ok = True
    driver_value_final = True
    """Selected as ``real[]`` (:meth:`column_expression`), asyncpg's value is the final
    list of floats; ``driver_sql.DRIVER_VALUE_FINAL``."""

    def bind_processor(self, dialect: Dialect) -> Any:
        """Return a converter from a float sequence to pgvector's text form."""

        def process(value: Any) -> str | None:
            if value is None or isinstance(value, str):
                return value
            if hasattr(value, "tolist"):
                value = value.tolist()
            return _vector_format(len(value)) % tuple(value)

        return process

    def column_expression(self, colexpr: Any) -> Any:
        """Select the vector as ``real[]``: asyncpg decodes that binary, without text.

        ``vector`` has no binary codec registered on a plain asyncpg connection, so it
        would arrive as text (``"[0.1,0.2,...]"``) and be parsed in Python; the cast to
        ``real[]`` (pgvector's own ``vector_to_float4``) arrives as single-precision
        floats, exactly the stored values, decoded in C. Applied to every column of this
        type in a SELECT list (SQLAlchemy calls it for result columns only).
        """
        return type_coerce(cast(colexpr, ARRAY(REAL)), self)

    def result_processor(self, dialect: Dialect, coltype: Any) -> Any:
        """Return a converter from ``real[]`` (or pgvector's text form) to a list of floats.

        pgvector prints the shortest decimal that identifies each float32; parsing it as a
        float64 (``float("9.501899e+07")``) would not give the stored float32 back, so the
        values are parsed as float32.
        """

        def process(value: Any) -> list[float] | None:
            if value is None:
                return None
            if isinstance(value, str):
                parsed: list[float] = np.array(value[1:-1].split(","), dtype=np.float32).tolist()
                return parsed
            if type(value) is list:
                return value  # real[] decoded by asyncpg: a fresh list of floats
            return [float(x) for x in value]

        return process


def _terms() -> Any:
    """A ``search_terms text[]`` column (BM25 tokens, migration 0008).

    The row's :func:`~cycgraph_memory.textsearch.tokenize` tokens in order (duplicates
    kept: their count is the term frequency), written by the store; the BM25 text search
    reads them (GIN-indexed).
    """
    return mapped_column(ARRAY(Text), server_default=text("'{}'::text[]"))


_TZ = DateTime(timezone=True)
# fastupdate=off: tag lookups are the reflection loop's hot path; a GIN pending list left
# behind by bulk inserts would be scanned linearly on every query until the next vacuum.
_GIN = {"fastupdate": "off"}
_UUID_ARRAY = ARRAY(Uuid(as_uuid=True))


def _hnsw(table: str) -> Index:
    return Index(
        f"ix_{table}_embedding_hnsw",
        "embedding",
        postgresql_using="hnsw",
        postgresql_with={"m": HNSW_M, "ef_construction": HNSW_EF_CONSTRUCTION},
        postgresql_ops={"embedding": "vector_cosine_ops"},
    )


class Base(DeclarativeBase):
    """Declarative base carrying the naming convention."""

    metadata = MetaData(naming_convention=NAMING_CONVENTION)


class SchemaMetadataRow(Base):
    """Deployment-wide key/value settings (``embedding_dim``, ``schema_version``)."""

    __tablename__ = "schema_metadata"

    key: Mapped[str] = mapped_column(Text, primary_key=True)
    value: Mapped[str] = mapped_column(Text)


class EntityRow(Base):
    """A knowledge-graph node."""

    __tablename__ = "entities"
    __table_args__ = (
        Index(None, "tenant_id", "created_at", "id"),
        Index(None, "tenant_id", "entity_type"),
        # Entity resolution at ingest and the entity-name match of retrieval (0017).
        Index(None, "tenant_id", "name_key"),
        _hnsw("entities"),
    )

    tenant_id: Mapped[str] = mapped_column(Text, primary_key=True)
    id: Mapped[uuid.UUID] = mapped_column(Uuid(as_uuid=True), primary_key=True)
    name: Mapped[str] = mapped_column(Text)
    # normalize_entity_name(name), written by the store (migration 0017).
    name_key: Mapped[str] = mapped_column(Text)
    entity_type: Mapped[str] = mapped_column(Text)
    attributes: Mapped[dict[str, Any]] = mapped_column(JSONB)
    embedding: Mapped[list[float] | None] = mapped_column(EmbeddingVector())
    provenance: Mapped[dict[str, Any]] = mapped_column(JSONB)
    created_at: Mapped[datetime] = mapped_column(_TZ)
    updated_at: Mapped[datetime] = mapped_column(_TZ)
    invalidated_at: Mapped[datetime | None] = mapped_column(_TZ)
    superseded_by: Mapped[uuid.UUID | None] = mapped_column(Uuid(as_uuid=True))


class RelationshipRow(Base):
    """A directed, weighted knowledge-graph edge."""

    __tablename__ = "relationships"
    __table_args__ = (
        Index(None, "tenant_id", "valid_from", "id"),
        Index(None, "tenant_id", "source_id"),
        Index(None, "tenant_id", "target_id"),
        ForeignKeyConstraint(
            ["tenant_id", "source_id"],
            ["entities.tenant_id", "entities.id"],
            ondelete="CASCADE",
        ),
        ForeignKeyConstraint(
            ["tenant_id", "target_id"],
            ["entities.tenant_id", "entities.id"],
            ondelete="CASCADE",
        ),
    )

    tenant_id: Mapped[str] = mapped_column(Text, primary_key=True)
    id: Mapped[uuid.UUID] = mapped_column(Uuid(as_uuid=True), primary_key=True)
    source_id: Mapped[uuid.UUID] = mapped_column(Uuid(as_uuid=True))
    target_id: Mapped[uuid.UUID] = mapped_column(Uuid(as_uuid=True))
    relation_type: Mapped[str] = mapped_column(Text)
    weight: Mapped[float] = mapped_column(Double)
    attributes: Mapped[dict[str, Any]] = mapped_column(JSONB)
    valid_from: Mapped[datetime] = mapped_column(_TZ)
    valid_until: Mapped[datetime | None] = mapped_column(_TZ)
    provenance: Mapped[dict[str, Any]] = mapped_column(JSONB)
    invalidated_by: Mapped[str | None] = mapped_column(Text)


class EpisodeRow(Base):
    """A coherent group of messages (its messages live in :class:`MessageRow`)."""

    __tablename__ = "episodes"
    __table_args__ = (
        Index(None, "tenant_id", "started_at", "id"),
        Index("ix_episodes_tenant_id_search_terms_gin", "tenant_id", "search_terms",
              postgresql_using="gin"),
        _hnsw("episodes"),
    )

    tenant_id: Mapped[str] = mapped_column(Text, primary_key=True)
    id: Mapped[uuid.UUID] = mapped_column(Uuid(as_uuid=True), primary_key=True)
    topic: Mapped[str] = mapped_column(Text)
    started_at: Mapped[datetime] = mapped_column(_TZ)
    ended_at: Mapped[datetime] = mapped_column(_TZ)
    embedding: Mapped[list[float] | None] = mapped_column(EmbeddingVector())
    fact_ids: Mapped[list[uuid.UUID]] = mapped_column(_UUID_ARRAY)
    provenance: Mapped[dict[str, Any]] = mapped_column(JSONB)
    invalidated_at: Mapped[datetime | None] = mapped_column(_TZ)
    search_terms: Mapped[list[str]] = _terms()  # topic and every message


class MessageRow(Base):
    """One message of an episode; ``position`` keeps the episode's message order."""

    __tablename__ = "episode_messages"
    __table_args__ = (
        # A message is stored once per tenant (migration 0006).
        UniqueConstraint("tenant_id", "id"),
        ForeignKeyConstraint(
            ["tenant_id", "episode_id"],
            ["episodes.tenant_id", "episodes.id"],
            ondelete="CASCADE",
        ),
        Index(None, "tenant_id", "id"),
        Index("ix_episode_messages_tenant_id_search_terms_gin", "tenant_id", "search_terms",
              postgresql_using="gin"),
        _hnsw("episode_messages"),
    )

    tenant_id: Mapped[str] = mapped_column(Text, primary_key=True)
    episode_id: Mapped[uuid.UUID] = mapped_column(Uuid(as_uuid=True), primary_key=True)
    id: Mapped[uuid.UUID] = mapped_column(Uuid(as_uuid=True), primary_key=True)
    position: Mapped[int] = mapped_column(Integer)
    role: Mapped[str] = mapped_column(Text)
    content: Mapped[str] = mapped_column(Text)
    timestamp: Mapped[datetime] = mapped_column(_TZ)
    metadata_: Mapped[dict[str, Any]] = mapped_column("metadata", JSONB)
    embedding: Mapped[list[float] | None] = mapped_column(EmbeddingVector())
    search_terms: Mapped[list[str]] = _terms()


class FactRow(Base):
    """An atomic piece of knowledge."""

    __tablename__ = "facts"
    __table_args__ = (
        Index(None, "tenant_id", "valid_from", "id"),
        Index(None, "tenant_id", "theme_id"),
        # The array indexes a tenant-scoped read uses lead with tenant_id (btree_gin,
        # migration 0015): a small tenant reads its own postings, not every tenant's.
        Index("ix_facts_tenant_id_tags_gin", "tenant_id", "tags", postgresql_using="gin",
              postgresql_with=_GIN),
        Index("ix_facts_tenant_id_entity_ids_gin", "tenant_id", "entity_ids",
              postgresql_using="gin", postgresql_with=_GIN),
        # Default fastupdate (on): written with every fact, read only to trace grounding.
        Index("ix_facts_source_message_ids_gin", "source_message_ids", postgresql_using="gin"),
        # Read when an episode is deleted (its id leaves the facts that cite it).
        Index(
            "ix_facts_source_episode_ids_gin", "source_episode_ids", postgresql_using="gin"
        ),
        Index("ix_facts_tenant_id_search_terms_gin", "tenant_id", "search_terms",
              postgresql_using="gin"),
        _hnsw("facts"),
    )

    tenant_id: Mapped[str] = mapped_column(Text, primary_key=True)
    id: Mapped[uuid.UUID] = mapped_column(Uuid(as_uuid=True), primary_key=True)
    content: Mapped[str] = mapped_column(Text)
    source_episode_ids: Mapped[list[uuid.UUID]] = mapped_column(_UUID_ARRAY)
    entity_ids: Mapped[list[uuid.UUID]] = mapped_column(_UUID_ARRAY)
    theme_id: Mapped[uuid.UUID | None] = mapped_column(Uuid(as_uuid=True))
    embedding: Mapped[list[float] | None] = mapped_column(EmbeddingVector())
    provenance: Mapped[dict[str, Any]] = mapped_column(JSONB)
    valid_from: Mapped[datetime] = mapped_column(_TZ)
    valid_until: Mapped[datetime | None] = mapped_column(_TZ)
    invalidated_by: Mapped[str | None] = mapped_column(Text)
    access_count: Mapped[int] = mapped_column(BigInteger)
    last_accessed_at: Mapped[datetime | None] = mapped_column(_TZ)
    tags: Mapped[list[str]] = mapped_column(ARRAY(Text))
    source_message_ids: Mapped[list[uuid.UUID]] = mapped_column(_UUID_ARRAY)
    search_terms: Mapped[list[str]] = _terms()


class ThemeRow(Base):
    """A cluster of facts; ``created_at`` is ``provenance.created_at`` flattened for ORDER BY."""

    __tablename__ = "themes"
    __table_args__ = (
        Index(None, "tenant_id", "created_at", "id"),
        _hnsw("themes"),
    )

    tenant_id: Mapped[str] = mapped_column(Text, primary_key=True)
    id: Mapped[uuid.UUID] = mapped_column(Uuid(as_uuid=True), primary_key=True)
    label: Mapped[str] = mapped_column(Text)
    description: Mapped[str] = mapped_column(Text)
    fact_ids: Mapped[list[uuid.UUID]] = mapped_column(_UUID_ARRAY)
    embedding: Mapped[list[float] | None] = mapped_column(EmbeddingVector())
    provenance: Mapped[dict[str, Any]] = mapped_column(JSONB)
    created_at: Mapped[datetime] = mapped_column(_TZ)
    invalidated_at: Mapped[datetime | None] = mapped_column(_TZ)


# --------------------------------------------------------------------------- outcome ledger


class OutcomeRunRow(Base):
    """One scored workflow run of the outcome ledger (re-recording a run replaces it)."""

    __tablename__ = "outcome_runs"

    tenant_id: Mapped[str] = mapped_column(Text, primary_key=True)
    run_id: Mapped[str] = mapped_column(Text, primary_key=True)
    score: Mapped[float] = mapped_column(Double)
    recorded_at: Mapped[datetime] = mapped_column(_TZ)


class OutcomeRunFactRow(Base):
    """A fact injected into a run; the key leads with ``fact_id`` for per-fact aggregates."""

    __tablename__ = "outcome_run_facts"
    __table_args__ = (
        ForeignKeyConstraint(
            ["tenant_id", "run_id"],
            ["outcome_runs.tenant_id", "outcome_runs.run_id"],
            ondelete="CASCADE",
        ),
        Index(None, "tenant_id", "run_id"),
    )

    tenant_id: Mapped[str] = mapped_column(Text, primary_key=True)
    fact_id: Mapped[uuid.UUID] = mapped_column(Uuid(as_uuid=True), primary_key=True)
    run_id: Mapped[str] = mapped_column(Text, primary_key=True)


class GateAuditRow(Base):
    """One decision of one retention-gate pass; append-only (a trigger refuses changes)."""

    __tablename__ = "gate_audit_log"
    __table_args__ = (
        Index(None, "tenant_id", "pass_id"),
        Index(None, "tenant_id", "fact_id"),
    )

    tenant_id: Mapped[str] = mapped_column(Text, primary_key=True)
    id: Mapped[int] = mapped_column(BigInteger, Identity(always=True), primary_key=True)
    pass_id: Mapped[uuid.UUID] = mapped_column(Uuid(as_uuid=True))
    fact_id: Mapped[uuid.UUID] = mapped_column(Uuid(as_uuid=True))
    verdict: Mapped[str] = mapped_column(Text)
    reason: Mapped[str | None] = mapped_column(Text)
    trials: Mapped[int] = mapped_column(Integer)
    evidence: Mapped[dict[str, Any] | None] = mapped_column(JSONB)
    policy: Mapped[dict[str, Any]] = mapped_column(JSONB)
    decided_at: Mapped[datetime] = mapped_column(_TZ)


class WriterKeyRow(Base):
    """One idempotent ``memory_writer`` call: its key and the fact ids it wrote.

    The primary key ``(tenant_id, idempotency_key)`` is what makes a repeated or a
    concurrent write with the same key store its facts once.
    """

    __tablename__ = "writer_keys"

    tenant_id: Mapped[str] = mapped_column(Text, primary_key=True)
    idempotency_key: Mapped[str] = mapped_column(Text, primary_key=True)
    fact_ids: Mapped[list[uuid.UUID]] = mapped_column(_UUID_ARRAY)
    created_at: Mapped[datetime] = mapped_column(_TZ)


class TextSearchCorpusRow(Base):
    """BM25 corpus statistics of one tenant's table: documents and summed lengths.

    ``corpus`` is ``facts``, ``episode_messages`` or ``episodes``; lengths in tokens.
    Maintained by triggers on the three tables (migration 0008), never by the library.
    """

    __tablename__ = "text_search_corpora"

    tenant_id: Mapped[str] = mapped_column(Text, primary_key=True)
    corpus: Mapped[str] = mapped_column(Text, primary_key=True)
    documents: Mapped[int] = mapped_column(BigInteger)
    total_length: Mapped[int] = mapped_column(BigInteger)


class TextSearchTermRow(Base):
    """BM25 document frequency of one term in one tenant's table (trigger-maintained)."""

    __tablename__ = "text_search_terms"

    tenant_id: Mapped[str] = mapped_column(Text, primary_key=True)
    corpus: Mapped[str] = mapped_column(Text, primary_key=True)
    term: Mapped[str] = mapped_column(Text, primary_key=True)
    documents: Mapped[int] = mapped_column(BigInteger)


class ErasureLogRow(Base):
    """One purge (migration 0009): what was erased, by which criteria, with no content.

    Append-only like the gate audit log (the same trigger refuses UPDATE, DELETE and
    TRUNCATE). Selector values are kept only as SHA-256 digests.
    """

    __tablename__ = "erasure_log"

    tenant_id: Mapped[str] = mapped_column(Text, primary_key=True)
    id: Mapped[int] = mapped_column(BigInteger, Identity(always=True), primary_key=True)
    erasure_id: Mapped[uuid.UUID] = mapped_column(Uuid(as_uuid=True))
    kind: Mapped[str] = mapped_column(Text)
    selector_kinds: Mapped[list[str]] = mapped_column(ARRAY(Text))
    selector_digests: Mapped[list[str]] = mapped_column(ARRAY(Text))
    counts: Mapped[dict[str, Any]] = mapped_column(JSONB)
    erased_at: Mapped[datetime] = mapped_column(_TZ)


class LedgerErasedFactRow(Base):
    """A fact a purge erased (migration 0018): the ledger never links its id again.

    Keeps ``fact_digest`` (:func:`~cycgraph_memory.lifecycle.models.erased_fact_digest`),
    never the id. Append-only like the erasure log (the same trigger refuses UPDATE,
    DELETE and TRUNCATE).
    """

    __tablename__ = "ledger_erased_facts"

    tenant_id: Mapped[str] = mapped_column(Text, primary_key=True)
    fact_digest: Mapped[str] = mapped_column(Text, primary_key=True)
    erased_at: Mapped[datetime] = mapped_column(_TZ)


class TenantSettingRow(Base):
    """One small per-tenant record (a JSON value under a key), e.g. the theme calibration."""

    __tablename__ = "tenant_settings"

    tenant_id: Mapped[str] = mapped_column(Text, primary_key=True)
    key: Mapped[str] = mapped_column(Text, primary_key=True)
    value: Mapped[dict[str, Any]] = mapped_column(JSONB)
    updated_at: Mapped[datetime] = mapped_column(_TZ)

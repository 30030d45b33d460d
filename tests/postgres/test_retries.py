"""Retries on real deadlocks and dropped connections; statement timeouts (real commits)."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
from sqlalchemy import text

from cycgraph_memory.errors import (
    ConcurrencyError,
    ConnectionLostError,
    InvalidInputError,
    StatementTimeoutError,
)
from cycgraph_memory.retry import NO_RETRY, RetryPolicy

from ._records import fact

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

FAST = RetryPolicy(max_attempts=3, base_delay_s=0.01, max_delay_s=0.05, seed=0)


@pytest_asyncio.fixture(loop_scope="session")
async def tenant(pg_engine: Any) -> AsyncIterator[str]:
    from cycgraph_memory.postgres import PostgresMemoryStore

    name = f"retry_{secrets.token_hex(4)}"
    try:
        yield name
    finally:
        await PostgresMemoryStore(pg_engine, tenant_id=name).clear()


async def _deadlock_against(pg_engine: Any, store: Any, tenant: str) -> None:
    """Make ``store.put_facts`` deadlock with a raw transaction; the store is the victim.

    The raw transaction locks fact B, the store's upsert locks A and waits for B, then the
    raw transaction asks for A. Each waiter checks for a cycle once, deadlock_timeout after
    it starts waiting: the store's check (600 ms) comes after the cycle closed (200 ms) and
    long before the raw one's (10 s), so the store detects it and aborts itself.
    """
    a, b = sorted((fact(), fact()), key=lambda f: f.id)
    await store.put_facts([a, b])
    async with pg_engine.connect() as raw:
        await raw.execute(text("SET deadlock_timeout = '10s'"))
        await raw.execute(text("UPDATE facts SET content = 'raw' WHERE tenant_id = :t AND id = :b"),
                          {"t": tenant, "b": b.id})
        writer = asyncio.create_task(store.put_facts([
            a.model_copy(update={"content": "store"}), b.model_copy(update={"content": "store"})
        ]))
        await asyncio.sleep(0.2)  # the store now holds A and waits for B
        await raw.execute(text("UPDATE facts SET content = 'raw' WHERE tenant_id = :t AND id = :a"),
                          {"t": tenant, "a": a.id})
        await raw.commit()
        await writer


async def test_deadlocked_upsert_is_retried(pg_dsn: str, pg_engine: Any, tenant: str) -> None:
    from cycgraph_memory.postgres import PostgresMemoryStore, create_engine_from_dsn

    engine = create_engine_from_dsn(pg_dsn, connect_args={
        "server_settings": {"deadlock_timeout": "600"}})
    try:
        store = PostgresMemoryStore(engine, tenant_id=tenant, retry=FAST)
        await _deadlock_against(pg_engine, store, tenant)
        contents = {f.content for f in await store.find_facts()}
        assert contents == {"store"}  # the retried upsert ran after the raw commit

        strict = PostgresMemoryStore(engine, tenant_id=tenant, retry=NO_RETRY)
        with pytest.raises(ConcurrencyError) as info:
            await _deadlock_against(pg_engine, strict, tenant)
        assert info.value.sqlstate == "40P01" and info.value.attempts == 1
    finally:
        await engine.dispose()


async def test_lost_connection_is_a_distinct_retryable_error(
    pg_engine: Any, tenant: str
) -> None:
    from cycgraph_memory.postgres import PostgresMemoryStore

    store = PostgresMemoryStore(pg_engine, tenant_id=tenant, retry=FAST)
    attempts: list[int] = []

    async def work(session: Any) -> int:
        attempts.append(1)
        if len(attempts) == 1:  # the server drops this connection mid-transaction
            await session.execute(text("SELECT pg_terminate_backend(pg_backend_pid())"))
        return int((await session.execute(text("SELECT 1"))).scalar_one())

    assert await store._run(work, "probe") == 1
    assert len(attempts) == 2

    attempts.clear()
    strict = PostgresMemoryStore(pg_engine, tenant_id=tenant, retry=NO_RETRY)
    with pytest.raises(ConnectionLostError):
        await strict._run(work, "probe")
    f = fact()
    await strict.put_fact(f)  # the engine recovers: the pool replaces the dead connection
    assert await strict.get_fact(f.id) == f


async def test_statement_timeout_is_configurable(pg_dsn: str, tenant: str) -> None:
    from cycgraph_memory.postgres import PostgresMemoryStore, create_engine_from_dsn

    engine = create_engine_from_dsn(pg_dsn, statement_timeout_ms=100, lock_timeout_ms=100)
    try:
        store = PostgresMemoryStore(engine, tenant_id=tenant)
        with pytest.raises(StatementTimeoutError) as info:
            async with store._session() as session:
                await session.execute(text("SELECT pg_sleep(2)"))
        assert info.value.sqlstate == "57014"
        async with store._session() as session:
            shown = (await session.execute(text("SHOW statement_timeout"))).scalar_one()
        assert shown == "100ms"
    finally:
        await engine.dispose()
    for bad in (0, -5, 1.5, True, "100"):
        with pytest.raises(InvalidInputError):
            create_engine_from_dsn(pg_dsn, statement_timeout_ms=bad)

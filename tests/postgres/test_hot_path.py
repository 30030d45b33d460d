"""Shapes of the Postgres hot path's client side (no timings): round trips and decoding."""

from __future__ import annotations

import asyncio
import secrets
import uuid
from typing import Any

import pytest
from sqlalchemy import text

from ._records import fact

pytestmark = [pytest.mark.postgres]


async def test_a_connection_the_server_closed_is_replaced_at_checkout(pg_dsn: str) -> None:
    # Without pool_pre_ping (the default), checkout tests the connection locally.
    from cycgraph_memory.postgres import PostgresMemoryStore, create_engine_from_dsn

    engine = create_engine_from_dsn(pg_dsn, pool_size=1, max_overflow=0)
    admin = create_engine_from_dsn(pg_dsn, pool_size=1, max_overflow=0)
    tenant = f"hot_{secrets.token_hex(4)}"
    store = PostgresMemoryStore(engine, tenant_id=tenant)
    try:
        f = fact()
        await store.put_fact(f)
        async with engine.connect() as conn:
            pid = (await conn.execute(text("SELECT pg_backend_pid()"))).scalar_one()
        async with admin.connect() as conn:
            assert (await conn.execute(
                text("SELECT pg_terminate_backend(:pid)"), {"pid": pid}
            )).scalar_one()
        await asyncio.sleep(0.2)  # the event loop sees the socket close
        # A read is not retried: it succeeds because the pool replaced the connection.
        assert await store.get_fact(f.id) == f
        async with engine.connect() as conn:
            assert (await conn.execute(text("SELECT pg_backend_pid()"))).scalar_one() != pid
    finally:
        await store.clear()
        await engine.dispose()
        await admin.dispose()


async def test_a_checkout_costs_no_round_trip(pg_dsn: str) -> None:
    # A retrieval's transaction is BEGIN, its statements, COMMIT: no ping around it.
    import asyncpg

    from cycgraph_memory.postgres import PostgresMemoryStore, create_engine_from_dsn

    engine = create_engine_from_dsn(pg_dsn, pool_size=1, max_overflow=0)
    store = PostgresMemoryStore(engine, tenant_id=f"hot_{secrets.token_hex(4)}")
    sent: list[str] = []
    original = asyncpg.Connection.execute

    async def spy(self: Any, query: str, *args: Any, **kwargs: Any) -> Any:
        sent.append(query)
        return await original(self, query, *args, **kwargs)

    try:
        await store.get_fact(uuid.uuid4())  # the pool holds one connection now
        asyncpg.Connection.execute = spy  # type: ignore[method-assign]
        try:
            assert await store.get_fact(uuid.uuid4()) is None
        finally:
            asyncpg.Connection.execute = original  # type: ignore[method-assign]
        assert sent == ["BEGIN;", "COMMIT;"]
    finally:
        await engine.dispose()

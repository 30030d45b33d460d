"""Unit of work: commit, rollback on raise, nested savepoints, real commits on the engine."""

from __future__ import annotations

import asyncio
import contextvars
import secrets
from typing import Any

import pytest

from cycgraph_memory.errors import TransactionError

from ._records import entity, episode, fact, theme

pytestmark = pytest.mark.postgres


class Boom(Exception):
    pass


async def test_rollback_on_raise_persists_nothing(pg_store: Any) -> None:
    f, e, ep, th = fact(), entity(), episode(), theme()
    with pytest.raises(Boom):
        async with pg_store.transaction():
            await pg_store.put_fact(f)
            await pg_store.put_entity(e)
            await pg_store.put_episode(ep)
            await pg_store.put_theme(th)
            assert await pg_store.get_fact(f.id) == f  # visible inside the unit of work
            raise Boom
    assert await pg_store.get_fact(f.id) is None
    assert await pg_store.get_entity(e.id) is None
    assert await pg_store.get_episode(ep.id) is None
    assert await pg_store.get_theme(th.id) is None


async def test_commit_persists_everything(pg_store: Any) -> None:
    f, e = fact(), entity()
    async with pg_store.transaction():
        await pg_store.put_fact(f)
        await pg_store.put_entity(e)
        await pg_store.touch_facts([f.id])
    assert (await pg_store.get_fact(f.id)).access_count == 1
    assert await pg_store.get_entity(e.id) == e


async def test_transaction_shares_one_session(pg_store: Any, pg_index: Any) -> None:
    async with pg_store.transaction():
        first = pg_store._active_session()
        await pg_store.put_fact(fact())
        assert pg_store._active_session() is first is not None
        assert pg_index._active_session() is first  # same bind: the index joins
    assert pg_store._active_session() is None


async def _in_fresh_context(coro: Any) -> Any:
    """Run ``coro`` in a task that does not inherit the caller's open unit of work."""
    return await asyncio.create_task(coro, context=contextvars.Context())


@pytest.mark.slow
async def test_real_commit_and_rollback_on_engine(pg_engine: Any) -> None:
    """Real commits (no outer transaction): other connections see committed rows only."""
    from cycgraph_memory.postgres import PostgresMemoryStore

    tenant = f"real_{secrets.token_hex(4)}"
    store = PostgresMemoryStore(pg_engine, tenant_id=tenant)
    observer = PostgresMemoryStore(pg_engine, tenant_id=tenant)
    kept, dropped = fact(), fact()
    try:
        async with store.transaction():
            await store.put_fact(kept)
            # not committed yet: another task (another connection) cannot see it
            assert await _in_fresh_context(observer.get_fact(kept.id)) is None
        assert await observer.get_fact(kept.id) == kept
        with pytest.raises(Boom):
            async with store.transaction():
                await store.put_fact(dropped)
                raise Boom
        assert await observer.get_fact(dropped.id) is None
    finally:
        await store.clear()
    assert await observer.find_facts(include_invalidated=True) == []


def test_transaction_error_exists() -> None:
    assert issubclass(TransactionError, Exception)


@pytest.mark.slow
async def test_objects_on_one_engine_share_the_unit_of_work(pg_engine: Any) -> None:
    """A write through a second store or an index joins the open transaction of the first."""
    from cycgraph_memory.postgres import PostgresMemoryIndex, PostgresMemoryStore

    tenant = f"uow_{secrets.token_hex(4)}"
    store = PostgresMemoryStore(pg_engine, tenant_id=tenant)
    other = PostgresMemoryStore(pg_engine, tenant_id=tenant)
    index = PostgresMemoryIndex(pg_engine, tenant_id=tenant)
    rolled, kept = fact(), fact()
    try:
        with pytest.raises(Boom):
            async with store.transaction():
                await other.put_fact(rolled)
                hits = await index.search_facts(rolled.embedding, limit=1)
                assert [h.item.id for h in hits] == [rolled.id]  # visible inside the unit
                raise Boom
        assert await other.get_fact(rolled.id) is None
        async with index.transaction():
            await other.put_fact(kept)
        assert await _in_fresh_context(store.get_fact(kept.id)) == kept
    finally:
        await store.clear()


@pytest.mark.slow
async def test_objects_on_other_engines_do_not_share(pg_dsn: str) -> None:
    from cycgraph_memory.postgres import PostgresMemoryStore, create_engine_from_dsn

    tenant = f"uow_{secrets.token_hex(4)}"
    engine_a, engine_b = create_engine_from_dsn(pg_dsn), create_engine_from_dsn(pg_dsn)
    a = PostgresMemoryStore(engine_a, tenant_id=tenant)
    b = PostgresMemoryStore(engine_b, tenant_id=tenant)
    committed = fact()
    try:
        with pytest.raises(Boom):
            async with a.transaction():
                await b.put_fact(committed)  # its own transaction on another engine
                raise Boom
        assert await a.get_fact(committed.id) == committed
    finally:
        await a.clear()
        await engine_a.dispose()
        await engine_b.dispose()


async def _overlap_order(make_store: Any) -> list[str]:
    """Two passes named alike: record when each enters and leaves its exclusive block."""
    events: list[str] = []
    entered = asyncio.Event()

    async def first() -> None:
        async with make_store().exclusive("pass"):
            events.append("a-in")
            entered.set()
            await asyncio.sleep(0.3)
            events.append("a-out")

    async def second() -> None:
        await entered.wait()
        async with make_store().exclusive("pass"):
            events.append("b-in")
            events.append("b-out")

    await asyncio.gather(
        asyncio.create_task(first(), context=contextvars.Context()),
        asyncio.create_task(second(), context=contextvars.Context()),
    )
    return events


@pytest.mark.slow
async def test_exclusive_passes_never_overlap_across_connections(pg_engine: Any) -> None:
    from cycgraph_memory.postgres import PostgresMemoryStore

    tenant = f"ex_{secrets.token_hex(4)}"
    events = await _overlap_order(lambda: PostgresMemoryStore(pg_engine, tenant_id=tenant))
    assert events == ["a-in", "a-out", "b-in", "b-out"]


@pytest.mark.slow
async def test_exclusive_locks_are_per_tenant(pg_engine: Any) -> None:
    from cycgraph_memory.postgres import PostgresMemoryStore

    tenants = iter([f"ex_{secrets.token_hex(4)}", f"ex_{secrets.token_hex(4)}"])
    events = await _overlap_order(lambda: PostgresMemoryStore(pg_engine, tenant_id=next(tenants)))
    assert events == ["a-in", "b-in", "b-out", "a-out"]


async def test_exclusive_is_a_unit_of_work(pg_store: Any) -> None:
    f = fact()
    with pytest.raises(Boom):
        async with pg_store.exclusive("pass"):
            await pg_store.put_fact(f)
            raise Boom
    assert await pg_store.get_fact(f.id) is None

"""Unit of work: commit, rollback on raise, nested savepoints, real commits on the engine."""

from __future__ import annotations

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


async def test_transaction_shares_one_session(pg_store: Any) -> None:
    async with pg_store.transaction():
        first = pg_store._active.get()
        await pg_store.put_fact(fact())
        assert pg_store._active.get() is first is not None
    assert pg_store._active.get() is None


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
            # not committed yet: another connection cannot see it
            assert await observer.get_fact(kept.id) is None
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

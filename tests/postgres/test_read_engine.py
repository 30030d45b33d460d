"""``read_engine=``: reads go to a second engine, writes and units of work to the primary.

A second engine on the same server stands in for a streaming replica; statement listeners
on both engines show which one served each call.
"""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
from sqlalchemy import event

from cycgraph_memory import Entity, Provenance, SemanticFact, retrieve_memory

pytestmark = pytest.mark.postgres

PROV = Provenance(source="agent")


class Recorder:
    """Statements sent through one engine."""

    def __init__(self, engine: Any) -> None:
        self.engine = engine
        self.statements: list[str] = []
        event.listen(engine.sync_engine, "before_cursor_execute", self)

    def __call__(self, conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        self.statements.append(" ".join(statement.split()))

    def take(self) -> list[str]:
        out, self.statements = self.statements, []
        return out

    def close(self) -> None:
        event.remove(self.engine.sync_engine, "before_cursor_execute", self)


@pytest_asyncio.fixture(loop_scope="session")
async def engines(pg_engine: Any, pg_dsn: str) -> AsyncIterator[tuple[Recorder, Recorder]]:
    from cycgraph_memory.postgres import create_engine_from_dsn

    replica = create_engine_from_dsn(pg_dsn, pool_size=2)
    primary_rec, replica_rec = Recorder(pg_engine), Recorder(replica)
    try:
        yield primary_rec, replica_rec
    finally:
        primary_rec.close()
        replica_rec.close()
        await replica.dispose()


def _writes(statements: list[str]) -> list[str]:
    return [s for s in statements if s.split()[0].upper() in ("INSERT", "UPDATE", "DELETE")]


async def test_reads_on_the_read_engine_writes_on_the_primary(
    engines: tuple[Recorder, Recorder],
) -> None:
    from cycgraph_memory.postgres import PostgresMemoryIndex, PostgresMemoryStore

    primary, replica = engines
    tenant = f"replica_{secrets.token_hex(4)}"
    store = PostgresMemoryStore(primary.engine, tenant_id=tenant, read_engine=replica.engine)
    index = PostgresMemoryIndex(primary.engine, tenant_id=tenant, read_engine=replica.engine)
    entity = Entity(name="Ada", entity_type="person", provenance=PROV)
    fact = SemanticFact(content="Ada writes programs", entity_ids=[entity.id], tags=["lesson"],
                        embedding=[1.0] + [0.0] * 7, provenance=PROV)
    try:
        await store.put_entities([entity])
        await store.put_fact(fact)
        assert _writes(primary.take()), "writes go to the primary"
        assert replica.take() == []

        assert (await store.get_fact(fact.id)) == fact
        assert [f.id for f in await store.find_facts(tags=["lesson"])] == [fact.id]
        hits = await index.search_facts([1.0] + [0.0] * 7, limit=1)
        assert [h.item.id for h in hits] == [fact.id]
        assert primary.take() == [], "reads outside a unit of work skip the primary"
        served = replica.take()
        assert any("FROM facts" in s for s in served) and _writes(served) == []

        # retrieve_memory: every read on the replica, the touch of served facts on the
        # primary (its own transaction).
        for query in ({"embedding": [1.0] + [0.0] * 7}, {"tags": ["lesson"]},
                      {"entity_ids": [entity.id]},
                      {"embedding": [1.0] + [0.0] * 7, "text": "Ada programs"}):
            result = await retrieve_memory(store, index, query)
            assert [f.id for f in result.facts] == [fact.id], query
            on_primary, on_replica = primary.take(), replica.take()
            assert [s.split()[0] for s in _writes(on_primary)] == ["UPDATE"], query
            assert all(
                "set_config" in s or s.startswith("UPDATE facts") for s in on_primary
            ), on_primary
            assert on_replica and _writes(on_replica) == [], query
        assert (await store.get_fact(fact.id)).access_count == 4
        assert replica.take() and primary.take() == []

        # Inside a unit of work every read joins the primary's transaction and sees its
        # own uncommitted writes.
        newer = SemanticFact(content="Ada reads proofs", tags=["lesson"], provenance=PROV)
        async with store.transaction():
            await store.put_fact(newer)
            assert (await store.get_fact(newer.id)) == newer
            listed = await store.find_facts(tags=["lesson"])
            assert newer.id in {f.id for f in listed}
            result = await retrieve_memory(store, index, {"tags": ["lesson"]})
            assert newer.id in {f.id for f in result.facts}
        assert replica.take() == [], "nothing inside the unit of work read the replica"
        assert primary.take()
        async with store.exclusive("maintenance"):
            await store.get_fact(fact.id)
        assert replica.take() == []
        assert any("pg_advisory_xact_lock" in s for s in primary.take())
    finally:
        await store.clear()


async def test_without_read_engine_everything_uses_the_primary(
    engines: tuple[Recorder, Recorder],
) -> None:
    from cycgraph_memory.postgres import PostgresMemoryStore

    primary, replica = engines
    store = PostgresMemoryStore(primary.engine, tenant_id=f"solo_{secrets.token_hex(4)}")
    assert store.read_sessionmaker is None
    fact = SemanticFact(content="x", provenance=PROV)
    try:
        await store.put_fact(fact)
        assert (await store.get_fact(fact.id)) == fact
        assert primary.take() and replica.take() == []
    finally:
        await store.clear()

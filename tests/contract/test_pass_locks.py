"""Passes that rewrite facts never undo one another (Postgres, two connections, committed).

Every pass that reads facts and writes whole records back (consolidation, entity and
conflict resolution, ``Memory.forget``, the retention gate, purge) holds ``FACTS_LOCK``
besides its own lock: one pass committing between another's read and its write is what
these tests provoke.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import secrets
from typing import Any

import pytest

from cycgraph_memory import Memory
from cycgraph_memory._exclusive import PASS_LOCK_ORDER, exclusive_passes
from cycgraph_memory.consolidation import MemoryConsolidator
from cycgraph_memory.inmemory import InMemoryMemoryStore

from .factories import at, make_fact, unit


@pytest.mark.postgres
async def test_forget_during_consolidation_is_not_undone(committing_dsn: str) -> None:
    """Consolidation merges X into Y; ``forget(Y)`` commits after its plan was read.

    Without the shared lock, consolidation's write of the keeper Y (with X's statistics
    absorbed) brought the forgotten fact back to life.
    """
    from cycgraph_memory.postgres import (
        PostgresMemoryIndex,
        PostgresMemoryStore,
        create_engine_from_dsn,
    )

    engine = create_engine_from_dsn(committing_dsn)
    tenant = f"locks_{secrets.token_hex(5)}"
    store = PostgresMemoryStore(engine, tenant_id=tenant)
    other = Memory(PostgresMemoryStore(engine, tenant_id=tenant),
                   PostgresMemoryIndex(engine, tenant_id=tenant), tenant=tenant)
    try:
        x = make_fact(content="the deploy runs at noon", embedding=unit(0), valid_from=at(0))
        y = make_fact(content="the deploy runs at noon", embedding=unit(0), valid_from=at(1))
        await store.put_facts([x, y])
        consolidator = MemoryConsolidator(store, dedup_threshold=0.9)
        plan = consolidator.plan
        planned, forgotten = asyncio.Event(), asyncio.Event()

        async def paused_plan(**kwargs: Any) -> Any:
            result = await plan(**kwargs)
            planned.set()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(forgotten.wait(), 1.0)
            return result

        consolidator.plan = paused_plan  # type: ignore[method-assign]

        async def forget() -> None:
            await planned.wait()
            await other.forget([y.id])
            forgotten.set()

        # The forgetting client is another client: a task of its own, in a fresh context.
        racer = asyncio.create_task(forget(), context=contextvars.Context())
        report = await consolidator.consolidate()
        await racer
        assert report.facts_deduped == 1
        kept = await store.get_fact(y.id)
        assert kept is not None and kept.invalidated_by == "forgotten"
    finally:
        await store.clear()
        await engine.dispose()


async def test_locks_are_taken_in_one_order() -> None:
    """``exclusive_passes`` takes its locks in ``PASS_LOCK_ORDER`` whatever the call order."""
    taken: list[str] = []

    class Recording(InMemoryMemoryStore):
        @contextlib.asynccontextmanager
        async def exclusive(self, name: str) -> Any:
            taken.append(name)
            async with super().exclusive(name):
                yield

    store = Recording()
    async with exclusive_passes(store, "themes", "facts", "purge", "custom", "forget"):
        pass
    assert taken == ["purge", "forget", "facts", "themes", "custom"]
    assert [n for n in PASS_LOCK_ORDER if n in taken] == taken[:-1]


@pytest.mark.postgres
async def test_ingest_during_entity_resolution_keeps_what_it_absorbed(
    committing_dsn: str,
) -> None:
    """Entity resolution merges B into A; an ingest absorbing data into A commits meanwhile.

    The ingest matched its new "Acme Corp" to the stored canonical A and wrote A back with
    the attribute it brought. Without the entity-resolution lock on the ingest, the
    resolver's write of A (planned before the ingest) dropped that attribute.
    """
    from cycgraph_memory import MemoryPipeline
    from cycgraph_memory.consolidation import EntityResolver
    from cycgraph_memory.postgres import PostgresMemoryStore, create_engine_from_dsn
    from cycgraph_memory.records import Episode, ExtractionResult, Message

    from .factories import make_entity

    engine = create_engine_from_dsn(committing_dsn)
    tenant = f"locks_{secrets.token_hex(5)}"
    store = PostgresMemoryStore(engine, tenant_id=tenant)
    writer = PostgresMemoryStore(engine, tenant_id=tenant)
    try:
        a = make_entity(name="Acme Corp", attributes={"industry": "widgets"},
                        created_at=at(0), updated_at=at(0))
        b = make_entity(name="Acme Corp", attributes={"city": "Lyon"},
                        created_at=at(1), updated_at=at(1))
        await store.put_entities([a, b])

        class Brings:
            async def extract(self, episode: Episode) -> ExtractionResult:
                entity = make_entity(name="Acme Corp", attributes={"founded": "1999"})
                fact = make_fact(content="Acme Corp was founded in 1999",
                                 source_episode_ids=[episode.id], entity_ids=[entity.id],
                                 source_message_ids=[m.id for m in episode.messages])
                episode.fact_ids = [fact.id]
                return ExtractionResult(facts=[fact], entities=[entity])

        pipeline = MemoryPipeline(writer, extractor=Brings())
        resolver = EntityResolver(store)
        plan = resolver.plan
        planned, ingested = asyncio.Event(), asyncio.Event()

        async def paused_plan(**kwargs: Any) -> Any:
            result = await plan(**kwargs)
            planned.set()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(ingested.wait(), 1.0)
            return result

        resolver.plan = paused_plan  # type: ignore[method-assign]

        async def ingest() -> None:
            await planned.wait()
            await pipeline.ingest([
                Message(role="user", content="Acme Corp was founded in 1999",
                        timestamp=at(10)),
                Message(role="assistant", content="Noted.", timestamp=at(11)),
            ])
            ingested.set()

        racer = asyncio.create_task(ingest(), context=contextvars.Context())
        report = await resolver.resolve()
        await racer
        assert report.entities_absorbed == 1
        kept = await store.get_entity(a.id)
        assert kept is not None
        assert kept.attributes == {"industry": "widgets", "city": "Lyon", "founded": "1999"}
    finally:
        await store.clear()
        await engine.dispose()

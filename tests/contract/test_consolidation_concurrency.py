"""Two workers running one pass at once end in the state of one run (real commits)."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest

from cycgraph_memory import (
    ConflictDetector,
    ConsolidationReport,
    EntityResolutionReport,
    EntityResolver,
    InMemoryMemoryStore,
    MemoryConsolidator,
)

from .factories import at, make_entity, make_fact, make_relationship, unit


@pytest.fixture(params=["memory", "postgres"])
def committing_store(request: pytest.FixtureRequest) -> Any:
    """A store whose writes really commit (the test clears it)."""
    if request.param == "memory":
        return InMemoryMemoryStore()
    from cycgraph_memory.postgres import PostgresMemoryStore

    return PostgresMemoryStore(
        request.getfixturevalue("pg_engine"), tenant_id=f"cons_{uuid.uuid4().hex[:12]}"
    )


async def test_concurrent_passes_apply_once(committing_store: Any) -> None:
    try:
        await run_concurrently(committing_store)
    finally:
        await committing_store.clear()


async def run_concurrently(store: Any) -> None:
    people = [
        make_entity(name=n, entity_type="person", created_at=at(i), updated_at=at(i))
        for i, n in enumerate(["Alice", "alice", "ALICE.", "Bob"])
    ]
    await store.put_entities(people)
    await store.put_relationships(
        [make_relationship(p.id, people[3].id, relation_type="knows") for p in people[:3]]
    )
    await store.put_facts(
        [
            make_fact(content=f"alice fact {i}", entity_ids=[people[i].id],
                      embedding=unit(0), valid_from=at(days=i))
            for i in range(3)
        ]
        + [make_fact(content="Alice is not here", entity_ids=[people[0].id],
                     embedding=unit(3), valid_from=at(days=5)),
           make_fact(content="Alice is here", entity_ids=[people[0].id],
                     embedding=unit(4), valid_from=at(days=6))]
    )
    one, two = await asyncio.gather(
        EntityResolver(store).resolve(), EntityResolver(store).resolve()
    )
    assert sorted([one, two], key=lambda r: r.groups_merged) == [
        EntityResolutionReport(),
        EntityResolutionReport(
            groups_merged=1, entities_absorbed=2, facts_rewritten=2,
            relationships_rewritten=0, relationships_dropped=2,
        ),
    ]
    c1, c2 = await asyncio.gather(
        MemoryConsolidator(store).consolidate(), MemoryConsolidator(store).consolidate()
    )
    assert sorted([c1.facts_deduped, c2.facts_deduped]) == [0, 2]
    assert ConsolidationReport() in (c1, c2)
    detector = ConflictDetector(store, policy="negation-invalidates-positive")
    conflicts = await detector.detect_conflicts()
    assert [c.type for c in conflicts] == ["negation"]
    r1, r2 = await asyncio.gather(
        detector.auto_resolve_all(conflicts), detector.auto_resolve_all(conflicts)
    )
    assert sorted([r1.resolved, r2.resolved]) == [0, 1]
    assert [f.content for f in await store.find_facts()] == ["alice fact 2", "Alice is not here"]

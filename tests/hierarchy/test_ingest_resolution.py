"""Ingest-time entity resolution: a second ingest reuses stored entities (both backends)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from cycgraph_memory import EntityResolutionReport, EntityResolver, Message
from cycgraph_memory.embeddings.hashing import HashingEmbeddingProvider
from cycgraph_memory.hierarchy.ingest_resolution import resolve_ingest_entities
from cycgraph_memory.hierarchy.pipeline import MemoryPipeline
from cycgraph_memory.inmemory import InMemoryMemoryStore
from cycgraph_memory.records import Entity, Provenance, Relationship, SemanticFact

T0 = datetime(2025, 3, 1, 9, 0, tzinfo=UTC)
PROV = Provenance(source="agent", created_at=T0)


@pytest.fixture(params=["memory", "postgres"])
def store(request: pytest.FixtureRequest) -> Any:
    if request.param == "memory":
        return InMemoryMemoryStore()
    return request.getfixturevalue("pg_store")


def messages(start: datetime, *texts: str) -> list[Message]:
    return [
        Message(role="user", content=t, timestamp=start + timedelta(seconds=i))
        for i, t in enumerate(texts)
    ]


def pipeline(store: Any, **kw: Any) -> MemoryPipeline:
    return MemoryPipeline(store, embedder=HashingEmbeddingProvider(dimensions=8), **kw)


async def person_ids(store: Any, name: str) -> list[Any]:
    return [
        e.id
        for e in await store.find_entities(include_invalidated=True)
        if e.name.lower() == name.lower()
    ]


async def test_second_ingest_reuses_the_stored_entity(store: Any) -> None:
    p = pipeline(store)
    first = await p.ingest(messages(T0, "Alice Smith works at Acme Corp."))
    second = await p.ingest(
        messages(T0 + timedelta(days=1), "Alice Smith joined Acme Corp in Paris.")
    )
    alice = await person_ids(store, "Alice Smith")
    assert len(alice) == 1
    assert alice[0] in first.entity_ids and alice[0] not in second.entity_ids
    facts = await store.find_facts()
    assert sum(alice[0] in f.entity_ids for f in facts) == len(facts) == 2
    # nothing left for the resolver
    assert await EntityResolver(store).resolve() == EntityResolutionReport()


async def test_switched_off_the_graph_fragments_until_resolution(store: Any) -> None:
    p = pipeline(store, resolve_entities=False)
    await p.ingest(messages(T0, "Alice Smith works at Acme Corp."))
    await p.ingest(messages(T0 + timedelta(days=1), "Alice Smith works at Acme Corp."))
    assert len(await person_ids(store, "Alice Smith")) == 2
    report = await EntityResolver(store).resolve()
    assert report.groups_merged >= 1 and report.entities_absorbed >= 1


async def test_helper_absorbs_attributes_and_drops_duplicate_edges(store: Any) -> None:
    stored = Entity(name="Acme Corp", entity_type="organization", attributes={"a": 1},
                    provenance=PROV, created_at=T0, updated_at=T0)
    bob = Entity(name="Bob", entity_type="person", provenance=PROV, created_at=T0,
                 updated_at=T0)
    edge = Relationship(source_id=bob.id, target_id=stored.id, relation_type="works_at",
                        provenance=PROV)
    await store.put_entities([stored, bob])
    await store.put_relationship(edge)
    new_acme = Entity(name="the ACME corp.", entity_type="organization",
                      attributes={"a": 2, "b": 3}, embedding=[1.0] + [0.0] * 7, provenance=PROV)
    new_bob = Entity(name="bob", entity_type="person", provenance=PROV)
    fresh = Entity(name="Carol", entity_type="person", provenance=PROV)
    fact = SemanticFact(content="bob works at acme", entity_ids=[new_bob.id, new_acme.id],
                        provenance=PROV)
    rels = [
        Relationship(source_id=new_bob.id, target_id=new_acme.id, relation_type="works_at",
                     provenance=PROV),
        Relationship(source_id=fresh.id, target_id=new_acme.id, relation_type="knows",
                     provenance=PROV),
    ]
    out = await resolve_ingest_entities(
        store, [new_acme, new_bob, fresh], [fact], rels, clock=lambda: T0 + timedelta(days=2)
    )
    assert out.matched == {new_acme.id: stored.id, new_bob.id: bob.id}
    assert fact.entity_ids == [bob.id, stored.id]
    assert [e.id for e in out.entities] == [fresh.id, stored.id]
    merged = out.entities[1]
    assert merged.attributes == {"a": 1, "b": 3}
    assert merged.embedding == [1.0] + [0.0] * 7
    assert merged.updated_at == T0 + timedelta(days=2)
    # the works_at edge already exists; the knows edge is remapped
    assert [(r.source_id, r.target_id, r.relation_type) for r in out.relationships] == [
        (fresh.id, stored.id, "knows")
    ]

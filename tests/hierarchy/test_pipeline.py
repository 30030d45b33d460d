"""MemoryPipeline: one-call ingest on both backends."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pydantic import ValidationError

from cycgraph_memory import (
    EmbeddingDimensionMismatchError,
    Message,
    SemanticFact,
)
from cycgraph_memory.demo import load_sample_messages
from cycgraph_memory.embeddings.hashing import HashingEmbeddingProvider
from cycgraph_memory.hierarchy.pipeline import MemoryPipeline
from cycgraph_memory.inmemory import InMemoryMemoryIndex, InMemoryMemoryStore

DIM = 8


@pytest.fixture(params=["memory", "postgres"])
def store(request: pytest.FixtureRequest) -> Any:
    if request.param == "memory":
        return InMemoryMemoryStore()
    return request.getfixturevalue("pg_store")


@pytest.fixture(params=["memory", "postgres"])
async def committing_store(request: pytest.FixtureRequest) -> AsyncIterator[Any]:
    """A store whose writes really commit: ingest_many runs writes on their own sessions
    (never two sessions on one connection), so the rolled-back test connection won't do."""
    if request.param == "memory":
        yield InMemoryMemoryStore()
        return
    from cycgraph_memory.postgres import PostgresMemoryStore

    store = PostgresMemoryStore(request.getfixturevalue("pg_engine"),
                                tenant_id=f"pipe_{uuid.uuid4().hex[:12]}")
    try:
        yield store
    finally:
        await store.clear()


def _pipeline(store: Any, **kwargs: Any) -> MemoryPipeline:
    return MemoryPipeline(store, embedder=HashingEmbeddingProvider(dimensions=DIM), **kwargs)


async def _counts(store: Any) -> dict[str, int]:
    facts = await store.find_facts(include_invalidated=True)
    return {
        "episodes": len(await store.list_episodes(include_invalidated=True)),
        "facts": len(facts),
        "entities": len(await store.find_entities(include_invalidated=True)),
        "themes": len(await store.list_themes(include_invalidated=True)),
        "relationships": sum(
            [len(await store.get_relationships_for_entity(e.id, direction="outgoing",
                                                          include_invalidated=True))
             for e in await store.find_entities(include_invalidated=True)]
        ),
    }


async def test_ingest_sample_builds_whole_hierarchy(store: Any) -> None:
    messages = load_sample_messages()
    report = await _pipeline(store).ingest(
        messages, tags=["lesson", "graph:demo"], run_id="run-1", node_id="node-a"
    )
    assert report.messages_ingested == len(messages) == 26
    assert report.messages_skipped == 0
    # the sample has four sessions separated by more than five minutes
    episodes = await store.list_episodes()
    assert [e.id for e in episodes] == report.episode_ids
    assert len(episodes) == 4
    assert sum(len(e.messages) for e in episodes) == 26
    facts = await store.find_facts()
    assert {f.id for f in facts} == set(report.fact_ids)
    assert len(facts) >= 12
    themes = {t.id: t for t in await store.list_themes()}
    for fact in facts:
        assert fact.embedding is not None and len(fact.embedding) == DIM
        assert set(fact.tags) >= {"lesson", "graph:demo"}
        assert fact.provenance.run_id == "run-1"
        assert fact.provenance.node_id == "node-a"
        assert fact.theme_id in themes
        assert fact.id in themes[fact.theme_id].fact_ids
        assert fact.source_episode_ids and fact.source_episode_ids[0] in report.episode_ids
    for episode in episodes:
        assert episode.provenance.run_id == "run-1"
        assert set(episode.fact_ids) <= set(report.fact_ids)
    entities = await store.get_entities(report.entity_ids)
    assert len(entities) == len(report.entity_ids) > 5
    names = {e.name for e in entities.values()}
    assert {"Alice Smith", "Acme Corp", "Bob Jones"} <= names
    # one entity per (normalised name, type) within an ingest
    keys = [(e.name.lower(), e.entity_type) for e in entities.values()]
    assert len(keys) == len(set(keys))
    rels = await store.get_relationships([*report.relationship_ids])
    assert len(rels) == len(report.relationship_ids) > 3
    for rel in rels.values():
        assert rel.source_id in entities and rel.target_id in entities
        assert rel.source_id != rel.target_id
    for fact in facts:
        assert set(fact.entity_ids) <= set(entities)


async def test_reingest_same_messages_adds_nothing(store: Any) -> None:
    messages = load_sample_messages()
    pipeline = _pipeline(store)
    await pipeline.ingest(messages)
    before = await _counts(store)
    again = await pipeline.ingest(messages)
    assert again.messages_skipped == len(messages)
    assert again.messages_ingested == 0
    assert again.fact_ids == [] and again.episode_ids == []
    assert await _counts(store) == before


async def test_partial_reingest_stores_only_new_messages(store: Any) -> None:
    messages = load_sample_messages()
    pipeline = _pipeline(store)
    await pipeline.ingest(messages[:10])
    report = await pipeline.ingest(messages)
    assert report.messages_skipped == 10
    assert report.messages_ingested == len(messages) - 10
    stored = [m.id for e in await store.list_episodes() for m in e.messages]
    assert sorted(map(str, stored)) == sorted(str(m.id) for m in messages)


async def test_duplicate_ids_within_one_call_are_stored_once(store: Any) -> None:
    base = datetime(2026, 1, 1, tzinfo=UTC)
    msg = Message(role="user", content="Alice Smith works at Acme Corp in Berlin.",
                  timestamp=base)
    report = await _pipeline(store).ingest([msg, msg, msg.model_dump()])
    assert report.messages_ingested == 1
    assert report.messages_skipped == 2


async def test_bad_message_writes_nothing(store: Any) -> None:
    good = {"role": "user", "content": "Alice Smith works at Acme Corp.",
            "timestamp": datetime(2026, 1, 1, tzinfo=UTC)}
    bad = {"role": "robot", "content": "x"}
    with pytest.raises(ValidationError):
        await _pipeline(store).ingest([good, bad])
    assert (await _counts(store))["episodes"] == 0


async def test_bad_option_writes_nothing(store: Any) -> None:
    with pytest.raises(ValidationError):
        await _pipeline(store).ingest(load_sample_messages(), tags=[""])
    assert (await _counts(store))["facts"] == 0


class _WrongSizeEmbedder:
    dimensions = DIM

    async def embed(self, texts: Iterable[str]) -> list[list[float]]:
        return [[0.5] * (DIM + 1) for _ in texts]


async def test_embedder_dimension_mismatch_writes_nothing(store: Any) -> None:
    pipeline = MemoryPipeline(store, embedder=_WrongSizeEmbedder())
    with pytest.raises(EmbeddingDimensionMismatchError):
        await pipeline.ingest(load_sample_messages())
    assert (await _counts(store))["episodes"] == 0


class _FailingFactsStore(InMemoryMemoryStore):
    async def put_facts(self, facts: Iterable[SemanticFact]) -> None:
        raise RuntimeError("disk full")


async def test_failure_inside_the_write_rolls_everything_back() -> None:
    store = _FailingFactsStore()
    with pytest.raises(RuntimeError, match="disk full"):
        await _pipeline(store).ingest(load_sample_messages())
    assert await store.list_episodes(include_invalidated=True) == []
    assert await store.find_entities(include_invalidated=True) == []
    assert await store.list_themes(include_invalidated=True) == []


async def test_in_memory_index_is_kept_in_sync_without_rebuild() -> None:
    store = InMemoryMemoryStore()
    embedder = HashingEmbeddingProvider(dimensions=64)
    index = InMemoryMemoryIndex(expected_dimensions=64)
    pipeline = MemoryPipeline(store, embedder=embedder, index=index)
    await pipeline.ingest(load_sample_messages())
    [query] = await embedder.embed(["Bob Jones maintains the billing service"])
    hits = await index.search_facts(query, limit=3)
    assert hits and "Bob Jones" in hits[0].item.content
    assert await index.search_themes(query, limit=1)
    assert await index.search_episodes(query, limit=1)


async def test_without_embedder_facts_go_to_general_theme() -> None:
    store = InMemoryMemoryStore()
    await MemoryPipeline(store).ingest(load_sample_messages())
    themes = await store.list_themes()
    assert [t.label for t in themes] == ["General"]
    facts = await store.find_facts()
    assert all(f.embedding is None and f.theme_id == themes[0].id for f in facts)


async def test_second_ingest_reuses_existing_themes(store: Any) -> None:
    pipeline = _pipeline(store)
    t0 = datetime(2026, 3, 1, tzinfo=UTC)
    first = [Message(role="user", content=f"Alice Smith works at Acme Corp on project {i}.",
                     timestamp=t0 + timedelta(seconds=i)) for i in range(3)]
    second = [Message(role="user", content=f"Alice Smith works at Acme Corp on project {i}.",
                      timestamp=t0 + timedelta(days=1, seconds=i)) for i in range(3, 6)]
    r1 = await pipeline.ingest(first)
    r2 = await pipeline.ingest(second)
    themes = await store.list_themes()
    facts = await store.find_facts()
    assert {f.theme_id for f in facts} <= {t.id for t in themes}
    assert len(facts) == len(r1.fact_ids) + len(r2.fact_ids)
    member_ids = {fid for t in themes for fid in t.fact_ids}
    assert {f.id for f in facts} <= member_ids
    assert uuid.UUID(int=0) not in member_ids


async def test_ingest_many_matches_sequential_ingest(committing_store: Any) -> None:
    store = committing_store
    messages = load_sample_messages()
    batches = [messages[:9], messages[9:18], messages[18:]]
    reports = await _pipeline(store).ingest_many(batches, tags=["bulk"], run_id="bulk-1")
    assert [r.messages_ingested for r in reports] == [9, 9, 8]
    reference = InMemoryMemoryStore()
    for batch in batches:
        await _pipeline(reference).ingest(batch, tags=["bulk"], run_id="bulk-1")
    got, want = await _counts(store), await _counts(reference)
    assert got == want
    facts = await store.find_facts(tags=["bulk"])
    assert len(facts) == want["facts"]
    assert all(f.provenance.run_id == "bulk-1" for f in facts)


async def test_ingest_many_skips_messages_repeated_across_batches(
    committing_store: Any,
) -> None:
    store = committing_store
    messages = load_sample_messages()
    reports = await _pipeline(store).ingest_many([messages[:12], messages[6:20], messages])
    assert [r.messages_skipped for r in reports] == [0, 6, 20]
    assert sum(r.messages_ingested for r in reports) == len(messages)
    stored = [m.id for e in await store.list_episodes() for m in e.messages]
    assert len(stored) == len(set(stored)) == len(messages)


class _FailOnSecondFactsWrite(InMemoryMemoryStore):
    calls = 0

    async def put_facts(self, facts: Iterable[SemanticFact]) -> None:
        type(self).calls += 1
        if type(self).calls == 2:
            raise RuntimeError("write failed")
        await super().put_facts(facts)


async def test_ingest_many_failure_keeps_earlier_batches_only() -> None:
    store = _FailOnSecondFactsWrite()
    messages = load_sample_messages()
    batches = [messages[:7], messages[7:14], messages[14:]]
    with pytest.raises(RuntimeError, match="write failed"):
        await _pipeline(store).ingest_many(batches)
    stored = {m.id for e in await store.list_episodes(include_invalidated=True)
              for m in e.messages}
    assert stored == {m.id for m in messages[:7]}


async def test_provenance_template_passes_through_and_keywords_win() -> None:
    from cycgraph_memory import Provenance

    store = InMemoryMemoryStore()
    template = Provenance(source="human", run_id="run-t", node_id="node-t", agent_id="agent-t",
                          tool_name="importer")
    await _pipeline(store).ingest(load_sample_messages()[:7], provenance=template,
                                  node_id="node-explicit")
    records = [*await store.find_facts(), *await store.list_episodes(),
               *await store.find_entities()]
    assert records
    for record in records:
        p = record.provenance
        assert (p.source, p.run_id, p.node_id, p.agent_id, p.tool_name) == (
            "human", "run-t", "node-explicit", "agent-t", "importer")

"""The ``Memory`` facade on both backends: add, search, remember, forget, stats, lifecycle."""

from __future__ import annotations

import secrets
import uuid
from typing import Any

import pytest
import pytest_asyncio

from cycgraph_memory import (
    EmbeddingDimensionMismatchError,
    ErasureNotAvailableError,
    HashingEmbeddingProvider,
    InvalidTenantError,
    Memory,
    ProgressEvent,
    RecordNotFoundError,
    SchemaNotReadyError,
)
from cycgraph_memory.memory import FORGOTTEN_BY

TEST_DIM = 8  # the shared test schema's width (tests/conftest.py)

CONVERSATION = [
    {"role": "user", "content": "Alice Smith maintains the billing service."},
    {"role": "assistant", "content": "Noted: Alice Smith deploys the billing service on Fridays."},
    {"role": "user", "content": "Bob Jones owns the search cluster."},
]


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def facade_dsn(pg_databases: Any) -> str:
    """A database of this module's own (these tests commit; others count session rows)."""
    from cycgraph_memory.postgres import upgrade

    dsn = str(await pg_databases.create("w20_facade_dsn"))
    await upgrade(dsn, embedding_dim=8)
    return dsn



def _messages() -> list[dict[str, Any]]:
    # Fixed ids: re-adding the same messages must write nothing.
    return [
        {**m, "id": str(uuid.UUID(int=i + 1)), "timestamp": f"2026-01-0{i + 1}T10:00:00Z"}
        for i, m in enumerate(CONVERSATION)
    ]


async def test_add_then_search_renders_a_prompt_block(memory: Memory) -> None:
    events: list[ProgressEvent] = []
    report = await memory.add(_messages(), tags=["notes"], progress=events.append)
    assert report.messages_ingested == 3 and report.fact_ids
    assert events and events[-1].stage == "write"
    assert all(e.operation == "ingest" for e in events)
    again = await memory.add(_messages())
    assert again.messages_ingested == 0 and again.messages_skipped == 3

    found = await memory.search("who maintains the billing service?", limit=5)
    contents = [f.content for f in found.result.facts]
    assert any("Alice Smith maintains the billing service" in c for c in contents)
    assert found.prompt.startswith("## Relevant Memory")
    assert set(found.result.fact_scores) == {f.id for f in found.result.facts}

    text_only = await memory.search("billing", mode="text", limit=5)
    assert text_only.result.facts and all(
        s.vector_rank is None for s in text_only.result.fact_scores.values()
    )


async def test_search_by_entity_and_by_tags(memory: Memory) -> None:
    await memory.add(_messages(), tags=["notes"])
    by_entity = await memory.search(entity="alice smith")
    assert "Alice Smith" in [e.name for e in by_entity.result.entities]
    assert by_entity.result.facts and all(
        "Alice" in f.content for f in by_entity.result.facts
    )
    with pytest.raises(RecordNotFoundError):
        await memory.search(entity="Nobody Atall")
    by_tag = await memory.search(tags=["notes"], limit=100)
    assert len(by_tag.result.facts) >= 3
    nothing = await memory.search(tags=["no-such-tag"])
    assert nothing.result.facts == [] and nothing.prompt == ""


async def test_remember_is_idempotent_and_a_candidate_lesson(memory: Memory) -> None:
    first = await memory.remember("Check the runbook before paging.", idempotency_key="r1:n1:0")
    again = await memory.remember("Check the runbook before paging.", idempotency_key="r1:n1:0")
    assert first == again
    fact = await memory.store.get_fact(first)
    assert fact is not None
    assert fact.tags == ["lesson", "candidate"] and fact.provenance.source == "agent"
    assert fact.embedding is not None and len(fact.embedding) == TEST_DIM
    verified = await memory.remember("Prefer small deploys.", candidate=False, tags=["ops"])
    fact = await memory.store.get_fact(verified)
    assert fact is not None and fact.tags == ["ops"]
    stats = await memory.stats()
    assert stats.pending_candidates == 1


async def test_forget_soft_deletes_and_erase_refuses(memory: Memory) -> None:
    report = await memory.add(_messages())
    target = report.fact_ids[0]
    missing = uuid.uuid4()
    done = await memory.forget([target, missing])
    assert done.forgotten == [target] and done.missing == [missing]
    fact = await memory.store.get_fact(target)
    assert fact is not None and fact.invalidated_by == FORGOTTEN_BY
    served = await memory.search(tags=[], text="Alice Smith billing", mode="text", limit=20)
    assert target not in {f.id for f in served.result.facts}
    again = await memory.forget(str(target))
    assert again.forgotten == [] and again.already_forgotten == [target]

    other = report.fact_ids[1]
    with pytest.raises(ErasureNotAvailableError):
        await memory.forget([other], erase=True)
    untouched = await memory.store.get_fact(other)
    assert untouched is not None and untouched.invalidated_by is None


async def test_erase_removes_what_a_run_said(memory: Memory) -> None:
    kept = await memory.add(_messages()[:1], run_id="keep")
    gone = await memory.add(_messages()[1:], run_id="erase-me")
    planned = await memory.erase(run_id="erase-me", dry_run=True)
    assert planned.facts == len(gone.fact_ids) > 0
    assert set(await memory.store.get_facts(gone.fact_ids)) == set(gone.fact_ids)
    report = await memory.erase(run_id="erase-me")
    assert report.facts == planned.facts
    assert await memory.store.get_facts(gone.fact_ids) == {}
    assert set(await memory.store.get_facts(kept.fact_ids)) == set(kept.fact_ids)
    served = await memory.search(text="Bob Jones search cluster", mode="text", limit=20)
    assert not {f.id for f in served.result.facts} & set(gone.fact_ids)


async def test_stats_counts_records(memory: Memory) -> None:
    empty = await memory.stats()
    assert all(c.live == 0 for c in empty.records.values())
    report = await memory.add(_messages(), tags=["notes"])
    await memory.forget(report.fact_ids[:1])
    stats = await memory.stats()
    facts = stats.records["fact"]
    assert facts.invalidated == 1 and facts.live == len(report.fact_ids) - 1
    assert stats.records["episode"].live == len(report.episode_ids)
    assert stats.records["message"].live == 3
    assert stats.records["entity"].live >= 2
    assert stats.tags["notes"] == len(report.fact_ids) - 1
    assert stats.records["theme"].live == len(stats.themes) >= 1
    assert stats.ledger_runs == 0


async def test_open_rejects_a_bad_tenant_and_a_width_mismatch() -> None:
    with pytest.raises(InvalidTenantError):
        await Memory.open("memory://", tenant="no spaces allowed")
    with pytest.raises(EmbeddingDimensionMismatchError):
        await Memory.open(
            "memory://", embedding_dim=16, embedder=HashingEmbeddingProvider(dimensions=8)
        )


async def test_vector_search_with_a_lower_similarity_floor() -> None:
    async with await Memory.open("memory://", embedding_dim=64) as memory:
        await memory.add(_messages())
        strict = await memory.search("billing service maintainer", mode="vector")
        loose = await memory.search(
            "billing service maintainer", mode="vector", min_similarity=0.05
        )
    assert len(loose.result.facts) >= max(1, len(strict.result.facts))
    assert all(s.vector_rank is not None for s in loose.result.fact_scores.values())


@pytest.mark.postgres
async def test_open_on_postgres_commits_and_reads_back(facade_dsn: str) -> None:
    tenant = f"t_{secrets.token_hex(6)}"
    async with await Memory.open(facade_dsn, tenant=tenant) as first:
        assert first.embedder is not None and first.embedder.dimensions == TEST_DIM
        await first.add(_messages())
    memory = await Memory.open(facade_dsn, tenant=tenant)
    try:
        found = await memory.search(entity="Bob Jones")
        assert any("search cluster" in f.content for f in found.result.facts)
        assert (await memory.stats()).records["message"].live == 3
    finally:
        await memory.store.clear()
        await memory.close()
        await memory.close()  # idempotent


@pytest.mark.postgres
async def test_open_refuses_a_width_other_than_the_database(facade_dsn: str) -> None:
    with pytest.raises(EmbeddingDimensionMismatchError):
        await Memory.open(facade_dsn, embedding_dim=16)
    with pytest.raises(EmbeddingDimensionMismatchError):
        await Memory.open(facade_dsn, embedder=HashingEmbeddingProvider(dimensions=32))


@pytest.mark.postgres
async def test_open_checks_the_schema_and_migrates_only_when_asked(pg_databases: Any) -> None:
    from cycgraph_memory.postgres import schema_status

    dsn = await pg_databases.create("w20_facade")
    with pytest.raises(SchemaNotReadyError, match="db upgrade"):
        await Memory.open(dsn, tenant="a")
    current, head, _ = await schema_status(dsn)
    assert current is None  # the failed open migrated nothing
    async with await Memory.open(dsn, tenant="a", migrate=True, embedding_dim=16) as memory:
        assert memory.embedder is not None and memory.embedder.dimensions == 16
        await memory.add(_messages())
    current, head, dim = await schema_status(dsn)
    assert current == head and dim == 16


class _NoNativeCounts:
    """Delegates to a store but hides ``record_counts`` (forces the scanning path)."""

    def __init__(self, store: Any) -> None:
        self._store = store

    def __getattr__(self, name: str) -> Any:
        if name == "record_counts":
            raise AttributeError(name)
        return getattr(self._store, name)


@pytest.mark.postgres
async def test_postgres_native_counts_equal_the_scan(pg_store: Any, pg_index: Any) -> None:
    from cycgraph_memory import Entity, Provenance, Relationship, SemanticFact, memory_stats

    memory = Memory(pg_store, pg_index, embedder=HashingEmbeddingProvider(dimensions=TEST_DIM))
    report = await memory.add(_messages(), tags=["notes"])
    await memory.forget(report.fact_ids[:1])
    prov = Provenance(source="system")
    a = Entity(name="Old Name", entity_type="person", provenance=prov)
    b = Entity(
        name="Gone", entity_type="person", provenance=prov, invalidated_at="2026-01-01T00:00:00Z"
    )
    await pg_store.put_entities([a, b])
    await pg_store.put_relationships([
        Relationship(source_id=a.id, target_id=b.id, relation_type="knows", provenance=prov,
                     invalidated_by="test"),
    ])
    await pg_store.put_facts([
        SemanticFact(content="Quarantined claim.", tags=["quarantined", "notes"], provenance=prov),
        SemanticFact(content="On trial.", tags=["lesson", "candidate"], provenance=prov),
    ])
    native = await memory_stats(pg_store, index=pg_index)
    scanned = await memory_stats(_NoNativeCounts(pg_store))  # type: ignore[arg-type]
    assert native.records == scanned.records
    assert native.tags == scanned.tags
    assert native.pending_candidates == scanned.pending_candidates == 1
    assert native.records["fact"].quarantined == 1
    assert native.records["relationship"].invalidated == 1
    assert native.records["entity"].invalidated == 1
    assert native.index and all(size > 0 for size in native.index.values())

"""MemoryPipeline write phase: the in-lock re-check of stored messages and whole retries."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pytest

from cycgraph_memory.demo import load_sample_messages
from cycgraph_memory.embeddings.hashing import HashingEmbeddingProvider
from cycgraph_memory.errors import ConcurrencyError
from cycgraph_memory.hierarchy.pipeline import MemoryPipeline
from cycgraph_memory.inmemory import InMemoryMemoryStore
from cycgraph_memory.records import Message, SemanticFact
from cycgraph_memory.retry import RetryPolicy


def _pipeline(store: Any, **kwargs: Any) -> MemoryPipeline:
    return MemoryPipeline(store, embedder=HashingEmbeddingProvider(dimensions=8), **kwargs)


class RacingStore(InMemoryMemoryStore):
    """Right after the pipeline's first "already stored?" check, another ingest stores
    ``racer_messages`` (what a concurrent ingester would do between prepare and commit)."""

    def __init__(self, racer_messages: list[Message]) -> None:
        super().__init__()
        self.racer_messages = racer_messages
        self.raced = False

    async def get_messages(self, ids: Iterable[Any]) -> dict[Any, Message]:
        found = await super().get_messages(ids)
        if not self.raced:
            self.raced = True
            await _pipeline(self).ingest(self.racer_messages)
        return found


async def test_messages_stored_meanwhile_are_skipped_under_the_lock() -> None:
    messages = load_sample_messages()
    store = RacingStore(messages[:7])
    report = await _pipeline(store).ingest(messages)
    assert report.messages_ingested == len(messages) - 7
    assert report.messages_skipped == 7
    episodes = await store.list_episodes()
    stored = [m.id for e in episodes for m in e.messages]
    assert sorted(stored) == sorted(m.id for m in messages)  # each message exactly once
    facts = await store.find_facts()
    themes = {t.id: t for t in await store.list_themes()}
    for fact in facts:
        assert [t for t in themes.values() if fact.id in t.fact_ids] == [themes[fact.theme_id]]


class DeadlockOnceStore(InMemoryMemoryStore):
    """The first ``put_facts`` inside the write transaction fails like a Postgres deadlock."""

    def __init__(self) -> None:
        super().__init__()
        self.failures = 1

    async def put_facts(self, facts: Iterable[SemanticFact]) -> None:
        if self.failures:
            self.failures -= 1
            raise ConcurrencyError("deadlock detected", sqlstate="40P01")
        await super().put_facts(facts)


async def test_a_deadlocked_write_is_retried_whole() -> None:
    messages = load_sample_messages()
    store = DeadlockOnceStore()
    policy = RetryPolicy(max_attempts=2, base_delay_s=0.0, max_delay_s=0.0)
    report = await _pipeline(store, retry=policy).ingest(messages)
    assert store.failures == 0
    assert report.messages_ingested == len(messages)
    assert len(await store.list_episodes()) == len(report.episode_ids) == 4
    assert {f.id for f in await store.find_facts()} == set(report.fact_ids)

    again = DeadlockOnceStore()
    with pytest.raises(ConcurrencyError) as info:
        await _pipeline(again, retry=RetryPolicy(max_attempts=1)).ingest(messages)
    assert info.value.attempts == 1
    assert await again.list_episodes() == [] and await again.find_facts() == []

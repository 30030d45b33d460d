"""``MemoryPipeline.ingest`` / ``ingest_many`` refuse a non-batch with a typed error."""

from __future__ import annotations

from typing import Any

import pytest

from cycgraph_memory import HashingEmbeddingProvider, InMemoryMemoryStore, MemoryPipeline
from cycgraph_memory.errors import InvalidTypeError

ONE = {"role": "user", "content": "Maya moved to Lisbon.", "timestamp": "2024-03-01T09:00:00Z"}


def _pipeline() -> tuple[InMemoryMemoryStore, MemoryPipeline]:
    store = InMemoryMemoryStore()
    return store, MemoryPipeline(store, embedder=HashingEmbeddingProvider(dimensions=16))


@pytest.mark.parametrize("messages", [None, ONE, "Maya moved to Lisbon.", b"x", 5])
async def test_ingest_refuses_what_is_not_a_batch(messages: Any) -> None:
    store, pipeline = _pipeline()
    with pytest.raises(InvalidTypeError):
        await pipeline.ingest(messages)
    assert await store.list_episodes() == []


@pytest.mark.parametrize("batches", [None, ONE, "text", 3, [None], [ONE]])
async def test_ingest_many_refuses_what_is_not_batches(batches: Any) -> None:
    store, pipeline = _pipeline()
    with pytest.raises(InvalidTypeError):
        await pipeline.ingest_many(batches)
    assert await store.list_episodes() == []


async def test_a_list_of_one_message_is_ingested() -> None:
    store, pipeline = _pipeline()
    report = await pipeline.ingest([ONE])
    assert report.messages_ingested == 1
    assert len(await store.list_episodes()) == 1


async def test_a_progress_that_is_not_callable_is_refused_before_anything() -> None:
    store, pipeline = _pipeline()
    with pytest.raises(InvalidTypeError, match="progress"):
        await pipeline.ingest([ONE], progress="bar")  # type: ignore[arg-type]
    assert await store.list_episodes() == []


def test_report_progress_refuses_a_non_callable() -> None:
    from cycgraph_memory.progress import report_progress

    with pytest.raises(InvalidTypeError):
        report_progress(5, "consolidate", 1, 2)  # type: ignore[arg-type]

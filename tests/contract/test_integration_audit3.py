"""Audit 3: ``memory_writer`` refuses an idempotency key no backend can store, the same on
both backends, before anything is embedded or written."""

from __future__ import annotations

import secrets
import uuid
from typing import Any

import pytest

from cycgraph_memory import InvalidInputError, memory_writer

from .factories import unit

MAX_IDEMPOTENCY_KEY_LENGTH = 512  # cycgraph_memory.integration.MAX_IDEMPOTENCY_KEY_LENGTH


class CountingEmbedder:
    dimensions = 8

    def __init__(self) -> None:
        self.calls = 0

    async def embed(self, texts: list[str]) -> list[list[float]]:
        self.calls += 1
        return [unit(0) for _ in texts]


FACTS = [{"content": "Check the cache layer first.", "tags": ["lesson"]}]


@pytest.mark.parametrize(
    "key",
    [
        secrets.token_hex(1400),  # 2,800 characters: past Postgres' 2,704-byte index entry
        "k" * (MAX_IDEMPOTENCY_KEY_LENGTH + 1),
        "run-1:reflect\x00:0",
        "run-1:reflect\ud800:0",
    ],
    ids=["index-entry-too-large", "one-over-the-limit", "nul", "lone-surrogate"],
)
async def test_writer_refuses_a_key_no_backend_stores(store: Any, index: Any, key: str) -> None:
    embedder = CountingEmbedder()
    write = memory_writer(store, index=index, embedder=embedder)
    with pytest.raises(InvalidInputError, match="idempotency_key"):
        await write(FACTS, {"idempotency_key": key})
    assert embedder.calls == 0
    assert await store.find_facts({}) == []


async def test_writer_accepts_a_key_at_the_limit_in_four_byte_characters(
    store: Any, index: Any
) -> None:
    key = "\U0001f600" * MAX_IDEMPOTENCY_KEY_LENGTH  # 2,048 bytes of UTF-8
    write = memory_writer(store, index=index, embedder=CountingEmbedder())
    first = await write(FACTS, {"idempotency_key": key})
    again = await write(FACTS, {"idempotency_key": key})
    assert again == first and len(first["fact_ids"]) == 1
    assert len(await store.find_facts({})) == 1


async def test_a_retried_write_does_not_call_the_embedder_again(store: Any, index: Any) -> None:
    """A repeated key is answered from the store before the facts are embedded again."""
    embedder = CountingEmbedder()
    write = memory_writer(store, index=index, embedder=embedder)
    first = await write(FACTS, {"idempotency_key": "run-7:reflect:0"})
    assert embedder.calls == 1
    again = await write(FACTS, {"idempotency_key": "run-7:reflect:0"})
    assert again == first
    assert embedder.calls == 1
    other = await write(FACTS, {"idempotency_key": "run-7:reflect:1"})
    assert other != first and embedder.calls == 2
    assert await store.writer_key_ids("run-7:reflect:0") == [
        uuid.UUID(i) for i in first["fact_ids"]
    ]
    assert await store.writer_key_ids("never-used") is None

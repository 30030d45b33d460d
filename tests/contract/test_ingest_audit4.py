"""Ingest pipeline audit (round 4), on both backends: checks written from the spec and docs.

Each test named ``test_bug_...`` failed before the fix that came with it.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from cycgraph_memory import Message
from cycgraph_memory.embeddings.hashing import HashingEmbeddingProvider
from cycgraph_memory.hierarchy.extractors.rules import RuleBasedExtractor
from cycgraph_memory.hierarchy.pipeline import MemoryPipeline

from .factories import EMBED_DIM, at


def _pipeline(store: Any, **kwargs: Any) -> MemoryPipeline:
    kwargs.setdefault("extractor", RuleBasedExtractor())
    return MemoryPipeline(
        store, embedder=HashingEmbeddingProvider(dimensions=EMBED_DIM), **kwargs
    )


# --------------------------------------------------------------------------- grounding


@pytest.mark.parametrize(
    "name",
    ["Mary  Jane", "Mary\nJane", "Mary\tJane ", "Zoë  O\u2019Neil", "X" * 300],
    ids=["double-space", "newline", "tab", "unicode", "long"],
)
async def test_bug_a_speaker_name_with_odd_whitespace_or_length_is_prefixed_once(
    store: Any, name: str
) -> None:
    """docs/pipeline.md: facts carry the speaker and date prefix, once ("one prefix, not
    two"). The extractor writes the speaker whitespace-collapsed and cut to 200
    characters, grounding read the raw metadata name: the extractor's "Mary Jane: "
    prefix was not recognised and facts read "Mary  Jane on 2025-01-01: Mary Jane:
    Mary  Jane adopted a dog"."""
    message = Message(
        role="user",
        content="I adopted a golden retriever puppy last week.",
        metadata={"name": name},
        timestamp=at(),
    )
    await _pipeline(store).ingest([message])
    facts = await store.find_facts()
    assert len(facts) == 1
    speaker = " ".join(name.split())[:200]
    assert facts[0].content == (
        f"{speaker} on 2025-01-01: {speaker} adopted a golden retriever puppy last week."
    )
    entities = {e.name for e in await store.find_entities()}
    assert speaker in entities
    assert facts[0].source_message_ids == [message.id]


async def test_a_second_message_of_the_same_speaker_keeps_one_prefix(store: Any) -> None:
    messages = [
        Message(role="user", content="I moved to Lisbon in March with my partner.",
                metadata={"name": "Ana  Lima"}, timestamp=at()),
        Message(role="assistant", content="Lisbon is a lovely city to live in.",
                timestamp=at() + timedelta(minutes=1)),
    ]
    await _pipeline(store).ingest(messages)
    contents = sorted(f.content for f in await store.find_facts())
    assert all(c.count(" on 2025-01-01: ") == 1 for c in contents), contents
    assert any(c.startswith("Ana Lima on 2025-01-01: Ana Lima moved to Lisbon") for c in contents)

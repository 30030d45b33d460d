"""The LLM tier's post-check on chat text, end to end on both backends (seventh audit).

A scripted provider asserts ``Alice work_at Acme`` whatever was said, as a careless model
would. The docs (extraction.md, "What a relationship says, and when") give all three
tiers the same reading: a chat question without its "?" ("does alice still work at acme")
stores and ends nothing, and a present or past negation with "anymore" ("Alice doesn't
work at Acme anymore") ends the stored edge, while a future or modal one ("won't ...
anymore") and a framed one ("I don't think ...") store and end nothing. Before the fix
the LLM tier stored the question as a live edge and dropped the "anymore" ending, so the
stored edge stayed open.
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest

from cycgraph_memory import Message
from cycgraph_memory.hierarchy.extractors.llm import LLMExtractor
from cycgraph_memory.hierarchy.extractors.rules import RuleBasedExtractor
from cycgraph_memory.hierarchy.pipeline import MemoryPipeline

from .factories import at

REPLY = json.dumps({
    "facts": [{"content": "Alice works at Acme Corp.", "entities": ["Alice", "Acme Corp"]}],
    "entities": [{"name": "Alice", "type": "person"},
                 {"name": "Acme Corp", "type": "organization"}],
    "relationships": [{"source": "Alice", "relation": "work_at", "target": "Acme Corp"}],
})


async def _always_work_at(prompt: str) -> str:
    return REPLY


def _pipeline(store: Any) -> MemoryPipeline:
    extractor = LLMExtractor(_always_work_at, fallback=RuleBasedExtractor())
    return MemoryPipeline(store, extractor=extractor)


async def _edges(store: Any) -> list[Any]:
    (alice,) = [e for e in await store.find_entities() if e.name == "Alice"]
    return await store.get_relationships_for_entity(
        alice.id, direction="outgoing", include_invalidated=True
    )


async def _say(store: Any, text: str, minute: int) -> None:
    await _pipeline(store).ingest(
        [Message(role="user", content=text, timestamp=at() + timedelta(minutes=minute))]
    )


@pytest.mark.parametrize(
    "text",
    ["Alice doesn't work at Acme Corp anymore.", "alice isn't at acme corp any more lol",
     "Alice is not working at Acme Corp anymore."],
)
async def test_bug_a_negation_with_anymore_ends_the_stored_edge(store: Any, text: str) -> None:
    await _say(store, "Alice works at Acme Corp.", 0)
    (edge,) = await _edges(store)
    assert edge.valid_until is None
    await _say(store, text, 60)
    (edge,) = await _edges(store)
    assert edge.valid_until == at() + timedelta(minutes=60)
    assert not edge.attributes.get("ended")  # the marker closed it; no marker was stored


@pytest.mark.parametrize(
    "text",
    ["Alice won't work at Acme Corp anymore.", "I don't think Alice works at Acme Corp anymore.",
     "does alice still work at acme corp", "so is Alice still at Acme Corp"],
)
async def test_bug_a_question_or_a_modal_anymore_stores_and_ends_nothing(
    store: Any, text: str
) -> None:
    await _say(store, text, 0)
    assert [e for e in await store.find_entities() if e.name == "Alice"] == [] or (
        await _edges(store) == []
    )
    await _say(store, "Alice works at Acme Corp.", 30)
    await _say(store, text, 60)
    (edge,) = await _edges(store)
    assert edge.valid_until is None
    assert edge.valid_from == at() + timedelta(minutes=30)

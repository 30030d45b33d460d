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


# --------------------------------------------------------------------------- options


async def _nothing_stored(store: Any, messages: list[Message]) -> None:
    assert await store.find_facts(include_invalidated=True) == []
    assert await store.list_episodes(include_invalidated=True) == []
    assert await store.find_entities(include_invalidated=True) == []
    assert await store.list_themes(include_invalidated=True) == []
    assert await store.get_messages([m.id for m in messages]) == {}


def _said() -> list[Message]:
    return [Message(role="user", content="Alice Smith works at Acme Corp.", timestamp=at())]


@pytest.mark.parametrize("template", ["agent", 7, ["agent"]], ids=["str", "int", "list"])
async def test_bug_a_provenance_template_that_is_no_provenance_is_a_typed_error(
    store: Any, template: Any
) -> None:
    """House rule: bad input raises a typed error and writes nothing. ``provenance="agent"``
    raised ``AttributeError: 'str' object has no attribute 'model_dump'``."""
    from cycgraph_memory.errors import InvalidTypeError

    messages = _said()
    with pytest.raises(InvalidTypeError, match="Provenance"):
        await _pipeline(store).ingest(messages, provenance=template)
    with pytest.raises(InvalidTypeError, match="Provenance"):
        await _pipeline(store).ingest_many([messages], provenance=template)
    await _nothing_stored(store, messages)


async def test_bug_a_provenance_template_may_be_a_mapping(store: Any) -> None:
    """Like the messages (``Message`` records or dicts), the template may be a dict; it
    raised ``AttributeError`` too. A bad one is a ``ValidationError`` and writes nothing."""
    from pydantic import ValidationError

    messages = _said()
    with pytest.raises(ValidationError):
        await _pipeline(store).ingest(messages, provenance={"source": "robot"})
    await _nothing_stored(store, messages)
    await _pipeline(store).ingest(
        messages, provenance={"source": "tool", "tool_name": "importer", "run_id": "r-1"}
    )
    records = [*await store.find_facts(), *await store.list_episodes(),
               *await store.find_entities(), *await store.list_themes()]
    assert records
    for record in records:
        p = record.provenance
        assert (p.source, p.tool_name, p.run_id) == ("tool", "importer", "r-1")


# --------------------------------------------------------------------------- Memory.remember


@pytest.mark.parametrize(
    "ids",
    [{"run_id": ""}, {"agent_id": ""}, {"run_id": "r" * 257}, {"agent_id": "a" * 257}],
    ids=["empty-run", "empty-agent", "long-run", "long-agent"],
)
async def test_bug_remember_refuses_the_provenance_ids_add_refuses(
    memory: Any, ids: dict[str, Any]
) -> None:
    """``remember(run_id="")`` stored a lesson whose provenance named the run ``""``,
    while ``add(run_id="")`` raised ``ValidationError``: the same keyword, documented
    the same way ("Workflow run recorded in the provenance"), takes the same values.
    (``memory`` is the facade on each backend, tests/conftest.py.)"""
    from pydantic import ValidationError

    said = [{"role": "user", "content": "Alice Smith maintains the billing service."}]
    with pytest.raises(ValidationError):
        await memory.add(said, **ids)
    with pytest.raises(ValidationError):
        await memory.remember("Always run the linter before pushing.", **ids)
    assert await memory.store.find_facts(include_invalidated=True) == []


async def test_remember_records_valid_provenance_ids(memory: Any) -> None:
    fact_id = await memory.remember(
        "Always run the linter before pushing.", run_id="run-1", agent_id="a" * 256
    )
    fact = (await memory.store.get_facts([fact_id]))[fact_id]
    assert (fact.provenance.source, fact.provenance.run_id) == ("agent", "run-1")
    assert fact.provenance.agent_id == "a" * 256

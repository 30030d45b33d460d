"""Audit 12: the consolidation passes and the runner adapters refuse what they cannot use.

The spec builds them as ``new MemoryConsolidator(store, index, options)``,
``new ConflictDetector(store, index, options)`` and ``new EntityResolver(store, options)``;
docs/consolidation.md: "Every pass checks its options when it is built, before reading or
writing anything". Before this pass an object that is no store was taken and failed later
with a bare ``AttributeError``, and an object that is no index was taken and silently never
kept in sync (a pass left the in-memory index serving what it had removed). The
consolidator's lifecycle tags were checked for emptiness only, while the retention gate's
``RetentionPolicy`` refuses a tag no fact could carry (NUL, over ``MAX_TAG_LENGTH``) and the
``quarantined`` tag: a consolidator configured so would never recognise a verified fact.
"""

from __future__ import annotations

import logging
from types import SimpleNamespace
from typing import Any

import pytest

from cycgraph_memory import (
    MAX_TAG_LENGTH,
    QUARANTINE_TAG,
    ConflictDetector,
    Entity,
    EntityResolver,
    InMemoryMemoryIndex,
    InMemoryMemoryStore,
    MemoryConsolidator,
    Provenance,
)
from cycgraph_memory.errors import InvalidInputError, InvalidTypeError
from cycgraph_memory.integration import memory_retriever, memory_writer

NOT_A_STORE: list[Any] = ["store", 42, object(), InMemoryMemoryIndex()]
NOT_AN_INDEX: list[Any] = ["index", 42, object(), InMemoryMemoryStore()]


@pytest.mark.parametrize("bad", NOT_A_STORE)
async def test_a_pass_refuses_an_object_that_is_no_store(bad: Any) -> None:
    with pytest.raises(InvalidTypeError, match="store"):
        MemoryConsolidator(bad, InMemoryMemoryIndex())
    with pytest.raises(InvalidTypeError, match="store"):
        ConflictDetector(bad, InMemoryMemoryIndex())
    with pytest.raises(InvalidTypeError, match="store"):
        EntityResolver(bad)
    with pytest.raises(InvalidTypeError, match="store"):
        await MemoryConsolidator.should_consolidate(bad, {"facts": 1})


@pytest.mark.parametrize("bad", NOT_AN_INDEX)
def test_a_pass_refuses_an_object_that_is_no_index(bad: Any) -> None:
    store = InMemoryMemoryStore()
    with pytest.raises(InvalidTypeError, match="index"):
        MemoryConsolidator(store, bad)
    with pytest.raises(InvalidTypeError, match="index"):
        ConflictDetector(store, bad)
    with pytest.raises(InvalidTypeError, match="index"):
        EntityResolver(store, index=bad)
    with pytest.raises(InvalidTypeError, match="index"):
        MemoryConsolidator(store, bad, {"max_facts": 1})


def test_the_index_stays_optional() -> None:
    store = InMemoryMemoryStore()
    assert MemoryConsolidator(store).index is None
    assert ConflictDetector(store).index is None
    assert EntityResolver(store).index is None


@pytest.mark.parametrize("bad", NOT_A_STORE)
def test_the_adapters_refuse_an_object_that_is_no_store(bad: Any) -> None:
    with pytest.raises(InvalidTypeError, match="store"):
        memory_retriever(bad, InMemoryMemoryIndex())
    with pytest.raises(InvalidTypeError, match="store"):
        memory_writer(bad)


@pytest.mark.parametrize("bad", NOT_AN_INDEX)
def test_the_adapters_refuse_an_object_that_is_no_index(bad: Any) -> None:
    store = InMemoryMemoryStore()
    with pytest.raises(InvalidTypeError, match="index"):
        memory_retriever(store, bad)
    with pytest.raises(InvalidTypeError, match="index"):
        memory_writer(store, index=bad)


@pytest.mark.parametrize("bad", ["embedder", 42, object()])
def test_the_adapters_refuse_an_object_that_is_no_embedder(bad: Any) -> None:
    store, index = InMemoryMemoryStore(), InMemoryMemoryIndex()
    with pytest.raises(InvalidTypeError, match="embedder"):
        memory_retriever(store, index, bad)
    with pytest.raises(InvalidTypeError, match="embedder"):
        memory_writer(store, index=index, embedder=bad)


@pytest.mark.parametrize("name", ["verified_tag", "candidate_tag"])
@pytest.mark.parametrize(
    "tag", [QUARANTINE_TAG, "a\x00b", "x" * (MAX_TAG_LENGTH + 1), "lone \ud800"]
)
def test_consolidator_refuses_a_lifecycle_tag_no_fact_can_carry(name: str, tag: str) -> None:
    with pytest.raises(InvalidInputError, match=name):
        MemoryConsolidator(InMemoryMemoryStore(), **{name: tag})


def test_consolidator_takes_any_storable_lifecycle_tag() -> None:
    longest = "x" * MAX_TAG_LENGTH
    c = MemoryConsolidator(InMemoryMemoryStore(), verified_tag=longest, candidate_tag="tríal")
    assert (c.verified_tag, c.candidate_tag) == (longest, "tríal")


async def test_a_full_one_message_logger_is_wrapped_and_stdlib_loggers_are_not() -> None:
    """A spec-style logger with every level gets one formatted string per call.

    It used to be taken for a ``logging.Logger`` and called with ``(msg, *args)``: the
    resolver raised ``TypeError`` after its pass had committed.
    """
    store = InMemoryMemoryStore()
    prov = Provenance(source="agent")
    await store.put_entities(
        [
            Entity(name="Alice", entity_type="person", provenance=prov),
            Entity(name="alice.", entity_type="person", provenance=prov),
        ]
    )
    lines: list[str] = []
    one_message = SimpleNamespace(debug=lines.append, info=lines.append, warning=lines.append)
    report = await EntityResolver(store, logger=one_message).resolve()
    assert report.entities_absorbed == 1
    assert len(lines) == 1 and "entities_absorbed" in lines[0] and "%s" not in lines[0]
    std = logging.getLogger("audit12")
    adapter = logging.LoggerAdapter(std, {})
    assert EntityResolver(store, logger=std).logger is std
    assert MemoryConsolidator(store, logger=adapter).logger is adapter

"""Options and helper arguments of the wrong type are typed errors, never silent coercions.

``bool("no")`` is True and ``0 or 20`` is 20: a flag given as a string or a limit of 0 must
be refused, not turned into the opposite of what the caller wrote. Components that log after
a commit refuse a logger they cannot call before anything is written.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import pytest
from pydantic import ValidationError

from cycgraph_memory import (
    ConflictDetector,
    EntityResolver,
    InMemoryMemoryIndex,
    InMemoryMemoryStore,
    MemoryConsolidator,
    Provenance,
    RuleBasedExtractor,
    SemanticFact,
    cosine_similarity,
    normalize_entity_name,
)
from cycgraph_memory.batch import batch_get_fallback
from cycgraph_memory.errors import InvalidInputError, InvalidTypeError
from cycgraph_memory.integration import memory_retriever, memory_writer
from cycgraph_memory.temporal import filter_valid, is_valid_at, windows_overlap

T0 = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.mark.parametrize("flag", ["no", 0, 1, None])
def test_conflict_flag_must_be_a_bool(flag: Any) -> None:
    with pytest.raises(InvalidTypeError):
        ConflictDetector(InMemoryMemoryStore(), auto_resolve_supersession=flag)
    assert ConflictDetector(InMemoryMemoryStore(), auto_resolve_supersession=False)


@pytest.mark.parametrize("component", [MemoryConsolidator, EntityResolver])
def test_a_logger_without_logging_methods_is_refused_up_front(component: Any) -> None:
    with pytest.raises(InvalidTypeError, match="logger"):
        component(InMemoryMemoryStore(), logger=object())
    with pytest.raises(InvalidTypeError, match="warning"):
        component(InMemoryMemoryStore(), logger=SimpleNamespace(debug="x", warn=3))
    # The spec's logger is { debug?, warn? }: an object with only some levels is accepted
    # (the missing ones are dropped; tests/contract/test_spec_sweep7_api.py).
    assert component(InMemoryMemoryStore(), logger=SimpleNamespace(debug=print, info=print))


async def test_consolidation_logs_to_a_duck_typed_logger() -> None:
    seen: list[str] = []

    def record(msg: str, *args: Any) -> None:
        seen.append(msg % args)

    logger = SimpleNamespace(debug=record, info=record, warning=record)
    store = InMemoryMemoryStore()
    await store.put_facts(
        [SemanticFact(content="a", embedding=[1.0, 0.0], provenance=Provenance(source="agent"))]
    )
    await MemoryConsolidator(store, logger=logger).consolidate()
    assert any("consolidation" in line for line in seen)


async def test_memory_retriever_refuses_zero_and_non_mappings() -> None:
    retrieve = memory_retriever(InMemoryMemoryStore(), InMemoryMemoryIndex())
    with pytest.raises(ValidationError):
        await retrieve({"tags": ["x"], "max_facts": 0})
    with pytest.raises(ValidationError):
        await retrieve({"tags": ["x"]}, {"max_facts": 0})
    with pytest.raises(InvalidTypeError):
        await retrieve(["x"])  # type: ignore[arg-type]
    with pytest.raises(InvalidTypeError):
        await retrieve({"tags": ["x"]}, ["goal"])  # type: ignore[arg-type]
    assert await retrieve({"tags": ["x"], "max_facts": 3}) == {
        "facts": [], "entities": [], "themes": []
    }
    with pytest.raises(InvalidInputError):
        memory_retriever(InMemoryMemoryStore(), InMemoryMemoryIndex(), default_max_facts=True)


async def test_memory_writer_refuses_bad_shapes_and_writes_nothing() -> None:
    store = InMemoryMemoryStore()
    write = memory_writer(store, index=InMemoryMemoryIndex())
    for facts, options in [
        (None, None),
        ([{"content": "a"}], ["key"]),
        ([{"content": "a", "tags": "lesson"}], None),
        ([{"content": "a", "provenance": 5}], None),
        ([{"content": "ok"}, {"content": "b", "entity_ids": "abc"}], None),
    ]:
        with pytest.raises(InvalidTypeError):
            await write(facts, options)  # type: ignore[arg-type]
    assert await store.find_facts() == []
    assert len((await write([{"content": "kept", "tags": ["lesson"]}]))["fact_ids"]) == 1


def test_filter_valid_types() -> None:
    bare = SimpleNamespace(valid_from=T0)  # no valid_until / invalidated_by: open and live
    assert filter_valid([bare], valid_at=T0) == [bare]
    assert filter_valid([bare], {}) == [bare]
    with pytest.raises(InvalidTypeError):
        filter_valid([bare], {"include_invalidated": "no"})
    with pytest.raises(InvalidTypeError):
        filter_valid([bare], include_invalidated=1)  # type: ignore[arg-type]
    for records in ([None], [{}], None, "abc"):
        with pytest.raises(InvalidTypeError):
            filter_valid(records)  # type: ignore[arg-type]
    with pytest.raises(InvalidTypeError):
        filter_valid([bare], 5)  # type: ignore[arg-type]
    with pytest.raises(InvalidTypeError):
        filter_valid([], valid_at="2026-01-01")  # type: ignore[arg-type]
    with pytest.raises(InvalidTypeError):
        is_valid_at(None, T0)  # type: ignore[arg-type]
    assert windows_overlap(bare, bare)  # type: ignore[arg-type]


@pytest.mark.parametrize("value", [0, -3, True, "384", 3.0])
def test_in_memory_backends_check_expected_dimensions(value: Any) -> None:
    with pytest.raises(InvalidInputError):
        InMemoryMemoryIndex(expected_dimensions=value)
    with pytest.raises(InvalidInputError):
        InMemoryMemoryStore(expected_dimensions=value)


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"entity_patterns": ["("]}, InvalidInputError),
        ({"entity_patterns": ["x*"]}, InvalidInputError),
        ({"entity_patterns": [5]}, InvalidTypeError),
        ({"entity_patterns": [("Acme", 5)]}, InvalidTypeError),
        ({"entity_patterns": [("a", "b", "c")]}, InvalidTypeError),
        ({"entity_patterns": [re.compile(b"x")]}, InvalidTypeError),
        ({"relationship_verbs": [None]}, InvalidTypeError),
        ({"relationship_verbs": ["="]}, InvalidInputError),
    ],
)
def test_rule_extractor_options_are_typed_errors(kwargs: dict[str, Any], error: type) -> None:
    with pytest.raises(error):
        RuleBasedExtractor(**kwargs)


def test_helper_functions_refuse_wrong_types() -> None:
    with pytest.raises(InvalidTypeError):
        RuleBasedExtractor().extract_entities(None)  # type: ignore[arg-type]
    with pytest.raises(InvalidTypeError):
        cosine_similarity(None, [1.0])  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError):
        cosine_similarity([float("nan")], [1.0])
    with pytest.raises(InvalidInputError):
        cosine_similarity([1.0, 0.0], [1.0])
    assert cosine_similarity([1.0, 0.0], [2.0, 0.0]) == pytest.approx(1.0)
    with pytest.raises(InvalidTypeError):
        normalize_entity_name(None)  # type: ignore[arg-type]


async def test_batch_get_fallback_refuses_wrong_types() -> None:
    async def get(key: str) -> str | None:
        return key.upper() if key != "b" else None

    assert await batch_get_fallback(["a", "b", "a"], get) == {"a": "A"}
    with pytest.raises(InvalidTypeError):
        await batch_get_fallback(None, get)  # type: ignore[arg-type]
    with pytest.raises(InvalidTypeError):
        await batch_get_fallback("ab", get)
    with pytest.raises(InvalidTypeError):
        await batch_get_fallback(["a"], None)  # type: ignore[arg-type]
    with pytest.raises(InvalidTypeError):
        await batch_get_fallback(["a"], get, concurrency=0)

"""A lone string where a list of strings is expected is refused, not split into letters.

``tags="lesson"`` used to become the tags ``["l", "e", "s", "s", "o", "n"]``, so the fact
could never be found by ``tags=["lesson"]``; the same for ``relationship_verbs`` and
``entity_patterns`` of the rule tier.
"""

from __future__ import annotations

import re

import pytest

from cycgraph_memory import InMemoryMemoryStore, Memory, MemoryPipeline
from cycgraph_memory._validate import string_list
from cycgraph_memory.errors import InvalidInputError, InvalidTypeError
from cycgraph_memory.hierarchy.extractors import RuleBasedExtractor

MESSAGES = [{"role": "user", "content": "Alice Smith works at Acme Corp in Lisbon."}]


def test_string_list() -> None:
    assert string_list(("a", "b"), "tags") == ["a", "b"]
    assert string_list([], "tags") == []
    for bad in ("lesson", b"lesson", bytearray(b"x")):
        with pytest.raises(InvalidTypeError, match="tags must be a list of strings"):
            string_list(bad, "tags")
    with pytest.raises(InvalidTypeError):
        string_list(5, "tags")
    assert issubclass(InvalidTypeError, InvalidInputError)
    assert issubclass(InvalidTypeError, TypeError)


async def test_ingest_refuses_string_tags_and_writes_nothing() -> None:
    store = InMemoryMemoryStore()
    pipeline = MemoryPipeline(store)
    with pytest.raises(InvalidTypeError):
        await pipeline.ingest(MESSAGES, tags="lesson")  # type: ignore[arg-type]
    with pytest.raises(InvalidTypeError):
        await pipeline.ingest_many([MESSAGES], tags="lesson")  # type: ignore[arg-type]
    assert await store.find_facts() == []
    assert await store.list_episodes() == []
    report = await pipeline.ingest(MESSAGES, tags=("lesson",))
    facts = await store.get_facts(report.fact_ids)
    assert facts and all(f.tags == ["lesson"] for f in facts.values())


async def test_facade_refuses_string_tags() -> None:
    async with await Memory.open("memory://", tenant="t") as memory:
        with pytest.raises(InvalidTypeError):
            await memory.add(MESSAGES, tags="team")  # type: ignore[arg-type]
        with pytest.raises(InvalidTypeError):
            await memory.remember("Prefer small PRs.", tags="lesson")  # type: ignore[arg-type]
        assert await memory.store.find_facts() == []
        fid = await memory.remember("Prefer small PRs.", tags=["lesson"])
        fact = await memory.store.get_fact(fid)
        assert fact is not None and fact.tags == ["lesson", "candidate"]


def test_rule_tier_refuses_string_options() -> None:
    with pytest.raises(InvalidTypeError, match="relationship_verbs"):
        RuleBasedExtractor(relationship_verbs="sponsor")  # type: ignore[arg-type]
    with pytest.raises(InvalidTypeError, match="entity_patterns"):
        RuleBasedExtractor(entity_patterns=r"Project \w+")  # type: ignore[arg-type]
    # One compiled pattern alone is unambiguous: accepted as a list of one.
    RuleBasedExtractor(entity_patterns=re.compile(r"Project \w+"))  # type: ignore[arg-type]
    RuleBasedExtractor(relationship_verbs=["sponsor"])


async def test_facade_refuses_wrong_types_before_any_work() -> None:
    from pydantic import ValidationError

    with pytest.raises(InvalidTypeError):
        await Memory.open(5)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="embedding_dim"):
        await Memory.open("memory://", embedding_dim=0)
    with pytest.raises(InvalidInputError, match="unknown pipeline_options"):
        await Memory.open("memory://", pipeline_options={"bogus": 1})
    with pytest.raises(ValidationError):
        await Memory.open("memory://", retrieval_options={"bogus": 1})
    async with await Memory.open("memory://", tenant="t") as memory:
        await memory.remember("Prefer small PRs.", tags=["lesson"])
        with pytest.raises(InvalidTypeError):
            await memory.search(tags="lesson")  # type: ignore[arg-type]
        with pytest.raises(InvalidTypeError):
            await memory.search(entity=5)  # type: ignore[arg-type]
        for bad in (5, None, [5]):
            with pytest.raises(InvalidTypeError):
                await memory.forget(bad)  # type: ignore[arg-type]
        assert len((await memory.search(tags=["lesson"])).result.facts) == 1


class _Embedder:
    """A provider of a fixed width that can also return too many vectors."""

    def __init__(self, dimensions: int, extra: int = 0) -> None:
        self.dimensions = dimensions
        self.extra = extra

    async def embed(self, texts: list[str]) -> list[list[float]]:
        return [[1.0] * self.dimensions for _ in range(len(texts) + self.extra)]


async def test_the_writer_checks_vectors_before_writing() -> None:
    from cycgraph_memory import InMemoryMemoryIndex
    from cycgraph_memory.errors import EmbeddingDimensionMismatchError
    from cycgraph_memory.integration import memory_writer

    store, index = InMemoryMemoryStore(), InMemoryMemoryIndex(expected_dimensions=4)
    fact = {"content": "Prefer small PRs.", "tags": ["lesson"]}
    wrong = memory_writer(store, index=index, embedder=_Embedder(3))  # type: ignore[arg-type]
    with pytest.raises(EmbeddingDimensionMismatchError):
        await wrong([fact], {"idempotency_key": "r:n:0"})
    with pytest.raises(InvalidInputError, match="2 vectors for 1 texts"):
        await memory_writer(store, index=index, embedder=_Embedder(4, extra=1))([fact])  # type: ignore[arg-type]
    assert await store.find_facts() == []
    # The key was not used up: the retry writes, and the fact is searchable.
    right = memory_writer(store, index=index, embedder=_Embedder(4))  # type: ignore[arg-type]
    written = await right([fact], {"idempotency_key": "r:n:0"})
    assert len(written["fact_ids"]) == 1
    assert len(await index.search_facts([1.0] * 4)) == 1


async def test_the_pipeline_refuses_a_wrong_number_of_vectors() -> None:
    store = InMemoryMemoryStore()
    pipeline = MemoryPipeline(store, embedder=_Embedder(8, extra=1))  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="vectors for"):
        await pipeline.ingest(MESSAGES)
    assert await store.find_facts() == [] and await store.list_episodes() == []

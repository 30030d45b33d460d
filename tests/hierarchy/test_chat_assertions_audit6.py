"""Audit 6: chat claims are stored only when asserted; a negated "anymore" ends an edge.

Every case runs through ``MemoryPipeline.ingest`` on the in-memory store, on the rule tier
and (when installed) the parser tier, and inspects the stored relationships.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from cycgraph_memory.embeddings.hashing import HashingEmbeddingProvider
from cycgraph_memory.hierarchy.extractors._relations import asks, is_question
from cycgraph_memory.hierarchy.pipeline import MemoryPipeline
from cycgraph_memory.inmemory import InMemoryMemoryStore
from cycgraph_memory.records import Message

from ._tiers import extractor_tiers

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)
TIERS = pytest.mark.parametrize("extractor", extractor_tiers(), ids=lambda e: type(e).__name__)


async def _ingest(extractor: Any, *batches: list[str]) -> list[tuple[str, str, str, bool]]:
    """Ingest each batch (one ``ingest`` call per batch, a day apart); stored edges."""
    store = InMemoryMemoryStore()
    pipeline = MemoryPipeline(
        store, embedder=HashingEmbeddingProvider(dimensions=8), extractor=extractor
    )
    for day, batch in enumerate(batches):
        await pipeline.ingest(
            [
                Message(
                    id=uuid.uuid4(),
                    role="user",
                    content=text,
                    timestamp=T0 + timedelta(days=day, minutes=i),
                    metadata={"name": "Maya"},
                )
                for i, text in enumerate(batch)
            ]
        )
    entities = {e.id: e.name for e in await store.find_entities()}
    seen: dict[Any, tuple[str, str, str, bool]] = {}
    for entity_id in entities:
        for r in await store.get_relationships_for_entity(entity_id):
            assert not r.attributes.get("ended"), "an ended marker is never stored"
            seen[r.id] = (
                entities[r.source_id],
                r.relation_type,
                entities[r.target_id],
                r.valid_until is not None,
            )
    return sorted(seen.values())


@TIERS
@pytest.mark.parametrize(
    "ending",
    [
        "Alice Chen doesn't work at Acme Corp anymore",
        "Alice Chen doesn't work at Acme Corp anymore lol",
        "Alice Chen does not work at Acme Corp any more tbh",
        "Alice Chen isn't working at Acme Corp anymore 😅",
        "Alice Chen doesn\u2019t work at Acme Corp anymore",
    ],
)
async def test_a_negated_anymore_ends_the_stored_edge(extractor: Any, ending: str) -> None:
    # Before: the negation dropped the claim, so the stored job stayed open.
    edges = await _ingest(extractor, ["Alice Chen works at Acme Corp"], [ending])
    assert edges == [("Alice Chen", "work_at", "Acme Corp", True)]


@TIERS
async def test_a_negated_anymore_in_the_same_batch_closes_the_edge(extractor: Any) -> None:
    edges = await _ingest(
        extractor, ["I work at Globex", "I don't work at Globex anymore, I work at Initech now"]
    )
    assert ("Maya", "work_at", "Globex", True) in edges
    assert ("Maya", "work_at", "Initech", False) in edges
    assert ("Maya", "work_at", "Globex", False) not in edges


@TIERS
@pytest.mark.parametrize(
    "text",
    [
        "Alice Chen doesn't work at Acme Corp anymore",  # ends nothing stored: no edge
        "Tom won't work at Acme Corp anymore",  # not yet
        "Tom can't work at Acme Corp anymore",
        "Tom didn't join Acme Corp anymore",  # not a relation that holds over a period
    ],
)
async def test_a_negated_anymore_never_creates_an_edge(extractor: Any, text: str) -> None:
    assert await _ingest(extractor, [text]) == []


@TIERS
async def test_future_negation_does_not_end_the_stored_edge(extractor: Any) -> None:
    edges = await _ingest(
        extractor, ["Tom works at Acme Corp"], ["Tom won't work at Acme Corp anymore"]
    )
    assert edges == [("Tom", "work_at", "Acme Corp", False)]


@TIERS
@pytest.mark.parametrize(
    "question",
    [
        "does Alice Chen still work at Acme Corp",
        "so does Tom work at Globex",
        "did Tom join Globex",
        "is Tom still working at Globex",
        "Is Tom at Globex now",
    ],
)
async def test_a_question_without_a_question_mark_stores_nothing(
    extractor: Any, question: str
) -> None:
    # Before: the claim inside the question was stored as a relation.
    assert await _ingest(extractor, [question]) == []


@TIERS
async def test_a_question_about_a_departure_does_not_end_the_job(extractor: Any) -> None:
    # Before: "has Tom left Globex" closed the stored job.
    edges = await _ingest(extractor, ["Tom works at Globex"], ["has Tom left Globex"])
    assert edges == [("Tom", "work_at", "Globex", False)]


@TIERS
@pytest.mark.parametrize(
    "text", ["maybe Tom joins Globex", "Tom supposedly works at Globex", "perhaps Tom joins Globex"]
)
async def test_a_doubted_claim_stores_nothing(extractor: Any, text: str) -> None:
    assert await _ingest(extractor, [text]) == []


@TIERS
async def test_used_to_ends_the_stored_edge(extractor: Any) -> None:
    # Before (rule tier): "used to" hid the subject, so the job stayed open.
    edges = await _ingest(
        extractor, ["Alice Chen works at Acme Corp"], ["Alice Chen used to work at Acme Corp"]
    )
    assert edges == [("Alice Chen", "work_at", "Acme Corp", True)]


@TIERS
async def test_used_to_alone_creates_no_edge(extractor: Any) -> None:
    assert await _ingest(extractor, ["Alice Chen used to work at Acme Corp"]) == []


@TIERS
@pytest.mark.parametrize(
    "statement",
    [
        "has left Acme Corp for Globex",
        "is still at Globex",
        "was hired by Globex",
        "did my internship at Globex",
        "Tom works at Globex",
    ],
)
async def test_subject_drop_statements_are_not_questions(extractor: Any, statement: str) -> None:
    assert not asks(statement)
    assert not is_question(statement)


def test_inverted_openings_are_questions() -> None:
    assert asks("does alice still work at acme")
    assert asks("has Tom left Globex")
    assert not asks("doesn't work at Acme anymore")


@pytest.mark.parametrize(
    "sentence", ["does alice still work at acme", "was great seeing you at Acme Corp"]
)
def test_only_a_question_mark_keeps_a_sentence_out_of_the_facts(sentence: str) -> None:
    """Relations are refused for a question without "?", facts only for a "?".

    Chat opens many statements with an auxiliary and no subject ("was great seeing you");
    skipping them as facts lost evidence turns on the frozen conversation sets.
    """
    assert not is_question(sentence)
    assert is_question(sentence + "?")

"""A claim framed as denied, doubted or conditioned, or stopped after its object, is no edge.

Found by an acceptance audit: the rule tier read negation only between the subject and the
verb, and neither tier read a frame over the whole clause ("it is not true that", "neither
X nor Y", "nobody at X") or a stop after the object ("works at Acme no longer").
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from cycgraph_memory.hierarchy.extractors import RuleBasedExtractor
from cycgraph_memory.hierarchy.extractors._polarity import claim_polarity
from cycgraph_memory.records import Episode, Message, Provenance

from ._tiers import extractor_tiers

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)


def _episode(text: str) -> Episode:
    message = Message(role="assistant", content=text, timestamp=T0)
    return Episode(topic="t", messages=[message], started_at=T0, ended_at=T0,
                   provenance=Provenance(source="system"))


async def _edges(tier: Any, text: str) -> list[tuple[str, str, str, bool]]:
    result = await tier.extract(_episode(text))
    names = {e.id: e.name for e in result.entities}
    return [
        (names[r.source_id], r.relation_type, names[r.target_id],
         bool(r.attributes.get("ended")))
        for r in result.relationships
    ]


NOT_ASSERTED = [
    "It is not true that Alice Smith works at Acme Corp.",
    "Neither Alice Smith nor Bob Jones works at Acme Corp.",
    "Nobody at Globex Inc works at Acme Corp.",
    "Alice Smith might work at Acme Corp.",
    "If Alice Smith works at Acme Corp, we win.",
    "Alice Smith denied that she works at Acme Corp.",
    "Alice Smith plans to join Acme Corp.",
]


@pytest.mark.parametrize("text", NOT_ASSERTED)
async def test_a_framed_claim_is_no_open_edge_on_any_tier(text: str) -> None:
    for tier in extractor_tiers():
        edges = await _edges(tier, text)
        assert [e for e in edges if not e[3]] == [], (type(tier).__name__, edges)


@pytest.mark.parametrize("text", [
    "Alice Smith works at Acme Corp no longer.",
    "Alice Smith works at Acme Corp no more.",
])
async def test_a_stop_after_the_object_ends_the_relation(text: str) -> None:
    for tier in extractor_tiers():
        edges = await _edges(tier, text)
        # An ended marker (closes a stored edge at ingest), never an open edge.
        assert edges == [("Alice Smith", "work_at", "Acme Corp", True)], (
            type(tier).__name__, edges)


@pytest.mark.parametrize("text,expected", [
    ("Alice Smith works at Acme Corp.", ("Alice Smith", "work_at", "Acme Corp", False)),
    # A clause boundary: only the later clause frames the claim reached through "it".
    ("The checkout service never used Redis; it depends on Memcached for session data.",
     ("checkout service", "depend_on", "Memcached", False)),
    # "instead" alone asserts the new partner ("instead of X" would not).
    ("Calder, which is owned by the Brandt family, will instead partner with Solis Grid.",
     ("Calder", "partner_with", "Solis Grid", False)),
    # A negation before a comma belongs to another clause.
    ("No, Alice Smith works at Acme Corp.", ("Alice Smith", "work_at", "Acme Corp", False)),
])
async def test_asserted_claims_keep_their_edge(text: str, expected: tuple[Any, ...]) -> None:
    for tier in extractor_tiers():
        edges = await _edges(tier, text)
        if isinstance(tier, RuleBasedExtractor) and ("Memcached" in text or "Calder" in text):
            continue  # claims the rule tier's patterns do not reach (before this change too)
        assert expected in edges, (type(tier).__name__, edges)


def test_claim_polarity_reads_frame_gap_and_stop() -> None:
    def polarity(text: str, a: str, b: str, relation: str = "work_at") -> str:
        sa, sb = text.index(a), text.index(b)
        return claim_polarity(text, (sa, sa + len(a)), (sb, sb + len(b)), relation)

    assert polarity("Alice works at Acme.", "Alice", "Acme") == "asserted"
    assert polarity("It is not true that Alice works at Acme.", "Alice", "Acme") == "negated"
    assert polarity("Alice would like to work at Acme.", "Alice", "Acme") == "negated"
    assert polarity("Alice works at Acme no longer.", "Alice", "Acme") == "ended"
    assert polarity("Alice no longer works at Acme.", "Alice", "Acme") == "ended"
    # "no more" after an event relation: not a stop that can end it, so not asserted.
    assert polarity("Alice acquired Acme no more.", "Alice", "Acme", "acquire") == "negated"
    assert polarity("In May, Alice joined Acme.", "Alice", "Acme", "join") == "asserted"

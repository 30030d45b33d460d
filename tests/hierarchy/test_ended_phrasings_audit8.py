"""Endings as people phrase them, per tier, with the exact edges (eighth audit pass).

Documented in extraction.md ("Ended relations close edges"): "is no longer at X" / "isn't
with X anymore" end a job at an organisation, "moved / switched / went from A to B" ends A
and holds B, a past claim with "until <date>" ended then (the marker's window is
``[stop, said]``), "used to work at" ended. Each case below was misread before (except
"used to", pinned as it is), on both free tiers; the LLM tier's post-check reads the same
sentences (``claim_stop``).
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from cycgraph_memory.hierarchy.extractors._polarity import claim_stop, locate_claim
from cycgraph_memory.records import Episode, Message, Provenance

from ._tiers import extractor_tiers

T = datetime(2026, 12, 15, 9, 0, tzinfo=UTC)
MARCH = datetime(2026, 3, 1, tzinfo=UTC)

Edges = dict[tuple[str, str, str], tuple[bool, datetime, datetime | None]]


async def _edges(extractor: object, text: str) -> Edges:
    """(source, relation, target) -> (ended marker, valid_from, valid_until), one message."""
    message = Message(role="user", content=text, timestamp=T)
    episode = Episode(topic="chat", messages=[message], started_at=T, ended_at=T,
                      provenance=Provenance(source="system"))
    result = await extractor.extract(episode)  # type: ignore[attr-defined]
    names = {e.id: e.name for e in result.entities}
    return {
        (names[r.source_id], r.relation_type, names[r.target_id]): (
            r.attributes.get("ended") is True, r.valid_from, r.valid_until
        )
        for r in result.relationships
    }


ENDED_AT_T = (True, T, T)

CASES: list[tuple[str, Edges]] = [
    ("Alice is no longer at Acme Corp.", {("Alice", "work_at", "Acme Corp"): ENDED_AT_T}),
    ("Alice Smith is not at Acme Corp anymore.",
     {("Alice Smith", "work_at", "Acme Corp"): ENDED_AT_T}),
    ("Bob isn't with Initech anymore", {("Bob", "work_at", "Initech"): ENDED_AT_T}),
    ("Bob is no longer with Initech.", {("Bob", "work_at", "Initech"): ENDED_AT_T}),
    ("Alice used to be at Acme Corp.", {("Alice", "work_at", "Acme Corp"): ENDED_AT_T}),
    ("Carol moved from Initech to Globex.", {
        ("Carol", "work_at", "Initech"): ENDED_AT_T,
        ("Carol", "work_at", "Globex"): (False, T, None),
    }),
    ("Carol switched from Initech to Globex Inc.", {
        ("Carol", "work_at", "Initech"): ENDED_AT_T,
        ("Carol", "work_at", "Globex Inc"): (False, T, None),
    }),
    ("Carol went from Initech to Globex.", {
        ("Carol", "work_at", "Initech"): ENDED_AT_T,
        ("Carol", "work_at", "Globex"): (False, T, None),
    }),
    ("Dave worked at Hooli until March.", {("Dave", "work_at", "Hooli"): (True, MARCH, T)}),
    ("Dave worked at Hooli until last year.",
     {("Dave", "work_at", "Hooli"): (True, datetime(2025, 1, 1, tzinfo=UTC), T)}),
    ("Dave worked at Hooli until 2023.",
     {("Dave", "work_at", "Hooli"): (True, datetime(2023, 1, 1, tzinfo=UTC), T)}),
    ("Dave worked at Hooli until he retired.", {("Dave", "work_at", "Hooli"): ENDED_AT_T}),
    ("Dave was at Hooli until March.", {("Dave", "work_at", "Hooli"): (True, MARCH, T)}),
    ("Dave lived in Berlin until 2020.",
     {("Dave", "live_in", "Berlin"): (True, datetime(2020, 1, 1, tzinfo=UTC), T)}),
    ("Erin used to work at Pied Piper.", {("Erin", "work_at", "Pied Piper"): ENDED_AT_T}),
    # Not endings: a day's schedule, a plan, a comparison, a question, common nouns, a
    # place or a tool, a condition, a person after "with".
    ("Alice is at Acme until 5pm today.", {}),
    ("Alice works at Acme until 5pm today.", {("Alice", "work_at", "Acme"): (False, T, None)}),
    ("Alice worked at Acme until 5pm.", {("Alice", "work_at", "Acme"): (False, T, None)}),
    ("Alice works at Acme until March.", {("Alice", "work_at", "Acme"): (False, T, None)}),
    ("Did Dave work at Hooli until March?", {}),
    ("Dave didn't work at Hooli until March.", {}),
    ("I spent no longer than a week at Acme.", {}),
    ("I moved from the couch to the desk.", {}),
    # A switch between two products is no job move; it moves the use (ninth pass, round 2).
    ("Carol switched from Slack to Discord.", {
        ("Carol", "use", "Slack"): (True, T, T),
        ("Carol", "use", "Discord"): (False, T, None),
    }),
    ("Carol went from Paris to Rome.", {}),
    ("Carol didn't move from Initech to Globex.", {}),
    ("If Carol moved from Initech to Globex, she would be happier.", {}),
    ("Alice isn't with Bob anymore.", {}),
    ("Alice is at Acme.", {}),
    ("Alice is with Acme.", {}),
]


@pytest.mark.parametrize("extractor", extractor_tiers(), ids=lambda e: type(e).__name__)
@pytest.mark.parametrize(("text", "expected"), CASES, ids=[c[0] for c in CASES])
async def test_endings_as_people_phrase_them(
    extractor: object, text: str, expected: Edges
) -> None:
    assert await _edges(extractor, text) == expected


@pytest.mark.parametrize("extractor", extractor_tiers(), ids=lambda e: type(e).__name__)
async def test_an_until_date_closes_the_edge_stated_earlier_in_the_episode(
    extractor: object,
) -> None:
    edges = await _edges(extractor, "Dave works at Hooli. Dave worked at Hooli until March.")
    # One edge, from the message, closed no earlier than it began (the same message).
    assert edges == {("Dave", "work_at", "Hooli"): (False, T, T)}


POST_CHECK = [
    # (sentence, source, target, relation, locate_claim polarity, claim_stop)
    ("Carol moved from Initech to Globex.", "Carol", "Initech", "work_at", "asserted",
     (True, None)),
    ("Carol moved from Initech to Globex.", "Carol", "Globex", "work_at", "asserted",
     (False, None)),
    ("Dave worked at Hooli until March.", "Dave", "Hooli", "work_at", "asserted",
     (True, "March")),
    # "May" the month is no modal (the post-check read "until May 3" as "may": negated).
    ("Dave worked at Hooli until May 3, 2024.", "Dave", "Hooli", "work_at", "asserted",
     (True, "May 3, 2024")),
    ("Dave works at Hooli until March.", "Dave", "Hooli", "work_at", "asserted",
     (False, None)),
    ("Alice is at Acme until 5pm today.", "Alice", "Acme", "work_at", "asserted",
     (False, None)),
    ("Alice is no longer at Acme.", "Alice", "Acme", "work_at", "ended", (False, None)),
    ("Carol acquired Initech, then sold it to Globex.", "Carol", "Initech", "acquire",
     "asserted", (False, None)),
]


@pytest.mark.parametrize(
    ("text", "source", "target", "relation", "polarity", "stop"),
    POST_CHECK,
    ids=[f"{c[0]}->{c[2]}" for c in POST_CHECK],
)
def test_the_llm_post_check_reads_moves_and_end_dates(
    text: str, source: str, target: str, relation: str, polarity: str,
    stop: tuple[bool, str | None],
) -> None:
    assert locate_claim([(text, None)], source, target, relation) == (polarity, 0)
    assert claim_stop(text, source, target, relation) == stop

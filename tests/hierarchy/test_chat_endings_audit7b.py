"""Discourse labels and clause-bounded endings on the free tiers (seventh audit pass)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from cycgraph_memory.hierarchy.extractors._conversation import without_labels
from cycgraph_memory.records import Episode, Message, Provenance

from ._tiers import extractor_tiers

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)


async def _edges(extractor: object, text: str) -> dict[tuple[str, str, str], bool]:
    """(source, relation, target) -> ended marker, for one message."""
    message = Message(role="user", content=text, timestamp=T0)
    episode = Episode(topic="chat", messages=[message], started_at=T0, ended_at=T0,
                      provenance=Provenance(source="system"))
    result = await extractor.extract(episode)  # type: ignore[attr-defined]
    names = {e.id: e.name for e in result.entities}
    return {
        (names[r.source_id], r.relation_type, names[r.target_id]): r.attributes.get("ended") is True
        for r in result.relationships
    }


@pytest.mark.parametrize(
    ("text", "read"),
    [
        ("Update: Alice left Acme.", "Alice left Acme."),
        ("UPDATE 2: Alice left Acme.", "Alice left Acme."),
        ("Note - Alice left Acme.", "Alice left Acme."),
        ("Update -- Alice left Acme.", "Alice left Acme."),
        ("Status update \u2014 Alice left Acme.", "Alice left Acme."),
        ("P.S. Alice left Acme.", "Alice left Acme."),
        ("heads-up: alice left acme", "alice left acme"),
        ("ok. Edit: Alice left Acme.", "ok. Alice left Acme."),
        ("Edit: typo\nNote: Alice left Acme.", "typo\nAlice left Acme."),
        # Not labels: a speaker-like prefix, a verb, a bare word, a label with nothing after.
        ("Alice: I left Acme", "Alice: I left Acme"),
        ("Note that Alice left Acme", "Note that Alice left Acme"),
        ("Remember: Alice left Acme", "Remember: Alice left Acme"),
        ("The update: Alice left Acme", "The update: Alice left Acme"),
        ("Update:", "Update:"),
    ],
)
def test_without_labels(text: str, read: str) -> None:
    assert without_labels(text) == read


@pytest.mark.parametrize("extractor", extractor_tiers(), ids=lambda e: type(e).__name__)
async def test_an_ending_stays_in_its_clause(extractor: object) -> None:
    edges = await _edges(extractor, "Alice Smith left Acme Corp and now works at Globex Inc.")
    assert edges == {
        ("Alice Smith", "work_at", "Acme Corp"): True,
        ("Alice Smith", "work_at", "Globex Inc"): False,
    }
    # Coordinated objects and a bare verb under "used to" share the ending.
    edges = await _edges(extractor, "Alice Smith left Acme Corp and Siemens.")
    assert edges == {
        ("Alice Smith", "work_at", "Acme Corp"): True,
        ("Alice Smith", "work_at", "Siemens"): True,
    }
    edges = await _edges(extractor, "Alice Smith used to lead Atlas and manage Bob Jones.")
    assert set(edges.values()) == {True}
    # A negation of the first clause still covers the second.
    assert await _edges(extractor, "Alice Smith didn't quit Acme Corp and joined Globex Inc.") == {}


@pytest.mark.parametrize("extractor", extractor_tiers(), ids=lambda e: type(e).__name__)
@pytest.mark.parametrize(
    "text",
    [
        "Alice Smith might quit Acme Corp.",
        "Alice Smith wants to quit Acme Corp.",
        "Alice Smith will no longer work at Acme Corp.",
        "I doubt Alice Smith left Acme Corp.",
        "Maybe Alice Smith left Acme Corp.",
    ],
)
async def test_an_unreal_ending_is_no_marker(extractor: object, text: str) -> None:
    assert await _edges(extractor, text) == {}

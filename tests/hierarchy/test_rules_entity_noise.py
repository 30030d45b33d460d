"""Rule tier entity noise (issue 10 follow-up): sentence-initial common words.

A capitalised word at the start of a sentence is a name only with evidence. Two kinds of
evidence against it: the episode also writes the word in lowercase ("every postmortem"
... "Postmortems are due"), or it looks plural and takes a plural verb ("Deadlines are
tight"). Chat fillers stretched for emphasis ("YESSS") are fillers. Sentences here are
written for these tests (not the bench corpora).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from cycgraph_memory.hierarchy.extractors.rules import RuleBasedExtractor
from cycgraph_memory.records import Episode, Message, Provenance

T0 = datetime(2026, 4, 1, 9, 0, tzinfo=UTC)


def _names(text: str) -> list[tuple[str, str]]:
    return [(e.name, e.type) for e in RuleBasedExtractor().extract_entities(text)]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Every postmortem needs an owner. Postmortems are due within a week.", []),
        ("The standup ran long again. Standups should stop at fifteen minutes.", []),
        ("Acknowledged. Deadlines are tight this quarter.", []),
        ("Minutes are in the shared folder.", []),
        ("Invoices are sent by Dana on Mondays.", [("Dana", "person")]),
        ("Understood, thanks.", []),
        ("YESSS we got the contract with Northwind!", [("Northwind", "concept")]),
        ("NOOO the build broke again", []),
    ],
)
def test_sentence_initial_common_words_are_not_entities(
    text: str, expected: list[tuple[str, str]]
) -> None:
    assert _names(text) == expected


@pytest.mark.parametrize(
    ("text", "name"),
    [
        ("Fieldnote uses Postgres for storage.", "Fieldnote"),
        ("Harbor acquired Fieldnote in March.", "Harbor"),
        ("Ines is building the charts in Grafana.", "Ines"),  # "in" is no evidence
        ("Siemens is hiring in Porto.", "Siemens"),  # plural-looking, singular verb
    ],
)
def test_sentence_initial_names_stay(text: str, name: str) -> None:
    names = [n for n, _ in _names(text)]
    assert name in names


async def test_lowercase_use_anywhere_in_the_episode_counts() -> None:
    texts = ["Postmortems are due within two days.", "Carol wants every postmortem written."]
    messages = [
        Message(role="user", content=t, timestamp=T0 + timedelta(seconds=i))
        for i, t in enumerate(texts)
    ]
    episode = Episode(
        topic="t",
        messages=messages,
        started_at=T0,
        ended_at=T0 + timedelta(seconds=2),
        provenance=Provenance(source="agent"),
    )
    result = await RuleBasedExtractor().extract(episode)
    assert "Postmortems" not in [e.name for e in result.entities]

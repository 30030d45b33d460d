"""Ninth audit pass, second round: dates said around a claim and switches between products.

Unit level (``_until.claim_dates`` and its parts, ``_frames`` with products, the polarity
of a dated negated perfect, a few thousand random chat fragments through every tier); the
behaviour on a store is pinned by ``tests/contract/test_temporal_chat2_audit9.py``.
"""

from __future__ import annotations

import asyncio
import json
import random
from datetime import UTC, datetime
from typing import Any

import pytest

from cycgraph_memory import LLMExtractor, RuleBasedExtractor
from cycgraph_memory.hierarchy.extractors._frames import (
    MOVED_FROM,
    USED_FROM,
    USED_TO,
    frames,
    switched_product,
)
from cycgraph_memory.hierarchy.extractors._polarity import claim_polarity, stopped_since
from cycgraph_memory.hierarchy.extractors._until import (
    claim_dates,
    coarse_since,
    duration_of,
    ended_since_of,
    lead_date_of,
    resolve_since,
)
from cycgraph_memory.records import Episode, Message, Provenance

SAID = datetime(2026, 12, 15, 9, 0, tzinfo=UTC)


def _d(year: int, month: int = 1, day: int = 1, hour: int = 0) -> datetime:
    return datetime(year, month, day, hour, tzinfo=UTC)


@pytest.mark.parametrize(
    ("sentence", "subject", "expected"),
    [
        ("since 2021, alice has worked at acme", "alice", ("since", "2021")),
        ("Since March, Bob's been at Globex", "Bob", ("since", "March")),
        ("oh btw ever since may 2019 Bob has been at Globex", "Bob", ("since", "may 2019")),
        ("in 2019 Carla moved to Berlin", "Carla", ("at", "2019")),
        ("back in 2019 she joined Initech", "she", ("at", "2019")),
        ("way back in march 2018, she joined Initech", "she", ("at", "march 2018")),
        ("last year Dan left Hooli", "Dan", ("at", "last year")),
        ("so yeah, yesterday Dan left Hooli", "Dan", ("at", "yesterday")),
        # Not a whole date, or no date at all.
        ("In Berlin, Carla joined Initech", "Carla", None),
        ("back in the day Carla joined Initech", "Carla", None),
        ("since then Bob has been at Globex", "Bob", None),
        ("2019 Carla moved to Berlin", "Carla", None),  # a bare year: no "in"
        ("in may be a week Carla joins", "Carla", None),
        ("Carla joined Initech", "Carla", None),
    ],
)
def test_lead_date_of(sentence: str, subject: str, expected: tuple[str, str] | None) -> None:
    assert lead_date_of(sentence, sentence.index(subject)) == expected


@pytest.mark.parametrize(
    ("sentence", "obj", "link", "expected"),
    [
        ("Alice has worked at Acme for three years", "Acme", " has worked at ",
         "for three years"),
        ("bob's been at globex for 6 months now", "globex", "'s been at ", "for 6 months"),
        ("we've used Vim for the past couple of years", "Vim", "'ve used ",
         "for couple of years"),
        ("Alice has lived in Paris for about a year", "Paris", " has lived in ",
         "for about a year"),
        # A simple past, a vague count, a future or past perfect: no start.
        ("she lived in Paris for two years", "Paris", " lived in ", None),
        ("Alice has worked at Acme for a few years", "Acme", " has worked at ", None),
        ("Alice will have worked at Acme for 3 years", "Acme", " will have worked at ", None),
        ("Alice had worked at Acme for 3 years", "Acme", " had worked at ", None),
        ("Alice has worked at Acme for 3 hours", "Acme", " has worked at ", None),
    ],
)
def test_duration_of(sentence: str, obj: str, link: str, expected: str | None) -> None:
    assert duration_of(sentence, sentence.index(obj) + len(obj), link) == expected


@pytest.mark.parametrize(
    ("phrase", "expected"),
    [
        ("for three years", _d(2023, 12, 15, 9)),
        ("for 6 months", _d(2026, 6, 15, 9)),
        ("for couple of years", _d(2024, 12, 15, 9)),
        ("for 2 weeks", _d(2026, 12, 1, 9)),
        ("for 99 years", _d(1927, 12, 15, 9)),
    ],
)
def test_resolve_since_of_a_duration(phrase: str, expected: datetime) -> None:
    assert resolve_since(phrase, SAID) == expected


def test_a_duration_is_clamped_to_the_month_and_to_year_1() -> None:
    assert resolve_since("for 1 month", _d(2026, 3, 31)) == _d(2026, 2, 28)
    assert resolve_since("for a year", _d(2024, 2, 29)) == _d(2023, 2, 28)
    assert resolve_since("for 5 years", _d(3, 6, 1)) is None  # before year 1


def test_coarse_since_of_a_duration() -> None:
    assert coarse_since("for 6 months") and coarse_since("for three years")
    assert not coarse_since("for 2 weeks")


@pytest.mark.parametrize(
    ("sentence", "obj", "link", "expected"),
    [
        ("Bob's not at Globex anymore since march", "Globex", "'s not at ", "march"),
        ("she hasn't worked at Acme since 2022", "Acme", " hasn't worked at ", "2022"),
        ("no longer works at Acme, since last year", "Acme", " no longer works at ",
         "last year"),
        ("not at Acme anymore since she left", "Acme", " not at ", None),
        ("not at Acme anymore since 9am", "Acme", " not at ", None),
        ("won't be at Acme since 2022", "Acme", " won't be at ", None),
    ],
)
def test_ended_since_of(sentence: str, obj: str, link: str, expected: str | None) -> None:
    assert ended_since_of(sentence, sentence.index(obj) + len(obj), link) == expected


@pytest.mark.parametrize(
    ("sentence", "subject", "obj", "stative", "ended", "moved", "expected"),
    [
        ("since 2021, Alice has worked at Acme", "Alice", "Acme", True, False, False,
         (False, None, "2021")),
        ("in 2019 Carla moved to Berlin", "Carla", "Berlin", False, False, False,
         (False, None, "2019")),
        ("last year Dan left Hooli", "Dan", "Hooli", True, True, False,
         (True, "last year", None)),
        ("in 2019 Dan moved from Hooli", "Dan", "Hooli", True, True, True,
         (True, "2019", None)),
        # A state in a year is no start; a leading date on a plan is nothing.
        ("in 2019 Carla lived in Berlin", "Carla", "Berlin", True, False, False,
         (False, None, None)),
        ("in march Carla will join Initech", "Carla", "Initech", False, False, False,
         (False, None, None)),
        # An ended claim said with a date that is no departure: the stop stays unknown.
        ("in 2019 Dan used to work at Hooli", "Dan", "Hooli", True, True, False,
         (True, None, None)),
        # The "since" after the claim outranks the one before it.
        ("since 2019, Alice has worked at Acme since 2021", "Alice", "Acme", True, False,
         False, (False, None, "2021")),
    ],
)
def test_claim_dates(
    sentence: str, subject: str, obj: str, stative: bool, ended: bool, moved: bool,
    expected: tuple[bool, str | None, str | None],
) -> None:
    start = sentence.index(subject)
    end = sentence.index(obj) + len(obj)
    link = sentence[start + len(subject) : sentence.index(obj)]
    assert claim_dates(
        sentence, start, end, link, stative=stative, ended=ended, moved=moved
    ) == expected


@pytest.mark.parametrize(
    ("sentence", "polarity"),
    [
        ("Alice hasn't worked at Acme since 2022", "ended"),
        ("since march Alice hasn't been at Acme", "ended"),
        ("Alice has not worked at Acme since last year", "ended"),
        ("Alice hasn't worked at Acme since she left", "negated"),
        ("I doubt Alice hasn't worked at Acme since 2022", "negated"),
        ("Alice never hasn't worked at Acme since 2022", "negated"),
        ("Alice didn't work at Acme since 2022", "negated"),
    ],
)
def test_a_dated_negated_perfect_is_an_ending(sentence: str, polarity: str) -> None:
    a = sentence.index("Alice")
    b = sentence.index("Acme")
    spans = ((a, a + 5), (b, b + 4))
    assert claim_polarity(sentence, *spans, "work_at") == polarity
    assert stopped_since(sentence, *spans, "work_at") is (polarity == "ended")
    assert not stopped_since(sentence, *spans, "join")  # an event does not stop


# ---------------------------------------------------------------- product switches


def _frames(sentence: str, names: list[str], products: set[str]) -> list[tuple[str, str, str]]:
    spans = [(sentence.index(n), sentence.index(n) + len(n), n) for n in names]
    return frames(
        sentence, spans, lambda n: n not in {"Bob"}, lambda n: False, lambda n: n in products
    )


@pytest.mark.parametrize(
    ("sentence", "names", "expected"),
    [
        ("Bob switched to T-Mobile from Verizon", ["Bob", "T-Mobile", "Verizon"],
         [("Bob", USED_FROM, "Verizon"), ("Bob", USED_TO, "T-Mobile")]),
        ("Bob moved from Slack to Discord", ["Bob", "Slack", "Discord"],
         [("Bob", USED_FROM, "Slack"), ("Bob", USED_TO, "Discord")]),
        # One product end alone: no move at all (a customer is no employee).
        ("Bob switched from Initech to Verizon", ["Bob", "Initech", "Verizon"], []),
        # Two employers: the job move of the first round.
        ("Bob moved from Initech to Globex", ["Bob", "Initech", "Globex"],
         [("Bob", MOVED_FROM, "Initech"), ("Bob", "\0moved_to", "Globex")]),
    ],
)
def test_frames_of_a_switch(
    sentence: str, names: list[str], expected: list[tuple[str, str, str]]
) -> None:
    products = {"T-Mobile", "Verizon", "Slack", "Discord"}
    assert _frames(sentence, names, products) == expected


@pytest.mark.parametrize(
    ("sentence", "name", "expected"),
    [
        ("Bob switched to T-Mobile from Verizon", "Verizon", True),
        ("Bob switched to T-Mobile from Verizon", "T-Mobile", True),
        ("so we moved from slack to google fi lol", "google fi", True),
        ("Bob moved from Initech to Verizon", "Verizon", False),
        ("Bob moved from Initech to Globex", "Globex", False),
        ("Bob uses Verizon", "Verizon", False),
    ],
)
def test_switched_product(sentence: str, name: str, expected: bool) -> None:
    start = sentence.index(name)
    assert switched_product(sentence, start, start + len(name)) is expected


# ---------------------------------------------------------------- rule and parser tiers


def _triples(extractor: Any, text: str) -> set[tuple[str, str, str, datetime, Any]]:
    episode = Episode(
        topic="t", messages=[Message(role="user", content=text, timestamp=SAID)],
        started_at=SAID, ended_at=SAID, provenance=Provenance(source="agent"),
    )
    result = asyncio.run(extractor.extract(episode))
    names = {e.id: e.name for e in result.entities}
    return {
        (names[r.source_id], r.relation_type, names[r.target_id], r.valid_from, r.valid_until)
        for r in result.relationships
    }


def test_the_rule_tier_reads_a_leading_date_without_a_comma() -> None:
    rule = RuleBasedExtractor()
    assert _triples(rule, "last year Dan left Hooli") == {
        ("Dan", "work_at", "Hooli", _d(2025), SAID)
    }
    assert _triples(rule, "back in 2019 Carla joined Initech") == {
        ("Carla", "join", "Initech", _d(2019), None)
    }


def test_the_parser_tier_reads_lowercase_chat() -> None:
    from cycgraph_memory.hierarchy.extractors.parser import ParserExtractor, parser_available

    if not parser_available():  # pragma: no cover - the parser extra is absent
        pytest.skip("the parser extra is not installed")
    parser = ParserExtractor()
    assert _triples(parser, "since 2021, alice has worked at Acme") == {
        ("alice", "work_at", "Acme", _d(2021), None)
    }
    assert _triples(parser, "we moved from Slack to Discord") == {
        ("user", "use", "Slack", SAID, SAID),
        ("user", "use", "Discord", SAID, None),
    }


# ---------------------------------------------------------------- fuzz


_OPENERS = ["", "so ", "oh btw ", "yeah ", "since 2021, ", "Since March, ", "in 2019 ",
            "back in 2019 ", "last year ", "Last year, ", "since may ", "in may ",
            "yesterday ", "since 2099, ", "in 2030 ", "since then ", "back in the day "]
_SUBJECTS = ["Alice", "Bob", "she", "we", "Dan Brown", "i"]
_LINKS = ["has worked at", "'s been at", "hasn't worked at", "has not been at", "left",
          "joined", "moved to", "moved from", "switched to", "switched from", "worked at",
          "lived in", "has lived in", "'s not at", "isn't at", "no longer works at",
          "uses", "hasn't used", "will join", "might leave", "had worked at", "used to use"]
_OBJECTS = ["Acme", "Globex", "Hooli", "Berlin", "Slack", "Discord", "Verizon", "T-Mobile",
            "Initech", "Paris"]
_TAILS = ["", " since 2022", " since march", " since may", " since 9am", " since she left",
          " anymore since last year", " for three years", " for 6 months now",
          " for a few years", " for 2 weeks", " for 999 years", " until 2023",
          " from 2019 to 2021", " to Discord", " from Verizon", " to Globex from Initech",
          " lol", " tbh", " since 2099", " for 12 yrs", " ever since last month", "?"]


def _fragments(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        words = [rng.choice(_OPENERS), rng.choice(_SUBJECTS), " ", rng.choice(_LINKS), " ",
                 rng.choice(_OBJECTS), rng.choice(_TAILS)]
        text = "".join(words)
        if rng.random() < 0.3:
            text = text.lower()
        out.append(text)
    return out


class _EchoModel:
    """A model that claims every relation between the names its prompt holds."""

    async def complete(self, prompt: str) -> str:
        names = [n for n in [*_SUBJECTS[:3], *_OBJECTS] if n.lower() in prompt.lower()]
        rels = ["work_at", "join", "use", "live_in", "move_to"]
        return json.dumps({
            "facts": [{"content": "chat", "entities": names}],
            "entities": [{"name": n, "type": "person"} for n in names],
            "relationships": [
                {"source": a, "relation": r, "target": b}
                for a in names[:2] for b in names for r in rels if a != b
            ],
        })


@pytest.mark.parametrize("seed", [1, 2])
def test_random_chat_fragments_never_fail_nor_date_out_of_order(seed: int) -> None:
    """No exception, no window that ends before it starts, nothing dated after its message."""
    echo = LLMExtractor(_EchoModel())
    tiers: list[Any] = [RuleBasedExtractor(), echo]
    from cycgraph_memory.hierarchy.extractors.parser import ParserExtractor, parser_available

    if parser_available():
        tiers.append(ParserExtractor())
    fragments = _fragments(1500, seed)
    for extractor in tiers:
        for start in range(0, len(fragments), 50):
            messages = [
                Message(role="user", content=text, timestamp=SAID)
                for text in fragments[start : start + 50]
            ]
            episode = Episode(
                topic="t", messages=messages, started_at=SAID, ended_at=SAID,
                provenance=Provenance(source="agent"),
            )
            result = asyncio.run(extractor.extract(episode))
            for r in result.relationships:
                assert r.valid_from <= SAID, (extractor, r)
                assert r.valid_until is None or r.valid_from <= r.valid_until <= SAID, r
    assert echo.stats.fallbacks == 0  # the post-check, not its fallback, read the claims


def test_trail_and_clause_dates() -> None:
    from cycgraph_memory.hierarchy.extractors._until import clause_date_of, trail_date_of

    def after(sentence: str, word: str) -> str | None:
        return trail_date_of(sentence, sentence.index(word) + len(word))

    assert after("Alice joined Acme in 2021 after a while", "Acme") == "2021 after a while"
    assert after("bob moved to Lisbon back in march lol", "Lisbon") == "march lol"
    assert after("Dan left Hooli last year", "Hooli") == "last year"
    assert after("Dan left Hooli yesterday", "Hooli") == "yesterday"
    assert after("Carla joined Initech in Berlin", "Initech") is None
    assert after("Carla joined Initech in may be", "Initech") is None
    assert after("Carla joined Initech Labs", "Initech") is None  # no "in": relative only
    assert after("Carla joined Initech", "Initech") is None
    sentence = "we moved from Boston to Denver in 2019, then to Austin in 2022"
    assert clause_date_of(sentence, sentence.index("Boston") + 6) == "2019"
    assert clause_date_of("moved from Boston to Denver, in 2019", 16) is None  # next clause

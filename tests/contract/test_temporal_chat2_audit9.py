"""Contract: dates said around a claim, and switches between products (both backends).

Ninth audit pass, second round. On every tier (rule, parser when installed, and the LLM
tier through its post-check on a scripted model):

* a date before the claim was not read: "since 2021, Alice Smith has worked at Acme
  Corp", "Since March, Bob's been at Globex" (start), "In 2019 Carla moved to Berlin",
  "Back in 2019, Carla joined Initech" (a past event: valid from then), "Last year, Dan
  left Hooli" (an ending: it stopped then) were stored from (or ended at) the message;
* a duration in the present perfect, "has worked at Acme Corp for three years", was
  stored from the message instead of three years before it;
* a "since" date on an ended claim, "Bob's not at Globex anymore since march", ended the
  job at the message, and "hasn't worked at Acme Corp since 2022" was a denial that
  ended nothing;
* "switched to Vodafone from Verizon" ended a ``work_at`` Verizon and stored a job at
  Vodafone; "moved from Slack to Discord" ended no ``use`` Slack.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from .test_temporal_chat_audit9 import _TYPES, _edges, _held_at, _ingest, tier

__all__ = ["tier"]  # the fixture, shared with the first round's module

_TYPES.update(
    {"Verizon": "organization", "Vodafone": "organization", "Slack": "tool",
     "Discord": "tool", "Paris": "location"}
)

T0 = datetime(2020, 6, 1, 9, 0, tzinfo=UTC)  # the earlier session
T1 = datetime(2026, 12, 15, 9, 0, tzinfo=UTC)  # the later message
JOB = {"work_at", "join"}


def _d(year: int, month: int = 1, day: int = 1, hour: int = 0) -> datetime:
    return datetime(year, month, day, hour, tzinfo=UTC)


# ---------------------------------------------------------------- a date before the claim


@pytest.mark.parametrize(
    ("text", "person", "relation", "target", "start"),
    [
        ("since 2021, Alice Smith has worked at Acme Corp", "Alice Smith", "work_at",
         "Acme Corp", _d(2021)),
        ("Since March, Bob's been at Globex", "Bob", "work_at", "Globex", _d(2026, 3)),
        ("In 2019 Carla moved to Berlin", "Carla", "move_to", "Berlin", _d(2019)),
        ("Back in 2019, Carla joined Initech", "Carla", "join", "Initech", _d(2019)),
        # A duration in the present perfect: that long before the message.
        ("Alice Smith has worked at Acme Corp for three years", "Alice Smith", "work_at",
         "Acme Corp", _d(2023, 12, 15, 9)),
        ("ok so Bob's been at Globex for 6 months now", "Bob", "work_at", "Globex",
         _d(2026, 6, 15, 9)),
    ],
)
async def test_a_date_said_around_the_claim_is_when_it_began(
    store: Any, index: Any, tier: str, text: str, person: str, relation: str, target: str,
    start: datetime,
) -> None:
    await _ingest(store, index, tier, [(T1, text, [(person, relation, target)])])
    subject, edges = await _edges(store, person)
    edge = edges[(relation, target)]
    assert (edge.valid_from, edge.valid_until) == (start, None)
    assert await _held_at(store, index, subject, {relation}, start - timedelta(days=1)) == set()
    assert await _held_at(store, index, subject, {relation}, start + timedelta(days=1)) == {
        target
    }


@pytest.mark.parametrize(
    ("text", "relation", "target"),
    [
        # Not a whole date before the claim, a plan, a vague or a simple-past duration.
        ("In Berlin, Carla joined Initech", "join", "Initech"),
        ("In March Carla will join Initech", "join", "Initech"),
        ("Carla has worked at Initech for a few years", "work_at", "Initech"),
        ("Carla has worked at Initech for ages lol", "work_at", "Initech"),
        # A past state in a year is no start (it may have begun earlier).
        ("In 2019 Carla lived in Berlin", "live_in", "Berlin"),
    ],
)
async def test_what_names_no_start_keeps_the_message_time(
    store: Any, index: Any, tier: str, text: str, relation: str, target: str
) -> None:
    await _ingest(store, index, tier, [(T1, text, [("Carla", relation, target)])])
    _, edges = await _edges(store, "Carla")
    if (relation, target) in edges:  # a plan stores nothing; what is stored is undated
        edge = edges[(relation, target)]
        assert (edge.valid_from, edge.valid_until) == (T1, None)


@pytest.mark.parametrize(
    ("later", "stop"),
    [
        ("Last year, Dan left Hooli", _d(2025)),
        ("Dan's not at Hooli anymore since march", _d(2026, 3)),
        ("Dan hasn't worked at Hooli since 2022", _d(2022)),
        ("since 2022 Dan hasn't worked at Hooli", _d(2022)),
        ("Dan no longer works at Hooli since last year", _d(2025)),
    ],
)
async def test_a_date_of_an_ending_is_when_it_stopped(
    store: Any, index: Any, tier: str, later: str, stop: datetime
) -> None:
    await _ingest(store, index, tier, [
        (T0, "Dan works at Hooli.", [("Dan", "work_at", "Hooli")]),
        (T1, later, [("Dan", "work_at", "Hooli")]),
    ])
    subject, edges = await _edges(store, "Dan")
    assert edges[("work_at", "Hooli")].valid_until == stop
    assert await _held_at(store, index, subject, JOB, stop - timedelta(days=1)) == {"Hooli"}
    assert await _held_at(store, index, subject, JOB, stop + timedelta(days=1)) == set()


@pytest.mark.parametrize(
    "later",
    [
        "Dan hasn't worked at Hooli since he got there",  # no date: a denial
        "i doubt Dan hasn't worked at Hooli since 2022",
        "Dan won't be at Hooli anymore since 2022 is over",
        "has Dan not worked at Hooli since 2022?",
    ],
)
async def test_what_only_sounds_like_a_dated_ending_closes_nothing(
    store: Any, index: Any, tier: str, later: str
) -> None:
    await _ingest(store, index, tier, [
        (T0, "Dan works at Hooli.", [("Dan", "work_at", "Hooli")]),
        (T1, later, [("Dan", "work_at", "Hooli")]),
    ])
    _, edges = await _edges(store, "Dan")
    assert edges[("work_at", "Hooli")].valid_until is None


# ---------------------------------------------------------------- switching products


@pytest.mark.parametrize(
    "later",
    [
        "Bob switched to Vodafone from Verizon",
        "Bob switched from Verizon to Vodafone lol",
    ],
)
async def test_a_switch_between_providers_moves_the_use_and_no_job(
    store: Any, index: Any, tier: str, later: str
) -> None:
    await _ingest(store, index, tier, [
        (T0, "Bob works at Verizon.", [("Bob", "work_at", "Verizon")]),
        (T0 + timedelta(days=1), "Bob uses Verizon.", [("Bob", "use", "Verizon")]),
        # What a model may report: the customer's switch read as a job move, too.
        (T1, later, [("Bob", "use", "Verizon"), ("Bob", "use", "Vodafone"),
                     ("Bob", "work_at", "Verizon"), ("Bob", "join", "Vodafone")]),
    ])
    subject, edges = await _edges(store, "Bob")
    assert edges[("use", "Verizon")].valid_until == T1
    vodafone = edges[("use", "Vodafone")]
    assert (vodafone.valid_from, vodafone.valid_until) == (T1, None)
    assert edges[("work_at", "Verizon")].valid_until is None  # no job ended
    assert ("join", "Vodafone") not in edges and ("work_at", "Vodafone") not in edges
    after = T1 + timedelta(days=1)
    assert await _held_at(store, index, subject, {"use"}, after) == {"Vodafone"}
    assert await _held_at(store, index, subject, JOB, after) == {"Verizon"}


async def test_a_switch_between_tools_ends_the_old_use(
    store: Any, index: Any, tier: str
) -> None:
    await _ingest(store, index, tier, [
        (T0, "Bob uses Slack.", [("Bob", "use", "Slack")]),
        (T1, "Bob moved from Slack to Discord", [("Bob", "use", "Slack"),
                                                  ("Bob", "use", "Discord")]),
    ])
    subject, edges = await _edges(store, "Bob")
    assert edges[("use", "Slack")].valid_until == T1
    assert ("join", "Discord") not in edges
    assert await _held_at(store, index, subject, {"use"}, T1 + timedelta(days=1)) == {
        "Discord"
    }



# ---------------------------------------------------------------- a date after the object


@pytest.mark.parametrize(
    ("text", "person", "relation", "target", "start"),
    [
        ("Alice Smith joined Acme Corp in 2021 after four years at Globex", "Alice Smith",
         "join", "Acme Corp", _d(2021)),
        ("Carla moved to Berlin in 2019", "Carla", "move_to", "Berlin", _d(2019)),
        ("ok so Carla joined Initech back in march lol", "Carla", "join", "Initech",
         _d(2026, 3)),
        ("Carla joined Initech last week", "Carla", "join", "Initech", _d(2026, 12, 7)),
    ],
)
async def test_a_date_after_a_past_event_is_when_it_happened(
    store: Any, index: Any, tier: str, text: str, person: str, relation: str, target: str,
    start: datetime,
) -> None:
    await _ingest(store, index, tier, [(T1, text, [(person, relation, target)])])
    subject, edges = await _edges(store, person)
    edge = edges[(relation, target)]
    assert (edge.valid_from, edge.valid_until) == (start, None)
    assert await _held_at(store, index, subject, {relation}, start + timedelta(days=1)) == {
        target
    }


@pytest.mark.parametrize(
    ("text", "relation", "target"),
    [
        ("Carla joined Initech in Berlin", "join", "Initech"),  # a place, no date
        ("Carla worked at Initech in 2019", "work_at", "Initech"),  # a past state
        ("Carla works at Initech in 2019 terms", "work_at", "Initech"),  # present
        ("Carla joined Initech in 2027", "join", "Initech"),  # after the message
    ],
)
async def test_what_follows_the_object_but_dates_no_event_keeps_the_message_time(
    store: Any, index: Any, tier: str, text: str, relation: str, target: str
) -> None:
    await _ingest(store, index, tier, [(T1, text, [("Carla", relation, target)])])
    _, edges = await _edges(store, "Carla")
    if (relation, target) in edges:
        assert edges[(relation, target)].valid_from == T1


@pytest.mark.parametrize(
    ("later", "stop"),
    [
        ("Dan left Hooli last year", _d(2025)),
        ("Dan quit Hooli in March lol", _d(2026, 3)),
    ],
)
async def test_a_date_after_a_departure_is_when_it_stopped(
    store: Any, index: Any, tier: str, later: str, stop: datetime
) -> None:
    await _ingest(store, index, tier, [
        (T0, "Dan works at Hooli.", [("Dan", "work_at", "Hooli")]),
        (T1, later, [("Dan", "work_at", "Hooli")]),
    ])
    subject, edges = await _edges(store, "Dan")
    assert edges[("work_at", "Hooli")].valid_until == stop
    assert await _held_at(store, index, subject, JOB, stop + timedelta(days=1)) == set()

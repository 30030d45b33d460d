"""Contract: "since" dates, moves in either order and jobs begun by "joined" (both backends).

Ninth audit pass. On every tier (rule, parser when installed, and the LLM tier through its
post-check on a scripted model):

* "has worked at Acme since 2021", "Bob's been at Globex since march", "has lived in
  Berlin since last year" stored the relation valid from the message, not from the date
  the text gives; a causal or unplaceable "since" must keep the message's time;
* "moved to Globex from Initech" (the other order of "moved from Initech to Globex") left
  the stored Initech job open;
* "Alice left Acme" / "no longer works at Acme" closed a stored ``work_at`` but not the
  open ``join`` edge "Alice joined Acme" stores, so retrieval still said she had joined
  Acme and never left;
* "moved from Boston to Denver" / "moved to Denver from Boston" ended no ``live_in``
  Boston and held no ``live_in`` Denver.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from cycgraph_memory import (
    HashingEmbeddingProvider,
    LLMExtractor,
    MemoryPipeline,
    MemoryQuery,
    Message,
    RuleBasedExtractor,
    retrieve_memory,
)

from .factories import EMBED_DIM
from .tiers import tier_extractor

T0 = datetime(2022, 6, 1, 9, 0, tzinfo=UTC)  # the earlier session
T1 = datetime(2026, 12, 15, 9, 0, tzinfo=UTC)  # the later message

_TYPES = {
    "Acme Corp": "organization",
    "Initech": "organization",
    "Globex": "organization",
    "Hooli": "organization",
    "Boston": "location",
    "Denver": "location",
    "Berlin": "location",
    "Tinyville": "location",
    "Bigtown": "location",
    "Vim": "tool",
}
# What the scripted model reports for each message: (source, relation, target) triples.
_MODEL: dict[str, list[tuple[str, str, str]]] = {}


class _ScriptedModel:
    """A model that reports the claims of ``_MODEL`` for the message in its prompt."""

    async def complete(self, prompt: str) -> str:
        text = max((t for t in _MODEL if t in prompt), key=len)
        triples = _MODEL[text]
        names = {n for s, _, t in triples for n in (s, t)}
        return json.dumps(
            {
                "facts": [{"content": text, "entities": sorted(names)}],
                "entities": [{"name": n, "type": _TYPES.get(n, "person")} for n in sorted(names)],
                "relationships": [
                    {"source": s, "relation": r, "target": t} for s, r, t in triples
                ],
            }
        )


def _extractor(tier: str) -> Any:
    return tier_extractor(
        tier, llm=lambda: LLMExtractor(_ScriptedModel(), fallback=RuleBasedExtractor())
    )


@pytest.fixture(params=["rule", "parser", "llm"])
def tier(request: pytest.FixtureRequest) -> str:
    return str(request.param)


async def _ingest(
    store: Any, index: Any, tier: str, sessions: list[tuple[datetime, str, list[Any]]]
) -> MemoryPipeline:
    """Ingest each ``(time, text, model triples)`` as a session of its own, in order."""
    pipeline = MemoryPipeline(
        store,
        index=index,
        extractor=_extractor(tier),
        embedder=HashingEmbeddingProvider(dimensions=EMBED_DIM),
    )
    for when, text, model in sessions:
        _MODEL[text] = model
        await pipeline.ingest([Message(role="user", content=text, timestamp=when)])
    return pipeline


async def _edges(store: Any, person: str) -> tuple[Any, dict[tuple[str, str], Any]]:
    """``person`` and their outgoing edges by ``(relation, target name)``."""
    entities = {e.id: e for e in await store.find_entities()}
    subject = next(e for e in entities.values() if e.name == person)
    edges = {
        (r.relation_type, entities[r.target_id].name): r
        for r in await store.get_relationships_for_entity(subject.id, direction="outgoing")
    }
    return subject, edges


async def _held_at(
    store: Any, index: Any, subject: Any, relations: set[str], when: datetime
) -> set[str]:
    """Targets of ``subject``'s edges of ``relations`` that retrieval returns at ``when``."""
    result = await retrieve_memory(
        store, index, MemoryQuery(entity_ids=[subject.id], max_hops=1, valid_at=when)
    )
    names = {e.id: e.name for e in await store.find_entities()}
    return {
        names[r.target_id]
        for r in result.relationships
        if r.relation_type in relations and r.source_id == subject.id
    }


JOB = {"work_at", "join"}


# ---------------------------------------------------------------- "since" dates


@pytest.mark.parametrize(
    ("text", "person", "relation", "target", "start"),
    [
        ("Alice Smith has worked at Acme Corp since 2021", "Alice Smith", "work_at",
         "Acme Corp", datetime(2021, 1, 1, tzinfo=UTC)),
        ("oh btw Bob's been at Globex since march lol", "Bob", "work_at", "Globex",
         datetime(2026, 3, 1, tzinfo=UTC)),
        ("Carla has lived in Berlin since last year", "Carla", "live_in", "Berlin",
         datetime(2025, 1, 1, tzinfo=UTC)),
        ("yeah Dave's been working at Hooli ever since may 2019 tbh", "Dave", "work_at",
         "Hooli", datetime(2019, 5, 1, tzinfo=UTC)),
    ],
)
async def test_a_since_date_is_when_the_relation_began(
    store: Any, index: Any, tier: str, text: str, person: str, relation: str, target: str,
    start: datetime,
) -> None:
    await _ingest(store, index, tier, [(T1, text, [(person, relation, target)])])
    subject, edges = await _edges(store, person)
    edge = edges[(relation, target)]
    assert (edge.valid_from, edge.valid_until) == (start, None)
    relations = {relation}
    assert await _held_at(store, index, subject, relations, start - timedelta(days=1)) == set()
    assert await _held_at(store, index, subject, relations, start + timedelta(days=1)) == {
        target
    }


@pytest.mark.parametrize(
    ("text", "relation", "target"),
    [
        # A causal "since", a phrase no date starts, a date after the message.
        ("since Alice Smith works at Acme Corp, she knows everyone there", "work_at",
         "Acme Corp"),
        ("Alice Smith has worked at Acme Corp since she was 20", "work_at", "Acme Corp"),
        ("Alice Smith has worked at Acme Corp since forever lol", "work_at", "Acme Corp"),
        ("Alice Smith has worked at Acme Corp since 2027", "work_at", "Acme Corp"),
        ("Alice Smith uses Vim since it's faster tbh", "use", "Vim"),
        ("Alice Smith uses Vim since may be it's faster", "use", "Vim"),
    ],
)
async def test_a_since_that_names_no_placed_date_leaves_the_message_time(
    store: Any, index: Any, tier: str, text: str, relation: str, target: str
) -> None:
    await _ingest(store, index, tier, [(T1, text, [("Alice Smith", relation, target)])])
    _, edges = await _edges(store, "Alice Smith")
    assert (edges[(relation, target)].valid_from, edges[(relation, target)].valid_until) == (
        T1, None
    )


# ---------------------------------------------------------------- moves, the other order


@pytest.mark.parametrize(
    ("later", "moved"),
    [
        ("Carol moved to Globex from Initech.", T1),
        ("so Carol just switched to Globex from Initech lol", T1),
        ("Carol jumped ship to Globex from Initech", T1),
        # A date after the move dates both of its ends (the first of last month).
        ("Carol hopped over to Globex from Initech last month",
         datetime(2026, 11, 1, tzinfo=UTC)),
    ],
)
async def test_a_move_to_b_from_a_ends_a_and_holds_b(
    store: Any, index: Any, tier: str, later: str, moved: datetime
) -> None:
    await _ingest(store, index, tier, [
        (T0, "Carol works at Initech.", [("Carol", "work_at", "Initech")]),
        (T1, later, [("Carol", "work_at", "Initech"), ("Carol", "work_at", "Globex")]),
    ])
    subject, edges = await _edges(store, "Carol")
    assert edges[("work_at", "Initech")].valid_until == moved
    assert await _held_at(store, index, subject, JOB, moved - timedelta(days=1)) == {"Initech"}
    # The LLM tier's claim of the new end is a work_at (a state), dated when said; the
    # free tiers' is the join the move began (docs/extraction.md, known limits).
    arrived = T1 if tier == "llm" else moved
    assert await _held_at(store, index, subject, JOB, arrived + timedelta(days=1)) == {"Globex"}


@pytest.mark.parametrize(
    "later",
    [
        "Carol went to Globex from Initech for a meeting",  # a trip, not a move
        "Carol will switch to Globex from Initech next year",
        "Carol might move to Globex from Initech",
        "did Carol move to Globex from Initech?",
        "if Carol moved to Globex from Initech she'd earn more",
    ],
)
async def test_what_only_sounds_like_a_move_to_b_from_a_leaves_a_open(
    store: Any, index: Any, tier: str, later: str
) -> None:
    await _ingest(store, index, tier, [
        (T0, "Carol works at Initech.", [("Carol", "work_at", "Initech")]),
        (T1, later, [("Carol", "work_at", "Initech")]),
    ])
    subject, edges = await _edges(store, "Carol")
    assert edges[("work_at", "Initech")].valid_until is None
    assert await _held_at(store, index, subject, JOB, T1 + timedelta(days=1)) == {"Initech"}


# ---------------------------------------------------------------- a job begun by "joined"


@pytest.mark.parametrize(
    "later",
    [
        "Alice Smith left Acme Corp",
        "Alice Smith no longer works at Acme Corp.",
        "ugh Alice Smith quit Acme Corp lol",
        "Alice Smith doesn't work at Acme Corp anymore",
        "Alice Smith moved from Acme Corp to Globex",
    ],
)
async def test_an_ended_job_closes_the_open_join_edge(
    store: Any, index: Any, tier: str, later: str
) -> None:
    await _ingest(store, index, tier, [
        (T0, "Alice Smith joined Acme Corp.", [("Alice Smith", "join", "Acme Corp")]),
        (T1, later, [("Alice Smith", "work_at", "Acme Corp")]),
    ])
    subject, edges = await _edges(store, "Alice Smith")
    assert edges[("join", "Acme Corp")].valid_until == T1
    assert ("work_at", "Acme Corp") not in edges  # the marker is never stored
    assert await _held_at(store, index, subject, JOB, T1 - timedelta(days=1)) == {"Acme Corp"}
    assert "Acme Corp" not in await _held_at(store, index, subject, JOB, T1)


async def test_a_job_joined_and_left_in_one_ingest_is_closed(
    store: Any, index: Any, tier: str
) -> None:
    pipeline = await _ingest(store, index, tier, [])
    _MODEL["Alice Smith joined Acme Corp."] = [("Alice Smith", "join", "Acme Corp")]
    _MODEL["Alice Smith left Acme Corp"] = [("Alice Smith", "work_at", "Acme Corp")]
    await pipeline.ingest([
        Message(role="user", content="Alice Smith joined Acme Corp.", timestamp=T0),
        Message(role="user", content="Alice Smith left Acme Corp", timestamp=T1),
    ])
    _, edges = await _edges(store, "Alice Smith")
    assert (edges[("join", "Acme Corp")].valid_from, edges[("join", "Acme Corp")].valid_until) == (
        T0, T1
    )


@pytest.mark.parametrize(
    "later",
    [
        "Alice Smith is at Acme Corp until 5pm today",
        "does Alice Smith still work at Acme Corp",
        "Alice Smith might quit Acme Corp",
        "Alice Smith left Globex",
    ],
)
async def test_what_ends_no_job_at_the_org_leaves_the_join_edge_open(
    store: Any, index: Any, tier: str, later: str
) -> None:
    await _ingest(store, index, tier, [
        (T0, "Alice Smith joined Acme Corp.", [("Alice Smith", "join", "Acme Corp")]),
        (T1, later, [("Alice Smith", "work_at", "Acme Corp")]),
    ])
    _, edges = await _edges(store, "Alice Smith")
    assert edges[("join", "Acme Corp")].valid_until is None


# ---------------------------------------------------------------- moves between places


@pytest.mark.parametrize(
    "later",
    [
        "Dan moved from Boston to Denver",
        "Dan moved to Denver from Boston last spring",
        "ugh Dan finally relocated from Boston to Denver",
    ],
)
async def test_a_move_between_places_ends_the_old_home_and_holds_the_new(
    store: Any, index: Any, tier: str, later: str
) -> None:
    await _ingest(store, index, tier, [
        (T0, "Dan lives in Boston.", [("Dan", "live_in", "Boston")]),
        (T1, later, [("Dan", "live_in", "Boston"), ("Dan", "live_in", "Denver")]),
    ])
    subject, edges = await _edges(store, "Dan")
    assert edges[("live_in", "Boston")].valid_until == T1
    assert (edges[("live_in", "Denver")].valid_from, edges[("live_in", "Denver")].valid_until) == (
        T1, None
    )
    home = {"live_in", "move_to"}
    assert await _held_at(store, index, subject, home, T1 - timedelta(days=1)) == {"Boston"}
    assert await _held_at(store, index, subject, home, T1 + timedelta(days=1)) == {"Denver"}


async def test_a_move_away_closes_the_open_move_to_edge(
    store: Any, index: Any, tier: str
) -> None:
    await _ingest(store, index, tier, [
        (T0, "Dan moved to Boston.", [("Dan", "move_to", "Boston")]),
        (T1, "Dan moved from Boston to Denver",
         [("Dan", "live_in", "Boston"), ("Dan", "live_in", "Denver")]),
    ])
    subject, edges = await _edges(store, "Dan")
    assert edges[("move_to", "Boston")].valid_until == T1
    home = {"live_in", "move_to"}
    assert await _held_at(store, index, subject, home, T1 + timedelta(days=1)) == {"Denver"}


@pytest.mark.parametrize(
    "later",
    [
        "Dan went to Denver from Boston for the weekend",
        "Dan might move from Boston to Denver",
        "Dan will move to Denver from Boston next year",
        "has Dan moved from Boston to Denver",
    ],
)
async def test_what_only_sounds_like_a_move_between_places_leaves_the_home_open(
    store: Any, index: Any, tier: str, later: str
) -> None:
    await _ingest(store, index, tier, [
        (T0, "Dan lives in Boston.", [("Dan", "live_in", "Boston")]),
        (T1, later, [("Dan", "live_in", "Boston")]),
    ])
    _, edges = await _edges(store, "Dan")
    assert edges[("live_in", "Boston")].valid_until is None
    assert ("live_in", "Denver") not in edges


# ---------------------------------------------------------------- doubted endings, LLM tier


@pytest.mark.parametrize(
    "later",
    [
        "Alice Smith might quit Acme Corp",
        "i doubt Alice Smith left Acme Corp tbh",
        "maybe Alice Smith quit Acme Corp idk",
        "Alice Smith wants to quit Acme Corp",
        "Alice Smith will no longer work at Acme Corp",
    ],
)
async def test_a_doubted_or_future_ending_closes_nothing(
    store: Any, index: Any, tier: str, later: str
) -> None:
    """The LLM tier's post-check read these as ended and closed the stored job.

    The free tiers already read them as not yet real (``claim_polarity``); the post-check
    now does too.
    """
    await _ingest(store, index, tier, [
        (T0, "Alice Smith works at Acme Corp.", [("Alice Smith", "work_at", "Acme Corp")]),
        (T1, later, [("Alice Smith", "work_at", "Acme Corp")]),
    ])
    subject, edges = await _edges(store, "Alice Smith")
    assert edges[("work_at", "Acme Corp")].valid_until is None
    assert await _held_at(store, index, subject, JOB, T1 + timedelta(days=1)) == {"Acme Corp"}

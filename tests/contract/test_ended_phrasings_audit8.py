"""Contract: relations that end as people phrase them close the stored edge (both backends).

An earlier session stores an open job; a later message says it ended in one of the shapes
people write ("is no longer at", "isn't with ... anymore", "moved from A to B", "worked at
X until March", "used to work at"). The stored edge must be closed (``valid_until``) and
retrieval at a later ``valid_at`` must not return it; what only sounds like an ending
("at Acme until 5pm today", "no longer than a week", "moved from the couch to the desk",
a question, a plan) leaves it open. Run on the rule tier, the parser tier (when its extra
is installed) and the LLM tier (a scripted model, read through its post-check).

Eighth audit pass: "be at" / "be with" ended nothing (no relation pattern), "moved from A
to B" ended nothing (the parser stored A open), "until <date>" was not read (the job stayed
open), and "spent no longer than a week at X" ended the job on the parser tier.
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

T0 = datetime(2022, 6, 1, 9, 0, tzinfo=UTC)  # the earlier session: the job is stored open
T1 = datetime(2026, 12, 15, 9, 0, tzinfo=UTC)  # the later message


# What a model replies for each message: (source, relation, target) triples. The post-check
# reads the text to decide whether each holds, ended or is denied.
_ORGS = {"Acme Corp", "Initech", "Globex", "Hooli", "Pied Piper"}
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
                "entities": [
                    {"name": n, "type": "organization" if n in _ORGS else "person"}
                    for n in sorted(names)
                ],
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


async def _edges(
    store: Any, index: Any, tier: str, person: str, earlier: str, later: str,
    model: list[tuple[str, str, str]],
) -> tuple[Any, dict[tuple[str, str], Any]]:
    """Ingest ``earlier`` at T0 and ``later`` at T1; ``person`` and their outgoing edges."""
    _MODEL[earlier] = [(person, "work_at", earlier.split(" at ")[-1].rstrip("."))]
    _MODEL[later] = model
    pipeline = MemoryPipeline(
        store,
        index=index,
        extractor=_extractor(tier),
        embedder=HashingEmbeddingProvider(dimensions=EMBED_DIM),
    )
    await pipeline.ingest([Message(role="user", content=earlier, timestamp=T0)])
    await pipeline.ingest([Message(role="user", content=later, timestamp=T1)])
    entities = {e.id: e for e in await store.find_entities()}
    subject = next(e for e in entities.values() if e.name == person)
    edges = {
        (r.relation_type, entities[r.target_id].name): r
        for r in await store.get_relationships_for_entity(subject.id, direction="outgoing")
    }
    return subject, edges


async def _jobs_at(store: Any, index: Any, subject: Any, when: datetime) -> set[str]:
    """Names of the organisations ``subject`` works at according to retrieval at ``when``."""
    result = await retrieve_memory(
        store, index, MemoryQuery(entity_ids=[subject.id], max_hops=1, valid_at=when)
    )
    names = {e.id: e.name for e in await store.find_entities()}
    return {
        names[r.target_id]
        for r in result.relationships
        if r.relation_type == "work_at" and r.source_id == subject.id
    }


@pytest.mark.parametrize(
    ("person", "org", "later"),
    [
        ("Alice", "Acme Corp", "Alice is no longer at Acme Corp."),
        ("Alice Smith", "Acme Corp", "Alice Smith is not at Acme Corp anymore."),
        ("Bob", "Initech", "Bob isn't with Initech anymore"),
        ("Bob", "Initech", "Bob is no longer with Initech."),
        ("Erin", "Pied Piper", "Erin used to work at Pied Piper."),
        ("Erin", "Pied Piper", "Erin used to be at Pied Piper."),
    ],
)
async def test_no_longer_at_an_org_closes_the_stored_job(
    store: Any, index: Any, tier: str, person: str, org: str, later: str
) -> None:
    subject, edges = await _edges(
        store, index, tier, person, f"{person} works at {org}.", later,
        [(person, "work_at", org)],
    )
    assert edges[("work_at", org)].valid_until == T1
    assert await _jobs_at(store, index, subject, T1 - timedelta(days=1)) == {org}
    assert await _jobs_at(store, index, subject, T1) == set()


@pytest.mark.parametrize(
    "later",
    [
        "Carol moved from Initech to Globex.",
        "Carol switched from Initech to Globex.",
        "Carol went from Initech to Globex.",
        "so Carol just jumped from Initech to Globex lol",
    ],
)
async def test_a_move_from_one_org_to_another_ends_the_first_and_holds_the_second(
    store: Any, index: Any, tier: str, later: str
) -> None:
    subject, edges = await _edges(
        store, index, tier, "Carol", "Carol works at Initech.", later,
        [("Carol", "work_at", "Initech"), ("Carol", "work_at", "Globex")],
    )
    assert edges[("work_at", "Initech")].valid_until == T1
    assert edges[("work_at", "Globex")].valid_from == T1
    assert edges[("work_at", "Globex")].valid_until is None
    assert await _jobs_at(store, index, subject, T1 + timedelta(days=1)) == {"Globex"}


@pytest.mark.parametrize(
    ("later", "stop"),
    [
        ("Dave worked at Hooli until March.", datetime(2026, 3, 1, tzinfo=UTC)),
        ("Dave worked at Hooli until last year.", datetime(2025, 1, 1, tzinfo=UTC)),
        ("Dave worked at Hooli until 2023.", datetime(2023, 1, 1, tzinfo=UTC)),
        ("Dave worked at Hooli until May 3, 2024.", datetime(2024, 5, 3, tzinfo=UTC)),
        ("Dave was at Hooli until March.", datetime(2026, 3, 1, tzinfo=UTC)),
        # A date the text cannot place: ended when it was said, never left open.
        ("Dave worked at Hooli until he retired.", T1),
    ],
)
async def test_an_until_date_closes_the_stored_job_then(
    store: Any, index: Any, tier: str, later: str, stop: datetime
) -> None:
    subject, edges = await _edges(
        store, index, tier, "Dave", "Dave works at Hooli.", later, [("Dave", "work_at", "Hooli")]
    )
    assert edges[("work_at", "Hooli")].valid_until == stop
    assert await _jobs_at(store, index, subject, stop - timedelta(days=1)) == {"Hooli"}
    assert await _jobs_at(store, index, subject, stop) == set()


async def test_an_until_date_before_the_stored_job_began_leaves_it_no_time(
    store: Any, index: Any, tier: str
) -> None:
    # Stored from 2022-06-01; "until 2020" ended before that: closed where it began.
    _, edges = await _edges(
        store, index, tier, "Dave", "Dave works at Hooli.", "Dave worked at Hooli until 2020.",
        [("Dave", "work_at", "Hooli")],
    )
    assert edges[("work_at", "Hooli")].valid_until == T0


@pytest.mark.parametrize(
    "later",
    [
        "Alice is at Acme Corp until 5pm today.",
        "Alice worked at Acme Corp until 5pm.",
        "Alice works at Acme Corp until March.",
        "Did Alice work at Acme Corp until March?",
        "Alice spent no longer than a week at Acme Corp.",
        "I moved from the couch to the desk.",
        "Alice will switch from Acme Corp to Globex next year.",
        "Alice might move from Acme Corp to Globex.",
        "If Alice moved from Acme Corp to Globex, she would earn more.",
        "Alice is at Acme Corp.",
    ],
)
async def test_what_only_sounds_like_an_ending_leaves_the_job_open(
    store: Any, index: Any, tier: str, later: str
) -> None:
    subject, edges = await _edges(
        store, index, tier, "Alice", "Alice works at Acme Corp.", later,
        [("Alice", "work_at", "Acme Corp")],
    )
    assert edges[("work_at", "Acme Corp")].valid_until is None
    assert ("work_at", "Globex") not in edges
    assert await _jobs_at(store, index, subject, T1 + timedelta(days=1)) == {"Acme Corp"}


async def test_an_until_date_before_year_one_ends_at_the_message(store: Any, index: Any) -> None:
    """A message of January 2, year 1 saying "until last month" failed the whole ingest.

    The date resolved before year 1 (``OverflowError`` / ``ValueError``) or to the first
    instant (a ``ValidationError`` of the ended marker): the ingest raised. Now such a date
    is not placed, and the relation ends when the message said so.
    """
    said = datetime(1, 1, 2, 9, 0, tzinfo=UTC)
    pipeline = MemoryPipeline(
        store, index=index, extractor=RuleBasedExtractor(),
        embedder=HashingEmbeddingProvider(dimensions=EMBED_DIM),
    )
    for text in ("Dave Lee worked at Hooli until last month.",
                 "Dave Lee worked at Hooli until yesterday."):
        report = await pipeline.ingest([Message(role="user", content=text, timestamp=said)])
        assert report.messages_ingested == 1 and report.fact_ids

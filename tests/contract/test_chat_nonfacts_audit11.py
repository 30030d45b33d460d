"""Contract: what chat only reports or imagines leaves the store as it was (both backends).

Eleventh audit pass. An earlier session stores Leo's open job at Deloitte; later messages
from Leo quote someone else ('Kai texted me "I quit Deloitte"'), guess ("i bet Nadia works
at Stripe"), or imagine ("I almost moved to Berlin"): the job stays open and nothing new is
stored about Leo. A relative date is resolved against the message: "until 2 years ago I
worked at Deloitte" closes the stored job two years before the message, and "3 years ago I
moved to Denver" stores the move from then, and a stored fact keeps a quoted "I" as
written (not grounded to Leo). Before the fix the quote closed Leo's job (its
"I" was read as Leo), the guess and the near-move were stored, and both relative dates
were ignored (the job stayed open; the move began at the message). Rule and parser tiers,
and the LLM tier on a scripted model that asserts what the words only report or imagine
(its post-check must drop or date them as the free tiers do).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from cycgraph_memory import (
    HashingEmbeddingProvider,
    LLMExtractor,
    MemoryPipeline,
    Message,
    RuleBasedExtractor,
)

from .factories import EMBED_DIM
from .tiers import tier_extractor

T0 = datetime(2022, 6, 1, 9, 0, tzinfo=UTC)  # the earlier session: the job is stored open
T1 = datetime(2026, 12, 15, 9, 0, tzinfo=UTC)  # the later messages


_PLACES = {"Berlin", "Glasgow", "Denver"}
# What a careless model replies for each message: it takes the quote's "I" for Leo, the
# guess and the near-move for facts.
_MODEL: dict[str, list[tuple[str, str, str]]] = {
    "I work at Deloitte.": [("Leo", "work_at", "Deloitte")],
    'my roommate Kai just texted me "I quit Deloitte" with zero context': [
        ("Leo", "work_at", "Deloitte")
    ],
    "my sister Mei was like \u201cI quit Deloitte and moved to Berlin\u201d lol": [
        ("Leo", "work_at", "Deloitte"),
        ("Leo", "move_to", "Berlin"),
    ],
    "i bet Nadia works at Stripe, she knows everything about payments": [
        ("Nadia", "work_at", "Stripe")
    ],
    "I almost moved to Berlin last year for a job at Zalando": [
        ("Leo", "move_to", "Berlin"),
        ("Leo", "work_at", "Zalando"),
    ],
    "I'm probably moving to Glasgow in the spring": [("Leo", "move_to", "Glasgow")],
    "until 2 years ago I worked at Deloitte": [("Leo", "work_at", "Deloitte")],
    "3 years ago I moved to Denver": [("Leo", "move_to", "Denver")],
    'my roommate Kai just texted me "I quit my job at Deloitte" with zero context': [],
}


class _ScriptedModel:
    """A model that reports the claims of ``_MODEL`` for the message in its prompt."""

    async def complete(self, prompt: str) -> str:
        text = max((t for t in _MODEL if t in prompt), key=len)
        triples = _MODEL[text]
        names = sorted({n for s, _, t in triples for n in (s, t)})
        kinds = {"Leo": "person", "Nadia": "person"}
        return json.dumps(
            {
                "facts": [{"content": text, "entities": names}],
                "entities": [
                    {
                        "name": n,
                        "type": kinds.get(n, "location" if n in _PLACES else "organization"),
                    }
                    for n in names
                ],
                "relationships": [{"source": s, "relation": r, "target": t} for s, r, t in triples],
            }
        )


def _extractor(tier: str) -> Any:
    return tier_extractor(
        tier, llm=lambda: LLMExtractor(_ScriptedModel(), fallback=RuleBasedExtractor())
    )


@pytest.fixture(params=["rule", "parser", "llm"])
def tier(request: pytest.FixtureRequest) -> str:
    return str(request.param)


async def _leo_edges(store: Any, index: Any, tier: str, later: str) -> dict[tuple[str, str], Any]:
    """Ingest Leo's job at T0 and ``later`` (said by Leo) at T1; Leo's outgoing edges."""
    pipeline = MemoryPipeline(
        store,
        index=index,
        extractor=_extractor(tier),
        embedder=HashingEmbeddingProvider(dimensions=EMBED_DIM),
    )
    said = {"name": "Leo"}
    await pipeline.ingest(
        [Message(role="user", content="I work at Deloitte.", timestamp=T0, metadata=said)]
    )
    await pipeline.ingest([Message(role="user", content=later, timestamp=T1, metadata=said)])
    entities = {e.id: e for e in await store.find_entities()}
    leo = next(e for e in entities.values() if e.name == "Leo")
    return {
        (r.relation_type, entities[r.target_id].name): r
        for r in await store.get_relationships_for_entity(leo.id, direction="outgoing")
    }


@pytest.mark.parametrize(
    "later",
    [
        'my roommate Kai just texted me "I quit Deloitte" with zero context',
        "my sister Mei was like \u201cI quit Deloitte and moved to Berlin\u201d lol",
        "i bet Nadia works at Stripe, she knows everything about payments",
        "I almost moved to Berlin last year for a job at Zalando",
        "I'm probably moving to Glasgow in the spring",
    ],
)
async def test_quotes_guesses_and_near_misses_leave_the_store_unchanged(
    store: Any, index: Any, tier: str, later: str
) -> None:
    edges = await _leo_edges(store, index, tier, later)
    relations = {k for k in edges if k[0] not in {"live_with", "sibling_of"}}
    assert relations == {("work_at", "Deloitte")}
    assert edges[("work_at", "Deloitte")].valid_from == T0
    assert edges[("work_at", "Deloitte")].valid_until is None
    everyone = [
        r
        for e in await store.find_entities()
        for r in await store.get_relationships_for_entity(e.id, direction="outgoing")
    ]
    assert {r.relation_type for r in everyone} <= {"work_at", "live_with", "sibling_of"}
    assert len([r for r in everyone if r.relation_type == "work_at"]) == 1


async def test_a_leading_until_n_years_ago_closes_the_stored_job_then(
    store: Any, index: Any, tier: str
) -> None:
    edges = await _leo_edges(store, index, tier, "until 2 years ago I worked at Deloitte")
    assert edges[("work_at", "Deloitte")].valid_from == T0
    assert edges[("work_at", "Deloitte")].valid_until == datetime(2024, 12, 15, 9, 0, tzinfo=UTC)


async def test_n_years_ago_dates_a_move(store: Any, index: Any, tier: str) -> None:
    edges = await _leo_edges(store, index, tier, "3 years ago I moved to Denver")
    assert edges[("move_to", "Denver")].valid_from == datetime(2023, 12, 15, 9, 0, tzinfo=UTC)
    assert edges[("move_to", "Denver")].valid_until is None
    assert edges[("work_at", "Deloitte")].valid_until is None


async def test_a_quoted_first_person_is_not_grounded_to_the_speaker(
    store: Any, index: Any, tier: str
) -> None:
    # The stored fact keeps the quote as written: "Leo quit Leo's job" would be a fact
    # about Leo (it was, before the fix).
    text = 'my roommate Kai just texted me "I quit my job at Deloitte" with zero context'
    await _leo_edges(store, index, tier, text)
    contents = [f.content for f in await store.find_facts() if "Kai" in f.content]
    assert contents == [
        "Leo on 2026-12-15: Leo's roommate Kai just texted Leo "
        '"I quit my job at Deloitte" with zero context'
    ]

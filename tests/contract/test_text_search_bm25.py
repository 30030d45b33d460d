"""Contract: one text ranking on both backends (BM25 over ``textsearch.tokenize``).

Every backend's ``text_search_facts`` / ``_messages`` / ``_episodes`` must return the top
10 that :class:`~cycgraph_memory.textsearch.BM25Index` (the reference: k1 1.2, b 0.75, IDF
over the tenant's documents) gives on the same records, with the same scores, so the two
backends return the same top 10 (ties aside). The records mix hyphenated ids, dates,
numbers, apostrophes and non-English letters.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import pytest

from cycgraph_memory.inmemory._search_ext import episode_search_text
from cycgraph_memory.records import Episode, ScoredResult
from cycgraph_memory.textsearch import BM25Index

from .factories import make_episode, make_fact, make_message

TEXTS = [
    "entity-8774 was merged into entity-8775 on 2024-05-11",
    "Entity 8774 owns the account ACME-4471; ticket CS-4471 is closed",
    "ticket CS-4471: the dashboard times out over 50k rows",
    "Maya's greyhound Biscuit weighs 27 kg",
    "Maya adopted a retired greyhound named Biscuit in January 2024",
    "Jörg opened his bakery Brot & Zeit in Zürich on 13 April 2024",
    "Jörg's bakery was reviewed by the NZZ: ehrlich und großartig",
    "Amélie moved to Montréal; her sister Chloé lives on rue Saint-Denis",
    "Søren's boat Havørn lost her mast in a storm",
    "Søren and Ida got married on 2024-08-17 in Aarhus",
    "the café on rue Saint-Denis serves 300 lattes on Saturdays",
    "don't forget: rent goes up 60 a month from May",
    "the landlord said rent only goes up 30, not 60",
    "O'Brien's flight leaves at 6:40am on 2024-11-28",
    "Kofi ran 2:58:41 at the Valencia marathon on 2024-12-01",
    "Ines ran 3:27:12 in Valencia, Pia 3:44",
    "Marek's daughter Zofia was born at 9:12pm weighing 3.4kg",
    "naïve résumé of the naïve plan",
    "the team agreed the q3 roadmap in Porto",
    "v2.3 was released on 2024-03-08 after one rollback",
    "greyhound greyhound greyhound",
    "the the the and of",
]

QUERIES = [
    "What happened to entity-8774?",
    "ticket CS-4471",
    "when did Maya adopt her greyhound",
    "Jörg's bakery in Zürich",
    "Amélie Montréal sister",
    "Søren Havørn storm",
    "what happened on 2024-08-17",
    "rent 60",
    "O'Brien flight 2024-11-28",
    "Valencia marathon times 3:27:12",
    "3.4kg baby Zofia",
    "naïve résumé",
    "greyhound",
    "nothing matches this zzzz",
]


def _normalised(pairs: Sequence[tuple[uuid.UUID, float]]) -> list[tuple[float, str]]:
    """(score rounded, id) sorted: equal lists mean the same top 10, ties aside."""
    return sorted((-round(score, 9), str(i)) for i, score in pairs)


def _assert_same(got: Sequence[ScoredResult[Any]], want: list[tuple[uuid.UUID, float]]) -> None:
    assert _normalised([(r.item.id, r.score) for r in got]) == _normalised(want)
    assert [r.score for r in got] == sorted((r.score for r in got), reverse=True)


async def test_text_search_facts_is_bm25(store: Any, index: Any) -> None:
    facts = [make_fact(content=t, tags=["even" if i % 2 == 0 else "odd"])
             for i, t in enumerate(TEXTS)]
    gone = make_fact(content="entity-8774 greyhound Zürich rent", invalidated_by="test")
    await store.put_facts([*facts, gone])
    await index.rebuild(store)
    reference = BM25Index()
    for f in [*facts, gone]:
        reference.add(f.id, f.content)
    live = [f.id for f in facts]
    even = [f.id for f in facts[::2]]
    for query in QUERIES:
        got = await index.text_search_facts(query, limit=10)
        _assert_same(got, reference.search(query, 10, allowed=live))
        got = await index.text_search_facts(query, limit=10, tags=["even"])
        _assert_same(got, reference.search(query, 10, allowed=even))
        got = await index.text_search_facts(query, limit=10, include_invalidated=True)
        _assert_same(got, reference.search(query, 10))


async def test_text_search_messages_and_episodes_are_bm25(store: Any, index: Any) -> None:
    episodes: list[Episode] = []
    for start in range(0, len(TEXTS), 3):
        messages = [make_message(content=t) for t in TEXTS[start : start + 3]]
        episodes.append(make_episode(topic=f"chat {start} about Zürich", messages=messages))
    gone = make_episode(
        topic="old", messages=[make_message(content="greyhound entity-8774 rent")],
        invalidated_at=datetime(2026, 1, 1, tzinfo=UTC),
    )
    await store.put_episodes([*episodes, gone])
    await index.rebuild(store)
    by_message, by_episode = BM25Index(), BM25Index()
    for episode in [*episodes, gone]:
        by_episode.add(episode.id, episode_search_text(episode))
        for message in episode.messages:
            by_message.add(message.id, message.content)
    live_messages = [m.id for e in episodes for m in e.messages]
    for query in QUERIES:
        got_m = await index.text_search_messages(query, limit=10)
        _assert_same(got_m, by_message.search(query, 10, allowed=live_messages))
        got_e = await index.text_search_episodes(query, limit=10)
        _assert_same(got_e, by_episode.search(query, 10, allowed=[e.id for e in episodes]))
        got_e = await index.text_search_episodes(query, limit=10, include_invalidated=True)
        _assert_same(got_e, by_episode.search(query, 10))


@pytest.mark.parametrize("query", ["", "the of and", "'' -- ::"])
async def test_text_search_without_terms_finds_nothing(
    store: Any, index: Any, query: str
) -> None:
    await store.put_facts([make_fact(content="the of and entity-1")])
    await index.rebuild(store)
    assert await index.text_search_facts(query, limit=10) == []
    assert await index.text_search_messages(query, limit=10) == []
    assert await index.text_search_episodes(query, limit=10) == []

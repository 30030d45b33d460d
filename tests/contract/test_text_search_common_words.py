"""Contract: text search when the question's words are in (nearly) every document.

On Postgres only a bounded candidate set is ranked (``TEXT_CANDIDATES`` rows per AND/word
branch); these tests shrink the cap so the bound is exercised with few rows, and check
that the lexical signal (the rare word, the densest match) still wins on both backends.
"""

from __future__ import annotations

from typing import Any

import pytest

from cycgraph_memory.postgres import search as pg_search

from .factories import make_episode, make_fact, make_message

COMMON = "the fact in theme {i} relates to entity number {i} of the catalogue"


@pytest.fixture
def small_cap(monkeypatch: pytest.MonkeyPatch) -> int:
    monkeypatch.setattr(pg_search, "TEXT_CANDIDATES", 5)
    return 5


async def test_rare_word_wins_when_common_words_match_everything(
    store: Any, index: Any, small_cap: int
) -> None:
    facts = [make_fact(content=COMMON.format(i=i)) for i in range(40)]
    zebra = make_fact(content="the fact in theme 7 relates to a zebra at the catalogue")
    await store.put_facts([*facts, zebra])
    await index.rebuild(store)
    res = await index.text_search_facts("which fact in the theme relates to the zebra", limit=10)
    assert res[0].item.id == zebra.id
    assert 1 <= len(res) <= 10
    assert [r.score for r in res] == sorted((r.score for r in res), reverse=True)


async def test_rare_word_message_and_episode_win(store: Any, index: Any, small_cap: int) -> None:
    episodes = [
        make_episode(messages=[make_message(content=COMMON.format(i=i))]) for i in range(30)
    ]
    hit = make_message(content="the fact about the theme: our greyhound relates to the entity")
    target = make_episode(messages=[hit])
    await store.put_episodes([*episodes, target])
    await index.rebuild(store)
    msgs = await index.text_search_messages("fact theme entity greyhound", limit=5)
    assert msgs[0].item.id == hit.id
    eps = await index.text_search_episodes("fact theme entity greyhound", limit=5)
    assert eps[0].item.id == target.id


async def test_words_in_every_fact_still_rank_the_densest_fact_first(
    store: Any, index: Any
) -> None:
    facts = [make_fact(content=COMMON.format(i=i)) for i in range(40)]
    dense = make_fact(content="theme catalogue: theme catalogue")
    await store.put_facts([*facts, dense])
    await index.rebuild(store)
    res = await index.text_search_facts("theme catalogue", limit=10)
    assert res[0].item.id == dense.id
    assert len(res) == 10

"""Contract: text search when the question's words are in (nearly) every document.

The lexical signal (the rare word, the densest match) wins on both backends when the
other words of the question match every document. The Postgres candidate bound itself
(``TEXT_CANDIDATES`` rows per common word, read by an early-stopping scan) is exercised
with enough rows in ``tests/postgres/test_text_candidate_plans.py``: the cap is baked into
the statements when they are built, so it cannot be shrunk here.
"""

from __future__ import annotations

from typing import Any

from .factories import make_episode, make_fact, make_message

COMMON = "the fact in theme {i} relates to entity number {i} of the catalogue"


async def test_rare_word_wins_when_common_words_match_everything(
    store: Any, index: Any
) -> None:
    facts = [make_fact(content=COMMON.format(i=i)) for i in range(40)]
    zebra = make_fact(content="the fact in theme 7 relates to a zebra at the catalogue")
    await store.put_facts([*facts, zebra])
    await index.rebuild(store)
    res = await index.text_search_facts("which fact in the theme relates to the zebra", limit=10)
    assert res[0].item.id == zebra.id
    assert 1 <= len(res) <= 10
    assert [r.score for r in res] == sorted((r.score for r in res), reverse=True)


async def test_rare_word_message_and_episode_win(store: Any, index: Any) -> None:
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

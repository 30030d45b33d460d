"""Contract: grounded facts, message embeddings, message kNN and text search on both backends."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from cycgraph_memory import EmbeddingDimensionMismatchError

from .factories import blend, make_episode, make_fact, make_message, sorted_ids, unit


async def test_fact_source_message_ids_round_trip(store: Any) -> None:
    m1, m2 = make_message(), make_message()
    fact = make_fact(source_message_ids=[m1.id, m2.id])
    await store.put_facts([fact])
    got = await store.get_fact(fact.id)
    assert got.source_message_ids == [m1.id, m2.id]
    assert (await store.get_fact(make_fact().id)) is None
    plain = make_fact()
    await store.put_facts([plain])
    assert (await store.get_fact(plain.id)).source_message_ids == []


async def test_message_embeddings_come_back_from_get_messages_only(store: Any) -> None:
    m1 = make_message(content="dog at the rescue", embedding=unit(0))
    m2 = make_message(content="no vector")
    episode = make_episode(messages=[m1, m2])
    await store.put_episodes([episode])
    got = await store.get_messages([m1.id, m2.id])
    assert got[m1.id].embedding == pytest.approx(unit(0))
    assert got[m2.id].embedding is None
    stored = await store.get_episode(episode.id)
    assert [m.embedding for m in stored.messages] == [None, None]


async def test_search_messages_ranks_by_cosine(store: Any, index: Any) -> None:
    exact = make_message(content="exact", embedding=unit(0))
    near = make_message(content="near", embedding=blend(0, 1, 3, 1))
    far = make_message(content="far", embedding=unit(1))
    bare = make_message(content="bare")
    await store.put_episodes([make_episode(messages=[far, bare, exact, near])])
    await index.rebuild(store)
    res = await index.search_messages(unit(0), limit=10)
    assert [r.item.id for r in res] == [exact.id, near.id, far.id]
    assert res[0].score == pytest.approx(1.0, abs=1e-5)
    assert all(r.item.embedding is None for r in res)
    assert [r.item.id for r in await index.search_messages(unit(0), limit=1)] == [exact.id]
    res = await index.search_messages(unit(0), min_similarity=0.9)
    assert [r.item.id for r in res] == [exact.id, near.id]


async def test_search_messages_ties_by_id_and_skips_invalidated(store: Any, index: Any) -> None:
    same = [make_message(embedding=unit(2)) for _ in range(4)]
    gone = make_message(embedding=unit(2))
    await store.put_episodes(
        [
            make_episode(messages=same),
            make_episode(messages=[gone], invalidated_at=datetime(2026, 1, 2, tzinfo=UTC)),
        ]
    )
    await index.rebuild(store)
    res = await index.search_messages(unit(2), limit=3)
    assert [r.item.id for r in res] == sorted_ids(*(m.id for m in same))[:3]
    everything = await index.search_messages(unit(2), limit=10, include_invalidated=True)
    assert gone.id in {r.item.id for r in everything}
    assert gone.id not in {r.item.id for r in await index.search_messages(unit(2), limit=10)}


async def test_search_messages_rejects_wrong_dimension(store: Any, index: Any) -> None:
    await store.put_episodes([make_episode(messages=[make_message(embedding=unit(0))])])
    await index.rebuild(store)
    with pytest.raises(EmbeddingDimensionMismatchError):
        await index.search_messages([1.0, 0.0, 0.0], limit=3)


async def test_text_search_facts(store: Any, index: Any) -> None:
    dog = make_fact(content="Maya adopted a retired greyhound named Biscuit")
    run = make_fact(content="Maya signed up for the riverside half marathon")
    both = make_fact(content="Biscuit the greyhound watched Maya run the marathon", tags=["x"])
    other = make_fact(content="Tom moved the billing service to Kubernetes")
    gone = make_fact(content="greyhound greyhound greyhound", invalidated_by="superseded")
    await store.put_facts([dog, run, both, other, gone])
    await index.rebuild(store)
    res = await index.text_search_facts("what breed is the greyhound?", limit=10)
    ids = [r.item.id for r in res]
    assert set(ids) == {dog.id, both.id}
    assert all(r.score > 0 for r in res)
    assert [r.score for r in res] == sorted((r.score for r in res), reverse=True)
    res = await index.text_search_facts("greyhound marathon", limit=10)
    assert res[0].item.id == both.id  # the only fact with both words
    assert {r.item.id for r in res} == {dog.id, run.id, both.id}
    tagged = await index.text_search_facts("greyhound", tags=["x"], limit=10)
    assert [r.item.id for r in tagged] == [both.id]
    excluded = await index.text_search_facts("greyhound", exclude_tags=["x"], limit=10)
    assert [r.item.id for r in excluded] == [dog.id]
    with_dead = await index.text_search_facts("greyhound", include_invalidated=True, limit=10)
    assert gone.id in {r.item.id for r in with_dead}
    assert await index.text_search_facts("the of and", limit=10) == []
    assert await index.text_search_facts("zebra", limit=10) == []


async def test_text_search_messages_and_episodes(store: Any, index: Any) -> None:
    a1 = make_message(content="we adopted a greyhound from the rescue")
    a2 = make_message(role="assistant", content="Greyhounds are gentle dogs.")
    b1 = make_message(content="the billing service runs on kubernetes now")
    first = make_episode(topic="dog", messages=[a1, a2])
    second = make_episode(topic="work", messages=[b1])
    await store.put_episodes([first, second])
    await index.rebuild(store)
    msgs = await index.text_search_messages("greyhounds", limit=10)
    assert {r.item.id for r in msgs} == {a1.id, a2.id}
    assert all(r.item.embedding is None for r in msgs)
    eps = await index.text_search_episodes("kubernetes billing", limit=10)
    assert [r.item.id for r in eps] == [second.id]
    assert [m.id for m in eps[0].item.messages] == [b1.id]
    limited = await index.text_search_messages("greyhound", limit=1)
    assert len(limited) == 1


async def test_message_embedding_of_wrong_dimension_is_refused(store: Any) -> None:
    bad = make_episode(messages=[make_message(embedding=[1.0, 0.0, 0.0])])
    with pytest.raises(EmbeddingDimensionMismatchError):
        await store.put_episodes([bad])
    assert await store.get_episode(bad.id) is None

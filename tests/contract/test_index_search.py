"""MemoryIndex contract: write to the store, ``rebuild``, then search."""

from __future__ import annotations

import math
from typing import Any

import pytest
from pydantic import ValidationError

from cycgraph_memory import QUARANTINE_TAG, EmbeddingDimensionMismatchError, SearchOptions

from .factories import (
    EMBED_DIM,
    at,
    blend,
    make_entity,
    make_episode,
    make_fact,
    make_theme,
    sorted_ids,
    unit,
    vec,
)

APPROX = 1e-5


def cos(wi: float, wj: float) -> float:
    return wi / math.hypot(wi, wj)


async def test_search_facts_ranks_by_cosine(store: Any, index: Any) -> None:
    exact = make_fact(content="exact", embedding=unit(0))
    near = make_fact(content="near", embedding=blend(0, 1, 4, 1))
    mid = make_fact(content="mid", embedding=blend(0, 1, 1, 1))
    far = make_fact(content="far", embedding=unit(1))
    opposite = make_fact(content="opposite", embedding=vec(-1))
    no_embedding = make_fact(content="no embedding")
    await store.put_facts([far, mid, opposite, exact, near, no_embedding])
    await index.rebuild(store)
    res = await index.search_facts(unit(0), limit=10)
    assert [r.item.id for r in res] == [exact.id, near.id, mid.id, far.id, opposite.id]
    expected = [1.0, cos(4, 1), cos(1, 1), 0.0, -1.0]
    assert [r.score for r in res] == pytest.approx(expected, abs=APPROX)
    assert all(isinstance(r.score, float) for r in res)
    scores = [r.score for r in res]
    assert scores == sorted(scores, reverse=True)


async def test_limit_and_min_similarity(store: Any, index: Any) -> None:
    facts = [make_fact(embedding=blend(0, 1, 8 - i, i)) for i in range(6)]
    await store.put_facts(facts)
    await index.rebuild(store)
    res = await index.search_facts(unit(0), limit=2)
    assert [r.item.id for r in res] == [facts[0].id, facts[1].id]
    res = await index.search_facts(unit(0), SearchOptions(limit=10, min_similarity=0.8))
    # cos(8-i, i) >= 0.8  <=>  i in {0, 1, 2, 3}  (cos(5,3) = 0.857, cos(4,4) = 0.707)
    assert [r.item.id for r in res] == [f.id for f in facts[:4]]
    assert all(r.score >= 0.8 for r in res)
    res = await index.search_facts(unit(0), {"limit": 1, "min_similarity": 1.0 - APPROX})
    assert [r.item.id for r in res] == [facts[0].id]
    assert await index.search_facts(unit(7), min_similarity=0.5) == []


async def test_ties_broken_by_id(store: Any, index: Any) -> None:
    facts = [make_fact(embedding=unit(3)) for _ in range(5)]
    await store.put_facts(facts)
    await index.rebuild(store)
    res = await index.search_facts(unit(3), limit=3)
    assert [r.item.id for r in res] == sorted_ids(*(f.id for f in facts))[:3]


async def test_invalidated_excluded_unless_requested(store: Any, index: Any) -> None:
    live = make_fact(embedding=blend(0, 1, 1, 1))
    dead = make_fact(embedding=unit(0), invalidated_by="superseded")
    await store.put_facts([live, dead])
    await index.rebuild(store)
    assert [r.item.id for r in await index.search_facts(unit(0))] == [live.id]
    res = await index.search_facts(unit(0), include_invalidated=True)
    assert [r.item.id for r in res] == [dead.id, live.id]


async def test_filters_apply_before_top_k(store: Any, index: Any) -> None:
    # The 6 nearest facts are all filtered out; limit results must still come back.
    nearest_dead = [make_fact(embedding=blend(0, 1, 8, i), invalidated_by="gone") for i in range(3)]
    nearest_quarantined = [
        make_fact(embedding=blend(0, 1, 8, i), tags=["lesson", QUARANTINE_TAG]) for i in range(3, 6)
    ]
    far_lessons = [make_fact(embedding=blend(0, 1, 1, 2 + i), tags=["lesson"]) for i in range(4)]
    far_other = [make_fact(embedding=blend(0, 1, 1, 1), tags=["other"])]
    await store.put_facts([*nearest_dead, *nearest_quarantined, *far_lessons, *far_other])
    await index.rebuild(store)
    res = await index.search_facts(unit(0), limit=3, tags=["lesson"], exclude_tags=[QUARANTINE_TAG])
    assert [r.item.id for r in res] == [f.id for f in far_lessons[:3]]
    res = await index.search_facts(unit(0), limit=2, exclude_tags=[QUARANTINE_TAG])
    assert [r.item.id for r in res] == [far_other[0].id, far_lessons[0].id]
    res = await index.search_facts(unit(0), limit=4, tags=["lesson", "other"])
    assert [r.item.id for r in res] == [f.id for f in nearest_quarantined] + [far_other[0].id]
    assert await index.search_facts(unit(0), tags=["nothing-has-this"]) == []


async def test_results_carry_whole_records(store: Any, index: Any) -> None:
    ent = make_entity(embedding=unit(0))
    fact = make_fact(
        embedding=unit(0),
        tags=["lesson", "verified"],
        entity_ids=[ent.id],
        valid_until=at(days=9),
        access_count=4,
    )
    theme = make_theme(embedding=unit(0), fact_ids=[fact.id])
    episode = make_episode(embedding=unit(0), fact_ids=[fact.id])
    await store.put_entity(ent)
    await store.put_fact(fact)
    await store.put_theme(theme)
    await store.put_episode(episode)
    await index.rebuild(store)
    (rf,) = await index.search_facts(unit(0))
    assert rf.item == fact
    assert rf.item.provenance == fact.provenance and rf.item.tags == ["lesson", "verified"]
    (re_,) = await index.search_entities(unit(0))
    assert re_.item == ent
    (rt,) = await index.search_themes(unit(0))
    assert rt.item == theme
    (rp,) = await index.search_episodes(unit(0))
    assert rp.item == episode and len(rp.item.messages) == 2
    # mutating a result does not leak into later results
    rf.item.tags.append("mutated")
    (again,) = await index.search_facts(unit(0))
    assert again.item.tags == ["lesson", "verified"]


@pytest.mark.parametrize("kind", ["entities", "themes", "episodes"])
async def test_other_record_types_rank_and_soft_delete(store: Any, index: Any, kind: str) -> None:
    a: Any
    b: Any
    dead: Any
    plain: Any
    if kind == "entities":
        a = make_entity(embedding=unit(0), created_at=at(1))
        b = make_entity(embedding=blend(0, 1, 1, 1), created_at=at(2))
        dead = make_entity(embedding=unit(0), created_at=at(3), invalidated_at=at(4))
        plain = make_entity()
        await store.put_entities([a, b, dead, plain])
    elif kind == "themes":
        a = make_theme(embedding=unit(0))
        b = make_theme(embedding=blend(0, 1, 1, 1))
        dead = make_theme(embedding=unit(0), invalidated_at=at(4))
        plain = make_theme()
        await store.put_themes([a, b, dead, plain])
    else:
        a = make_episode(embedding=unit(0))
        b = make_episode(embedding=blend(0, 1, 1, 1))
        dead = make_episode(embedding=unit(0), invalidated_at=at(4))
        plain = make_episode()
        await store.put_episodes([a, b, dead, plain])
    await index.rebuild(store)
    search = getattr(index, f"search_{kind}")
    res = await search(unit(0), limit=5)
    assert [r.item.id for r in res] == [a.id, b.id]
    assert [r.score for r in res] == pytest.approx([1.0, cos(1, 1)], abs=APPROX)
    res = await search(unit(0), limit=5, include_invalidated=True)
    assert [r.item.id for r in res] == [*sorted_ids(a.id, dead.id), b.id]
    assert [r.item.id for r in await search(unit(0), limit=1)] == [a.id]


async def test_zero_vector_scores_zero(store: Any, index: Any, backend: str) -> None:
    zero = make_fact(embedding=[0.0] * EMBED_DIM)
    pos = make_fact(embedding=unit(2))
    await store.put_facts([zero, pos])
    await index.rebuild(store)
    res = await index.search_facts(unit(2))
    ids = [r.item.id for r in res]
    # A zero vector has no direction: it scores 0. pgvector's HNSW index does not index
    # it, so on Postgres it is served only when the planner scans exactly (documented).
    expected = [[pos.id, zero.id]] if backend == "memory" else [[pos.id, zero.id], [pos.id]]
    assert ids in expected
    assert all(r.score == pytest.approx(0.0, abs=APPROX) for r in res[1:])


async def test_rebuild_reflects_store_changes(store: Any, index: Any) -> None:
    f = make_fact(embedding=unit(0))
    await store.put_fact(f)
    await index.rebuild(store)
    assert len(await index.search_facts(unit(0))) == 1
    await store.delete_fact(f.id)
    g = make_fact(embedding=unit(1))
    await store.put_fact(g)
    await index.rebuild(store)
    assert [r.item.id for r in await index.search_facts(unit(0))] == [g.id]
    await store.clear()
    await index.rebuild(store)
    assert await index.search_facts(unit(0)) == []


async def test_empty_index_returns_nothing(store: Any, index: Any) -> None:
    await index.rebuild(store)
    assert await index.search_facts(unit(0)) == []
    assert await index.search_entities(unit(0)) == []
    assert await index.search_themes(unit(0)) == []
    assert await index.search_episodes(unit(0)) == []


async def test_wrong_dimension_query_raises(store: Any, index: Any) -> None:
    await store.put_fact(make_fact(embedding=unit(0)))
    await index.rebuild(store)
    for search in (
        index.search_facts,
        index.search_entities,
        index.search_themes,
        index.search_episodes,
    ):
        with pytest.raises(EmbeddingDimensionMismatchError) as info:
            await search([1.0] * (EMBED_DIM - 1))
        assert info.value.expected == EMBED_DIM and info.value.actual == EMBED_DIM - 1


async def test_search_options_validated(store: Any, index: Any) -> None:
    await index.rebuild(store)
    with pytest.raises(ValidationError):
        await index.search_facts(unit(0), limit=0)
    with pytest.raises(ValidationError):
        await index.search_facts(unit(0), min_similarity=1.5)
    with pytest.raises(ValidationError):
        await index.search_facts(unit(0), bogus=1)
    # ef_search is a hint; exact backends ignore it
    assert await index.search_facts(unit(0), ef_search=40) == []

"""Contract: retrieve_memory modes (vector / text / hybrid) on both backends."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from cycgraph_memory import QUARANTINE_TAG, InvalidInputError, MemoryQuery
from cycgraph_memory.retrieval.retrieve import retrieve_memory

from .factories import (
    EMBED_DIM,
    at,
    blend,
    make_entity,
    make_episode,
    make_fact,
    make_message,
    make_theme,
    unit,
)


class FakeEmbedder:
    """Maps known texts to fixed vectors (anything else: the last axis)."""

    dimensions = EMBED_DIM

    def __init__(self, table: dict[str, list[float]]) -> None:
        self.table = table

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return [self.table.get(t, unit(EMBED_DIM - 1)) for t in texts]


EMBEDDER = FakeEmbedder({"greyhound": unit(0), "greyhound biscuit": unit(0)})


async def _world(store: Any, index: Any) -> dict[str, Any]:
    ma = make_message(content="we adopted a greyhound", embedding=unit(0), timestamp=at(10))
    mb = make_message(role="assistant", content="night shift schedule", embedding=unit(1),
                      timestamp=at(20))
    episode = make_episode(messages=[ma, mb], started_at=at(10), ended_at=at(20))
    a = make_fact(content="greyhound adopted from rescue", embedding=unit(0),
                  source_message_ids=[ma.id], source_episode_ids=[episode.id],
                  valid_from=at(10))
    b = make_fact(content="night shifts at hospital", embedding=blend(0, 1, 1, 1),
                  valid_from=at(20))
    c = make_fact(content="greyhound racing history", embedding=unit(1), tags=["dogs"],
                  valid_from=at(30))
    q = make_fact(content="greyhound quarantined lesson", embedding=unit(0),
                  tags=[QUARANTINE_TAG])
    await store.put_episodes([episode])
    await store.put_facts([a, b, c, q])
    await index.rebuild(store)
    return {"a": a, "b": b, "c": c, "q": q, "ma": ma, "mb": mb, "episode": episode}


def _query(**kw: Any) -> MemoryQuery:
    return MemoryQuery(**{"text": "greyhound", "min_similarity": 0.0, **kw})


async def test_hybrid_is_the_default_and_fuses_both_signals(store: Any, index: Any) -> None:
    w = await _world(store, index)
    result = await retrieve_memory(store, index, _query(), embedder=EMBEDDER)
    assert [f.id for f in result.facts] == [w["a"].id, w["c"].id, w["b"].id]
    sa, sb, sc = (result.fact_scores[w[k].id] for k in "abc")
    assert (sa.vector_rank, sa.vector_score) == (1, pytest.approx(1.0, abs=1e-5))
    assert sa.text_rank is not None and sa.text_score is not None and sa.text_score > 0
    assert sb.text_rank is None and sb.vector_rank == 2
    assert sc.vector_rank == 3 and sc.text_rank is not None
    assert sa.fused_score == pytest.approx(1 / 61 + 0.5 / (60 + sa.text_rank))  # text 0.5
    assert sa.fused_score > sc.fused_score > sb.fused_score
    assert w["q"].id not in {f.id for f in result.facts}  # quarantined
    assert result.messages[0].id == w["ma"].id
    assert all(m.embedding is None for m in result.messages)
    assert [e.id for e in result.episodes] == [w["episode"].id]
    assert (await store.get_fact(w["a"].id)).access_count == 1  # touched


async def test_hybrid_fuses_the_first_vector_candidates_only(store: Any, index: Any) -> None:
    w = await _world(store, index)
    result = await retrieve_memory(
        store, index, _query(), embedder=EMBEDDER, options={"vector_candidates": 2}
    )
    sa, sb, sc = (result.fact_scores[w[k].id] for k in "abc")
    assert (sa.vector_rank, sb.vector_rank) == (1, 2)
    # c is third by similarity: beyond the vector list, it is fused by its text rank alone.
    assert sc.vector_rank is None and sc.vector_score is None and sc.text_rank is not None
    assert sc.fused_score == pytest.approx(0.5 / (60 + sc.text_rank))
    assert [f.id for f in result.facts] == [w["a"].id, w["b"].id, w["c"].id]


async def test_hybrid_vector_list_through_themes_is_the_exact_top(store: Any, index: Any) -> None:
    # 30 facts listed by one theme, at decreasing similarity to the query: the vector list
    # of a hybrid call is the exact first vector_candidates of the whole ranking (a backend
    # reading only the nearest theme facts must not lose or reorder any of them).
    facts = [
        make_fact(content=f"note number {i}", embedding=blend(0, 1, 30 - i, i + 1))
        for i in range(30)
    ]
    theme = make_theme(embedding=unit(0), fact_ids=[f.id for f in reversed(facts)])
    await store.put_facts(facts)
    await store.put_themes([theme])
    await index.rebuild(store)
    query = MemoryQuery(text="nothing matches", embedding=unit(0), min_similarity=0.0, limit=5)
    opts = {"vector_candidates": 7, "direct_fact_candidates": 2}
    result = await retrieve_memory(store, index, query, options=opts)
    ranks = {f.id: result.fact_scores[f.id].vector_rank for f in result.facts}
    assert [f.id for f in result.facts] == [f.id for f in facts[:5]]
    assert list(ranks.values()) == [1, 2, 3, 4, 5]
    wide = await retrieve_memory(
        store, index, query, options={**opts, "vector_candidates": 1000}, mode="hybrid"
    )
    assert [f.id for f in wide.facts] == [f.id for f in facts[:5]]


async def test_text_mode_needs_no_embedder(store: Any, index: Any) -> None:
    w = await _world(store, index)
    result = await retrieve_memory(store, index, _query(), mode="text")
    assert {f.id for f in result.facts} == {w["a"].id, w["c"].id}
    assert all(result.fact_scores[f.id].vector_rank is None for f in result.facts)
    # mb shares no word with the question: only its episode (found by text) brings it,
    # after the turn that matched.
    assert [m.id for m in result.messages] == [w["ma"].id, w["mb"].id]
    alone = await retrieve_memory(
        store, index, _query(), mode="text", options={"episode_weight": 0.0}
    )
    assert [m.id for m in alone.messages] == [w["ma"].id]


async def test_vector_mode_keeps_the_hierarchical_ranking(store: Any, index: Any) -> None:
    w = await _world(store, index)
    result = await retrieve_memory(store, index, _query(), embedder=EMBEDDER, mode="vector")
    assert [f.id for f in result.facts] == [w["a"].id, w["b"].id, w["c"].id]
    assert [result.fact_scores[f.id].vector_rank for f in result.facts] == [1, 2, 3]
    assert all(result.fact_scores[f.id].text_rank is None for f in result.facts)
    assert [m.id for m in result.messages] == [w["ma"].id, w["mb"].id]


async def test_text_without_embedder_still_needs_one_by_default(store: Any, index: Any) -> None:
    await _world(store, index)
    with pytest.raises(InvalidInputError):
        await retrieve_memory(store, index, _query())
    with pytest.raises(InvalidInputError):
        await retrieve_memory(store, index, _query(), embedder=EMBEDDER, mode="fuzzy")  # type: ignore[arg-type]


async def test_hybrid_rules_tags_time_limit(store: Any, index: Any) -> None:
    w = await _world(store, index)
    tagged = await retrieve_memory(store, index, _query(tags=["dogs"]), embedder=EMBEDDER)
    assert [f.id for f in tagged.facts] == [w["c"].id]
    assert tagged.messages == []  # c has no grounding; no direct message hits under tags
    early = await retrieve_memory(
        store, index, _query(valid_at=at(15)), embedder=EMBEDDER
    )
    assert [f.id for f in early.facts] == [w["a"].id]
    assert [m.id for m in early.messages] == [w["ma"].id]  # mb was sent after valid_at
    since = await retrieve_memory(
        store, index, _query(changed_since=at(25)), embedder=EMBEDDER
    )
    assert [f.id for f in since.facts] == [w["c"].id]
    one = await retrieve_memory(store, index, _query(limit=1), embedder=EMBEDDER)
    assert [f.id for f in one.facts] == [w["a"].id] and len(one.messages) == 1
    audit = await retrieve_memory(
        store, index, _query(tags=[QUARANTINE_TAG]), embedder=EMBEDDER
    )
    assert [f.id for f in audit.facts] == [w["q"].id]
    none = await retrieve_memory(
        store, index, _query(), embedder=EMBEDDER, options={"message_limit": 0}
    )
    assert none.messages == [] and none.facts


async def test_entity_named_in_the_question_adds_its_facts(store: Any, index: Any) -> None:
    w = await _world(store, index)
    biscuit = make_entity(name="Biscuit", entity_type="concept")
    tariq = make_entity(name="Tariq Khan", entity_type="person")
    await store.put_entities([biscuit, tariq])
    sitter = make_fact(content="the neighbour will look after her", embedding=unit(5),
                       entity_ids=[biscuit.id, tariq.id], valid_from=at(40))
    await store.put_facts([sitter])
    await index.rebuild(store)
    assert [e.id for e in await index.match_entity_names("who watches biscuit's bed?")] == [
        biscuit.id
    ]
    assert [e.id for e in await index.match_entity_names("ask tariq khan or BISCUIT")] == [
        tariq.id, biscuit.id,
    ]
    assert await index.match_entity_names("nobody here") == []
    result = await retrieve_memory(
        store, index, _query(text="where does biscuit stay?"), embedder=EMBEDDER, mode="text"
    )
    assert [f.id for f in result.facts] == [sitter.id]  # no shared word: only the graph
    assert result.fact_scores[sitter.id].graph_distance == 0
    assert result.fact_scores[sitter.id].text_rank is None
    off = await retrieve_memory(
        store, index, _query(text="where does biscuit stay?"), embedder=EMBEDDER, mode="text",
        options={"entity_match_limit": 0},
    )
    assert off.facts == []
    people = await retrieve_memory(
        store, index, _query(text="where does biscuit stay?", entity_types=["person"]),
        embedder=EMBEDDER, mode="text",
    )
    assert people.facts == []
    hybrid = await retrieve_memory(store, index, _query(text="greyhound biscuit"),
                                   embedder=EMBEDDER)
    assert {sitter.id, w["a"].id} <= {f.id for f in hybrid.facts}


async def test_messages_fuse_each_fact_signal_not_only_the_served_facts(
    store: Any, index: Any
) -> None:
    """A turn behind a fact that the text signal ranks, but that is not served, is returned."""
    m1 = make_message(content="we adopted one last week", embedding=unit(2), timestamp=at(10))
    m2 = make_message(content="the track was loud", embedding=unit(3), timestamp=at(20))
    episode = make_episode(messages=[m1, m2], started_at=at(10), ended_at=at(20))
    f1 = make_fact(content="greyhound greyhound adopted", embedding=unit(2),
                   source_message_ids=[m1.id], source_episode_ids=[episode.id])
    f2 = make_fact(content="greyhound racing track", embedding=unit(3),
                   source_message_ids=[m2.id], source_episode_ids=[episode.id])
    await store.put_episodes([episode])
    await store.put_facts([f1, f2])
    await index.rebuild(store)
    options = {"message_limit": 3, "episode_weight": 0.0}
    result = await retrieve_memory(
        store, index, _query(limit=1), mode="text", options=options
    )
    assert [f.id for f in result.facts] == [f1.id]  # one served fact
    # Both facts of the text ranking bring their turn, in that ranking's order.
    assert [m.id for m in result.messages] == [m1.id, m2.id]

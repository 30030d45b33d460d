"""Contract: the graph signal weighs each named entity by how much it narrows the facts.

A participant of the conversation (cited by most facts) is context: the graph signal
ignores it (its facts neither join the candidates nor move up); a specific entity (cited by
few facts) still brings its facts, weighted by its specificity. ``FactScore.graph_weight``
shows the weight used. Same on both backends (``entity_fact_counts`` from the index).
"""

from __future__ import annotations

from typing import Any

import pytest

from cycgraph_memory import MemoryQuery
from cycgraph_memory.records import RetrievalOptions
from cycgraph_memory.retrieval.hybrid import entity_specificity
from cycgraph_memory.retrieval.retrieve import retrieve_memory

from .factories import at, make_entity, make_fact


def test_entity_specificity_is_an_idf_scaled_to_one() -> None:
    assert entity_specificity(1, 1000) == pytest.approx(1.0)
    assert entity_specificity(0, 1000) == 1.0 and entity_specificity(5, 0) == 1.0
    third = entity_specificity(333, 1000)
    assert 0.0 < third < 0.2
    values = [entity_specificity(n, 1000) for n in (1, 2, 10, 100, 500, 1000)]
    assert values == sorted(values, reverse=True) and values[-1] < 0.05
    assert entity_specificity(2000, 1000) == entity_specificity(1000, 1000)


async def _chat(store: Any, index: Any) -> dict[str, Any]:
    """Ana speaks in every fact; Pickle (her cat) is cited once; rent facts share words."""
    ana = make_entity(name="Ana", entity_type="person")
    pickle = make_entity(name="Pickle", entity_type="animal")
    await store.put_entities([ana, pickle])
    chatter = [
        make_fact(content=f"Ana on day {i}: lunch was pasta number {i}", entity_ids=[ana.id],
                  valid_from=at(days=30 + i))
        for i in range(12)
    ]
    rent = make_fact(content="Ana on day 2: the rent goes up 60 pounds in May",
                     entity_ids=[ana.id], valid_from=at(days=2))
    landlord = make_fact(content="the landlord agreed the rent rise is only 30 pounds",
                         valid_from=at(days=3))
    vet = make_fact(content="Ana on day 5: the vet said she just needs a bland diet",
                    entity_ids=[ana.id, pickle.id], valid_from=at(days=5))
    await store.put_facts([*chatter, rent, landlord, vet])
    await index.rebuild(store)
    return {"ana": ana, "pickle": pickle, "chatter": chatter, "rent": rent,
            "landlord": landlord, "vet": vet}


async def test_entity_fact_counts(store: Any, index: Any) -> None:
    w = await _chat(store, index)
    counts, total = await index.entity_fact_counts([w["ana"].id, w["pickle"].id])
    assert total == 15
    assert counts == {w["ana"].id: 14, w["pickle"].id: 1}
    capped, _ = await index.entity_fact_counts([w["ana"].id], cap=5)
    assert capped == {w["ana"].id: 5}
    assert await index.entity_fact_counts([make_entity().id]) == ({}, 15)


async def test_participant_is_context_not_evidence(store: Any, index: Any) -> None:
    w = await _chat(store, index)
    query = MemoryQuery(text="how much is Ana's rent going up", limit=3)
    result = await retrieve_memory(store, index, query, mode="text")
    ids = [f.id for f in result.facts]
    # Only the two rent facts share words with the question; Ana's twelve other facts
    # are reached only through Ana and must not come before (or instead of) them.
    assert set(ids[:2]) == {w["rent"].id, w["landlord"].id}
    for fact_id in ids[2:]:
        assert result.fact_scores[fact_id].text_rank is not None
    assert all(result.fact_scores[i].graph_weight is None for i in ids)
    assert all(result.fact_scores[i].graph_distance is None for i in ids)


async def test_specific_entity_still_brings_its_facts(store: Any, index: Any) -> None:
    w = await _chat(store, index)
    query = MemoryQuery(text="what about Pickle?", limit=3)
    result = await retrieve_memory(store, index, query, mode="text")
    assert [f.id for f in result.facts] == [w["vet"].id]  # no shared word: only the graph
    score = result.fact_scores[w["vet"].id]
    assert score.graph_distance == 0 and score.graph_weight == pytest.approx(1.0)
    half = await retrieve_memory(store, index, query, mode="text",
                                 options=RetrievalOptions(graph_weight=0.5))
    assert half.fact_scores[w["vet"].id].graph_weight == pytest.approx(0.5)

"""Contract: a fact served by a fused retrieval is the record ``get_facts`` returns.

On Postgres the candidates of every signal are built lean (their vector, provenance,
episode, entity and theme ids decoded only for the facts served, see
``postgres/signals.py``); whichever signal brought a fact (the direct kNN, a matched
theme's list, the text search, a named entity's facts), the served record must be the
stored one, to the types of its ids, on both backends.
"""

from __future__ import annotations

from typing import Any

from cycgraph_memory import MemoryQuery, RetrievalOptions, SemanticFact, retrieve_memory

from .factories import at, blend, make_entity, make_episode, make_fact, make_theme, unit


def _untouched(fact: SemanticFact) -> SemanticFact:
    # The retrieval touches what it serves: the access counters are not compared.
    return fact.model_copy(update={"access_count": 0, "last_accessed_at": None})


def _id_types(fact: SemanticFact) -> list[Any]:
    return [
        type(fact.id),
        type(fact.theme_id),
        [type(i) for i in fact.entity_ids],
        [type(i) for i in fact.source_episode_ids],
        [type(i) for i in fact.source_message_ids],
    ]


async def test_served_facts_are_the_stored_records_whatever_signal_brought_them(
    store: Any, index: Any
) -> None:
    ada = make_entity(name="Ada", entity_type="person")
    bob = make_entity(name="Bob", entity_type="person")
    engine = make_entity(name="engine", entity_type="thing")
    await store.put_entities([ada, bob, engine])
    first, second = make_episode(messages=[]), make_episode(messages=[])
    await store.put_episodes([first, second])
    message_ids = [m.id for m in first.messages]
    near_theme = make_theme(label="near", embedding=unit(0))
    far_theme = make_theme(label="far", embedding=unit(3))
    await store.put_themes([near_theme, far_theme])
    common: dict[str, Any] = {
        "source_episode_ids": [first.id, second.id],
        "source_message_ids": message_ids,
        "tags": ["x", "y"],
    }
    # The direct kNN hit (the only one: direct_fact_candidates=1).
    direct = make_fact(
        content="a first note",
        embedding=unit(0),
        theme_id=near_theme.id,
        entity_ids=[engine.id, bob.id],
        valid_until=at(500),
        **common,
    )
    # Near the query too, but reached through the matched theme's list.
    listed = make_fact(
        content="a second note",
        embedding=blend(0, 1, 3, 1),
        theme_id=near_theme.id,
        entity_ids=[bob.id],
        **common,
    )
    # Far from the query (similarity 0): only the text search finds it.
    worded = make_fact(
        content="greyhound biscuits in the cupboard",
        embedding=unit(2),
        theme_id=far_theme.id,
        entity_ids=[engine.id],
        **common,
    )
    # No vector and no word of the question: only Ada's facts (the graph list) bring it.
    cited = make_fact(
        content="likes tea at noon",
        embedding=None,
        entity_ids=[ada.id],
        valid_from=at(40),
        **common,
    )
    fillers = [
        make_fact(content=f"filler {i}", embedding=unit(3), entity_ids=[bob.id]) for i in range(6)
    ]
    await store.put_facts([direct, listed, worded, cited, *fillers])
    await store.put_themes(
        [
            near_theme.model_copy(update={"fact_ids": [direct.id, listed.id]}),
            far_theme.model_copy(update={"fact_ids": [worded.id]}),
        ]
    )
    await index.rebuild(store)

    query = MemoryQuery(embedding=unit(0), text="Ada greyhound", min_similarity=0.5, limit=10)
    result = await retrieve_memory(
        store, index, query, mode="hybrid", options=RetrievalOptions(direct_fact_candidates=1)
    )

    served = {f.id: f for f in result.facts}
    assert set(served) == {direct.id, listed.id, worded.id, cited.id}
    scores = result.fact_scores
    assert scores[direct.id].vector_rank == 1 and scores[listed.id].vector_rank == 2
    assert scores[worded.id].vector_rank is None and scores[worded.id].text_rank == 1
    assert scores[cited.id].vector_rank is None and scores[cited.id].text_rank is None
    assert scores[cited.id].graph_distance == 0
    stored = await store.get_facts(list(served))
    for fact_id, fact in served.items():
        assert _untouched(fact) == _untouched(stored[fact_id])
        assert _id_types(fact) == _id_types(stored[fact_id])
        assert fact.model_fields_set == set(SemanticFact.model_fields)
    assert served[cited.id].embedding is None
    assert served[direct.id].theme_id == near_theme.id
    assert served[direct.id].entity_ids == [engine.id, bob.id]
    assert served[worded.id].source_episode_ids == [first.id, second.id]
    # Each served record owns its field-name set: changing one changes no other.
    assert len({id(f.model_fields_set) for f in result.facts}) == len(result.facts)
    served[direct.id].model_fields_set.discard("tags")
    assert all("tags" in f.model_fields_set for f in result.facts if f.id != direct.id)

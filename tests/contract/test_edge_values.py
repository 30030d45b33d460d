"""Edge values an acceptance audit found handled differently by the two backends.

Each was accepted by one backend and refused, broken or mis-ranked by the other: offsets
past 32 bits, the first and last instants a ``datetime`` holds (Postgres writes them as
``-infinity`` / ``infinity`` and reads them back naive), vectors whose norm overflows
pgvector's single-precision sums, ``extract_subgraph`` options of the wrong type, and a
query of the wrong type. The contract: the same answer or the same typed error on both,
and nothing changed in the store by a refused call.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Any

import pytest
from pydantic import ValidationError

from cycgraph_memory import MAX_EMBEDDING_NORM, extract_subgraph, retrieve_memory
from cycgraph_memory.errors import InvalidInputError, InvalidTypeError
from cycgraph_memory.records import MAX_OFFSET

from .factories import EMBED_DIM, make_entity, make_fact, make_relationship, unit


async def test_offsets_past_32_bits_return_nothing(store: Any) -> None:
    a, b = make_entity(name="A"), make_entity(name="B")
    await store.put_entities([a, b])
    await store.put_relationship(make_relationship(a.id, b.id))
    await store.put_facts([make_fact(content="f", embedding=unit(0))])
    for offset in (2**31, 2**32 + 1, MAX_OFFSET):
        assert await store.find_facts(offset=offset) == []
        assert await store.find_entities(offset=offset) == []
        assert await store.get_relationships_for_entities([a.id], offset=offset) == []
        assert await store.get_relationships_for_entity(a.id, offset=offset) == []
    assert len(await store.get_relationships_for_entities([a.id], offset=0)) == 1


@pytest.mark.parametrize("instant", [datetime.min, datetime.max])
async def test_the_first_and_last_instants_are_refused(store: Any, instant: datetime) -> None:
    aware = instant.replace(tzinfo=UTC)
    for value in (instant, aware):
        with pytest.raises(ValidationError, match="first or last instant"):
            make_fact(valid_from=value)
    fact = make_fact(content="kept", embedding=unit(1))
    await store.put_facts([fact])
    with pytest.raises(InvalidInputError):
        await store.touch_facts([fact.id], at=aware)
    assert await store.get_fact(fact.id) == fact  # not touched
    # One microsecond inside the range round-trips exactly, aware UTC.
    inside = datetime(1, 1, 1, 0, 0, 0, 1, tzinfo=UTC)
    edge = make_fact(content="edge", valid_from=inside, embedding=unit(2))
    await store.put_facts([edge])
    got = await store.get_fact(edge.id)
    assert got is not None and got.valid_from == inside and got.valid_from.tzinfo is not None


async def test_a_vector_norm_past_the_limit_is_refused(store: Any, index: Any) -> None:
    big = [0.0] * EMBED_DIM
    big[0] = big[1] = MAX_EMBEDDING_NORM  # each value fine for float4, the norm is not
    with pytest.raises(ValidationError, match="MAX_EMBEDDING_NORM"):
        make_fact(embedding=big)
    with pytest.raises(InvalidInputError, match="norm"):
        await index.search_facts(big)
    # Just under the limit, the two backends rank and score the same.
    near = [0.0] * EMBED_DIM
    near[0] = 0.9 * MAX_EMBEDDING_NORM
    far = [0.0] * EMBED_DIM
    far[1] = 0.9 * MAX_EMBEDDING_NORM
    a, b = make_fact(content="near", embedding=near), make_fact(content="far", embedding=far)
    await store.put_facts([a, b])
    await index.rebuild(store)
    hits = await index.search_facts(near, limit=2, min_similarity=0.0)
    assert [h.item.id for h in hits] == [a.id, b.id]
    assert hits[0].score == pytest.approx(1.0, abs=1e-6)
    assert hits[1].score == pytest.approx(0.0, abs=1e-6)
    assert not any(math.isnan(h.score) for h in hits)


async def test_subgraph_options_of_the_wrong_type_are_refused(store: Any) -> None:
    a, b = make_entity(name="A"), make_entity(name="B")
    await store.put_entities([a, b])
    await store.put_relationship(make_relationship(a.id, b.id, relation_type="knows"))
    for kwargs, error in (
        ({"relation_types": "knows"}, InvalidTypeError),
        ({"relation_types": ["a\x00"]}, InvalidInputError),
        ({"relation_types": [3]}, InvalidTypeError),
        ({"include_invalidated": "no"}, InvalidTypeError),
        ({"max_entities": 2**31}, InvalidInputError),
    ):
        with pytest.raises(error):
            await extract_subgraph(store, [a.id], **kwargs)
    result = await extract_subgraph(store, [a.id], relation_types=["knows"])
    assert {e.id for e in result.entities} == {a.id, b.id}


async def test_a_query_of_the_wrong_type_is_a_typed_error(store: Any, index: Any) -> None:
    for query, options in ((None, None), ([1, 2], None), ({"tags": ["x"]}, 5)):
        with pytest.raises(InvalidTypeError):
            await retrieve_memory(store, index, query, options=options)  # type: ignore[arg-type]


async def test_whole_floats_past_64_bits_read_back_as_floats(store: Any) -> None:
    # jsonb prints 1e20 as 100000000000000000000; no int that large can be written, so it
    # is read back as the float it was, and the record can be written again unchanged.
    entity = make_entity(name="E", attributes={"big": 1e20, "huge": 1e308, "n": -(2**63)})
    await store.put_entity(entity)
    got = await store.get_entity(entity.id)
    assert got is not None and got.attributes == entity.attributes
    assert isinstance(got.attributes["huge"], float) and isinstance(got.attributes["n"], int)
    await store.put_entity(got)
    assert await store.get_entity(entity.id) == got


async def test_a_result_exactly_at_the_threshold_is_kept(store: Any, index: Any) -> None:
    # cos 60 degrees = 0.5; single precision scores it 0.49999997 in memory.
    query = [1.0, 0.0] + [0.0] * (EMBED_DIM - 2)
    at_half = [0.5, math.sqrt(3) / 2] + [0.0] * (EMBED_DIM - 2)
    orthogonal = [make_fact(content=f"o{i}", embedding=unit(i + 2)) for i in range(3)]
    half = make_fact(content="half", embedding=at_half)
    await store.put_facts([half, *orthogonal])
    await index.rebuild(store)
    hits = await index.search_facts(query, limit=5, min_similarity=0.5)
    assert [h.item.id for h in hits] == [half.id]
    assert hits[0].score == pytest.approx(0.5, abs=1e-6)
    hits = await index.search_facts(query, limit=5, min_similarity=0.0)
    assert {h.item.id for h in hits} == {half.id, *(f.id for f in orthogonal)}


@pytest.mark.parametrize("mode", ["vector", "hybrid", "text"])
async def test_store_changes_the_index_was_not_told_of_are_not_served(
    store: Any, index: Any, mode: str
) -> None:
    # Three facts near the query, indexed; then, through the store only, one is
    # quarantined, one invalidated and one deleted. None may be served as a plain fact.
    from cycgraph_memory import QUARANTINE_TAG, MemoryQuery

    facts = [make_fact(content=f"alpha report {i}", embedding=unit(0), tags=["lesson"])
             for i in range(4)]
    await store.put_facts(facts)
    await index.rebuild(store)
    quarantined, invalidated, deleted, kept = facts
    await store.put_fact(quarantined.model_copy(update={"tags": ["lesson", QUARANTINE_TAG]}))
    await store.put_fact(invalidated.model_copy(update={"invalidated_by": "corrected"}))
    await store.delete_fact(deleted.id)
    await store.touch_facts([kept.id])  # the index's copy is now behind on the counter
    before = await store.get_fact(kept.id)
    query = MemoryQuery(embedding=unit(0), text="alpha report", limit=10, min_similarity=0.0)
    result = await retrieve_memory(store, index, query, mode=mode)  # type: ignore[arg-type]
    assert [f.id for f in result.facts] == [kept.id]
    assert set(result.fact_scores) <= {kept.id}
    assert result.facts[0] == before  # the store's record as it was read (then touched)


async def test_a_tiny_query_vector_ranks_as_its_direction(store: Any, index: Any) -> None:
    # 1e-300 vanishes in single precision; cosine ignores scale, so both backends rank
    # by the query's direction.
    a, b = make_fact(content="a", embedding=unit(0)), make_fact(content="b", embedding=unit(1))
    await store.put_facts([a, b])
    await index.rebuild(store)
    tiny = [1e-300 * x for x in unit(1)]
    hits = await index.search_facts(tiny, limit=2, min_similarity=0.0)
    assert [h.item.id for h in hits] == [b.id, a.id]
    assert hits[0].score == pytest.approx(1.0, abs=1e-6)


@pytest.mark.parametrize("mode", ["text", "hybrid"])
async def test_facts_found_only_by_text_or_the_graph_are_served_whole(
    store: Any, index: Any, mode: str
) -> None:
    # Postgres reads text and graph candidates without their vectors and reads the
    # served ones' in the expansion: the served records must equal the stored ones.
    from cycgraph_memory import MemoryQuery

    ada = make_entity(name="Ada", embedding=unit(5))
    await store.put_entities([ada])
    by_text = make_fact(content="zymurgy notes from the brewery", embedding=unit(1))
    by_graph = make_fact(content="Ada runs the lab", entity_ids=[ada.id], embedding=unit(2))
    no_vector = make_fact(content="zymurgy without a vector", embedding=None)
    await store.put_facts([by_text, by_graph, no_vector])
    await index.rebuild(store)
    before = {f.id: f for f in (by_text, by_graph, no_vector)}
    query = MemoryQuery(text="zymurgy Ada", embedding=unit(7), limit=10, min_similarity=0.0)
    result = await retrieve_memory(store, index, query, mode=mode)  # type: ignore[arg-type]
    served = {f.id: f for f in result.facts}
    assert by_text.id in served and no_vector.id in served
    if mode == "hybrid":
        assert by_graph.id in served
    touched = {"access_count", "last_accessed_at"}
    for fid, fact in served.items():
        assert fact.model_dump(exclude=touched) == before[fid].model_dump(exclude=touched)

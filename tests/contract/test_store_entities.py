"""MemoryStore contract: entities (CRUD, copies, filters, ordering, paging)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from cycgraph_memory import EntityFilter, InvalidInputError

from .factories import at, make_entity, sorted_ids, unit


async def test_put_get_roundtrip_returns_equal_record(store: Any) -> None:
    e = make_entity(embedding=unit(0), superseded_by=uuid.uuid4())
    await store.put_entity(e)
    got = await store.get_entity(e.id)
    assert got == e
    assert got is not e


async def test_get_missing_returns_none(store: Any) -> None:
    assert await store.get_entity(uuid.uuid4()) is None


async def test_get_accepts_uuid_string(store: Any) -> None:
    e = make_entity()
    await store.put_entity(e)
    got = await store.get_entity(str(e.id))
    assert got is not None and got.id == e.id


async def test_malformed_id_string_raises_invalid_input(store: Any) -> None:
    with pytest.raises(InvalidInputError):
        await store.get_entity("not-a-uuid")
    with pytest.raises(InvalidInputError):
        await store.get_entities(["nope"])
    with pytest.raises(InvalidInputError):
        await store.delete_entity("nope")


async def test_put_is_upsert_replacing_all_fields(store: Any) -> None:
    e = make_entity(name="Old", attributes={"a": 1}, embedding=unit(0))
    await store.put_entity(e)
    replacement = make_entity(
        id=e.id, name="New", entity_type="person", attributes={"b": 2}, embedding=None
    )
    await store.put_entity(replacement)
    got = await store.get_entity(e.id)
    assert got == replacement
    assert len(await store.find_entities()) == 1


async def test_returned_record_mutation_does_not_change_store(store: Any) -> None:
    e = make_entity(attributes={"k": [1, 2]})
    await store.put_entity(e)
    got = await store.get_entity(e.id)
    assert got is not None
    got.name = "Mutated"
    got.attributes["k"].append(3)
    listed = (await store.find_entities())[0]
    listed.name = "Mutated again"
    batch = await store.get_entities([e.id])
    batch[e.id].attributes["new"] = True
    again = await store.get_entity(e.id)
    assert again == e


async def test_input_mutation_after_put_does_not_change_store(store: Any) -> None:
    e = make_entity(attributes={"k": [1]}, embedding=unit(1))
    original = e.model_copy(deep=True)
    await store.put_entity(e)
    e.name = "Changed"
    e.attributes["k"].append(2)
    assert e.embedding is not None
    e.embedding[0] = 0.5
    assert await store.get_entity(e.id) == original


async def test_put_accepts_dict_and_rejects_other_types(store: Any) -> None:
    e = make_entity()
    await store.put_entity(e.model_dump())
    assert await store.get_entity(e.id) == e
    with pytest.raises(TypeError):
        await store.put_entity(42)


async def test_bulk_put_and_batch_get_with_missing_and_duplicate_ids(store: Any) -> None:
    a, b, c = make_entity(name="A"), make_entity(name="B"), make_entity(name="C")
    await store.put_entities([a, b, c])
    missing = uuid.uuid4()
    got = await store.get_entities([a.id, missing, str(c.id), a.id])
    assert got == {a.id: a, c.id: c}
    assert await store.get_entities([]) == {}


async def test_bulk_put_is_all_or_nothing_on_bad_item(store: Any) -> None:
    good = make_entity()
    with pytest.raises(TypeError):
        await store.put_entities([good, "bad"])
    assert await store.get_entity(good.id) is None


async def test_delete_is_hard_and_reports_existence(store: Any) -> None:
    e = make_entity()
    await store.put_entity(e)
    assert await store.delete_entity(e.id) is True
    assert await store.get_entity(e.id) is None
    assert await store.delete_entity(e.id) is False
    assert await store.find_entities(include_invalidated=True) == []


async def test_find_orders_by_created_at_then_id(store: Any) -> None:
    late = make_entity(name="late", created_at=at(100))
    tie1 = make_entity(name="tie1", created_at=at(10))
    tie2 = make_entity(name="tie2", created_at=at(10))
    early = make_entity(name="early", created_at=at(0))
    await store.put_entities([late, tie1, tie2, early])
    got = [e.id for e in await store.find_entities()]
    assert got == [early.id, *sorted_ids(tie1.id, tie2.id), late.id]


async def test_find_filters_by_type(store: Any) -> None:
    p = make_entity(entity_type="person", created_at=at(1))
    o = make_entity(entity_type="organization", created_at=at(2))
    p2 = make_entity(entity_type="person", created_at=at(3))
    await store.put_entities([p, o, p2])
    assert [e.id for e in await store.find_entities(entity_type="person")] == [p.id, p2.id]
    assert [e.id for e in await store.find_entities({"entity_type": "organization"})] == [o.id]
    assert await store.find_entities(EntityFilter(entity_type="tool")) == []


async def test_soft_deleted_excluded_by_default(store: Any) -> None:
    live = make_entity(created_at=at(1))
    dead = make_entity(created_at=at(2), invalidated_at=at(5))
    await store.put_entities([live, dead])
    assert [e.id for e in await store.find_entities()] == [live.id]
    assert [e.id for e in await store.find_entities(include_invalidated=True)] == [
        live.id,
        dead.id,
    ]
    # get_* ignores soft delete
    assert await store.get_entity(dead.id) == dead
    assert set(await store.get_entities([dead.id])) == {dead.id}


async def test_pagination_edges(store: Any) -> None:
    es = [make_entity(created_at=at(i)) for i in range(5)]
    await store.put_entities(reversed(es))
    ids = [e.id for e in es]
    assert [e.id for e in await store.find_entities(limit=1)] == ids[:1]
    assert [e.id for e in await store.find_entities(limit=2, offset=1)] == ids[1:3]
    assert [e.id for e in await store.find_entities(offset=3)] == ids[3:]
    assert [e.id for e in await store.find_entities(limit=10, offset=4)] == ids[4:]
    assert await store.find_entities(offset=5) == []
    assert await store.find_entities(offset=50, limit=3) == []


async def test_pagination_applies_after_filter(store: Any) -> None:
    es = [
        make_entity(entity_type="person" if i % 2 else "tool", created_at=at(i)) for i in range(6)
    ]
    await store.put_entities(es)
    got = await store.find_entities(entity_type="person", offset=1, limit=1)
    assert [e.id for e in got] == [es[3].id]


async def test_find_options_reject_bad_values(store: Any) -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError):
        await store.find_entities(limit=0)
    with pytest.raises(ValidationError):
        await store.find_entities(offset=-1)
    with pytest.raises(ValidationError):
        await store.find_entities(unknown=True)

"""MemoryStore contract: relationships (CRUD, direction/type filters, ordering)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from cycgraph_memory import RelationshipFilter

from .factories import at, make_entity, make_relationship, sorted_ids


@pytest.fixture
async def ids(store: Any) -> tuple[uuid.UUID, uuid.UUID, uuid.UUID]:
    """Three stored entities (a relationship's endpoints must be entities of the store)."""
    entities = [make_entity(name=name) for name in ("A", "B", "C")]
    await store.put_entities(entities)
    return entities[0].id, entities[1].id, entities[2].id


async def test_roundtrip_upsert_delete(store: Any, ids: Any) -> None:
    a, b, _ = ids
    r = make_relationship(a, b, valid_until=at(days=10))
    await store.put_relationship(r)
    assert await store.get_relationship(r.id) == r
    assert await store.get_relationship(str(r.id)) == r
    changed = make_relationship(a, b, id=r.id, relation_type="owns", weight=0.25)
    await store.put_relationship(changed)
    assert await store.get_relationship(r.id) == changed
    assert await store.delete_relationship(r.id) is True
    assert await store.delete_relationship(r.id) is False
    assert await store.get_relationship(r.id) is None


async def test_copies_are_isolated(store: Any, ids: Any) -> None:
    a, b, _ = ids
    r = make_relationship(a, b, attributes={"x": [1]})
    await store.put_relationship(r)
    r.attributes["x"].append(2)
    got = await store.get_relationship(r.id)
    assert got is not None and got.attributes == {"x": [1]}
    got.attributes["y"] = 1
    assert (await store.get_relationship(r.id)) == make_relationship(
        a, b, id=r.id, attributes={"x": [1]}
    )


async def test_bulk_and_batch_get(store: Any, ids: Any) -> None:
    a, b, c = ids
    r1, r2 = make_relationship(a, b), make_relationship(b, c)
    await store.put_relationships([r1, r2])
    got = await store.get_relationships([r1.id, uuid.uuid4(), r1.id, r2.id])
    assert got == {r1.id: r1, r2.id: r2}


async def test_direction_filter(store: Any, ids: Any) -> None:
    a, b, c = ids
    out_ab = make_relationship(a, b, valid_from=at(1))
    in_ca = make_relationship(c, a, valid_from=at(2))
    loop = make_relationship(a, a, valid_from=at(3))
    other = make_relationship(b, c, valid_from=at(4))
    await store.put_relationships([other, loop, in_ca, out_ab])

    async def q(**kw: Any) -> list[uuid.UUID]:
        return [r.id for r in await store.get_relationships_for_entity(a, **kw)]

    assert await q() == [out_ab.id, in_ca.id, loop.id]
    assert await q(direction="both") == [out_ab.id, in_ca.id, loop.id]
    assert await q(direction="outgoing") == [out_ab.id, loop.id]
    assert await q(direction="incoming") == [in_ca.id, loop.id]
    got = await store.get_relationships_for_entity(str(a), RelationshipFilter(direction="incoming"))
    assert [r.id for r in got] == [in_ca.id, loop.id]
    assert await store.get_relationships_for_entity(uuid.uuid4()) == []


async def test_relation_type_filter_and_paging(store: Any, ids: Any) -> None:
    a, b, c = ids
    r1 = make_relationship(a, b, relation_type="knows", valid_from=at(1))
    r2 = make_relationship(a, c, relation_type="works_at", valid_from=at(2))
    r3 = make_relationship(b, a, relation_type="knows", valid_from=at(3))
    await store.put_relationships([r1, r2, r3])
    got = await store.get_relationships_for_entity(a, {"relation_type": "knows"})
    assert [r.id for r in got] == [r1.id, r3.id]
    got = await store.get_relationships_for_entity(a, relation_type="knows", offset=1, limit=1)
    assert [r.id for r in got] == [r3.id]
    got = await store.get_relationships_for_entity(a, limit=2)
    assert [r.id for r in got] == [r1.id, r2.id]
    assert await store.get_relationships_for_entity(a, offset=3) == []


async def test_soft_delete_and_tie_ordering(store: Any, ids: Any) -> None:
    a, b, _ = ids
    t1 = make_relationship(a, b, valid_from=at(5))
    t2 = make_relationship(a, b, valid_from=at(5))
    dead = make_relationship(a, b, valid_from=at(0), invalidated_by="superseded")
    await store.put_relationships([t1, dead, t2])
    live = [r.id for r in await store.get_relationships_for_entity(a)]
    assert live == sorted_ids(t1.id, t2.id)
    every = [r.id for r in await store.get_relationships_for_entity(a, include_invalidated=True)]
    assert every == [dead.id, *sorted_ids(t1.id, t2.id)]
    assert await store.get_relationship(dead.id) == dead

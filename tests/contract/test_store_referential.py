"""MemoryStore contract: relationships and the entities they connect stay consistent.

Deleting an entity deletes every relationship touching it (in the same step, so a rollback
restores both); a relationship whose endpoint is not an entity of the store is refused with
``DanglingReferenceError`` and nothing is written.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from cycgraph_memory import DanglingReferenceError, IntegrityViolationError, StorageError

from .factories import at, make_entity, make_relationship


class Boom(Exception):
    pass


async def _graph(store: Any) -> tuple[Any, Any, Any, list[Any]]:
    a, b, c = (make_entity(name=n, created_at=at(i)) for i, n in enumerate("ABC"))
    await store.put_entities([a, b, c])
    edges = [
        make_relationship(a.id, b.id, valid_from=at(1)),  # a -> b
        make_relationship(c.id, a.id, valid_from=at(2)),  # c -> a
        make_relationship(a.id, a.id, valid_from=at(3)),  # self-loop on a
        make_relationship(b.id, c.id, valid_from=at(4)),  # b -> c (does not touch a)
        make_relationship(c.id, a.id, valid_from=at(5), invalidated_by="old"),  # soft-deleted
    ]
    await store.put_relationships(edges)
    return a, b, c, edges


async def test_delete_entity_deletes_every_edge_touching_it(store: Any) -> None:
    a, b, c, edges = await _graph(store)
    assert await store.delete_entity(a.id) is True

    for edge in edges[:3] + edges[4:]:
        assert await store.get_relationship(edge.id) is None
    assert await store.get_relationship(edges[3].id) == edges[3]
    # The other endpoints no longer see an edge to the deleted entity, in any direction.
    assert [r.id for r in await store.get_relationships_for_entity(
        b.id, include_invalidated=True)] == [edges[3].id]
    assert [r.id for r in await store.get_relationships_for_entity(
        c.id, include_invalidated=True)] == [edges[3].id]
    assert await store.get_relationships_for_entity(a.id, include_invalidated=True) == []
    assert await store.get_relationships([e.id for e in edges]) == {edges[3].id: edges[3]}
    assert await store.delete_entity(a.id) is False


async def test_delete_entity_and_its_edges_roll_back_together(store: Any) -> None:
    a, _, _, edges = await _graph(store)
    with pytest.raises(Boom):
        async with store.transaction():
            assert await store.delete_entity(a.id) is True
            assert await store.get_relationship(edges[0].id) is None
            raise Boom
    assert await store.get_entity(a.id) == a
    assert await store.get_relationships([e.id for e in edges]) == {e.id: e for e in edges}


async def test_edge_to_a_missing_entity_is_refused(store: Any) -> None:
    a = make_entity()
    await store.put_entity(a)
    ghost = uuid.uuid4()
    for edge in (make_relationship(a.id, ghost), make_relationship(ghost, a.id)):
        with pytest.raises(DanglingReferenceError) as info:
            await store.put_relationship(edge)
        assert info.value.missing_ids == [ghost]
        assert info.value.sqlstate == "23503"
        assert isinstance(info.value, IntegrityViolationError)
        assert isinstance(info.value, StorageError)
        assert await store.get_relationship(edge.id) is None
    assert await store.get_relationships_for_entity(a.id, include_invalidated=True) == []


async def test_bulk_put_with_one_dangling_edge_writes_nothing(store: Any) -> None:
    a, b = make_entity(name="A"), make_entity(name="B")
    await store.put_entities([a, b])
    good = make_relationship(a.id, b.id)
    ghost1, ghost2 = uuid.uuid4(), uuid.uuid4()
    bad = make_relationship(ghost1, ghost2)
    with pytest.raises(DanglingReferenceError) as info:
        await store.put_relationships([good, bad])
    assert info.value.missing_ids == [ghost1, ghost2]
    assert await store.get_relationships([good.id, bad.id]) == {}


async def test_edge_to_a_deleted_entity_is_refused(store: Any) -> None:
    a, b = make_entity(name="A"), make_entity(name="B")
    await store.put_entities([a, b])
    await store.delete_entity(b.id)
    with pytest.raises(DanglingReferenceError):
        await store.put_relationship(make_relationship(a.id, b.id))


async def test_edge_to_a_soft_deleted_entity_is_kept(store: Any) -> None:
    """Soft delete is a field write: the entity still exists, so its edges stay valid.

    (Entity resolution remaps edges to the surviving entity before soft-deleting losers.)
    """
    a, b = make_entity(name="A"), make_entity(name="B")
    await store.put_entities([a, b])
    edge = make_relationship(a.id, b.id)
    await store.put_relationship(edge)
    gone = make_entity(id=b.id, name="B", invalidated_at=at(9))
    await store.put_entity(gone)
    assert await store.get_relationship(edge.id) == edge
    late = make_relationship(a.id, b.id)
    await store.put_relationship(late)
    assert await store.get_relationship(late.id) == late


async def test_entities_and_edges_in_one_transaction(store: Any) -> None:
    a, b = make_entity(name="A"), make_entity(name="B")
    edge = make_relationship(a.id, b.id)
    async with store.transaction():
        await store.put_entities([a, b])
        await store.put_relationship(edge)
    assert await store.get_relationship(edge.id) == edge
    with pytest.raises(DanglingReferenceError):
        async with store.transaction():
            c = make_entity(name="C")
            await store.put_entity(c)
            await store.put_relationship(make_relationship(c.id, uuid.uuid4()))
    assert {e.id for e in await store.find_entities()} == {a.id, b.id}

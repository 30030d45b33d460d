"""MemoryStore contract: transactions, clear, cross-cutting bad input."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from pydantic import ValidationError

from cycgraph_memory import InvalidInputError

from .factories import make_entity, make_episode, make_fact, make_relationship, make_theme


class Boom(Exception):
    pass


async def test_transaction_commits(store: Any) -> None:
    f, e = make_fact(), make_entity()
    async with store.transaction():
        await store.put_fact(f)
        await store.put_entity(e)
    assert await store.get_fact(f.id) == f
    assert await store.get_entity(e.id) == e


async def test_transaction_rolls_back_on_raise(store: Any) -> None:
    kept = make_fact(content="kept")
    await store.put_fact(kept)
    doomed_entity = make_entity()
    doomed_fact = make_fact()
    with pytest.raises(Boom):
        async with store.transaction():
            await store.put_fact(doomed_fact)
            await store.put_entity(doomed_entity)
            await store.put_fact(kept.model_copy(update={"content": "overwritten"}))
            await store.touch_facts([kept.id])
            assert await store.delete_fact(kept.id) is True
            raise Boom
    assert await store.get_fact(doomed_fact.id) is None
    assert await store.get_entity(doomed_entity.id) is None
    assert await store.get_fact(kept.id) == kept


async def test_transaction_rollback_restores_deleted_and_all_types(store: Any) -> None:
    a, b = make_entity(), make_entity()
    rel = make_relationship(a.id, b.id)
    ep, th, f = make_episode(), make_theme(), make_fact()
    await store.put_entities([a, b])
    await store.put_relationship(rel)
    await store.put_episode(ep)
    await store.put_theme(th)
    await store.put_fact(f)
    with pytest.raises(Boom):
        async with store.transaction():
            assert await store.delete_relationship(rel.id)
            assert await store.delete_episode(ep.id)
            assert await store.delete_theme(th.id)
            assert await store.delete_fact(f.id)
            assert await store.delete_entity(a.id)
            raise Boom
    assert await store.get_relationship(rel.id) == rel
    assert await store.get_episode(ep.id) == ep
    assert await store.get_theme(th.id) == th
    assert await store.get_fact(f.id) == f
    assert await store.get_entity(a.id) == a


async def test_nested_transaction_inner_failure_caught(store: Any) -> None:
    outer_fact, inner_fact = make_fact(content="outer"), make_fact(content="inner")
    async with store.transaction():
        await store.put_fact(outer_fact)
        with pytest.raises(Boom):
            async with store.transaction():
                await store.put_fact(inner_fact)
                raise Boom
        assert await store.get_fact(inner_fact.id) is None
    assert await store.get_fact(outer_fact.id) == outer_fact
    assert await store.get_fact(inner_fact.id) is None


async def test_nested_transaction_outer_failure_undoes_inner(store: Any) -> None:
    f1, f2 = make_fact(), make_fact()
    with pytest.raises(Boom):
        async with store.transaction():
            await store.put_fact(f1)
            async with store.transaction():
                await store.put_fact(f2)
            raise Boom
    assert await store.get_facts([f1.id, f2.id]) == {}


async def test_clear_removes_everything(store: Any) -> None:
    a, b = make_entity(), make_entity()
    await store.put_entities([a, b])
    await store.put_relationship(make_relationship(a.id, b.id))
    await store.put_episode(make_episode())
    await store.put_theme(make_theme())
    await store.put_fact(make_fact(invalidated_by="x"))
    await store.clear()
    assert await store.find_entities(include_invalidated=True) == []
    assert await store.get_relationships_for_entity(a.id, include_invalidated=True) == []
    assert await store.list_episodes(include_invalidated=True) == []
    assert await store.list_themes(include_invalidated=True) == []
    assert await store.find_facts(include_invalidated=True) == []


async def test_put_dict_is_validated(store: Any) -> None:
    data = make_fact().model_dump()
    data["access_count"] = -1
    with pytest.raises(ValidationError):
        await store.put_fact(data)
    with pytest.raises(TypeError):
        await store.put_fact("not a fact")
    with pytest.raises(TypeError):
        await store.put_theme(make_fact())


async def test_malformed_ids_everywhere(store: Any) -> None:
    bad = "1234-not-a-uuid"
    for call in (
        store.get_fact(bad),
        store.get_facts([uuid.uuid4(), bad]),
        store.delete_fact(bad),
        store.get_theme(bad),
        store.get_episode(bad),
        store.get_relationship(bad),
        store.get_relationships_for_entity(bad),
        store.touch_facts([bad]),
    ):
        with pytest.raises(InvalidInputError):
            await call

"""MemoryStore contract: facts (CRUD, every FactFilter field, ordering, touch_facts)."""

from __future__ import annotations

import math
import uuid
from typing import Any

import pytest
from pydantic import ValidationError

from cycgraph_memory import QUARANTINE_TAG, EmbeddingDimensionMismatchError, FactFilter

from .factories import EMBED_DIM, at, make_fact, sorted_ids, store_cited, unit


async def test_roundtrip_full_record(store: Any) -> None:
    f = make_fact(
        embedding=unit(0),
        source_episode_ids=[uuid.uuid4()],
        entity_ids=[uuid.uuid4(), uuid.uuid4()],
        theme_id=uuid.uuid4(),
        valid_until=at(days=30),
        access_count=3,
        last_accessed_at=at(60),
        tags=["lesson", "candidate"],
    )
    await store_cited(store, [f])
    await store.put_fact(f)
    assert await store.get_fact(f.id) == f
    assert await store.get_fact(str(f.id)) == f
    assert await store.get_fact(uuid.uuid4()) is None


async def test_upsert_replaces_tags(store: Any) -> None:
    f = make_fact(tags=["lesson", "candidate"])
    await store.put_fact(f)
    verified = f.model_copy(update={"tags": ["lesson", "verified"]})
    await store.put_fact(verified)
    got = await store.get_fact(f.id)
    assert got is not None and got.tags == ["lesson", "verified"]
    assert await store.find_facts(tags=["candidate"]) == []
    quarantined = f.model_copy(update={"tags": ["lesson", "verified", QUARANTINE_TAG]})
    await store.put_fact(quarantined)
    assert [x.id for x in await store.find_facts(tags=[QUARANTINE_TAG])] == [f.id]
    assert await store.find_facts(exclude_tags=[QUARANTINE_TAG]) == []
    assert len(await store.find_facts()) == 1


async def test_copies_are_isolated(store: Any) -> None:
    f = make_fact(tags=["a"], embedding=unit(1))
    await store.put_fact(f)
    f.tags.append("b")
    assert f.embedding is not None
    f.embedding[1] = 0.5
    got = await store.get_fact(f.id)
    assert got is not None and got.tags == ["a"] and got.embedding == unit(1)
    got.tags.append("c")
    (await store.find_facts())[0].tags.append("d")
    again = await store.get_fact(f.id)
    assert again is not None and again.tags == ["a"]


async def test_bulk_put_and_batch_get(store: Any) -> None:
    fs = [make_fact(content=f"fact {i}") for i in range(3)]
    await store.put_facts(fs)
    got = await store.get_facts([fs[2].id, uuid.uuid4(), fs[0].id, fs[0].id])
    assert got == {fs[0].id: fs[0], fs[2].id: fs[2]}


async def test_delete(store: Any) -> None:
    f = make_fact()
    await store.put_fact(f)
    assert await store.delete_fact(f.id) is True
    assert await store.delete_fact(str(f.id)) is False
    assert await store.get_fact(f.id) is None


async def test_order_by_valid_from_then_id(store: Any) -> None:
    late = make_fact(valid_from=at(100))
    t1, t2, t3 = (make_fact(valid_from=at(50)) for _ in range(3))
    early = make_fact(valid_from=at(0))
    await store.put_facts([t1, late, t2, early, t3])
    got = [f.id for f in await store.find_facts()]
    assert got == [early.id, *sorted_ids(t1.id, t2.id, t3.id), late.id]


async def test_tags_any_of_and_exclude_tags(store: Any) -> None:
    a = make_fact(valid_from=at(1), tags=["lesson"])
    b = make_fact(valid_from=at(2), tags=["lesson", QUARANTINE_TAG])
    c = make_fact(valid_from=at(3), tags=["note"])
    d = make_fact(valid_from=at(4), tags=[])
    await store.put_facts([a, b, c, d])

    async def q(*args: Any, **kw: Any) -> list[uuid.UUID]:
        return [f.id for f in await store.find_facts(*args, **kw)]

    assert await q() == [a.id, b.id, c.id, d.id]
    assert await q(tags=None) == [a.id, b.id, c.id, d.id]
    assert await q(tags=[]) == [a.id, b.id, c.id, d.id]
    assert await q(tags=["lesson"]) == [a.id, b.id]
    assert await q(tags=["lesson", "note"]) == [a.id, b.id, c.id]
    assert await q(tags=["missing"]) == []
    assert await q(exclude_tags=[QUARANTINE_TAG]) == [a.id, c.id, d.id]
    assert await q(tags=["lesson"], exclude_tags=[QUARANTINE_TAG]) == [a.id]
    assert await q(tags=["lesson"], exclude_tags=["lesson"]) == []
    assert await q(exclude_tags=[]) == [a.id, b.id, c.id, d.id]
    assert await q(FactFilter(tags=["note"])) == [c.id]
    assert await q({"tags": ["lesson"], "limit": 1, "offset": 1}) == [b.id]


async def test_theme_and_entity_filters(store: Any) -> None:
    theme, other_theme = uuid.uuid4(), uuid.uuid4()
    ent, other_ent = uuid.uuid4(), uuid.uuid4()
    a = make_fact(valid_from=at(1), theme_id=theme, entity_ids=[ent])
    b = make_fact(valid_from=at(2), theme_id=other_theme, entity_ids=[other_ent, ent])
    c = make_fact(valid_from=at(3), theme_id=theme, entity_ids=[other_ent])
    d = make_fact(valid_from=at(4))
    await store_cited(store, [d, c, b, a])
    await store.put_facts([d, c, b, a])
    assert [f.id for f in await store.find_facts(theme_id=theme)] == [a.id, c.id]
    assert [f.id for f in await store.find_facts(entity_id=ent)] == [a.id, b.id]
    assert [f.id for f in await store.find_facts(theme_id=theme, entity_id=ent)] == [a.id]
    assert [f.id for f in await store.find_facts(theme_id=str(theme))] == [a.id, c.id]
    assert await store.find_facts(entity_id=uuid.uuid4()) == []


async def test_soft_delete_default_and_include(store: Any) -> None:
    live = make_fact(valid_from=at(1), tags=["x"])
    dead = make_fact(valid_from=at(2), tags=["x"], invalidated_by="eval-gate:harmful")
    await store.put_facts([live, dead])
    assert [f.id for f in await store.find_facts()] == [live.id]
    assert [f.id for f in await store.find_facts(tags=["x"])] == [live.id]
    assert [f.id for f in await store.find_facts(include_invalidated=True)] == [live.id, dead.id]
    assert await store.get_fact(dead.id) == dead
    assert set(await store.get_facts([dead.id, live.id])) == {dead.id, live.id}


async def test_pagination_edges(store: Any) -> None:
    fs = [make_fact(valid_from=at(i)) for i in range(4)]
    await store.put_facts(fs)
    ids = [f.id for f in fs]
    assert [f.id for f in await store.find_facts(limit=1)] == ids[:1]
    assert [f.id for f in await store.find_facts(offset=1, limit=2)] == ids[1:3]
    assert [f.id for f in await store.find_facts(offset=2, limit=2)] == ids[2:]
    assert [f.id for f in await store.find_facts(offset=3, limit=5)] == ids[3:]
    assert await store.find_facts(offset=4) == []
    assert await store.find_facts(offset=100, limit=1) == []


async def test_touch_facts(store: Any) -> None:
    a = make_fact(access_count=2)
    b = make_fact()
    await store.put_facts([a, b])
    when = at(days=3)
    await store.touch_facts([a.id, a.id, uuid.uuid4(), str(b.id)], at=when)
    ga, gb = await store.get_fact(a.id), await store.get_fact(b.id)
    assert ga is not None and ga.access_count == 3 and ga.last_accessed_at == when
    assert gb is not None and gb.access_count == 1 and gb.last_accessed_at == when
    await store.touch_facts([b.id])
    gb2 = await store.get_fact(b.id)
    assert gb2 is not None and gb2.access_count == 2
    assert gb2.last_accessed_at is not None and gb2.last_accessed_at > when
    # everything else is unchanged
    assert ga.model_copy(update={"access_count": 2, "last_accessed_at": None}) == a
    await store.touch_facts([])


async def test_wrong_dimension_embedding_is_rejected_and_store_unchanged(store: Any) -> None:
    ok = make_fact(embedding=unit(0))
    await store.put_fact(ok)
    bad = make_fact(embedding=[1.0] * (EMBED_DIM + 1))
    with pytest.raises(EmbeddingDimensionMismatchError) as info:
        await store.put_fact(bad)
    assert info.value.expected == EMBED_DIM and info.value.actual == EMBED_DIM + 1
    with pytest.raises(EmbeddingDimensionMismatchError):
        await store.put_facts([make_fact(embedding=unit(1)), bad])
    replaced = ok.model_copy(update={"embedding": [1.0] * 3, "content": "changed"})
    with pytest.raises(EmbeddingDimensionMismatchError):
        await store.put_fact(replaced)
    assert [f.id for f in await store.find_facts(include_invalidated=True)] == [ok.id]
    assert await store.get_fact(ok.id) == ok


def test_nan_and_inf_embedding_rejected_at_construction() -> None:
    with pytest.raises(ValidationError):
        make_fact(embedding=[math.nan] * EMBED_DIM)
    with pytest.raises(ValidationError):
        make_fact(embedding=[math.inf] + [0.0] * (EMBED_DIM - 1))

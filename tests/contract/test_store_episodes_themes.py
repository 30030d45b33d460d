"""MemoryStore contract: episodes and themes."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

import pytest

from cycgraph_memory import ListOptions
from cycgraph_memory.consolidation.plan import Put, sync_index
from cycgraph_memory.errors import DuplicateRecordError

from .factories import at, make_episode, make_message, make_theme, provenance, sorted_ids, unit


async def test_episode_roundtrip_with_messages(store: Any) -> None:
    fid = uuid.uuid4()
    ep = make_episode(embedding=unit(2), fact_ids=[fid])
    await store.put_episode(ep)
    got = await store.get_episode(ep.id)
    assert got == ep
    assert got is not None and [m.content for m in got.messages] == ["hello", "hi there"]
    assert await store.get_episode(uuid.uuid4()) is None


async def test_episode_upsert_replaces_messages(store: Any) -> None:
    ep = make_episode()
    await store.put_episode(ep)
    replacement = make_episode(id=ep.id, topic="new", messages=[make_message(content="only")])
    await store.put_episode(replacement)
    got = await store.get_episode(ep.id)
    assert got == replacement
    assert got is not None and len(got.messages) == 1


async def test_put_episodes_mixes_new_and_stored_episodes(store: Any) -> None:
    stored = make_episode(topic="old")
    await store.put_episodes([stored])
    kept = make_message(content="kept")
    replacement = make_episode(id=stored.id, topic="new", messages=[kept])
    fresh = make_episode(topic="fresh")
    await store.put_episodes([fresh, replacement])
    got = await store.get_episodes([stored.id, fresh.id])
    assert got == {stored.id: replacement, fresh.id: fresh}
    gone = [m.id for m in stored.messages]
    assert set(await store.get_messages([*gone, kept.id])) == {kept.id}
    # the same call again (both stored now) changes nothing
    await store.put_episodes([fresh, replacement])
    assert await store.get_episodes([stored.id, fresh.id]) == got


async def test_episode_copies(store: Any) -> None:
    ep = make_episode()
    await store.put_episode(ep)
    ep.messages[0].content = "mutated input"
    got = await store.get_episode(ep.id)
    assert got is not None and got.messages[0].content == "hello"
    got.messages.append(make_message())
    got.fact_ids.append(uuid.uuid4())
    again = await store.get_episode(ep.id)
    assert again is not None and len(again.messages) == 2 and again.fact_ids == []


async def test_list_episodes_order_soft_delete_paging(store: Any) -> None:
    e2 = make_episode(started_at=at(20), ended_at=at(30))
    t1 = make_episode(started_at=at(10), ended_at=at(11))
    t2 = make_episode(started_at=at(10), ended_at=at(11))
    dead = make_episode(started_at=at(0), ended_at=at(1), invalidated_at=at(50))
    await store.put_episodes([e2, t1, dead, t2])
    ties = sorted_ids(t1.id, t2.id)
    assert [e.id for e in await store.list_episodes()] == [*ties, e2.id]
    assert [e.id for e in await store.list_episodes(include_invalidated=True)] == [
        dead.id,
        *ties,
        e2.id,
    ]
    assert [e.id for e in await store.list_episodes(ListOptions(limit=1, offset=1))] == [ties[1]]
    assert [e.id for e in await store.list_episodes({"offset": 2})] == [e2.id]
    assert await store.list_episodes(offset=3) == []
    assert await store.get_episode(dead.id) == dead


async def test_episode_batch_get_and_delete(store: Any) -> None:
    a, b = make_episode(), make_episode()
    await store.put_episodes([a, b])
    assert await store.get_episodes([a.id, a.id, uuid.uuid4()]) == {a.id: a}
    assert await store.delete_episode(a.id) is True
    assert await store.delete_episode(a.id) is False
    assert await store.get_episodes([a.id, b.id]) == {b.id: b}


async def test_theme_roundtrip_upsert_delete(store: Any) -> None:
    th = make_theme(embedding=unit(3), fact_ids=[uuid.uuid4()])
    await store.put_theme(th)
    assert await store.get_theme(th.id) == th
    replacement = make_theme(id=th.id, label="renamed", fact_ids=[])
    await store.put_theme(replacement)
    assert await store.get_theme(str(th.id)) == replacement
    assert await store.delete_theme(th.id) is True
    assert await store.delete_theme(th.id) is False
    assert await store.get_theme(th.id) is None


async def test_theme_copies(store: Any) -> None:
    th = make_theme(fact_ids=[uuid.uuid4()])
    await store.put_theme(th)
    th.fact_ids.clear()
    got = await store.get_theme(th.id)
    assert got is not None and len(got.fact_ids) == 1
    got.label = "changed"
    again = await store.get_theme(th.id)
    assert again is not None and again.label == "widgets"


async def test_list_themes_order_soft_delete_paging(store: Any) -> None:
    late = make_theme(provenance=provenance(created_at=at(30)))
    t1 = make_theme(provenance=provenance(created_at=at(10)))
    t2 = make_theme(provenance=provenance(created_at=at(10)))
    dead = make_theme(provenance=provenance(created_at=at(0)), invalidated_at=at(40))
    await store.put_themes([late, t1, dead, t2])
    ties = sorted_ids(t1.id, t2.id)
    assert [t.id for t in await store.list_themes()] == [*ties, late.id]
    assert [t.id for t in await store.list_themes(include_invalidated=True)] == [
        dead.id,
        *ties,
        late.id,
    ]
    assert [t.id for t in await store.list_themes(limit=1)] == [ties[0]]
    assert [t.id for t in await store.list_themes(limit=5, offset=2)] == [late.id]
    assert await store.list_themes(offset=10) == []


async def test_theme_batch_get(store: Any) -> None:
    a, b = make_theme(), make_theme()
    await store.put_themes([a, b])
    assert await store.get_themes([b.id, uuid.uuid4(), str(a.id)]) == {a.id: a, b.id: b}


async def test_episode_span_validation() -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError):
        make_episode(started_at=at(10), ended_at=at(10) - timedelta(seconds=1))


async def test_get_messages_batch(store: Any) -> None:
    m1, m2, m3 = make_message(content="one"), make_message(content="two"), make_message()
    live = make_episode(messages=[m1, m2])
    dead = make_episode(messages=[m3], invalidated_at=at(9))
    await store.put_episodes([live, dead])
    got = await store.get_messages([m1.id, uuid.uuid4(), str(m3.id), m1.id])
    assert got == {m1.id: m1, m3.id: m3}
    assert await store.get_messages([]) == {}
    got[m1.id].content = "mutated"
    assert (await store.get_messages([m1.id]))[m1.id].content == "one"
    await store.delete_episode(live.id)
    assert await store.get_messages([m1.id, m2.id]) == {}


async def test_message_id_is_stored_once_per_tenant(store: Any) -> None:
    shared = uuid.uuid4()
    e1 = make_episode(messages=[make_message(id=shared, content="first")])
    e2 = make_episode(messages=[make_message(id=shared, content="second")])
    with pytest.raises(DuplicateRecordError):
        await store.put_episodes([e1, e2])
    assert await store.get_messages([shared]) == {}
    await store.put_episodes([e1])
    with pytest.raises(DuplicateRecordError):
        await store.put_episode(e2)
    assert await store.get_episode(e2.id) is None
    assert (await store.get_messages([shared]))[shared].content == "first"
    # Moving the message: replace both episodes in one call.
    moved = e1.model_copy(update={"messages": [make_message()]})
    await store.put_episodes([moved, e2])
    assert (await store.get_messages([shared]))[shared].content == "second"


async def test_an_episode_written_back_keeps_its_message_vectors(store: Any, index: Any) -> None:
    """Episode reads carry no message vectors; writing one back (changed) keeps them."""
    m1 = make_message(content="moved to Lisbon", embedding=unit(1))
    m2 = make_message(content="sister visits in June", embedding=unit(2))
    episode = make_episode(messages=[m1, m2])
    await store.put_episodes([episode])
    sync_index(index, [Put(episode, "test")])
    read = await store.get_episode(episode.id)
    assert read is not None and all(m.embedding is None for m in read.messages)
    pruned = read.model_copy(update={"invalidated_at": at(9)})
    await store.put_episodes([pruned])
    sync_index(index, [Put(pruned, "episode_pruned")])
    got = await store.get_messages([m1.id, m2.id])
    assert got[m1.id].embedding == unit(1) and got[m2.id].embedding == unit(2)
    hits = await index.search_messages(unit(2), limit=5, include_invalidated=True)
    assert [h.item.id for h in hits][:1] == [m2.id]
    # A vector given with the write replaces the stored one.
    renewed = pruned.model_copy(update={"messages": [m1.model_copy(update={"embedding": unit(3)})]})
    await store.put_episodes([renewed])
    assert (await store.get_messages([m1.id]))[m1.id].embedding == unit(3)
    assert await store.get_messages([m2.id]) == {}

"""Storage-contract findings of the fourth acceptance audit (store and index, both backends).

Each test failed on one backend before its fix: the same calls must give the same answer or
the same typed error on both, and a refused call changes nothing, including inside an open
unit of work.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from cycgraph_memory.errors import DuplicateRecordError

from .factories import EMBED_DIM, make_entity, make_episode, make_fact, make_message, unit


async def test_a_refused_episode_leaves_the_unit_of_work_usable(store: Any) -> None:
    # A message already stored in another episode is refused with DuplicateRecordError;
    # on Postgres the refusal came from the unique constraint, which aborted the enclosing
    # transaction: the next statement failed and the block's earlier writes were lost.
    stored = make_episode()
    await store.put_episode(stored)
    before, after = make_entity(name="before"), make_entity(name="after")
    thief = make_episode(messages=[stored.messages[0]])
    async with store.transaction():
        await store.put_entity(before)
        with pytest.raises(DuplicateRecordError, match=str(stored.messages[0].id)):
            await store.put_episode(thief)
        await store.put_entity(after)
    got = await store.get_entities([before.id, after.id])
    assert sorted(e.name for e in got.values()) == ["after", "before"]
    assert await store.get_episode(thief.id) is None
    assert await store.get_episode(stored.id) == stored


async def test_a_message_in_two_episodes_of_one_write_is_refused_alike(store: Any) -> None:
    shared = make_message(content="shared")
    first, second = make_episode(messages=[shared]), make_episode(messages=[shared])
    kept = make_entity(name="kept")
    async with store.transaction():
        await store.put_entity(kept)
        with pytest.raises(DuplicateRecordError, match="of one write"):
            await store.put_episodes([first, second])
    assert await store.get_entity(kept.id) == kept
    assert await store.get_episodes([first.id, second.id]) == {}
    assert await store.get_messages([shared.id]) == {}


async def test_moving_a_message_in_one_write_is_still_accepted(store: Any) -> None:
    moving = make_message(content="moving")
    origin = make_episode(messages=[moving])
    await store.put_episode(origin)
    target = make_episode(messages=[moving])
    await store.put_episodes([target, origin.model_copy(update={"messages": []})])
    got = await store.get_messages([moving.id, uuid.uuid4()])
    assert list(got) == [moving.id]
    stored_origin = await store.get_episode(origin.id)
    stored_target = await store.get_episode(target.id)
    assert stored_origin is not None and stored_origin.messages == []
    assert stored_target is not None and [m.id for m in stored_target.messages] == [moving.id]


async def test_a_stored_zero_vector_ranks_by_its_score_of_zero(store: Any, index: Any) -> None:
    # A stored zero vector scores 0. On Postgres its distance was NaN, which SQL sorts
    # after every number: it was served after results of negative similarity (the list
    # was not best first) and cut before them by a limit.
    zero = make_fact(content="zero", embedding=[0.0] * EMBED_DIM)
    half = make_fact(content="half", embedding=[-1.0, 1.0] + [0.0] * (EMBED_DIM - 2))
    opposite = make_fact(content="opposite", embedding=[-1.0] + [0.0] * (EMBED_DIM - 1))
    await store.put_facts([zero, half, opposite])
    await index.rebuild(store)
    hits = await index.search_facts(unit(0), limit=10)
    scores = [h.score for h in hits]
    assert scores == sorted(scores, reverse=True)
    assert [h.item.id for h in hits] == [zero.id, half.id, opposite.id]
    assert scores == pytest.approx([0.0, -(0.5**0.5), -1.0], abs=1e-6)
    top = await index.search_facts(unit(0), limit=1)
    assert [h.item.id for h in top] == [zero.id]

"""Eighth audit (both backends): divergences found by the sequence differential test.

``tests/postgres/test_differential_sequences.py`` applies one random sequence of writes to
both backends and compares every read; each test here pins one disagreement it found and
failed before its fix:

* ``put_episodes`` given two versions of one episode (the last one wins) left, in memory,
  the message vectors of the earlier version behind: a message the earlier version
  carried with a vector got that vector in ``get_messages`` although the written version
  (or another episode of the call) carried a different one, or none;
* a message no longer stored (its episode replaced without it, or deleted) and written
  again without a vector got its old vector back in memory (Postgres had none): "a
  message written without a vector keeps the one stored for it" means a stored one.
"""

from __future__ import annotations

from typing import Any

import pytest

from .factories import make_episode, make_message, unit


async def test_put_episodes_duplicate_id_keeps_only_the_last_versions_vectors(
    store: Any,
) -> None:
    held = make_message(content="held elsewhere", embedding=unit(0))
    home = make_episode(messages=[held])
    await store.put_episodes([home])
    moved = make_message(content="moves", embedding=unit(1))
    stale = make_episode(messages=[held.model_copy(update={"embedding": unit(2)}),
                                   moved.model_copy(update={"embedding": unit(3)})])
    final = stale.model_copy(update={"messages": [make_message(content="only one")]})
    other = make_episode(messages=[moved])
    # ``stale`` and ``final`` share an id: ``final`` (the last) is the one written, so the
    # message ``held`` stays in ``home`` with its vector, and ``moved`` belongs to ``other``.
    await store.put_episodes([other, stale, final])
    got = await store.get_messages([held.id, moved.id])
    assert got[held.id].embedding == pytest.approx(unit(0))
    assert got[moved.id].embedding == pytest.approx(unit(1))
    stored = await store.get_episode(stale.id)
    assert [m.id for m in stored.messages] == [final.messages[0].id]


@pytest.mark.parametrize("removal", ["replaced", "deleted"])
async def test_message_no_longer_stored_does_not_get_its_old_vector_back(
    store: Any, removal: str
) -> None:
    message = make_message(content="turn", embedding=unit(0))
    first = make_episode(messages=[message])
    await store.put_episodes([first])
    if removal == "replaced":
        await store.put_episodes([first.model_copy(update={"messages": []})])
    else:
        assert await store.delete_episode(first.id)
    assert await store.get_messages([message.id]) == {}
    again = make_episode(messages=[message.model_copy(update={"embedding": None})])
    await store.put_episodes([again])
    got = await store.get_messages([message.id])
    assert got[message.id].embedding is None
    # Read, changed and written back (still stored): the vector is kept, as before.
    await store.put_episodes([again.model_copy(update={"topic": "renamed"})])
    second = make_message(content="next", embedding=unit(1))
    stored = await store.get_episode(again.id)
    await store.put_episodes([stored.model_copy(update={"messages": [*stored.messages, second]})])
    await store.put_episodes([(await store.get_episode(again.id)).model_copy(
        update={"invalidated_at": stored.started_at})])
    got = await store.get_messages([message.id, second.id])
    assert got[message.id].embedding is None
    assert got[second.id].embedding == pytest.approx(unit(1))

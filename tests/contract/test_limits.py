"""Limits and references, the same on both backends (issue 22).

* ``access_count`` is 64-bit: touching a fact past 2**31 - 1 keeps counting.
* Text fields hold at most ``MAX_TEXT_LENGTH`` characters, checked by the shared validation
  before any work; any text within the limit is accepted by Postgres too (its text-search
  column never refuses a record), whatever its characters.
* A fact cites only entities, episodes and themes of its own store/tenant
  (``DanglingReferenceError`` otherwise); hard deletes take the deleted id out of the facts.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from pydantic import ValidationError

from cycgraph_memory import MemoryPipeline
from cycgraph_memory.errors import DanglingReferenceError
from cycgraph_memory.inmemory import InMemoryMemoryStore
from cycgraph_memory.records import MAX_ACCESS_COUNT, MAX_TEXT_LENGTH, Message, SemanticFact

from .factories import EMBED_DIM, make_entity, make_episode, make_fact, make_theme, provenance

INT32_MAX = 2**31 - 1


@pytest.fixture
def other_tenant_store(backend: str, request: pytest.FixtureRequest) -> Any:
    if backend == "memory":
        return InMemoryMemoryStore(expected_dimensions=EMBED_DIM)
    return request.getfixturevalue("pg_make_store")(f"other-{uuid.uuid4().hex[:8]}")


async def _facts(store: Any) -> list[SemanticFact]:
    return list(await store.find_facts(include_invalidated=True))


def _bypass(record: Any, **update: Any) -> Any:
    return record.model_copy(update=update)  # skips validation, like a careless caller


# ------------------------------------------------------------------ item 1: counters


async def test_access_count_keeps_counting_past_32_bits(store: Any) -> None:
    fact = make_fact(access_count=INT32_MAX)
    await store.put_fact(fact)
    await store.touch_facts([fact.id])
    await store.touch_facts([fact.id])
    got = await store.get_fact(fact.id)
    assert got is not None and got.access_count == INT32_MAX + 2


async def test_access_count_round_trips_at_the_64_bit_limit(store: Any) -> None:
    fact = make_fact(access_count=MAX_ACCESS_COUNT)
    await store.put_fact(fact)
    assert (await store.get_fact(fact.id)).access_count == MAX_ACCESS_COUNT
    await store.touch_facts([fact.id])  # saturates, never overflows
    assert (await store.get_fact(fact.id)).access_count == MAX_ACCESS_COUNT
    with pytest.raises(ValidationError):
        make_fact(access_count=MAX_ACCESS_COUNT + 1)


# ------------------------------------------------------------------ item 2: text sizes


def _worst_case_text(length: int) -> str:
    """Distinct one-letter words of 4-byte UTF-8 letters: the largest tsvector per char."""
    words = [chr(0x20000 + i) for i in range(length // 2)]  # CJK Extension B letters
    text = " ".join(words)
    return (text + " x")[:length] if len(text) < length else text[:length]


@pytest.mark.parametrize("kind", ["worst", "ascii"])
async def test_text_at_the_limit_is_stored_and_indexed(store: Any, kind: str) -> None:
    if kind == "worst":
        content = _worst_case_text(MAX_TEXT_LENGTH)
    else:
        content = " ".join(f"w{i}" for i in range(30_000))[:MAX_TEXT_LENGTH]
    assert len(content) == MAX_TEXT_LENGTH
    fact = make_fact(content=content)
    episode = make_episode(messages=[Message(role="user", content=content)])
    await store.put_episode(episode)
    await store.put_fact(fact)
    got = await store.get_fact(fact.id)
    assert got is not None and got.content == content
    stored = await store.get_episode(episode.id)
    assert stored is not None and stored.messages[0].content == content


@pytest.mark.parametrize("size", [MAX_TEXT_LENGTH + 1, 10_000_000])
async def test_text_over_the_limit_is_refused_before_any_work(store: Any, size: int) -> None:
    text = "a" * size
    with pytest.raises(ValidationError, match="MAX_TEXT_LENGTH"):
        make_fact(content=text)
    with pytest.raises(ValidationError, match="MAX_TEXT_LENGTH"):
        Message(role="user", content=text)
    before = await _facts(store)
    # Smuggled past construction: the store edge refuses it the same way on both backends.
    with pytest.raises(ValidationError, match="MAX_TEXT_LENGTH"):
        await store.put_fact(_bypass(make_fact(), content=text))
    episode = make_episode()
    with pytest.raises(ValidationError, match="MAX_TEXT_LENGTH"):
        await store.put_episode(
            _bypass(episode, messages=[_bypass(episode.messages[0], content=text)])
        )
    assert await _facts(store) == before
    assert await store.get_episode(episode.id) is None


async def test_other_text_fields_share_the_limit(store: Any) -> None:
    long = "x" * (MAX_TEXT_LENGTH + 1)
    with pytest.raises(ValidationError):
        make_theme(description=long)
    with pytest.raises(ValidationError):
        provenance(agent_id=long)
    with pytest.raises(ValidationError):
        make_entity(attributes={"note": long})
    with pytest.raises(ValidationError):
        make_fact(invalidated_by=long)


# ------------------------------------------------------------------ item 3: ingest


@pytest.mark.parametrize("size", [1_000_000, 10_000_000])
async def test_ingest_refuses_an_oversized_message_up_front(store: Any, size: int) -> None:
    pipeline = MemoryPipeline(store)
    message = _bypass(Message(role="user", content="x"), content="Q" + "b" * size)
    with pytest.raises(ValidationError, match="MAX_TEXT_LENGTH"):
        await pipeline.ingest([message])
    with pytest.raises(ValidationError, match="MAX_TEXT_LENGTH"):
        await pipeline.ingest([{"role": "user", "content": "Q" + "b" * size}])
    assert await _facts(store) == []
    assert await store.list_episodes(include_invalidated=True) == []


async def test_ingest_of_a_message_without_spaces_at_the_limit_succeeds(store: Any) -> None:
    """Bounded tokens: no derived record (entity name, fact) outgrows its own limit."""
    content = ("Qbcdefghij" * (MAX_TEXT_LENGTH // 10))[:MAX_TEXT_LENGTH]
    report = await MemoryPipeline(store).ingest([Message(role="user", content=content)])
    assert report.messages_ingested == 1
    for entity in await store.find_entities():
        assert len(entity.name) <= 1024


# ------------------------------------------------------------------ item 4: references


async def test_fact_citing_unknown_records_is_refused(store: Any) -> None:
    ghost_entity, ghost_episode, ghost_theme = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    cases = [
        ({"entity_ids": [ghost_entity]}, ghost_entity),
        ({"source_episode_ids": [ghost_episode]}, ghost_episode),
        ({"theme_id": ghost_theme}, ghost_theme),
    ]
    for fields, missing in cases:
        fact = make_fact(**fields)
        with pytest.raises(DanglingReferenceError) as info:
            await store.put_fact(fact)
        assert info.value.missing_ids == [missing]
        ok = make_fact()
        with pytest.raises(DanglingReferenceError):
            await store.put_facts([ok, fact])  # all or nothing
        assert await _facts(store) == []


async def test_fact_citing_another_tenants_records_is_refused(
    store: Any, other_tenant_store: Any
) -> None:
    entity, theme, episode = make_entity(), make_theme(), make_episode()
    await other_tenant_store.put_entity(entity)
    await other_tenant_store.put_theme(theme)
    await other_tenant_store.put_episode(episode)
    fact = make_fact(entity_ids=[entity.id], theme_id=theme.id, source_episode_ids=[episode.id])
    with pytest.raises(DanglingReferenceError) as info:
        await store.put_fact(fact)
    assert set(info.value.missing_ids) == {entity.id, theme.id, episode.id}
    assert await _facts(store) == []
    await other_tenant_store.put_fact(fact)  # fine in its own tenant
    put_once = getattr(store, "put_facts_once", None)
    if put_once is not None:
        with pytest.raises(DanglingReferenceError):
            await put_once("key-1", [fact])
        assert await _facts(store) == []


async def test_fact_citing_stored_records_is_accepted(store: Any) -> None:
    entity, theme, episode = make_entity(), make_theme(), make_episode()
    await store.put_entity(entity)
    await store.put_theme(theme)
    await store.put_episode(episode)
    fact = make_fact(entity_ids=[entity.id], theme_id=theme.id, source_episode_ids=[episode.id])
    await store.put_fact(fact)
    assert await store.get_fact(fact.id) == fact


async def test_hard_deletes_take_the_id_out_of_the_facts(store: Any) -> None:
    e1, e2, theme, ep1, ep2 = (make_entity(), make_entity(), make_theme(), make_episode(),
                               make_episode())
    await store.put_entities([e1, e2])
    await store.put_theme(theme)
    await store.put_episodes([ep1, ep2])
    fact = make_fact(entity_ids=[e1.id, e2.id], theme_id=theme.id,
                     source_episode_ids=[ep1.id, ep2.id])
    other = make_fact(entity_ids=[e2.id])
    await store.put_facts([fact, other])
    assert await store.delete_entity(e1.id)
    assert await store.delete_theme(theme.id)
    assert await store.delete_episode(ep2.id)
    got = await store.get_fact(fact.id)
    assert got is not None
    assert (got.entity_ids, got.theme_id, got.source_episode_ids) == ([e2.id], None, [ep1.id])
    assert (await store.get_fact(other.id)).entity_ids == [e2.id]
    await store.put_fact(got)  # what is left is still writable
    assert [f.id for f in await store.find_facts(entity_id=e1.id)] == []
    assert {f.id for f in await store.find_facts(entity_id=e2.id)} == {fact.id, other.id}

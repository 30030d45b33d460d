"""Third retrieval audit: acceptance checks written from the spec, on both backends."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import timedelta, timezone
from typing import Any

import pytest
from pydantic import ValidationError

from cycgraph_memory import QUARANTINE_TAG, retrieve_memory
from cycgraph_memory.errors import CycgraphMemoryError
from cycgraph_memory.inmemory import InMemoryMemoryIndex, InMemoryMemoryStore
from cycgraph_memory.records import MemoryResult
from cycgraph_memory.retrieval.lessons import retrieve_gated_lessons

from .factories import (
    EMBED_DIM,
    at,
    blend,
    make_entity,
    make_episode,
    make_fact,
    make_message,
    make_relationship,
    make_theme,
    provenance,
    unit,
)


class Embedder:
    """Maps known texts to fixed vectors (anything else: the last axis)."""

    dimensions = EMBED_DIM

    def __init__(self, table: dict[str, list[float]] | None = None) -> None:
        self.table = table or {}

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return [self.table.get(t, unit(EMBED_DIM - 1)) for t in texts]


def ids(records: Sequence[Any]) -> list[uuid.UUID]:
    return [r.id for r in records]


def uid(i: int) -> uuid.UUID:
    return uuid.UUID(int=0xA000 + i)


FULL = provenance(source="tool", tool_name="search", node_id="n-7", run_id="r-9",
                  agent_id="ag", confidence=0.5)

_COUNTERS = {"access_count", "last_accessed_at"}


async def _assert_whole(store: Any, result: MemoryResult) -> None:
    """Every returned record is the stored one (counters aside), provenance included."""
    if result.facts:
        got = await store.get_facts(ids(result.facts))
        for f in result.facts:
            assert f.provenance is not None
            assert f.model_dump(exclude=_COUNTERS) == got[f.id].model_dump(exclude=_COUNTERS)
    for kind, getter in (("entities", store.get_entities), ("episodes", store.get_episodes),
                         ("themes", store.get_themes)):
        records = getattr(result, kind)
        if records:
            got = await getter(ids(records))
            for r in records:
                assert r.provenance is not None
                assert r.model_dump(exclude={"messages"}) == got[r.id].model_dump(
                    exclude={"messages"}
                ), kind
    for r in result.relationships:
        stored = await store.get_relationship(r.id)
        assert r.provenance is not None
        assert r == stored


async def _world(store: Any, index: Any) -> dict[str, Any]:
    """A small graph with a theme, an episode and facts reached by every path."""
    alice = make_entity(id=uid(1), name="Alice", entity_type="person", provenance=FULL)
    acme = make_entity(id=uid(2), name="Acme", entity_type="organization", provenance=FULL)
    works = make_relationship(alice.id, acme.id, id=uid(3), provenance=FULL,
                              attributes={"k": [1, "ü"]}, weight=0.25)
    msg = make_message(content="alice works at acme", embedding=unit(0), timestamp=at(1))
    ep = make_episode(id=uid(4), messages=[msg], provenance=FULL)
    theme = make_theme(id=uid(5), embedding=unit(0), provenance=FULL)
    fact = make_fact(id=uid(6), content="alice works at acme", embedding=unit(0),
                     entity_ids=[alice.id, acme.id], source_episode_ids=[ep.id],
                     source_message_ids=[msg.id], theme_id=theme.id, tags=["lesson", "ü"],
                     provenance=FULL, valid_from=at(1))
    theme = theme.model_copy(update={"fact_ids": [fact.id]})
    await store.put_entities([alice, acme])
    await store.put_relationship(works)
    await store.put_episodes([ep])
    await store.put_themes([theme])
    await store.put_facts([fact])
    await index.rebuild(store)
    return {"alice": alice, "acme": acme, "works": works, "ep": ep, "theme": theme,
            "fact": fact, "msg": msg}


# ----------------------------------------------------------------------------- provenance


async def test_every_path_returns_whole_records_with_provenance(store: Any, index: Any) -> None:
    w = await _world(store, index)
    emb = Embedder({"alice works at acme": unit(0)})
    results = {
        "tags": await retrieve_memory(store, index, {"tags": ["lesson"]}),
        "tags-time": await retrieve_memory(store, index, {"tags": ["ü"], "valid_at": at(5)}),
        "vector": await retrieve_memory(store, index, {"embedding": unit(0)}, mode="vector"),
        "text": await retrieve_memory(store, index, {"text": "alice acme"}, mode="text"),
        "hybrid": await retrieve_memory(store, index, {"text": "alice works at acme"},
                                        embedder=emb),
        "graph": await retrieve_memory(store, index, {"entity_ids": [w["alice"].id]}),
    }
    for name, r in results.items():
        assert ids(r.facts) == [w["fact"].id], name
        assert r.facts[0].provenance == FULL, name
        await _assert_whole(store, r)
    for name in ("vector", "hybrid", "graph"):
        r = results[name]
        assert ids(r.entities) == [w["alice"].id, w["acme"].id], name
        assert ids(r.relationships) == [w["works"].id], name
        assert ids(r.episodes) == [w["ep"].id], name
        assert ids(r.themes) == [w["theme"].id], name
    lessons = await retrieve_gated_lessons(store, tags=["lesson"])
    assert lessons[0].model_dump(exclude=_COUNTERS) == w["fact"].model_dump(exclude=_COUNTERS)


# ----------------------------------------------------------------------------- odd inputs


async def test_an_empty_store_answers_every_path_with_nothing(store: Any, index: Any) -> None:
    await index.rebuild(store)
    queries: list[tuple[dict[str, Any], Any]] = [
        ({"tags": ["lesson"]}, None),
        ({"tags": ["lesson"], "valid_at": at(0)}, None),
        ({"embedding": unit(0), "min_similarity": 0.0}, "vector"),
        ({"text": "anything at all", "min_similarity": 0.0}, "text"),
        ({"text": "anything at all", "embedding": unit(0), "min_similarity": 0.0}, "hybrid"),
        ({"entity_ids": [uuid.uuid4()]}, None),
    ]
    for q, mode in queries:
        r = await retrieve_memory(store, index, q, mode=mode)
        assert r == MemoryResult(), q
    assert await retrieve_gated_lessons(store, tags=["lesson"]) == []


async def test_unicode_and_empty_text(store: Any, index: Any) -> None:
    f = make_fact(content="Zoë's café uses 東京 servers", tags=["日本"], embedding=unit(1))
    await store.put_facts([f])
    await index.rebuild(store)
    r = await retrieve_memory(store, index, {"tags": ["日本"]})
    assert ids(r.facts) == [f.id]
    r = await retrieve_memory(store, index, {"text": "zoë café", "min_similarity": 0.0},
                              mode="text")
    assert ids(r.facts) == [f.id]
    r = await retrieve_memory(store, index, {"text": "", "min_similarity": 0.0}, mode="text")
    assert r.facts == []
    r = await retrieve_memory(store, index, {"text": "   ", "min_similarity": 0.0}, mode="text")
    assert r.facts == []


async def test_limit_one_and_the_largest_limit_on_every_path(store: Any, index: Any) -> None:
    a = make_entity(id=uid(0), name="Hub")
    spokes = [make_entity(id=uid(100 + i), name=f"spoke {i}") for i in range(105)]
    rels = [make_relationship(a.id, s.id, id=uid(300 + i), valid_from=at(i))
            for i, s in enumerate(spokes)]
    facts = [
        make_fact(id=uid(500 + i), content=f"hub fact number {i}", tags=["l"],
                  embedding=blend(0, 1, 8, i % 7), entity_ids=[a.id, spokes[i].id],
                  valid_from=at(i))
        for i in range(105)
    ]
    themes = [make_theme(id=uid(700 + i), embedding=unit(0)) for i in range(3)]
    await store.put_entities([a, *spokes])
    await store.put_relationships(rels)
    await store.put_themes(themes)
    await store.put_facts(facts)
    await index.rebuild(store)
    for limit in (1, 100):
        for q, mode in (
            ({"tags": ["l"]}, None),
            ({"tags": ["l"], "valid_at": at(1000)}, None),
            ({"embedding": unit(0), "min_similarity": 0.0}, "vector"),
            ({"text": "hub fact", "min_similarity": 0.0}, "text"),
            ({"text": "hub fact", "embedding": unit(0), "min_similarity": 0.0}, "hybrid"),
            ({"entity_ids": [a.id], "max_hops": 1}, None),
        ):
            r = await retrieve_memory(store, index, {**q, "limit": limit}, mode=mode)
            for kind in ("themes", "facts", "episodes", "entities", "relationships"):
                assert len(getattr(r, kind)) <= limit, (q, kind)
            assert len(r.facts) == limit, (q, limit)
    with pytest.raises(ValidationError):
        await retrieve_memory(store, index, {"tags": ["l"], "limit": 10**9})


async def test_invalid_queries_change_nothing(store: Any, index: Any) -> None:
    f = make_fact(tags=["l"], embedding=unit(0))
    await store.put_facts([f])
    await index.rebuild(store)
    before = await store.get_fact(f.id)
    bad: list[tuple[Any, dict[str, Any]]] = [
        ({"tags": ["l"], "limit": 0}, {}),
        ({"tags": ["l"], "entity_ids": ["not-a-uuid"]}, {}),
        ({"tags": [""]}, {}),
        ({"tags": "l"}, {}),
        ({"tags": ["l"], "valid_at": "yesterday"}, {}),
        ({"embedding": [*unit(0), 1.0]}, {"mode": "vector"}),
        ({"embedding": unit(0)}, {"mode": "nonsense"}),
        ({"tags": ["l"]}, {"options": {"theme_limit": -1}}),
        ({"tags": ["l"]}, {"options": {"bogus": 1}}),
        ({"tags": ["l"], "max_hops": 1.5}, {}),
        ({"tags": ["l"], "include_invalidated": "maybe"}, {}),
    ]
    for q, kw in bad:
        with pytest.raises((ValidationError, CycgraphMemoryError)):
            await retrieve_memory(store, index, q, **kw)
    after = await store.get_fact(f.id)
    assert after == before


# ----------------------------------------------------------------------------- time


async def test_validity_bounds_are_half_open_on_every_path(store: Any, index: Any) -> None:
    """[valid_from, valid_until): valid at valid_from, not at valid_until; changed_since strict."""
    a, b = make_entity(id=uid(1)), make_entity(id=uid(2))
    edge = make_relationship(a.id, b.id, valid_from=at(10), valid_until=at(20))
    f = make_fact(id=uid(3), content="bounded window fact", embedding=unit(0), tags=["l"],
                  entity_ids=[a.id], valid_from=at(10), valid_until=at(20))
    await store.put_entities([a, b])
    await store.put_relationship(edge)
    await store.put_facts([f])
    await index.rebuild(store)
    emb = Embedder({"bounded window fact": unit(0)})
    paths: list[tuple[dict[str, Any], Any]] = [
        ({"tags": ["l"]}, None),
        ({"embedding": unit(0)}, "vector"),
        ({"text": "bounded window"}, "text"),
        ({"text": "bounded window fact"}, "hybrid"),
        ({"entity_ids": [a.id]}, None),
    ]
    cases = [
        ({"valid_at": at(10)}, True),
        ({"valid_at": at(19.999999)}, True),
        ({"valid_at": at(20)}, False),
        ({"valid_at": at(9.999999)}, False),
        ({"changed_since": at(19.999999)}, True),  # ended after it
        ({"changed_since": at(20)}, False),
        ({"changed_since": at(9)}, True),
    ]
    for q, mode in paths:
        for extra, present in cases:
            r = await retrieve_memory(store, index, {**q, **extra}, mode=mode, embedder=emb)
            assert (ids(r.facts) == [f.id]) is present, (q, extra)
    for extra, present in cases:
        r = await retrieve_memory(store, index, {"entity_ids": [a.id], **extra})
        assert (ids(r.relationships) == [edge.id]) is present, extra
        if "valid_at" in extra:
            assert (ids(r.entities) == [a.id, b.id]) is present, extra


async def test_offset_datetimes_mean_the_same_instant(store: Any, index: Any) -> None:
    f = make_fact(id=uid(1), tags=["l"], embedding=unit(0), valid_from=at(10),
                  valid_until=at(20))
    await store.put_facts([f])
    await index.rebuild(store)
    plus5 = timezone(timedelta(hours=5))
    inside = at(15).astimezone(plus5)
    outside = at(25).astimezone(plus5)
    for q, mode in (({"tags": ["l"]}, None), ({"embedding": unit(0)}, "vector")):
        assert ids((await retrieve_memory(store, index, {**q, "valid_at": inside},
                                          mode=mode)).facts) == [f.id]
        assert (await retrieve_memory(store, index, {**q, "valid_at": outside},
                                      mode=mode)).facts == []


# ----------------------------------------------------------------------------- soft delete


async def test_soft_deleted_themes_are_not_served(store: Any, index: Any) -> None:
    a = make_entity(id=uid(1))
    f = make_fact(id=uid(2), embedding=unit(0), entity_ids=[a.id], content="theme member")
    live = make_theme(id=uid(3), embedding=unit(0), fact_ids=[f.id])
    dead = make_theme(id=uid(4), embedding=unit(0), fact_ids=[f.id], invalidated_at=at(1))
    await store.put_entities([a])
    await store.put_themes([live, dead])
    await store.put_facts([f.model_copy(update={"theme_id": dead.id})])
    await index.rebuild(store)
    emb = Embedder({"theme member": unit(0)})
    for q, mode in (({"embedding": unit(0)}, "vector"),
                    ({"text": "theme member"}, "hybrid")):
        r = await retrieve_memory(store, index, q, mode=mode, embedder=emb)
        assert ids(r.themes) == [live.id], mode
        r = await retrieve_memory(store, index, {**q, "include_invalidated": True},
                                  mode=mode, embedder=emb)
        assert set(ids(r.themes)) == {live.id, dead.id}, mode
    r = await retrieve_memory(store, index, {"entity_ids": [a.id]})
    assert r.themes == []
    r = await retrieve_memory(store, index, {"entity_ids": [a.id], "include_invalidated": True})
    assert ids(r.themes) == [dead.id]


async def test_soft_deleted_records_never_come_back_on_any_path(
    store: Any, index: Any
) -> None:
    a = make_entity(id=uid(1), name="Alice")
    gone = make_entity(id=uid(2), name="Bob", invalidated_at=at(1))
    merged = make_entity(id=uid(3), name="Carol", superseded_by=a.id)
    dead_edge = make_relationship(a.id, uid(4), invalidated_by="x")
    other = make_entity(id=uid(4), name="Dave")
    live = make_fact(id=uid(10), content="alice bob carol dave fact", embedding=unit(0),
                     tags=["l"], entity_ids=[a.id, gone.id, merged.id, other.id])
    dead = make_fact(id=uid(11), content="alice bob carol dave fact", embedding=unit(0),
                     tags=["l"], entity_ids=[a.id], invalidated_by="wrong")
    await store.put_entities([a, gone, merged, other])
    await store.put_relationship(dead_edge)
    await store.put_facts([live, dead])
    await index.rebuild(store)
    emb = Embedder({"alice bob carol dave fact": unit(0)})
    for q, mode in (
        ({"tags": ["l"]}, None),
        ({"embedding": unit(0)}, "vector"),
        ({"text": "alice bob carol dave fact"}, "text"),
        ({"text": "alice bob carol dave fact"}, "hybrid"),
        ({"entity_ids": [a.id, gone.id, merged.id]}, None),
    ):
        r = await retrieve_memory(store, index, q, mode=mode, embedder=emb)
        assert ids(r.facts) == [live.id], (q, mode)
        assert gone.id not in ids(r.entities) and merged.id not in ids(r.entities), (q, mode)
        assert dead_edge.id not in ids(r.relationships), (q, mode)
    assert ids(await retrieve_gated_lessons(store, tags=["l"])) == [live.id]


# ----------------------------------------------------------------------------- quarantine


async def test_quarantined_facts_never_reach_a_lesson_path(store: Any, index: Any) -> None:
    biscuit = make_entity(id=uid(1), name="Biscuit", entity_type="concept")
    ok = make_fact(id=uid(2), content="biscuit likes long walks", embedding=unit(0),
                   tags=["lesson"], entity_ids=[biscuit.id], valid_from=at(1))
    bad = make_fact(id=uid(3), content="biscuit likes long walks", embedding=unit(0),
                    tags=["lesson", QUARANTINE_TAG, "candidate"], entity_ids=[biscuit.id],
                    valid_from=at(2))
    theme = make_theme(id=uid(4), embedding=unit(0), fact_ids=[ok.id, bad.id])
    await store.put_entities([biscuit])
    await store.put_themes([theme])
    await store.put_facts([ok, bad])
    await index.rebuild(store)
    emb = Embedder({"where does biscuit walk": unit(0)})
    for q, mode in (
        ({"tags": ["lesson"]}, None),
        ({"tags": ["lesson"], "changed_since": at(0)}, None),
        ({"embedding": unit(0)}, "vector"),
        ({"text": "where does biscuit walk"}, "text"),
        ({"text": "where does biscuit walk"}, "hybrid"),
        ({"text": "where does biscuit walk", "tags": ["lesson"]}, "hybrid"),
        ({"entity_ids": [biscuit.id]}, None),
    ):
        r = await retrieve_memory(store, index, q, mode=mode, embedder=emb)
        assert ids(r.facts) == [ok.id], (q, mode)
        assert bad.id not in r.fact_scores
    for slots in (0, 2, 10):
        got = await retrieve_gated_lessons(store, tags=["lesson", QUARANTINE_TAG],
                                           max_facts=10, candidate_slots=slots)
        assert ids(got) == [ok.id]


# ----------------------------------------------------------------------------- backends agree


async def _load_ties(store: Any, index: Any) -> dict[str, Any]:
    hub = make_entity(id=uid(1), name="Hub")
    others = [make_entity(id=uuid.UUID(int=(0x5 << 124) + i * 7919), name=f"n{i}")
              for i in range(12)]
    rels = [make_relationship(hub.id if i < 6 else others[i - 6].id, e.id,
                              id=uuid.UUID(int=(0x9 << 124) + i * 104729), valid_from=at(i % 3))
            for i, e in enumerate(others)]
    facts = [
        make_fact(id=uuid.UUID(int=(0xC << 124) + i * 15485863),
                  content=f"shared words tie {i % 2}", tags=["l", f"g{i % 3}"],
                  embedding=unit(i % 2), valid_from=at(i % 4),
                  entity_ids=[others[i % 12].id, hub.id] if i % 5 else [others[i % 12].id])
        for i in range(40)
    ]
    themes = [make_theme(id=uuid.UUID(int=(0xE << 124) + i), embedding=unit(0),
                         fact_ids=[f.id for f in facts[i::3]]) for i in range(3)]
    await store.put_entities([hub, *others])
    await store.put_relationships(rels)
    await store.put_themes(themes)
    await store.put_facts(facts)
    await index.rebuild(store)
    return {"hub": hub}


async def test_both_backends_return_the_same_ids_in_the_same_order(
    backend: str, store: Any, index: Any
) -> None:
    if backend != "postgres":
        pytest.skip("compares the Postgres backend with the in-memory one")
    mem_store = InMemoryMemoryStore(expected_dimensions=EMBED_DIM)
    mem_index = InMemoryMemoryIndex(expected_dimensions=EMBED_DIM)
    w = await _load_ties(store, index)
    await _load_ties(mem_store, mem_index)
    emb = Embedder({"shared words tie": unit(0)})
    queries: list[tuple[dict[str, Any], Any]] = [
        ({"tags": ["g1", "g2"], "limit": 7}, None),
        ({"tags": ["l"], "valid_at": at(2), "limit": 9}, None),
        ({"embedding": unit(0), "limit": 9, "min_similarity": 0.0}, "vector"),
        ({"embedding": unit(0), "limit": 9, "tags": ["g0"]}, "vector"),
        ({"text": "shared words tie", "limit": 9, "min_similarity": 0.0}, "text"),
        ({"text": "shared words tie", "limit": 9, "min_similarity": 0.0}, "hybrid"),
        ({"entity_ids": [w["hub"].id], "limit": 11}, None),
        ({"entity_ids": [w["hub"].id], "limit": 11, "max_hops": 1, "valid_at": at(1)}, None),
    ]
    for q, mode in queries:
        pg = await retrieve_memory(store, index, q, mode=mode, embedder=emb)
        mem = await retrieve_memory(mem_store, mem_index, q, mode=mode, embedder=emb)
        for kind in ("themes", "facts", "episodes", "entities", "relationships"):
            assert ids(getattr(pg, kind)) == ids(getattr(mem, kind)), (q, mode, kind)
    for slots in (0, 3):
        pg_l = await retrieve_gated_lessons(store, tags=["g1"], candidate_slots=slots)
        mem_l = await retrieve_gated_lessons(mem_store, tags=["g1"], candidate_slots=slots)
        assert ids(pg_l) == ids(mem_l)


# ----------------------------------------------------------------------------- messages


async def test_messages_of_soft_deleted_episodes_are_not_served(
    store: Any, index: Any
) -> None:
    """A live fact grounded in a turn of a soft-deleted episode does not bring that turn back.

    The message searches treat the turns of an invalidated episode as invalidated; the
    turns reached through the served facts' ``source_message_ids`` must too.
    """
    live_msg = make_message(content="greyhound adopted", embedding=unit(2), timestamp=at(1))
    dead_msg = make_message(content="greyhound racing", embedding=unit(3), timestamp=at(2))
    live_ep = make_episode(id=uid(1), messages=[live_msg], started_at=at(1), ended_at=at(1))
    dead_ep = make_episode(id=uid(2), messages=[dead_msg], started_at=at(2), ended_at=at(2),
                           invalidated_at=at(3))
    f1 = make_fact(id=uid(3), content="greyhound adopted", embedding=unit(0),
                   source_message_ids=[live_msg.id], source_episode_ids=[live_ep.id])
    f2 = make_fact(id=uid(4), content="greyhound racing", embedding=blend(0, 1, 4, 1),
                   source_message_ids=[dead_msg.id], source_episode_ids=[dead_ep.id])
    await store.put_episodes([live_ep, dead_ep])
    await store.put_facts([f1, f2])
    await index.rebuild(store)
    emb = Embedder({"greyhound": unit(0)})
    for mode in ("vector", "text", "hybrid"):
        for tags in ([], ["t"]):
            q = {"text": "greyhound", "min_similarity": 0.0}
            if tags:
                await store.put_facts([f1.model_copy(update={"tags": tags}),
                                       f2.model_copy(update={"tags": tags})])
                await index.rebuild(store)
                q["tags"] = tags
            r = await retrieve_memory(store, index, q, mode=mode, embedder=emb)
            assert set(ids(r.facts)) == {f1.id, f2.id}, (mode, tags)
            assert ids(r.episodes) == [live_ep.id], mode
            assert ids(r.messages) == [live_msg.id], (mode, tags)
            r = await retrieve_memory(store, index, {**q, "include_invalidated": True},
                                      mode=mode, embedder=emb)
            assert set(ids(r.messages)) == {live_msg.id, dead_msg.id}, (mode, tags)
        await store.put_facts([f1, f2])
        await index.rebuild(store)


async def test_a_soft_deleted_entity_named_in_the_question_adds_nothing(
    store: Any, index: Any
) -> None:
    live = make_entity(id=uid(1), name="Biscuit", entity_type="concept")
    gone = make_entity(id=uid(2), name="Tariq", entity_type="person", invalidated_at=at(1))
    merged = make_entity(id=uid(3), name="Zoë", entity_type="person", superseded_by=live.id)
    f_live = make_fact(id=uid(4), content="sleeps on the sofa", entity_ids=[live.id])
    f_gone = make_fact(id=uid(5), content="works nights", entity_ids=[gone.id])
    f_merged = make_fact(id=uid(6), content="plays the cello", entity_ids=[merged.id])
    filler = [make_fact(id=uid(10 + i), content=f"unrelated note {i}") for i in range(5)]
    await store.put_entities([live, gone, merged])
    await store.put_facts([f_live, f_gone, f_merged, *filler])
    await index.rebuild(store)
    q = {"text": "what about biscuit, tariq and zoë?", "min_similarity": 0.0}
    r = await retrieve_memory(store, index, q, mode="text")
    assert ids(r.facts) == [f_live.id]
    assert ids(r.entities) == [live.id]
    r = await retrieve_memory(store, index, {**q, "include_invalidated": True}, mode="text")
    assert set(ids(r.facts)) == {f_live.id, f_gone.id, f_merged.id}


# ----------------------------------------------------------------------------- gate


async def test_gated_lessons_follow_the_gates_verdicts(
    backend: str, store: Any, request: pytest.FixtureRequest
) -> None:
    from cycgraph_memory.inmemory.ledger import InMemoryOutcomeLedger
    from cycgraph_memory.records import RunOutcome
    from cycgraph_memory.retention.gate import evaluate_retention

    if backend == "memory":
        ledger: Any = InMemoryOutcomeLedger()
    else:
        from cycgraph_memory.postgres import PostgresOutcomeLedger

        ledger = PostgresOutcomeLedger(request.getfixturevalue("pg_sessionmaker"),
                                       tenant_id=request.getfixturevalue("pg_tenant"))
    good = make_fact(id=uid(1), tags=["lesson", "candidate"], valid_from=at(1))
    bad = make_fact(id=uid(2), tags=["lesson", "candidate"], valid_from=at(2))
    old = make_fact(id=uid(3), tags=["lesson", "verified"], valid_from=at(0))
    await store.put_facts([good, bad, old])
    first = await retrieve_gated_lessons(store, tags=["lesson"], max_facts=3,
                                         candidate_slots=2)
    assert ids(first) == [old.id, bad.id, good.id]
    for i in range(4):
        await ledger.record_outcome(RunOutcome(run_id=f"g{i}", score=0.9, fact_ids=[good.id]))
        await ledger.record_outcome(RunOutcome(run_id=f"b{i}", score=0.1, fact_ids=[bad.id]))
        await ledger.record_outcome(RunOutcome(run_id=f"n{i}", score=0.5, fact_ids=[]))
    report = await evaluate_retention(store, ledger, {"decision_rule": "margin",
                                                      "min_trials": 3})
    assert [p.fact_id for p in report.promoted] == [good.id]
    assert [e.fact_id for e in report.evicted] == [bad.id]
    after = await retrieve_gated_lessons(store, tags=["lesson"], max_facts=3,
                                         candidate_slots=2, ledger=ledger)
    # The promoted lesson is verified now (newest first), the evicted one is gone.
    assert ids(after) == [good.id, old.id]
    r = await retrieve_memory(store, InMemoryMemoryIndex(), {"tags": ["lesson"]})
    assert ids(r.facts) == [old.id, good.id]


@pytest.mark.parametrize("mode", ["vector", "hybrid"])
async def test_themes_the_index_was_not_told_about_are_not_served(
    store: Any, index: Any, mode: str
) -> None:
    """A theme soft-deleted or deleted through the store only is not served (as facts)."""
    f = make_fact(id=uid(1), content="alpha report", embedding=unit(0))
    soft = make_theme(id=uid(2), embedding=unit(0), fact_ids=[f.id])
    hard = make_theme(id=uid(3), embedding=unit(0), fact_ids=[f.id])
    kept = make_theme(id=uid(4), embedding=unit(0), fact_ids=[f.id])
    await store.put_themes([soft, hard, kept])
    await store.put_facts([f])
    await index.rebuild(store)
    await store.put_theme(soft.model_copy(update={"invalidated_at": at(5)}))
    await store.delete_theme(hard.id)
    relabelled = kept.model_copy(update={"label": "renamed"})
    await store.put_theme(relabelled)
    r = await retrieve_memory(
        store, index, {"embedding": unit(0), "text": "alpha report", "min_similarity": 0.0},
        mode=mode,
    )
    assert ids(r.facts) == [f.id]
    assert ids(r.themes) == [kept.id]
    assert r.themes[0] == relabelled


async def test_messages_the_index_was_not_told_about_are_not_served(
    store: Any, index: Any
) -> None:
    """Turns of an episode soft-deleted through the store only are not served."""
    m = make_message(content="greyhound adopted", embedding=unit(0), timestamp=at(1))
    ep = make_episode(id=uid(1), messages=[m], started_at=at(1), ended_at=at(1))
    await store.put_episodes([ep])
    await index.rebuild(store)
    await store.put_episode(ep.model_copy(update={"invalidated_at": at(2)}))
    emb = Embedder({"greyhound": unit(0)})
    for mode in ("vector", "text", "hybrid"):
        r = await retrieve_memory(store, index, {"text": "greyhound", "min_similarity": 0.0},
                                  mode=mode, embedder=emb)
        assert r.messages == [], mode


async def test_entities_the_index_was_not_told_about_add_no_graph_facts(
    store: Any, index: Any
) -> None:
    """An entity soft-deleted through the store only is not a graph signal any more."""
    biscuit = make_entity(id=uid(1), name="Biscuit", entity_type="concept")
    f = make_fact(id=uid(2), content="sleeps on the sofa", entity_ids=[biscuit.id])
    filler = [make_fact(id=uid(10 + i), content=f"unrelated note {i}") for i in range(5)]
    await store.put_entities([biscuit])
    await store.put_facts([f, *filler])
    await index.rebuild(store)
    await store.put_entity(biscuit.model_copy(update={"invalidated_at": at(3)}))
    r = await retrieve_memory(store, index, {"text": "where is biscuit?", "min_similarity": 0.0},
                              mode="text")
    assert r.facts == [] and r.entities == []


# ----------------------------------------------------------------------------- graph


async def test_self_loops_parallel_edges_and_direction(store: Any, index: Any) -> None:
    a, b, c = (make_entity(id=uid(i), name=f"n{i}") for i in (1, 2, 3))
    loop = make_relationship(a.id, a.id, id=uid(10), valid_from=at(0))
    ab1 = make_relationship(a.id, b.id, id=uid(11), valid_from=at(1))
    ab2 = make_relationship(a.id, b.id, id=uid(12), valid_from=at(1), relation_type="knows")
    ca = make_relationship(c.id, a.id, id=uid(13), valid_from=at(2))
    await store.put_entities([a, b, c])
    await store.put_relationships([loop, ab1, ab2, ca])
    both = await store.get_relationships_for_entities([a.id, a.id])
    assert ids(both) == [loop.id, ab1.id, ab2.id, ca.id]
    out = await store.get_relationships_for_entities([a.id], direction="outgoing")
    assert ids(out) == [loop.id, ab1.id, ab2.id]
    inc = await store.get_relationships_for_entities([a.id], direction="incoming")
    assert ids(inc) == [loop.id, ca.id]
    page = await store.get_relationships_for_entities([a.id], limit=2, offset=1)
    assert ids(page) == [ab1.id, ab2.id]
    typed = await store.get_relationships_for_entities([a.id, b.id], relation_type="knows")
    assert ids(typed) == [ab2.id]
    r = await retrieve_memory(store, index, {"entity_ids": [b.id], "max_hops": 2})
    assert ids(r.entities) == [b.id, a.id, c.id]
    # Nearest endpoint first (hop 0 = b), then (valid_from, id).
    assert ids(r.relationships) == [ab1.id, ab2.id, loop.id, ca.id]
    r = await retrieve_memory(store, index, {"entity_ids": [b.id], "max_hops": 1})
    assert ids(r.entities) == [b.id, a.id]
    # Only the edges traversed: those of the last hop's entities are not fetched.
    assert ids(r.relationships) == [ab1.id, ab2.id]
    r = await retrieve_memory(store, index, {"entity_ids": [b.id], "max_hops": 0})
    assert ids(r.entities) == [b.id] and r.relationships == []


async def test_expansion_filters_types_before_the_limit(store: Any, index: Any) -> None:
    orgs = [make_entity(id=uid(i), name=f"org {i}", entity_type="organization")
            for i in range(1, 4)]
    people = [make_entity(id=uid(i), name=f"person {i}", entity_type="person")
              for i in range(4, 7)]
    hub = make_entity(id=uid(9), name="hub", entity_type="place")
    edges = [make_relationship(e.id, hub.id, id=uid(20 + n), valid_from=at(n),
                               relation_type="a" if n % 2 else "b")
             for n, e in enumerate([*orgs, *people])]
    f = make_fact(id=uid(30), embedding=unit(0), valid_from=at(3),
                  entity_ids=[o.id for o in orgs] + [p.id for p in people])
    await store.put_entities([*orgs, *people, hub])
    await store.put_relationships(edges)
    await store.put_facts([f])
    await index.rebuild(store)
    r = await retrieve_memory(
        store, index, {"embedding": unit(0), "limit": 2, "entity_types": ["person"]},
        mode="vector",
    )
    assert ids(r.entities) == [people[0].id, people[1].id]
    assert ids(r.relationships) == [edges[3].id, edges[4].id]
    r = await retrieve_memory(
        store, index, {"embedding": unit(0), "limit": 2, "relation_types": ["b"]},
        mode="vector",
    )
    assert ids(r.relationships) == [edges[0].id, edges[2].id]
    r = await retrieve_memory(
        store, index, {"embedding": unit(0), "limit": 2, "changed_since": at(2.5)},
        mode="vector",
    )
    assert ids(r.relationships) == [edges[3].id, edges[4].id]


# ----------------------------------------------------------------------------- tenants


async def test_another_tenants_records_never_come_back(
    backend: str, store: Any, index: Any, request: pytest.FixtureRequest
) -> None:
    if backend != "postgres":
        pytest.skip("tenants are a Postgres concept")
    w = await _world(store, index)
    make = request.getfixturevalue("pg_make_store")
    other = f"{request.getfixturevalue('pg_tenant')}-b"
    o_store, o_index = make(other), make(other, index=True)
    emb = Embedder({"alice works at acme": unit(0)})
    queries: list[tuple[dict[str, Any], Any]] = [
        ({"tags": ["lesson"]}, None),
        ({"tags": ["lesson"], "valid_at": at(5)}, None),
        ({"embedding": unit(0), "min_similarity": 0.0}, "vector"),
        ({"text": "alice works at acme", "min_similarity": 0.0}, "text"),
        ({"text": "alice works at acme", "min_similarity": 0.0}, "hybrid"),
        ({"entity_ids": [w["alice"].id]}, None),
    ]
    for q, mode in queries:
        assert await retrieve_memory(o_store, o_index, q, mode=mode, embedder=emb) == \
            MemoryResult(), (q, mode)
    assert await retrieve_gated_lessons(o_store, tags=["lesson"]) == []
    # With records of its own, the other tenant sees only those.
    mine = make_fact(content="alice works at acme", embedding=unit(0), tags=["lesson"])
    await o_store.put_facts([mine])
    for q, mode in queries[:-1]:
        r = await retrieve_memory(o_store, o_index, q, mode=mode, embedder=emb)
        assert ids(r.facts) == [mine.id], (q, mode)
        assert r.entities == [] and r.themes == [] and r.messages == [], (q, mode)


async def test_a_tag_scope_serves_only_themes_of_its_facts(store: Any, index: Any) -> None:
    """Themes carry no tags: under a tag scope, a theme of another scope's facts stays out."""
    mine = make_fact(id=uid(1), content="deploy checklist", embedding=unit(0),
                     tags=["graph:a"])
    other = make_fact(id=uid(2), content="deploy checklist too", embedding=unit(0),
                      tags=["graph:b"])
    theme_a = make_theme(id=uid(3), label="a", embedding=unit(0), fact_ids=[mine.id])
    theme_b = make_theme(id=uid(4), label="b", embedding=unit(0), fact_ids=[other.id])
    await store.put_themes([theme_a, theme_b])
    await store.put_facts([mine.model_copy(update={"theme_id": theme_a.id}),
                           other.model_copy(update={"theme_id": theme_b.id})])
    await index.rebuild(store)
    emb = Embedder({"deploy checklist": unit(0)})
    for q, mode in (({"embedding": unit(0)}, "vector"),
                    ({"embedding": unit(0), "text": "deploy checklist"}, "hybrid")):
        r = await retrieve_memory(store, index, {**q, "tags": ["graph:a"]}, mode=mode,
                                  embedder=emb)
        assert ids(r.facts) == [mine.id], mode
        assert ids(r.themes) == [theme_a.id], mode
        r = await retrieve_memory(store, index, q, mode=mode, embedder=emb)
        assert set(ids(r.themes)) == {theme_a.id, theme_b.id}, mode

"""Acceptance (thirteenth audit): retrieval combinations an outside tester tries.

Written from the spec's "Retrieval" section and the ``retrieveMemory`` tables: every path
applies the tag scope and the temporal filters and respects ``limit`` on every list of
the result; ``include_invalidated`` opts back into soft-deleted records on each path;
quarantined facts are never served unless the query's tags name them; an entity id may
be given as a string; an empty result has every list empty.
"""

from __future__ import annotations

import uuid
from typing import Any

from cycgraph_memory import (
    MemoryQuery,
    MemoryResult,
    extract_subgraph,
    retrieve_gated_lessons,
    retrieve_memory,
)

from .factories import (
    at,
    make_entity,
    make_episode,
    make_fact,
    make_message,
    make_relationship,
    make_theme,
    unit,
    vec,
)

LISTS = ("themes", "facts", "episodes", "entities", "relationships", "messages")


async def _world(store: Any, index: Any) -> dict[str, Any]:
    """A small graph: Ada (seed) -> Acme, Ada -> Bob; facts citing Ada in many states."""
    ada = make_entity(name="Ada", entity_type="person")
    acme = make_entity(name="Acme", entity_type="organization")
    bob = make_entity(name="Bob", entity_type="person")
    gone = make_entity(name="Gone", entity_type="person", invalidated_at=at(days=1))
    await store.put_entities([ada, acme, bob, gone])
    works = make_relationship(ada.id, acme.id, relation_type="works_at", valid_from=at(days=0))
    knows = make_relationship(ada.id, bob.id, relation_type="knows", valid_from=at(days=10))
    old = make_relationship(
        ada.id, acme.id, relation_type="worked_at", valid_from=at(days=-30), valid_until=at(days=-1)
    )
    dead = make_relationship(
        ada.id, bob.id, relation_type="mentors", invalidated_by=str(uuid.uuid4())
    )
    await store.put_relationships([works, knows, old, dead])
    live_ep = make_episode(topic="live", messages=[make_message(content="ada at acme")])
    dead_ep = make_episode(
        topic="dead", messages=[make_message(content="old turn")], invalidated_at=at(days=2)
    )
    await store.put_episodes([live_ep, dead_ep])
    live_theme = make_theme(label="live", embedding=unit(0))
    dead_theme = make_theme(label="dead", embedding=unit(0), invalidated_at=at(days=2))
    await store.put_themes([live_theme, dead_theme])
    common: dict[str, Any] = {"entity_ids": [ada.id], "embedding": unit(0)}
    lesson = make_fact(
        content="lesson one",
        tags=["lesson"],
        source_episode_ids=[live_ep.id],
        theme_id=live_theme.id,
        valid_from=at(days=0),
        **common,
    )
    other = make_fact(
        content="other scope",
        tags=["other"],
        source_episode_ids=[dead_ep.id],
        theme_id=dead_theme.id,
        valid_from=at(days=1),
        **common,
    )
    quarantined = make_fact(
        content="poisoned", tags=["lesson", "quarantined"], valid_from=at(days=2), **common
    )
    invalidated = make_fact(
        content="retracted",
        tags=["lesson"],
        invalidated_by="eval-gate:harmful",
        valid_from=at(days=3),
        **common,
    )
    future = make_fact(content="later", tags=["lesson"], valid_from=at(days=20), **common)
    expired = make_fact(
        content="expired",
        tags=["lesson"],
        valid_from=at(days=-10),
        valid_until=at(days=-2),
        **common,
    )
    await store.put_facts([lesson, other, quarantined, invalidated, future, expired])
    await store.put_themes(
        [
            live_theme.model_copy(update={"fact_ids": [lesson.id]}),
            dead_theme.model_copy(update={"fact_ids": [other.id]}),
        ]
    )
    await index.rebuild(store)
    return {
        "ada": ada,
        "acme": acme,
        "bob": bob,
        "gone": gone,
        "works": works,
        "knows": knows,
        "old": old,
        "dead": dead,
        "live_ep": live_ep,
        "dead_ep": dead_ep,
        "live_theme": live_theme,
        "dead_theme": dead_theme,
        "lesson": lesson,
        "other": other,
        "quarantined": quarantined,
        "invalidated": invalidated,
        "future": future,
        "expired": expired,
    }


def _ids(records: Any) -> set[Any]:
    return {r.id for r in records}


def _paths(w: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {
        "entity": {"entity_ids": [w["ada"].id]},
        "embedding": {"embedding": unit(0), "min_similarity": 0.5},
        "tags": {"tags": ["lesson", "other"]},
    }


async def test_entity_ids_given_as_strings_are_the_same_query(store: Any, index: Any) -> None:
    w = await _world(store, index)
    as_uuid = await retrieve_memory(store, index, {"entity_ids": [w["ada"].id]})
    as_str = await retrieve_memory(store, index, {"entity_ids": [str(w["ada"].id)]})
    as_model = await retrieve_memory(store, index, MemoryQuery(entity_ids=[str(w["ada"].id)]))
    for result in (as_str, as_model):
        for name in ("themes", "facts", "episodes", "entities", "relationships"):
            assert [r.id for r in getattr(result, name)] == [
                r.id for r in getattr(as_uuid, name)
            ], name
    assert _ids(as_uuid.facts) == {w["lesson"].id, w["other"].id, w["future"].id, w["expired"].id}


async def test_quarantined_and_invalidated_facts_on_every_path(store: Any, index: Any) -> None:
    w = await _world(store, index)
    for name, query in _paths(w).items():
        result = await retrieve_memory(store, index, query)
        served = _ids(result.facts)
        assert w["quarantined"].id not in served, name
        assert w["invalidated"].id not in served, name
        opted = await retrieve_memory(store, index, {**query, "include_invalidated": True})
        assert w["invalidated"].id in _ids(opted.facts), name
        assert w["quarantined"].id not in _ids(opted.facts), name
        audit = await retrieve_memory(store, index, {**query, "tags": ["quarantined"]})
        assert _ids(audit.facts) == {w["quarantined"].id}, name


async def test_tag_scope_with_entity_ids(store: Any, index: Any) -> None:
    w = await _world(store, index)
    result = await retrieve_memory(store, index, {"entity_ids": [w["ada"].id], "tags": ["lesson"]})
    assert _ids(result.facts) == {w["lesson"].id, w["future"].id, w["expired"].id}
    assert all("lesson" in f.tags for f in result.facts)
    # Themes and episodes only of the served facts; the graph view is still returned.
    assert _ids(result.themes) == {w["live_theme"].id}
    assert _ids(result.episodes) == {w["live_ep"].id}
    assert _ids(result.entities) == {w["ada"].id, w["acme"].id, w["bob"].id}
    assert w["works"].id in _ids(result.relationships)
    other = await retrieve_memory(store, index, {"entity_ids": [w["ada"].id], "tags": ["other"]})
    assert _ids(other.facts) == {w["other"].id}
    # The other fact's theme and episode are soft-deleted: not served by default.
    assert other.themes == [] and other.episodes == []
    opted = await retrieve_memory(
        store, index, {"entity_ids": [w["ada"].id], "tags": ["other"], "include_invalidated": True}
    )
    assert _ids(opted.themes) == {w["dead_theme"].id}
    assert _ids(opted.episodes) == {w["dead_ep"].id}


async def test_valid_at_on_every_path(store: Any, index: Any) -> None:
    w = await _world(store, index)
    when = at(days=5)
    for name, query in _paths(w).items():
        result = await retrieve_memory(store, index, {**query, "valid_at": when})
        served = _ids(result.facts)
        assert w["future"].id not in served and w["expired"].id not in served, name
        assert w["lesson"].id in served, name
        for rel in result.relationships:
            assert rel.valid_from <= when and (rel.valid_until is None or when < rel.valid_until)
    sub = await retrieve_memory(store, index, {"entity_ids": [w["ada"].id], "valid_at": when})
    # Ada -> Bob starts at day 10: not traversed, so Bob is not reached.
    assert _ids(sub.relationships) == {w["works"].id}
    assert _ids(sub.entities) == {w["ada"].id, w["acme"].id}


async def test_changed_since_on_every_path(store: Any, index: Any) -> None:
    w = await _world(store, index)
    since = at(days=1)
    for name, query in _paths(w).items():
        result = await retrieve_memory(store, index, {**query, "changed_since": since})
        served = _ids(result.facts)
        # Started strictly after day 1 (or ended after it).
        assert served == {w["future"].id}, (name, served)
        for rel in result.relationships:
            assert rel.valid_from > since or (
                rel.valid_until is not None and rel.valid_until > since
            ), name


async def test_limit_on_every_list_of_every_path(store: Any, index: Any) -> None:
    w = await _world(store, index)
    more_eps = [
        make_episode(topic=f"e{i}", messages=[make_message(content=f"turn {i}")]) for i in range(3)
    ]
    await store.put_episodes(more_eps)
    themes = [make_theme(label=f"t{i}", embedding=unit(0)) for i in range(3)]
    await store.put_themes(themes)
    facts = [
        make_fact(
            content=f"many {i}",
            tags=["lesson"],
            entity_ids=[w["ada"].id, w["bob"].id],
            source_episode_ids=[e.id for e in more_eps],
            embedding=unit(0),
            theme_id=themes[i].id,
            source_message_ids=[m.id for e in more_eps for m in e.messages],
        )
        for i in range(3)
    ]
    await store.put_facts(facts)
    await store.put_themes(
        [t.model_copy(update={"fact_ids": [facts[i].id]}) for i, t in enumerate(themes)]
    )
    await index.rebuild(store)
    for name, query in _paths(w).items():
        result = await retrieve_memory(store, index, {**query, "limit": 1})
        for field in LISTS:
            assert len(getattr(result, field)) <= 1, (name, field)
        assert len(result.facts) == 1, name
        assert len(result.fact_scores) <= 1, name


async def test_unknown_seed_gives_an_empty_result(store: Any, index: Any) -> None:
    w = await _world(store, index)
    for query in (
        {"entity_ids": [uuid.uuid4()]},
        {"entity_ids": [str(w["gone"].id)]},
        {"tags": ["nothing-has-this"]},
        {"embedding": unit(5)},
        {"entity_ids": [w["ada"].id], "tags": ["nothing-has-this"], "entity_types": ["robot"]},
    ):
        result = await retrieve_memory(store, index, query)
        assert isinstance(result, MemoryResult)
        assert result.facts == [] and result.themes == [] and result.episodes == [], query
        assert result.messages == [] and result.fact_scores == {}, query
        if "entity_types" not in query and "entity_ids" in query:
            assert result.entities == [] and result.relationships == [], query


async def test_soft_deleted_seed_is_served_only_when_asked(store: Any, index: Any) -> None:
    w = await _world(store, index)
    gone_fact = make_fact(content="gone fact", entity_ids=[w["gone"].id])
    await store.put_facts([gone_fact])
    result = await retrieve_memory(store, index, {"entity_ids": [w["gone"].id]})
    assert result.entities == [] and result.facts == []
    opted = await retrieve_memory(
        store, index, {"entity_ids": [w["gone"].id], "include_invalidated": True}
    )
    assert _ids(opted.entities) == {w["gone"].id}
    assert _ids(opted.facts) == {gone_fact.id}


async def test_include_invalidated_relationships_on_entity_path(store: Any, index: Any) -> None:
    w = await _world(store, index)
    result = await retrieve_memory(store, index, {"entity_ids": [w["ada"].id]})
    assert w["dead"].id not in _ids(result.relationships)
    assert w["old"].id in _ids(result.relationships)  # expired, not invalidated
    opted = await retrieve_memory(
        store, index, {"entity_ids": [w["ada"].id], "include_invalidated": True}
    )
    assert w["dead"].id in _ids(opted.relationships)


async def test_tag_path_returns_facts_only(store: Any, index: Any) -> None:
    w = await _world(store, index)
    result = await retrieve_memory(store, index, {"tags": ["lesson"], "include_invalidated": True})
    assert result.entities == [] and result.relationships == []
    assert _ids(result.facts) == {
        w["lesson"].id,
        w["invalidated"].id,
        w["future"].id,
        w["expired"].id,
    }


async def test_provenance_on_everything_returned(store: Any, index: Any) -> None:
    w = await _world(store, index)
    for query in _paths(w).values():
        result = await retrieve_memory(store, index, {**query, "include_invalidated": True})
        for field in ("themes", "facts", "episodes", "entities", "relationships"):
            for record in getattr(result, field):
                assert record.provenance is not None and record.provenance.source == "agent"


async def test_ties_are_deterministic_and_the_same_on_both_paths(store: Any, index: Any) -> None:
    ada = make_entity(name="Ada", entity_type="person")
    await store.put_entities([ada])
    facts = [
        make_fact(
            content=f"tie {i}",
            tags=["lesson"],
            entity_ids=[ada.id],
            embedding=unit(0),
            valid_from=at(days=1),
        )
        for i in range(6)
    ]
    await store.put_facts(facts)
    await index.rebuild(store)
    expected = sorted((f.id for f in facts), key=str)
    for query in ({"entity_ids": [ada.id]}, {"tags": ["lesson"]}, {"embedding": unit(0)}):
        first = [f.id for f in (await retrieve_memory(store, index, query)).facts]
        again = [f.id for f in (await retrieve_memory(store, index, query)).facts]
        assert first == again, query
        assert set(first) == set(expected), query


async def _worded(store: Any, index: Any) -> dict[str, Any]:
    """The world with one shared word in every fact and turn (text and hybrid modes)."""
    w = await _world(store, index)
    for key in ("lesson", "other", "quarantined", "invalidated", "future", "expired"):
        fact = w[key].model_copy(update={"content": f"Ada widget {key}"})
        await store.put_facts([fact])
        w[key] = fact
    await index.rebuild(store)
    return w


MODES = (("text", {"text": "Ada widget"}), ("hybrid", {"text": "Ada widget", "embedding": unit(0)}))


async def test_text_and_hybrid_modes_apply_every_filter(store: Any, index: Any) -> None:
    w = await _worded(store, index)
    for mode, base in MODES:
        plain = _ids((await retrieve_memory(store, index, base, mode=mode)).facts)
        assert w["quarantined"].id not in plain and w["invalidated"].id not in plain, mode
        assert w["lesson"].id in plain and w["other"].id in plain, mode
        opted = await retrieve_memory(
            store, index, {**base, "include_invalidated": True}, mode=mode
        )
        assert w["invalidated"].id in _ids(opted.facts), mode
        assert w["quarantined"].id not in _ids(opted.facts), mode
        audit = await retrieve_memory(store, index, {**base, "tags": ["quarantined"]}, mode=mode)
        assert _ids(audit.facts) == {w["quarantined"].id}, mode
        scoped = await retrieve_memory(store, index, {**base, "tags": ["other"]}, mode=mode)
        assert _ids(scoped.facts) == {w["other"].id}, mode
        valid = await retrieve_memory(store, index, {**base, "valid_at": at(days=5)}, mode=mode)
        assert _ids(valid.facts) == {w["lesson"].id, w["other"].id}, mode
        for rel in valid.relationships:
            assert rel.valid_from <= at(days=5), mode
            assert rel.valid_until is None or at(days=5) < rel.valid_until, mode
        changed = await retrieve_memory(
            store, index, {**base, "changed_since": at(days=1)}, mode=mode
        )
        assert _ids(changed.facts) == {w["future"].id}, mode
        one = await retrieve_memory(store, index, {**base, "limit": 1}, mode=mode)
        for field in LISTS:
            assert len(getattr(one, field)) <= 1, (mode, field)
        assert len(one.facts) == 1 and set(one.fact_scores) == _ids(one.facts), mode
        assert set(plain) == set(
            (await retrieve_memory(store, index, base, mode=mode)).fact_scores
        ), mode


async def test_text_and_hybrid_modes_leave_out_soft_deleted_records(store: Any, index: Any) -> None:
    w = await _worded(store, index)
    for mode, base in MODES:
        result = await retrieve_memory(store, index, {**base, "tags": ["other"]}, mode=mode)
        assert result.themes == [] and result.episodes == [], mode
        result = await retrieve_memory(store, index, base, mode=mode)
        assert w["gone"].id not in _ids(result.entities), mode
        assert w["dead"].id not in _ids(result.relationships), mode
        assert w["dead_theme"].id not in _ids(result.themes), mode
        assert w["dead_ep"].id not in _ids(result.episodes), mode
        dead_turns = {m.id for m in w["dead_ep"].messages}
        assert dead_turns.isdisjoint(m.id for m in result.messages), mode


async def test_max_hops_zero_and_repeated_seeds(store: Any, index: Any) -> None:
    w = await _world(store, index)
    ada = w["ada"].id
    zero = await retrieve_memory(store, index, {"entity_ids": [ada], "max_hops": 0})
    assert _ids(zero.entities) == {ada}
    assert zero.relationships == []
    assert _ids(zero.facts) == {w["lesson"].id, w["other"].id, w["future"].id, w["expired"].id}
    once = await retrieve_memory(store, index, {"entity_ids": [ada]})
    twice = await retrieve_memory(store, index, {"entity_ids": [ada, str(ada).upper(), ada]})
    for field in ("themes", "facts", "episodes", "entities", "relationships"):
        assert [r.id for r in getattr(twice, field)] == [r.id for r in getattr(once, field)]


async def test_empty_lists_do_not_select_a_path(store: Any, index: Any) -> None:
    w = await _world(store, index)
    nothing = await retrieve_memory(store, index, {"entity_ids": [], "tags": []})
    assert nothing == MemoryResult()
    by_vector = await retrieve_memory(store, index, {"entity_ids": [], "embedding": unit(0)})
    assert w["lesson"].id in _ids(by_vector.facts)
    assert w["live_theme"].id in _ids(by_vector.themes)
    by_tag = await retrieve_memory(store, index, {"entity_ids": [], "tags": ["other"]})
    assert _ids(by_tag.facts) == {w["other"].id}


async def test_entity_path_orders_entities_and_relationships_by_hop(store: Any, index: Any) -> None:
    hub = make_entity(name="Hub", entity_type="concept")
    ring = [make_entity(name=f"R{i}", entity_type="concept") for i in range(4)]
    outer = [make_entity(name=f"O{i}", entity_type="concept") for i in range(4)]
    await store.put_entities([hub, *ring, *outer])
    near = [make_relationship(hub.id, r.id, valid_from=at(days=5)) for r in ring]
    far = [
        make_relationship(r.id, o.id, valid_from=at(days=1))
        for r, o in zip(ring, outer, strict=True)
    ]
    await store.put_relationships([*near, *far])
    result = await retrieve_memory(store, index, {"entity_ids": [str(hub.id)]})
    by_int = sorted((e.id for e in ring), key=lambda i: i.int)
    outer_ids = sorted((e.id for e in outer), key=lambda i: i.int)
    assert [e.id for e in result.entities] == [hub.id, *by_int, *outer_ids]
    # Edges touching the seed first (hop 0), then by (valid_from, id).
    assert [r.id for r in result.relationships] == sorted(
        (r.id for r in near), key=lambda i: i.int
    ) + sorted((r.id for r in far), key=lambda i: i.int)
    two = await retrieve_memory(store, index, {"entity_ids": [hub.id], "limit": 2})
    assert [e.id for e in two.entities] == [e.id for e in result.entities[:2]]
    assert [r.id for r in two.relationships] == [r.id for r in result.relationships[:2]]


ODD_TAGS = ["a,b", "{x}", 'say "hi"', "back\\slash", "NULL", "Lesson", "lesson ", "é-ü", "a b"]


async def test_tags_match_exactly_whatever_their_characters(store: Any, index: Any) -> None:
    ada = make_entity(name="Ada", entity_type="person")
    await store.put_entities([ada])
    facts = {
        tag: make_fact(content=f"fact {i}", tags=[tag], entity_ids=[ada.id], embedding=unit(0))
        for i, tag in enumerate(ODD_TAGS)
    }
    plain = make_fact(content="plain", tags=["lesson"], entity_ids=[ada.id], embedding=unit(0))
    await store.put_facts([*facts.values(), plain])
    await index.rebuild(store)
    for tag, fact in facts.items():
        for base in ({}, {"entity_ids": [ada.id]}, {"embedding": unit(0)}):
            result = await retrieve_memory(store, index, {**base, "tags": [tag]})
            assert _ids(result.facts) == {fact.id}, (tag, base)
        lessons = await retrieve_gated_lessons(store, tags=[tag])
        assert [f.id for f in lessons] == [fact.id], tag
    both = await retrieve_memory(store, index, {"tags": ["a,b", "lesson"]})
    assert _ids(both.facts) == {facts["a,b"].id, plain.id}


async def test_max_hops_defaults_to_two_on_both_entry_points(store: Any, index: Any) -> None:
    ids = [uuid.UUID(int=i + 1) for i in range(5)]
    await store.put_entities([make_entity(id=i, name=f"c{k}") for k, i in enumerate(ids)])
    await store.put_relationships([make_relationship(ids[k], ids[k + 1]) for k in range(4)])
    facts = [make_fact(content=f"about c{k}", entity_ids=[i]) for k, i in enumerate(ids)]
    await store.put_facts(facts)
    sub = await extract_subgraph(store, [ids[0]])
    assert [e.id for e in sub.entities] == ids[:3]
    result = await retrieve_memory(store, index, {"entity_ids": [ids[0]]})
    assert [e.id for e in result.entities] == ids[:3]
    assert _ids(result.facts) == {f.id for f in facts[:3]}
    assert MemoryQuery().max_hops == 2


async def test_entity_retrieval_visits_at_most_500_entities(store: Any, index: Any) -> None:
    hub = make_entity(id=uuid.UUID(int=1), name="hub")
    spokes = [make_entity(id=uuid.UUID(int=10 + i), name=f"s{i}") for i in range(510)]
    await store.put_entities([hub, *spokes])
    await store.put_relationships([make_relationship(hub.id, s.id) for s in spokes])
    # The cap admits the seed and the first 499 spokes by id: spokes 499.. are not visited.
    inside = make_fact(content="inside", entity_ids=[spokes[498].id])
    outside = [
        make_fact(content=f"outside {i}", entity_ids=[s.id]) for i, s in enumerate(spokes[499:])
    ]
    await store.put_facts([inside, *outside])
    result = await retrieve_memory(
        store, index, {"entity_ids": [hub.id], "max_hops": 1, "limit": 100}
    )
    assert _ids(result.facts) == {inside.id}
    assert len(result.entities) == 100
    sub = await extract_subgraph(store, [hub.id], max_hops=1)
    assert len(sub.entities) == 500 and len(sub.relationships) == 499


async def test_exactly_the_served_facts_are_touched_on_every_path(store: Any, index: Any) -> None:
    w = await _worded(store, index)
    everything = [
        w[k].id for k in ("lesson", "other", "quarantined", "invalidated", "future", "expired")
    ]
    queries: list[tuple[dict[str, Any], Any]] = [
        ({"entity_ids": [w["ada"].id], "limit": 2}, None),
        ({"entity_ids": [w["ada"].id], "limit": 2, "valid_at": at(days=30)}, None),
        ({"embedding": unit(0), "limit": 2}, "vector"),
        ({"text": "Ada widget", "limit": 2}, "text"),
        ({"text": "Ada widget", "embedding": unit(0), "limit": 2}, "hybrid"),
        ({"tags": ["lesson"], "limit": 2}, None),
        ({"tags": ["lesson"], "limit": 2, "changed_since": at(days=-20)}, None),
        ({"tags": ["lesson"], "limit": 2, "include_invalidated": True}, None),
    ]
    for query, mode in queries:
        before = await store.get_facts(everything)
        result = await retrieve_memory(store, index, query, mode=mode)
        assert result.facts, query
        after = await store.get_facts(everything)
        served = _ids(result.facts)
        for fact_id in everything:
            bump = after[fact_id].access_count - before[fact_id].access_count
            assert bump == (1 if fact_id in served else 0), (query, mode, fact_id)
            if fact_id in served:
                assert after[fact_id].last_accessed_at is not None


class _NoTouchStore:
    """The store without ``touch_facts`` (nor the natives that touch): the spec's optional
    capability left out, every other method delegated."""

    _hidden = frozenset({"touch_facts", "expand_facts", "list_and_touch_facts"})

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        if name in self._hidden:
            raise AttributeError(name)
        return getattr(self._inner, name)


async def test_a_store_without_touch_facts_serves_every_path_untouched(
    store: Any, index: Any
) -> None:
    w = await _worded(store, index)
    bare = _NoTouchStore(store)
    assert not hasattr(bare, "touch_facts")
    everything = [w[k].id for k in ("lesson", "other", "future", "expired")]
    before = await store.get_facts(everything)
    queries: list[tuple[dict[str, Any], Any]] = [
        ({"entity_ids": [w["ada"].id]}, None),
        ({"embedding": unit(0)}, "vector"),
        ({"text": "Ada widget"}, "text"),
        ({"text": "Ada widget", "embedding": unit(0)}, "hybrid"),
        ({"tags": ["lesson", "other"]}, None),
    ]
    for query, mode in queries:
        plain = await retrieve_memory(bare, index, query, mode=mode)
        assert _ids(plain.facts) == set(everything), (query, mode)
    after = await store.get_facts(everything)
    assert [after[i].access_count for i in everything] == [
        before[i].access_count for i in everything
    ]


async def test_gated_lessons_never_serve_quarantined_facts_even_when_asked(
    backend: str, store: Any, request: Any
) -> None:
    """Unlike ``retrieve_memory``'s audit path, naming the tag does not bring them back."""
    from cycgraph_memory import InMemoryOutcomeLedger, RunOutcome

    if backend == "memory":
        ledger: Any = InMemoryOutcomeLedger()
    else:
        from cycgraph_memory.postgres import PostgresOutcomeLedger

        ledger = PostgresOutcomeLedger(
            request.getfixturevalue("pg_sessionmaker"),
            tenant_id=request.getfixturevalue("pg_tenant"),
        )
    verified = make_fact(content="verified", tags=["lesson", "verified"], valid_from=at(days=1))
    tainted = make_fact(content="tainted", tags=["lesson", "quarantined"], valid_from=at(days=2))
    tainted_cand = make_fact(
        content="tainted candidate",
        tags=["lesson", "candidate", "quarantined"],
        valid_from=at(days=3),
    )
    await store.put_facts([verified, tainted, tainted_cand])
    for run in range(3):
        await ledger.record_outcome(
            RunOutcome(run_id=f"r{run}", score=0.5, fact_ids=[tainted_cand.id])
        )
    for tags in (["lesson"], ["quarantined"], ["lesson", "quarantined"]):
        for led in (None, ledger):
            got = await retrieve_gated_lessons(store, tags=tags, ledger=led)
            assert [f.id for f in got] == ([verified.id] if "lesson" in tags else []), (tags, led)


async def test_defaults_limit_20_and_min_similarity_half_in_effect(store: Any, index: Any) -> None:
    ada = make_entity(name="Ada", entity_type="person")
    await store.put_entities([ada])
    near = [
        make_fact(
            content=f"Ada widget {i}",
            tags=["lesson"],
            entity_ids=[ada.id],
            embedding=vec(1, 1),
            valid_from=at(i),
        )
        for i in range(25)
    ]
    far = make_fact(
        content="Ada widget far",
        tags=["lesson"],
        entity_ids=[ada.id],
        embedding=vec(1, 2),
        valid_from=at(days=-1),
    )
    await store.put_facts([*near, far])
    await index.rebuild(store)
    for query, mode in (
        ({"entity_ids": [ada.id]}, None),
        ({"tags": ["lesson"]}, None),
        ({"embedding": unit(0)}, "vector"),
        ({"text": "widget"}, "text"),
        ({"text": "widget", "embedding": unit(0)}, "hybrid"),
    ):
        result = await retrieve_memory(store, index, query, mode=mode)
        assert len(result.facts) == 20, (query, mode)
    # cos(e0, (1,1)) = 0.707 passes the default 0.5 floor, cos(e0, (1,2)) = 0.447 does not.
    by_vector = await retrieve_memory(store, index, {"embedding": unit(0), "limit": 100})
    assert _ids(by_vector.facts) == {f.id for f in near}
    loose = await retrieve_memory(
        store, index, {"embedding": unit(0), "limit": 100, "min_similarity": 0.4}
    )
    assert far.id in _ids(loose.facts)

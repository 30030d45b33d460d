"""retrieve_memory on both backends: dispatch, filters, ranking, limits, touches."""

from __future__ import annotations

import math
import uuid
from collections.abc import Sequence
from typing import Any

import pytest
from pydantic import ValidationError

from cycgraph_memory import (
    QUARANTINE_TAG,
    Entity,
    Episode,
    InvalidInputError,
    MemoryQuery,
    Relationship,
    SemanticFact,
    Theme,
    retrieve_memory,
)

from .factories import (
    at,
    blend,
    make_entity,
    make_episode,
    make_fact,
    make_relationship,
    make_theme,
    unit,
    vec,
)


async def load(store: Any, index: Any, *records: Any) -> None:
    for r in records:
        if isinstance(r, Entity):
            await store.put_entity(r)
        elif isinstance(r, Relationship):
            await store.put_relationship(r)
        elif isinstance(r, Episode):
            await store.put_episode(r)
        elif isinstance(r, SemanticFact):
            await store.put_fact(r)
        elif isinstance(r, Theme):
            await store.put_theme(r)
    await index.rebuild(store)


def ids(records: Sequence[Any]) -> list[uuid.UUID]:
    return [r.id for r in records]


def fid(i: int) -> uuid.UUID:
    return uuid.UUID(int=0xF000 + i)


class FakeEmbedder:
    """Maps known texts to fixed vectors."""

    dimensions = 8

    def __init__(self, table: dict[str, list[float]]) -> None:
        self.table = table
        self.calls: list[list[str]] = []

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        self.calls.append(list(texts))
        return [self.table[t] for t in texts]


# ----------------------------------------------------------------------------- dispatch


async def test_empty_query_returns_an_empty_result(store: Any, index: Any) -> None:
    await load(store, index, make_fact(embedding=unit(0), tags=["lesson"]))
    result = await retrieve_memory(store, index, {})
    assert result.model_dump() == {
        "themes": [], "facts": [], "episodes": [], "entities": [], "relationships": [],
        "messages": [], "fact_scores": {},
    }


async def test_text_without_embedder_is_an_error(store: Any, index: Any) -> None:
    with pytest.raises(InvalidInputError, match="embedder"):
        await retrieve_memory(store, index, {"text": "what do we know?"})


async def test_text_is_embedded_with_the_embedder(store: Any, index: Any) -> None:
    best = make_fact(embedding=unit(2), content="the answer")
    other = make_fact(embedding=unit(3))
    await load(store, index, best, other)
    embedder = FakeEmbedder({"question": unit(2)})
    result = await retrieve_memory(store, index, {"text": "question"}, embedder=embedder)
    assert ids(result.facts) == [best.id]
    assert embedder.calls == [["question"]]
    # An explicit embedding wins over the text.
    result = await retrieve_memory(
        store, index, {"text": "question", "embedding": unit(3)}, embedder=embedder
    )
    assert ids(result.facts) == [other.id]
    assert embedder.calls == [["question"]]


async def test_entity_ids_win_over_embedding_and_tags(store: Any, index: Any) -> None:
    a = make_entity(id=uuid.UUID(int=1))
    about_a = make_fact(entity_ids=[a.id], embedding=unit(1), tags=["t"])
    unrelated = make_fact(embedding=unit(0), tags=["t"])
    await load(store, index, a, about_a, unrelated)
    result = await retrieve_memory(
        store, index, MemoryQuery(entity_ids=[a.id], embedding=unit(0), tags=["t"])
    )
    assert ids(result.entities) == [a.id]
    assert ids(result.facts) == [about_a.id]


async def test_invalid_queries_raise(store: Any, index: Any) -> None:
    for bad in (
        {"limit": 0}, {"limit": 101}, {"max_hops": 6}, {"max_hops": -1},
        {"min_similarity": 1.5}, {"min_similarity": -0.1}, {"surprise": 1},
        {"embedding": [math.nan] * 8},
    ):
        with pytest.raises(ValidationError):
            await retrieve_memory(store, index, bad)
    with pytest.raises(TypeError):
        await retrieve_memory(store, index, ["tags"])  # type: ignore[arg-type]


# ----------------------------------------------------------------------------- tag path


async def test_tag_path_lists_facts_in_store_order_and_limits(store: Any, index: Any) -> None:
    lessons = [make_fact(id=fid(i), tags=["lesson"], valid_from=at(i)) for i in range(5)]
    other = make_fact(id=fid(100), tags=["other"], valid_from=at(0))
    await load(store, index, *lessons, other)
    result = await retrieve_memory(store, index, {"tags": ["lesson"], "limit": 3})
    assert ids(result.facts) == ids(lessons[:3])
    assert result.entities == [] and result.relationships == [] and result.themes == []
    both = await retrieve_memory(store, index, {"tags": ["lesson", "other"], "limit": 10})
    assert ids(both.facts) == [lessons[0].id, other.id, *ids(lessons[1:])]


async def test_quarantined_facts_only_on_the_audit_path(store: Any, index: Any) -> None:
    ok = make_fact(tags=["lesson"], embedding=unit(0), valid_from=at(0))
    bad = make_fact(tags=["lesson", QUARANTINE_TAG], embedding=unit(0), valid_from=at(1))
    a = make_entity()
    ok_e = make_fact(entity_ids=[a.id], valid_from=at(2))
    bad_e = make_fact(entity_ids=[a.id], tags=[QUARANTINE_TAG], valid_from=at(3))
    await load(store, index, a, ok, bad, ok_e, bad_e)
    assert ids((await retrieve_memory(store, index, {"tags": ["lesson"]})).facts) == [ok.id]
    hier = await retrieve_memory(store, index, {"embedding": unit(0)})
    assert ids(hier.facts) == [ok.id]
    sub = await retrieve_memory(store, index, {"entity_ids": [a.id]})
    assert ids(sub.facts) == [ok_e.id]
    audit = await retrieve_memory(store, index, {"tags": [QUARANTINE_TAG]})
    assert ids(audit.facts) == [bad.id, bad_e.id]
    audit = await retrieve_memory(store, index, {"embedding": unit(0), "tags": [QUARANTINE_TAG]})
    assert ids(audit.facts) == [bad.id]
    audit = await retrieve_memory(store, index, {"entity_ids": [a.id], "tags": [QUARANTINE_TAG]})
    assert ids(audit.facts) == [bad_e.id]


async def test_tag_path_temporal_filters_page_past_dropped_facts(store: Any, index: Any) -> None:
    expired = [
        make_fact(id=fid(i), tags=["l"], valid_from=at(i), valid_until=at(i + 1))
        for i in range(150)
    ]
    live = [make_fact(id=fid(200 + i), tags=["l"], valid_from=at(200 + i)) for i in range(3)]
    await load(store, index, *expired, *live)
    result = await retrieve_memory(
        store, index, {"tags": ["l"], "valid_at": at(1000), "limit": 2},
        options={"tag_page_size": 40},
    )
    assert ids(result.facts) == ids(live[:2])
    changed = await retrieve_memory(store, index, {"tags": ["l"], "changed_since": at(148.5)})
    assert ids(changed.facts) == [fid(148), fid(149), *ids(live)]


# ----------------------------------------------------------------------------- hierarchical


def cos(a: float, b: float) -> float:
    return a / math.hypot(a, b)


async def test_a_theme_never_pushes_out_a_better_direct_match(store: Any, index: Any) -> None:
    # The theme lists four good facts; the best fact of all is outside the theme.
    members = [make_fact(id=fid(k), embedding=blend(0, 1, 4, k)) for k in range(1, 5)]
    theme = make_theme(embedding=unit(0), fact_ids=ids(members))
    best = make_fact(id=fid(9), embedding=unit(0))
    await load(store, index, *members, best, theme)
    result = await retrieve_memory(
        store, index, {"embedding": unit(0), "limit": 3},
        options={"direct_fact_candidates": 1},
    )
    assert ids(result.facts) == [best.id, members[0].id, members[1].id]
    assert ids(result.themes) == [theme.id]


async def test_min_similarity_applies_to_theme_facts(store: Any, index: Any) -> None:
    close = make_fact(embedding=blend(0, 1, 4, 1))  # cos 0.970
    mid = make_fact(embedding=blend(0, 1, 1, 1))  # cos 0.707
    far = make_fact(embedding=unit(1))  # cos 0
    bare = make_fact()  # no embedding: never clears a positive threshold
    theme = make_theme(embedding=blend(0, 1, 4, 1), fact_ids=ids([far, mid, bare, close]))
    await load(store, index, close, mid, far, bare, theme)
    result = await retrieve_memory(
        store, index, {"embedding": unit(0), "min_similarity": 0.8},
        options={"direct_fact_candidates": 1},
    )
    assert ids(result.facts) == [close.id]
    result = await retrieve_memory(
        store, index, {"embedding": unit(0), "min_similarity": 0.5},
        options={"direct_fact_candidates": 1},
    )
    assert ids(result.facts) == [close.id, mid.id]
    result = await retrieve_memory(
        store, index, {"embedding": unit(0), "min_similarity": 0.0},
        options={"direct_fact_candidates": 1, "theme_limit": 1},
    )
    assert ids(result.facts) == [close.id, mid.id, *sorted([far.id, bare.id], key=str)]
    # Themes below the threshold contribute nothing.
    none = await retrieve_memory(
        store, index, {"embedding": unit(5), "min_similarity": 0.5}
    )
    assert none.facts == [] and none.themes == []


async def test_max_facts_per_theme_bounds_theme_expansion(store: Any, index: Any) -> None:
    members = [make_fact(id=fid(k), embedding=blend(0, 1, 4, k)) for k in range(1, 5)]
    theme = make_theme(embedding=unit(0), fact_ids=ids(reversed(members)))
    await load(store, index, *members, theme)
    result = await retrieve_memory(
        store, index, {"embedding": unit(0)},
        options={"direct_fact_candidates": 1, "max_facts_per_theme": 2},
    )
    # Direct: the best one; theme: its first two listed facts (members 4 and 3).
    assert ids(result.facts) == [members[0].id, members[2].id, members[3].id]


async def test_ties_are_broken_by_id(store: Any, index: Any) -> None:
    twins = [make_fact(id=fid(k), embedding=unit(0)) for k in (3, 1, 2)]
    await load(store, index, *twins)
    result = await retrieve_memory(store, index, {"embedding": unit(0), "limit": 2})
    assert ids(result.facts) == [fid(1), fid(2)]


async def test_hierarchical_expands_to_episodes_entities_relationships(
    store: Any, index: Any
) -> None:
    alice = make_entity(id=uuid.UUID(int=1), name="Alice", entity_type="person")
    acme = make_entity(id=uuid.UUID(int=2), name="Acme", entity_type="organization")
    gone = make_entity(id=uuid.UUID(int=3), invalidated_at=at(1))
    works = make_relationship(alice.id, acme.id, relation_type="works_at", valid_from=at(0))
    knows = make_relationship(alice.id, gone.id, relation_type="knows", valid_from=at(1))
    old = make_relationship(
        alice.id, acme.id, relation_type="visited", valid_from=at(0), valid_until=at(5)
    )
    ep = make_episode(id=uuid.UUID(int=10))
    ep_dead = make_episode(id=uuid.UUID(int=11), invalidated_at=at(2))
    fact = make_fact(
        embedding=unit(0), entity_ids=[alice.id, acme.id, gone.id],
        source_episode_ids=[ep.id, ep_dead.id],
    )
    await load(store, index, alice, acme, gone, works, knows, old, ep, ep_dead, fact)
    r = await retrieve_memory(store, index, {"embedding": unit(0)})
    assert ids(r.facts) == [fact.id]
    assert ids(r.episodes) == [ep.id]
    assert ids(r.entities) == [alice.id, acme.id]
    # ``knows`` leads to an invalidated entity: not served (as by the entity path).
    assert ids(r.relationships) == sorted([works.id, old.id], key=str)
    r = await retrieve_memory(store, index, {"embedding": unit(0), "valid_at": at(10)})
    assert ids(r.relationships) == [works.id]
    r = await retrieve_memory(
        store, index,
        {"embedding": unit(0), "entity_types": ["person"], "relation_types": ["works_at"]},
    )
    assert ids(r.entities) == [alice.id]
    assert ids(r.relationships) == [works.id]
    r = await retrieve_memory(store, index, {"embedding": unit(0), "include_invalidated": True})
    assert ids(r.entities) == [alice.id, acme.id, gone.id]
    assert ids(r.episodes) == [ep.id, ep_dead.id]
    assert ids(r.relationships) == [*sorted([works.id, old.id], key=str), knows.id]


async def test_expansion_serves_limit_entities_and_the_edges_of_every_cited_one(
    store: Any, index: Any
) -> None:
    # The served facts cite more live entities than ``limit``: the first ``limit`` of
    # them (citation order, invalidated ones skipped) are served, while the relationships
    # are those of every cited live entity, in (valid_from, id) order.
    e = [make_entity(id=uuid.UUID(int=0x100 + i), name=f"E{i}") for i in range(6)]
    e[1] = make_entity(id=uuid.UUID(int=0x101), name="E1", invalidated_at=at(1))
    outside = make_entity(id=uuid.UUID(int=0x1FF), name="not cited")
    late_only = make_relationship(e[5].id, outside.id, valid_from=at(1))  # a later entity
    first = make_relationship(e[0].id, outside.id, valid_from=at(2))
    cut_off = make_relationship(e[3].id, outside.id, valid_from=at(3))  # beyond limit 2
    dead_end = make_relationship(e[1].id, outside.id, valid_from=at(0))  # invalidated one
    near = make_fact(id=fid(1), embedding=unit(0), entity_ids=[e[0].id, e[1].id, e[2].id])
    far = make_fact(id=fid(2), embedding=blend(0, 1, 1.0, 0.5),
                    entity_ids=[e[3].id, e[4].id, e[5].id])
    await load(store, index, *e, outside, late_only, first, cut_off, dead_end, near, far)
    r = await retrieve_memory(store, index, {"embedding": unit(0), "limit": 2},
                              mode="vector")
    assert ids(r.facts) == [near.id, far.id]
    assert ids(r.entities) == [e[0].id, e[2].id]
    assert ids(r.relationships) == [late_only.id, first.id]
    r = await retrieve_memory(store, index, {"embedding": unit(0), "limit": 2,
                                             "include_invalidated": True}, mode="vector")
    assert ids(r.entities) == [e[0].id, e[1].id]
    assert ids(r.relationships) == [dead_end.id, late_only.id]


async def test_hierarchical_temporal_and_invalidated(store: Any, index: Any) -> None:
    current = make_fact(id=fid(1), embedding=unit(0), valid_from=at(0))
    expired = make_fact(id=fid(2), embedding=unit(0), valid_from=at(0), valid_until=at(10))
    future = make_fact(id=fid(3), embedding=unit(0), valid_from=at(100))
    retracted = make_fact(id=fid(4), embedding=unit(0), invalidated_by="wrong")
    await load(store, index, current, expired, future, retracted)
    r = await retrieve_memory(store, index, {"embedding": unit(0), "valid_at": at(50)})
    assert ids(r.facts) == [current.id]
    r = await retrieve_memory(store, index, {"embedding": unit(0), "changed_since": at(5)})
    assert ids(r.facts) == [expired.id, future.id]
    r = await retrieve_memory(store, index, {"embedding": unit(0), "include_invalidated": True})
    assert ids(r.facts) == [fid(1), fid(2), fid(3), fid(4)]


async def test_limit_applies_per_record_type(store: Any, index: Any) -> None:
    ents = [make_entity(id=uuid.UUID(int=i + 1)) for i in range(4)]
    facts = [
        make_fact(id=fid(i), embedding=blend(0, 1, 8, i), entity_ids=[ents[i].id])
        for i in range(4)
    ]
    themes = [make_theme(id=uuid.UUID(int=100 + i), embedding=vec(1, 0.01 * i)) for i in range(4)]
    await load(store, index, *ents, *facts, *themes)
    r = await retrieve_memory(store, index, {"embedding": unit(0), "limit": 2})
    assert ids(r.facts) == [fid(0), fid(1)]
    assert ids(r.entities) == [ents[0].id, ents[1].id]
    assert len(r.themes) == 2


# ----------------------------------------------------------------------------- subgraph path


async def test_subgraph_path_attaches_facts_themes_episodes(store: Any, index: Any) -> None:
    a, b, c = (make_entity(id=uuid.UUID(int=i + 1), entity_type="person") for i in range(3))
    ab = make_relationship(a.id, b.id, valid_from=at(0))
    bc = make_relationship(b.id, c.id, valid_from=at(1), relation_type="manages")
    theme = make_theme(id=uuid.UUID(int=50))
    ep = make_episode(id=uuid.UUID(int=60))
    f_a_old = make_fact(id=fid(1), entity_ids=[a.id], valid_from=at(0), theme_id=theme.id)
    f_a_new = make_fact(id=fid(2), entity_ids=[a.id], valid_from=at(5),
                        source_episode_ids=[ep.id])
    f_b = make_fact(id=fid(3), entity_ids=[b.id], valid_from=at(9))
    f_c = make_fact(id=fid(4), entity_ids=[c.id], valid_from=at(9))
    await load(store, index, a, b, c, ab, bc, theme, ep, f_a_old, f_a_new, f_b, f_c)
    r = await retrieve_memory(store, index, {"entity_ids": [a.id]})
    assert ids(r.entities) == [a.id, b.id, c.id]
    assert ids(r.relationships) == [ab.id, bc.id]
    # Nearest entity first, then newest.
    assert ids(r.facts) == [f_a_new.id, f_a_old.id, f_b.id, f_c.id]
    assert ids(r.themes) == [theme.id]
    assert ids(r.episodes) == [ep.id]
    r = await retrieve_memory(store, index, {"entity_ids": [a.id], "max_hops": 1, "limit": 2})
    assert ids(r.entities) == [a.id, b.id]
    assert ids(r.facts) == [f_a_new.id, f_a_old.id]
    r = await retrieve_memory(
        store, index, {"entity_ids": [a.id], "relation_types": ["works_at"]}
    )
    assert ids(r.entities) == [a.id, b.id]
    r = await retrieve_memory(store, index, {"entity_ids": [a.id], "valid_at": at(3)})
    assert ids(r.facts) == [f_a_old.id]
    r = await retrieve_memory(store, index, {"entity_ids": [a.id], "entity_types": ["tool"]})
    assert r.entities == [] and r.facts == []
    r = await retrieve_memory(store, index, {"entity_ids": [a.id], "changed_since": at(0.5)})
    assert ids(r.relationships) == [bc.id]


async def test_max_facts_per_entity_is_exact_by_default(store: Any, index: Any) -> None:
    a, b = make_entity(id=uuid.UUID(int=1)), make_entity(id=uuid.UUID(int=2))
    rel = make_relationship(a.id, b.id)
    many = [make_fact(id=fid(i), entity_ids=[a.id, b.id], valid_from=at(i)) for i in range(6)]
    await load(store, index, a, b, rel, *many)
    r = await retrieve_memory(store, index, {"entity_ids": [b.id], "limit": 3})
    assert ids(r.facts) == [fid(5), fid(4), fid(3)]
    r = await retrieve_memory(
        store, index, {"entity_ids": [b.id], "limit": 3}, options={"max_facts_per_entity": 1}
    )
    assert ids(r.facts) == [fid(5)]


# ----------------------------------------------------------------------------- touches


async def test_served_facts_are_touched_once(store: Any, index: Any) -> None:
    served = make_fact(id=fid(1), embedding=unit(0), tags=["l"], valid_from=at(0))
    cut = make_fact(id=fid(2), embedding=blend(0, 1, 1, 1), tags=["l"], valid_from=at(1))
    await load(store, index, served, cut)
    r = await retrieve_memory(store, index, {"embedding": unit(0), "limit": 1})
    assert r.facts[0].access_count == 0  # returned as read, before the touch
    got = await store.get_facts([served.id, cut.id])
    assert (got[served.id].access_count, got[cut.id].access_count) == (1, 0)
    assert got[served.id].last_accessed_at is not None
    await retrieve_memory(store, index, {"tags": ["l"]})
    got = await store.get_facts([served.id, cut.id])
    assert (got[served.id].access_count, got[cut.id].access_count) == (2, 1)


async def test_retrieval_writes_nothing_but_touches(store: Any, index: Any) -> None:
    f = make_fact(embedding=unit(0))
    await load(store, index, f)
    await retrieve_memory(store, index, {"embedding": unit(0)})
    after = await store.get_fact(f.id)
    assert after.model_dump(exclude={"access_count", "last_accessed_at"}) == f.model_dump(
        exclude={"access_count", "last_accessed_at"}
    )

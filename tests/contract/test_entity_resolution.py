"""EntityResolver on both backends: grouping, remapping, soft/hard delete, idempotence."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import pytest

from cycgraph_memory import EntityResolutionReport, EntityResolver, InvalidInputError
from cycgraph_memory.records import Entity, Relationship

from .factories import at, make_entity, make_fact, make_relationship, vec

NOW = at(days=100)


def clock() -> datetime:
    return NOW


@dataclass
class Graph:
    alice: Entity  # canonical (oldest)
    alice2: Entity
    alice3: Entity
    alice_org: Entity  # same name, other type: never merged
    bob: Entity
    edges: dict[str, Relationship]
    facts: dict[str, Any]


async def seed(store: Any) -> Graph:
    alice = make_entity(
        name="Alice Smith", entity_type="person", attributes={"role": "cto"},
        created_at=at(0), updated_at=at(0),
    )
    alice2 = make_entity(
        name="alice smith", entity_type="person",
        attributes={"role": "ceo", "city": "paris", "age": 40},
        embedding=vec(0.5, 0.5), created_at=at(1), updated_at=at(1),
    )
    alice3 = make_entity(
        name="The  Alice, Smith!", entity_type="person",
        attributes={"city": "rome", "team": "core"}, embedding=vec(0.25),
        created_at=at(2), updated_at=at(2),
    )
    alice_org = make_entity(
        name="Alice Smith", entity_type="organization", created_at=at(3), updated_at=at(3)
    )
    bob = make_entity(name="Bob", entity_type="person", created_at=at(4), updated_at=at(4))
    await store.put_entities([alice3, alice, bob, alice2, alice_org])
    edges = {
        "a_bob": make_relationship(alice.id, bob.id, relation_type="knows", valid_from=at(0)),
        "a2_bob": make_relationship(alice2.id, bob.id, relation_type="knows", valid_from=at(1)),
        "a3_bob_other": make_relationship(
            alice3.id, bob.id, relation_type="manages", valid_from=at(2)
        ),
        "bob_a3": make_relationship(bob.id, alice3.id, relation_type="knows", valid_from=at(3)),
        "loop": make_relationship(alice2.id, alice3.id, relation_type="knows", valid_from=at(4)),
        "dead": make_relationship(
            alice2.id, bob.id, relation_type="likes", valid_from=at(5), invalidated_by="old"
        ),
        "org_bob": make_relationship(
            alice_org.id, bob.id, relation_type="knows", valid_from=at(6)
        ),
    }
    await store.put_relationships(edges.values())
    facts = {
        "f_a2": make_fact(content="alice likes tea", entity_ids=[alice2.id, bob.id]),
        "f_both": make_fact(content="alice is alice", entity_ids=[alice.id, alice3.id]),
        "f_dead": make_fact(content="old", entity_ids=[alice3.id], invalidated_by="x"),
        "f_bob": make_fact(content="bob", entity_ids=[bob.id]),
    }
    await store.put_facts(facts.values())
    return Graph(alice, alice2, alice3, alice_org, bob, edges, facts)


async def test_soft_resolution_merges_remaps_and_drops(store: Any) -> None:
    g = await seed(store)
    resolver = EntityResolver(store, clock=clock)
    report = await resolver.resolve()
    assert report == EntityResolutionReport(
        groups_merged=1,
        entities_absorbed=2,
        facts_rewritten=3,
        relationships_rewritten=3,  # a3_bob_other, bob_a3 and dead are remapped and kept
        relationships_dropped=2,  # a2_bob duplicates a_bob; loop collapses onto alice
    )
    canonical = await store.get_entity(g.alice.id)
    assert canonical is not None
    # the canonical wins; among losers, the older (alice2) wins over alice3
    assert canonical.attributes == {"role": "cto", "city": "paris", "age": 40, "team": "core"}
    assert canonical.embedding == vec(0.5, 0.5)  # inherited from the oldest loser having one
    assert canonical.updated_at == NOW
    for loser in (g.alice2, g.alice3):
        got = await store.get_entity(loser.id)
        assert got is not None
        assert got.invalidated_at == NOW and got.superseded_by == g.alice.id
    untouched = await store.get_entity(g.alice_org.id)
    assert untouched == g.alice_org
    assert [e.id for e in await store.find_entities()] == [g.alice.id, g.alice_org.id, g.bob.id]

    facts = await store.get_facts([f.id for f in g.facts.values()])
    assert facts[g.facts["f_a2"].id].entity_ids == [g.alice.id, g.bob.id]
    assert facts[g.facts["f_both"].id].entity_ids == [g.alice.id]
    assert facts[g.facts["f_dead"].id].entity_ids == [g.alice.id]  # invalidated ones too
    assert facts[g.facts["f_bob"].id] == g.facts["f_bob"]

    e = g.edges
    edges = await store.get_relationships([r.id for r in e.values()])
    assert edges[e["a_bob"].id] == e["a_bob"]
    assert edges[e["a3_bob_other"].id].source_id == g.alice.id
    assert edges[e["bob_a3"].id].target_id == g.alice.id
    assert edges[e["dead"].id].source_id == g.alice.id
    assert edges[e["dead"].id].invalidated_by == "old"
    # soft mode: dropped edges are invalidated, endpoints untouched
    assert edges[e["a2_bob"].id] == e["a2_bob"].model_copy(
        update={"invalidated_by": str(e["a_bob"].id)}
    )
    assert edges[e["loop"].id] == e["loop"].model_copy(
        update={"invalidated_by": str(g.alice.id)}
    )
    live = await store.get_relationships_for_entity(g.alice.id)
    assert sorted(r.id for r in live) == sorted(
        [e["a_bob"].id, e["a3_bob_other"].id, e["bob_a3"].id], key=str
    )


async def test_remapped_edges_of_disjoint_windows_both_stay(store: Any) -> None:
    """Same source, target and relation, but two periods: not duplicates."""
    alice = make_entity(name="Alice Smith", entity_type="person", created_at=at(0))
    alice2 = make_entity(name="alice smith", entity_type="person", created_at=at(1))
    acme = make_entity(name="Acme", entity_type="organization", created_at=at(0))
    await store.put_entities([alice, alice2, acme])
    past = make_relationship(alice2.id, acme.id, valid_from=at(0), valid_until=at(100))
    now = make_relationship(alice.id, acme.id, valid_from=at(400))
    overlapping = make_relationship(alice2.id, acme.id, valid_from=at(500))
    await store.put_relationships([past, now, overlapping])
    report = await EntityResolver(store, clock=clock).resolve()
    assert report.relationships_dropped == 1
    got = await store.get_relationships([past.id, now.id, overlapping.id])
    assert got[past.id].invalidated_by is None and got[past.id].source_id == alice.id
    assert got[now.id].invalidated_by is None
    assert got[overlapping.id].invalidated_by == str(now.id)


async def test_resolution_is_idempotent_and_plan_is_empty_after(store: Any) -> None:
    await seed(store)
    resolver = EntityResolver(store, clock=clock)
    first = await resolver.plan()
    assert not first.empty
    await resolver.resolve()
    assert (await resolver.plan()).empty
    assert await resolver.resolve() == EntityResolutionReport()


async def test_hard_mode_deletes_losers_after_remapping(store: Any) -> None:
    g = await seed(store)
    report = await EntityResolver(store, delete_mode="hard", clock=clock).resolve()
    assert report.entities_absorbed == 2 and report.relationships_dropped == 2
    assert await store.get_entity(g.alice2.id) is None
    assert await store.get_entity(g.alice3.id) is None
    losers = {g.alice2.id, g.alice3.id}
    assert await store.find_relationships_for_entities(losers, include_invalidated=True) == []
    assert await store.find_facts_for_entities(losers, include_invalidated=True) == []
    assert await store.get_relationship(g.edges["a2_bob"].id) is None
    assert await store.get_relationship(g.edges["loop"].id) is None
    assert (await EntityResolver(store, delete_mode="hard").plan()).empty


async def test_paging_and_chunking_give_the_same_result(store: Any) -> None:
    # Many groups, each of three members, ingested out of order; batch_size 2 forces
    # paged loading and one group per chunk, with edges crossing groups.
    people = []
    for k in range(5):
        for j in range(3):
            people.append(
                make_entity(
                    name=f"Person {k}" if j == 0 else f"the person {k}.",
                    entity_type="person",
                    created_at=at(10 * j + k),
                    updated_at=at(10 * j + k),
                )
            )
    await store.put_entities(reversed(people))
    by_group = [[p for p in people if p.name.lower().strip(".").endswith(str(k))] for k in range(5)]
    edges = [
        make_relationship(by_group[k][2].id, by_group[(k + 1) % 5][1].id, relation_type="knows")
        for k in range(5)
    ] + [
        make_relationship(by_group[k][0].id, by_group[(k + 1) % 5][0].id, relation_type="knows")
        for k in range(5)
    ]
    await store.put_relationships(edges)
    fact = make_fact(entity_ids=[by_group[0][2].id, by_group[4][1].id, by_group[0][1].id])
    await store.put_fact(fact)
    report = await EntityResolver(store, batch_size=2, clock=clock).resolve()
    assert report == EntityResolutionReport(
        groups_merged=5, entities_absorbed=10, facts_rewritten=1,
        relationships_rewritten=0, relationships_dropped=5,
    )
    got = await store.get_fact(fact.id)
    assert got is not None
    assert got.entity_ids == [by_group[0][0].id, by_group[4][0].id]
    assert [e.id for e in await store.find_entities()] == [g[0].id for g in by_group]
    assert (await EntityResolver(store, batch_size=2).plan()).empty


async def test_bad_options_are_rejected(store: Any) -> None:
    with pytest.raises(InvalidInputError):
        EntityResolver(store, delete_mode="medium")  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError):
        EntityResolver(store, batch_size=0)


async def test_empty_store_reports_zeros(store: Any) -> None:
    assert await EntityResolver(store).resolve() == EntityResolutionReport()
    assert uuid.UUID(int=0) not in {e.id for e in await store.find_entities()}

"""Seeds forward along ``superseded_by``: an id kept from before a resolution still finds.

The spec's EntityResolver: "Losers are soft-deleted with superseded_by pointing at the
canonical entity, so stale references remain resolvable." Entity-based retrieval and
``extract_subgraph`` replace a superseded seed by the entity its chain ends at (both
backends; on Postgres also the native recursive CTE, checked against the generic one).
"""

from __future__ import annotations

import uuid
from typing import Any

from cycgraph_memory import EntityResolver, retrieve_memory
from cycgraph_memory.records import MAX_FORWARDING_STEPS, Entity
from cycgraph_memory.retrieval import extract_subgraph

from .factories import at, make_entity, make_episode, make_fact, make_relationship


def eid(i: int) -> uuid.UUID:
    return uuid.UUID(int=i + 1)


async def subgraph(store: Any, seeds: list[uuid.UUID], **kwargs: Any) -> Any:
    """``extract_subgraph``, checked equal on the native and the generic paths."""
    native = await extract_subgraph(store, seeds, **kwargs)
    generic = await extract_subgraph(store, seeds, native=False, **kwargs)
    assert native == generic
    return native


def alice(created: int, **overrides: Any) -> Entity:
    fields: dict[str, Any] = {
        "name": "Alice Smith",
        "entity_type": "person",
        "attributes": {},
        "created_at": at(days=created),
        "updated_at": at(days=created),
    }
    return make_entity(**{**fields, **overrides})


async def test_a_resolved_losers_id_finds_the_canonical(store: Any, index: Any) -> None:
    first, second = make_episode(topic="monday"), make_episode(topic="friday")
    canonical, loser = alice(0), alice(1, name="alice smith")
    bob = make_entity(name="Bob", entity_type="person")
    await store.put_episodes([first, second])
    await store.put_entities([canonical, loser, bob])
    knows = make_relationship(loser.id, bob.id, relation_type="knows", valid_from=at(5))
    await store.put_relationships([knows])
    old = make_fact(
        content="Alice leads the team",
        entity_ids=[canonical.id],
        source_episode_ids=[first.id],
        valid_from=at(1),
    )
    new = make_fact(
        content="Alice moved to Paris",
        entity_ids=[loser.id],
        source_episode_ids=[second.id],
        valid_from=at(2),
    )
    await store.put_facts([old, new])

    # Before the resolution each id finds its own entity.
    before = await retrieve_memory(store, index, {"entity_ids": [loser.id]})
    assert [f.id for f in before.facts] == [new.id]

    report = await EntityResolver(store).resolve()
    assert report.entities_absorbed == 1
    stored = await store.get_entity(loser.id)
    assert stored is not None and stored.superseded_by == canonical.id

    sub = await subgraph(store, [loser.id])
    assert [e.id for e in sub.entities] == [canonical.id, bob.id]
    assert sub.hops == {canonical.id: 0, bob.id: 1}
    assert [r.id for r in sub.relationships] == [knows.id]  # remapped onto the canonical
    assert sub == await subgraph(store, [canonical.id])

    result = await retrieve_memory(store, index, {"entity_ids": [loser.id]})
    assert [f.id for f in result.facts] == [new.id, old.id]  # newest first
    assert [e.id for e in result.entities] == [canonical.id, bob.id]
    assert [r.id for r in result.relationships] == [knows.id]
    assert [e.id for e in result.episodes] == [second.id, first.id]
    by_canonical = await retrieve_memory(store, index, {"entity_ids": [canonical.id]})
    assert [f.id for f in by_canonical.facts] == [f.id for f in result.facts]
    assert [e.id for e in by_canonical.entities] == [e.id for e in result.entities]

    # With include_invalidated the loser itself is a seed too (hop 0), next to the
    # canonical it forwards to; nothing else changes.
    sub = await subgraph(store, [loser.id], include_invalidated=True)
    assert sub.hops == {canonical.id: 0, loser.id: 0, bob.id: 1}
    result = await retrieve_memory(
        store, index, {"entity_ids": [loser.id], "include_invalidated": True}
    )
    assert {e.id for e in result.entities} == {canonical.id, loser.id, bob.id}
    assert [f.id for f in result.facts] == [new.id, old.id]

    # The loser and the canonical given together: the canonical once, at hop 0.
    sub = await subgraph(store, [loser.id, canonical.id, loser.id], max_hops=0)
    assert [e.id for e in sub.entities] == [canonical.id] and sub.hops == {canonical.id: 0}


async def test_a_chain_of_two_merges_is_followed(store: Any, index: Any) -> None:
    middle, newest = alice(5), alice(9, name="The Alice Smith")
    await store.put_entities([middle, newest])
    fact = make_fact(content="Alice ships", entity_ids=[newest.id])
    await store.put_facts([fact])
    await EntityResolver(store).resolve()  # newest -> middle
    oldest = alice(0, name="ALICE SMITH")  # learnt later, but older: the next canonical
    await store.put_entities([oldest])
    await EntityResolver(store).resolve()  # middle -> oldest
    got = await store.get_entities([newest.id, middle.id])
    assert got[newest.id].superseded_by == middle.id
    assert got[middle.id].superseded_by == oldest.id

    for seed in (newest.id, middle.id):
        sub = await subgraph(store, [seed])
        assert [e.id for e in sub.entities] == [oldest.id] and sub.hops == {oldest.id: 0}
        result = await retrieve_memory(store, index, {"entity_ids": [seed]})
        assert [f.id for f in result.facts] == [fact.id]
        assert [e.id for e in result.entities] == [oldest.id]
    # include_invalidated: the seed and the chain's end, not the entity passed on the way
    sub = await subgraph(store, [newest.id], include_invalidated=True)
    assert sub.hops == {newest.id: 0, oldest.id: 0}


async def test_a_forwarding_loop_terminates_and_forwards_nowhere(store: Any, index: Any) -> None:
    a, b, c, d = eid(0), eid(1), eid(2), eid(3)
    dead = {"invalidated_at": at(1)}
    await store.put_entities(
        [
            make_entity(id=a, superseded_by=b, **dead),
            make_entity(id=b, superseded_by=a, **dead),  # a <-> b
            make_entity(id=c, superseded_by=a, **dead),  # c -> a -> b -> a: a tail into it
            make_entity(id=d, superseded_by=d, **dead),  # d -> d
        ]
    )
    await store.put_facts([make_fact(entity_ids=[a, b])])
    for seeds in ([a], [b], [c], [d], [a, b, c, d]):
        sub = await subgraph(store, seeds)
        assert sub.entities == [] and sub.relationships == []
        result = await retrieve_memory(store, index, {"entity_ids": seeds})
        assert result.facts == [] and result.entities == []
        # include_invalidated visits the seeds themselves, as without forwarding
        sub = await subgraph(store, seeds, include_invalidated=True)
        assert sub.hops == dict.fromkeys(seeds, 0)


async def test_a_pointer_to_a_missing_entity_leaves_the_seed_as_it_is(
    store: Any, index: Any
) -> None:
    a, b, c, ghost = eid(0), eid(1), eid(2), eid(9)
    live = make_entity(id=c)
    await store.put_entities(
        [
            make_entity(id=a, superseded_by=ghost, invalidated_at=at(1)),  # never stored
            make_entity(id=b, superseded_by=a, invalidated_at=at(1)),  # b -> a -> ghost
            live,
        ]
    )
    await store.put_relationships([make_relationship(a, c)])
    fact = make_fact(entity_ids=[a])
    await store.put_facts([fact])
    for seeds in ([a], [b]):
        assert (await subgraph(store, seeds)).entities == []
        result = await retrieve_memory(store, index, {"entity_ids": seeds})
        assert result.facts == [] and result.entities == []
    # what the seed finds without forwarding: itself when invalidated records are asked for
    sub = await subgraph(store, [a], include_invalidated=True)
    assert sub.hops == {a: 0, c: 1}
    result = await retrieve_memory(store, index, {"entity_ids": [a], "include_invalidated": True})
    assert [f.id for f in result.facts] == [fact.id]
    sub = await subgraph(store, [b], include_invalidated=True)
    assert sub.hops == {b: 0}  # the chain did not end: a is not a seed


async def test_a_pointer_to_a_hard_deleted_entity_leaves_the_seed_as_it_is(
    store: Any, index: Any
) -> None:
    a, b = eid(0), eid(1)
    await store.put_entities(
        [make_entity(id=a, superseded_by=b, invalidated_at=at(1)), make_entity(id=b)]
    )
    assert (await subgraph(store, [a])).hops == {b: 0}
    await store.delete_entity(b)
    assert (await subgraph(store, [a])).entities == []
    assert (await subgraph(store, [a], include_invalidated=True)).hops == {a: 0}


async def test_forwarding_follows_at_most_the_bounded_number_of_pointers(store: Any) -> None:
    n = MAX_FORWARDING_STEPS
    ids = [eid(i) for i in range(n + 2)]
    # ids[k] -> ids[k + 1]; the last one is the canonical: ids[1] is n pointers from it,
    # ids[0] is n + 1.
    await store.put_entities(
        [
            make_entity(id=i, superseded_by=ids[k + 1], invalidated_at=at(1))
            for k, i in enumerate(ids[:-1])
        ]
        + [make_entity(id=ids[-1])]
    )
    assert (await subgraph(store, [ids[1]])).hops == {ids[-1]: 0}
    assert (await subgraph(store, [ids[0]])).entities == []
    assert (await subgraph(store, [ids[0], ids[1]])).hops == {ids[-1]: 0}


async def test_forwarded_seeds_count_toward_the_cap_in_id_order(store: Any) -> None:
    a, b, c, d = eid(0), eid(1), eid(2), eid(3)
    await store.put_entities(
        [
            make_entity(id=d, superseded_by=a, invalidated_at=at(1)),
            make_entity(id=a),
            make_entity(id=b),
            make_entity(id=c),
        ]
    )
    await store.put_relationships([make_relationship(a, b), make_relationship(b, c)])
    sub = await subgraph(store, [d, c], max_entities=2)
    assert sub.hops == {a: 0, c: 0}
    sub = await subgraph(store, [d, c], max_entities=1)
    assert sub.hops == {a: 0}
    sub = await subgraph(store, [d], max_hops=2)
    assert sub.hops == {a: 0, b: 1, c: 2}
    # an invalidated canonical (not superseded) ends the chain but is not live
    await store.put_entities([make_entity(id=a, invalidated_at=at(2))])
    assert (await subgraph(store, [d], max_hops=0)).entities == []
    assert (await subgraph(store, [d], max_hops=0, include_invalidated=True)).hops == {a: 0, d: 0}

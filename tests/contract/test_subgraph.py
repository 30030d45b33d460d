"""extract_subgraph and the batched graph reads, on both backends.

On Postgres ``extract_subgraph`` takes the native recursive-CTE path by default; the
hypothesis test compares it with the generic per-hop algorithm on random graphs.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cycgraph_memory import InvalidInputError
from cycgraph_memory.errors import DanglingReferenceError
from cycgraph_memory.retrieval import DEFAULT_MAX_SUBGRAPH_ENTITIES, extract_subgraph

from .factories import at, make_entity, make_fact, make_relationship, store_cited


def eid(i: int) -> uuid.UUID:
    return uuid.UUID(int=i + 1)


async def chain(store: Any, n: int) -> list[uuid.UUID]:
    """Entities 0..n-1 linked 0->1->2->... (ids increase along the chain)."""
    ids = [eid(i) for i in range(n)]
    await store.put_entities([make_entity(id=i, name=f"e{k}") for k, i in enumerate(ids)])
    await store.put_relationships(
        [
            make_relationship(ids[k], ids[k + 1], id=uuid.UUID(int=1000 + k), valid_from=at(k))
            for k in range(n - 1)
        ]
    )
    return ids


async def test_hops_bound_the_traversal(store: Any) -> None:
    ids = await chain(store, 6)
    for hops in range(0, 6):
        sub = await extract_subgraph(store, [ids[0]], max_hops=hops)
        assert [e.id for e in sub.entities] == ids[: hops + 1]
        assert [r.id for r in sub.relationships] == [uuid.UUID(int=1000 + k) for k in range(hops)]
        assert sub.hops == {ids[k]: k for k in range(hops + 1)}


async def test_bfs_from_the_middle_goes_both_ways(store: Any) -> None:
    ids = await chain(store, 5)
    sub = await extract_subgraph(store, [str(ids[2])], max_hops=1)
    assert [e.id for e in sub.entities] == [ids[2], ids[1], ids[3]]
    assert sub.hops == {ids[2]: 0, ids[1]: 1, ids[3]: 1}
    assert [r.id for r in sub.relationships] == [uuid.UUID(int=1001), uuid.UUID(int=1002)]


async def test_cycles_are_visited_once(store: Any) -> None:
    ids = await chain(store, 3)
    back = make_relationship(ids[2], ids[0], id=uuid.UUID(int=2000), valid_from=at(10))
    await store.put_relationship(back)
    sub = await extract_subgraph(store, [ids[0]], max_hops=5)
    assert [e.id for e in sub.entities] == [ids[0], ids[1], ids[2]]
    assert sub.hops == {ids[0]: 0, ids[1]: 1, ids[2]: 1}
    assert {r.id for r in sub.relationships} == {
        uuid.UUID(int=1000), uuid.UUID(int=1001), uuid.UUID(int=2000)
    }


async def test_cap_admits_in_id_order(store: Any) -> None:
    hub = eid(0)
    spokes = [eid(i) for i in range(1, 8)]
    await store.put_entities([make_entity(id=i) for i in [hub, *spokes]])
    await store.put_relationships(
        [make_relationship(hub, s, id=uuid.UUID(int=1000 + k)) for k, s in enumerate(spokes)]
    )
    sub = await extract_subgraph(store, [hub], max_hops=2, max_entities=4)
    assert [e.id for e in sub.entities] == [hub, *spokes[:3]]
    assert [r.id for r in sub.relationships] == [uuid.UUID(int=1000 + k) for k in range(3)]
    # Seeds count toward the cap too.
    sub = await extract_subgraph(store, spokes, max_hops=1, max_entities=2)
    assert [e.id for e in sub.entities] == spokes[:2]
    assert DEFAULT_MAX_SUBGRAPH_ENTITIES == 500


async def test_temporal_and_soft_deleted_edges_are_not_traversed(store: Any) -> None:
    a, b, c, d = (eid(i) for i in range(4))
    await store.put_entities([make_entity(id=i) for i in (a, b, c, d)])
    expired = make_relationship(a, b, valid_from=at(0), valid_until=at(10))
    current = make_relationship(a, c, valid_from=at(0))
    deleted = make_relationship(a, d, invalidated_by="retracted")
    await store.put_relationships([expired, current, deleted])
    sub = await extract_subgraph(store, [a], valid_at=at(20))
    assert [e.id for e in sub.entities] == [a, c]
    assert [r.id for r in sub.relationships] == [current.id]
    sub = await extract_subgraph(store, [a], valid_at=at(5))
    assert [e.id for e in sub.entities] == [a, b, c]
    sub = await extract_subgraph(store, [a], valid_at=at(5), include_invalidated=True)
    assert [e.id for e in sub.entities] == [a, b, c, d]


async def test_superseded_and_missing_entities_are_skipped(store: Any) -> None:
    a, b, c = eid(0), eid(1), eid(2)
    await store.put_entities(
        [make_entity(id=a), make_entity(id=b, superseded_by=c, invalidated_at=at(1)),
         make_entity(id=c)]
    )
    ghost = eid(9)  # never stored: an edge to it is refused, as a seed it is skipped
    with pytest.raises(DanglingReferenceError):
        await store.put_relationship(make_relationship(a, ghost))
    await store.put_relationships([make_relationship(a, b), make_relationship(a, c)])
    sub = await extract_subgraph(store, [a, ghost])
    assert [e.id for e in sub.entities] == [a, c]
    assert len(sub.relationships) == 1
    sub = await extract_subgraph(store, [a], include_invalidated=True)
    assert [e.id for e in sub.entities] == [a, b, c]
    # b is superseded by c: as a seed it forwards to c (test_subgraph_forwarding.py)
    sub = await extract_subgraph(store, [b])
    assert sub.hops == {c: 0, a: 1} and len(sub.relationships) == 1


async def test_relation_types_restrict_the_traversal(store: Any) -> None:
    a, b, c = eid(0), eid(1), eid(2)
    await store.put_entities([make_entity(id=i) for i in (a, b, c)])
    await store.put_relationships(
        [make_relationship(a, b, relation_type="manages"),
         make_relationship(a, c, relation_type="uses")]
    )
    sub = await extract_subgraph(store, [a], relation_types=["uses"])
    assert [e.id for e in sub.entities] == [a, c]


async def test_invalid_arguments_raise(store: Any) -> None:
    with pytest.raises(InvalidInputError):
        await extract_subgraph(store, [eid(0)], max_hops=6)
    with pytest.raises(InvalidInputError):
        await extract_subgraph(store, [eid(0)], max_hops=-1)
    with pytest.raises(InvalidInputError):
        await extract_subgraph(store, [eid(0)], max_entities=0)
    with pytest.raises(InvalidInputError):
        await extract_subgraph(store, ["not-a-uuid"])
    assert (await extract_subgraph(store, [])).entities == []


async def test_get_relationships_for_entities_batches(store: Any) -> None:
    ids = await chain(store, 4)
    rels = await store.get_relationships_for_entities([ids[1], ids[2]])
    assert [r.id for r in rels] == [uuid.UUID(int=1000 + k) for k in range(3)]
    out = await store.get_relationships_for_entities([ids[1]], direction="outgoing")
    assert [r.id for r in out] == [uuid.UUID(int=1001)]
    inc = await store.get_relationships_for_entities([ids[1]], {"direction": "incoming"})
    assert [r.id for r in inc] == [uuid.UUID(int=1000)]
    assert await store.get_relationships_for_entities([]) == []


async def test_get_facts_for_entities_newest_first_with_filters(store: Any) -> None:
    a, b = eid(0), eid(1)
    old = make_fact(entity_ids=[a], valid_from=at(0), tags=["x"])
    mid = make_fact(entity_ids=[a, b], valid_from=at(10))
    new = make_fact(entity_ids=[a], valid_from=at(20), valid_until=at(30))
    gone = make_fact(entity_ids=[a], valid_from=at(25), invalidated_by="superseded")
    await store_cited(store, [old, mid, new, gone])
    await store.put_facts([old, mid, new, gone])
    got = await store.get_facts_for_entities([a, b, eid(5)])
    assert list(got) == [a, b]
    assert [f.id for f in got[a]] == [new.id, mid.id, old.id]
    assert [f.id for f in got[b]] == [mid.id]
    got = await store.get_facts_for_entities([a], per_entity_limit=1)
    assert [f.id for f in got[a]] == [new.id]
    got = await store.get_facts_for_entities([a], valid_at=at(35), per_entity_limit=1)
    assert [f.id for f in got[a]] == [mid.id]
    got = await store.get_facts_for_entities([a], changed_since=at(5))
    assert [f.id for f in got[a]] == [new.id, mid.id]
    got = await store.get_facts_for_entities([a], tags=["x"])
    assert [f.id for f in got[a]] == [old.id]
    got = await store.get_facts_for_entities([a], exclude_tags=["x"], include_invalidated=True)
    assert [f.id for f in got[a]] == [gone.id, new.id, mid.id]


# ----------------------------------------------------------------------------- native == generic

graphs = st.fixed_dictionaries(
    {
        "n": st.integers(2, 14),
        "edges": st.lists(
            st.tuples(
                st.integers(0, 13), st.integers(0, 13), st.integers(0, 3),
                st.sampled_from(["a", "b"]), st.booleans(),
            ),
            max_size=30,
        ),
        "dead": st.sets(st.integers(0, 13), max_size=3),
        # superseded_by pointers: chains, loops and ids past n (missing entities)
        "fwd": st.dictionaries(st.integers(0, 13), st.integers(0, 15), max_size=4),
        "seeds": st.lists(st.integers(0, 15), min_size=1, max_size=3),
        "hops": st.integers(0, 4),
        "cap": st.one_of(st.integers(1, 4), st.integers(5, 15)),
        "at": st.one_of(st.none(), st.integers(0, 4)),
        "types": st.one_of(st.none(), st.just(["a"])),
        "inc": st.booleans(),
    }
)


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(g=graphs)
async def test_native_and_generic_subgraphs_agree(store: Any, g: dict[str, Any]) -> None:
    await store.clear()
    n = g["n"]
    await store.put_entities(
        [make_entity(id=eid(i), invalidated_at=at(1) if i in g["dead"] else None,
                     superseded_by=eid(g["fwd"][i]) if i in g["fwd"] else None)
         for i in range(n)]
    )
    rels = []
    for k, (s, t, start, kind, deleted) in enumerate(g["edges"]):
        rels.append(
            make_relationship(
                eid(s % n), eid(t % n), id=uuid.UUID(int=5000 + k), relation_type=kind,
                valid_from=at(days=start), valid_until=at(days=start + 2),
                invalidated_by="x" if deleted else None,
            )
        )
    await store.put_relationships(rels)
    kwargs: dict[str, Any] = {
        "max_hops": g["hops"], "max_entities": g["cap"],
        "valid_at": None if g["at"] is None else at(days=g["at"] + 0.5),
        "relation_types": g["types"], "include_invalidated": g["inc"],
    }
    seeds = [eid(i) for i in g["seeds"]]
    native = await extract_subgraph(store, seeds, **kwargs)
    generic = await extract_subgraph(store, seeds, native=False, **kwargs)
    assert native == generic

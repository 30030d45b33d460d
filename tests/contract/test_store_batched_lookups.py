"""MemoryStore contract: the batched lookups used by entity resolution and ingest."""

from __future__ import annotations

import uuid
from typing import Any

from .factories import at, make_entity, make_fact, make_relationship, store_cited


async def test_find_facts_for_entities(store: Any) -> None:
    a, b, c = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    f1 = make_fact(entity_ids=[a], valid_from=at(2))
    f2 = make_fact(entity_ids=[c, b], valid_from=at(1))
    f3 = make_fact(entity_ids=[c], valid_from=at(0))
    gone = make_fact(entity_ids=[a], valid_from=at(3), invalidated_by="x")
    await store_cited(store, [f1, f2, f3, gone])
    await store.put_facts([f1, f2, f3, gone])
    assert await store.find_facts_for_entities([a, b]) == [f2, f1]
    assert await store.find_facts_for_entities([a], include_invalidated=True) == [f1, gone]
    assert await store.find_facts_for_entities([str(c)]) == [f3, f2]
    assert await store.find_facts_for_entities([]) == []
    assert await store.find_facts_for_entities([uuid.uuid4()]) == []


async def test_find_relationships_for_entities(store: Any) -> None:
    ents = [make_entity() for _ in range(4)]
    await store.put_entities(ents)
    a, b, c, d = (e.id for e in ents)
    ab = make_relationship(a, b, valid_from=at(3))
    cb = make_relationship(c, b, valid_from=at(1))
    cd = make_relationship(c, d, valid_from=at(2))
    dead = make_relationship(d, a, valid_from=at(4), invalidated_by="x")
    await store.put_relationships([ab, cb, cd, dead])
    assert await store.find_relationships_for_entities([a]) == [ab]
    assert await store.find_relationships_for_entities([b, d]) == [cb, cd, ab]
    assert await store.find_relationships_for_entities([a], include_invalidated=True) == [
        ab,
        dead,
    ]
    assert await store.find_relationships_for_entities([]) == []


async def test_find_entities_by_name_keys(store: Any) -> None:
    acme = make_entity(name="The Acme, Corp.", created_at=at(1), updated_at=at(1))
    acme2 = make_entity(name="acme corp", created_at=at(0), updated_at=at(0))
    person = make_entity(name="Acme Corp", entity_type="person")
    ai = make_entity(name="A.I. Labs", entity_type="org")
    dead = make_entity(name="Acme Corp", invalidated_at=at(5))
    other = make_entity(name="Acme Corporation")
    await store.put_entities([acme, acme2, person, ai, dead, other])
    got = await store.find_entities_by_name_keys([("acme corp", "organization")])
    assert got == [acme2, acme]
    got = await store.find_entities_by_name_keys(
        [("acme corp", "person"), ("ai labs", "org"), ("nobody", "organization")]
    )
    assert got == sorted([person, ai], key=lambda e: (e.created_at, str(e.id)))
    assert await store.find_entities_by_name_keys([]) == []


async def test_scan_facts_pages_everything_in_listing_order(store: Any) -> None:
    facts = [make_fact(content=str(i), valid_from=at(i % 4), tags=["t"] if i % 3 else [])
             for i in range(11)]
    facts.append(make_fact(content="gone", invalidated_by="x"))
    await store.put_facts(facts)
    pages = [p async for p in store.scan_facts(page_size=3)]
    assert [len(p) for p in pages] == [3, 3, 3, 2]
    assert [f for p in pages for f in p] == await store.find_facts()
    tagged = [f async for p in store.scan_facts({"tags": ["t"]}, page_size=2) for f in p]
    assert tagged == await store.find_facts(tags=["t"])
    everything = [f async for p in store.scan_facts(include_invalidated=True) for f in p]
    assert everything == await store.find_facts(include_invalidated=True)
    assert [p async for p in store.scan_facts(exclude_tags=["t"], entity_id=uuid.uuid4())] == []


async def test_scan_entities_pages_everything_in_listing_order(store: Any) -> None:
    ents = [make_entity(name=f"e{i}", created_at=at(i % 3), updated_at=at(0),
                        entity_type="person" if i % 2 else "org") for i in range(7)]
    await store.put_entities(ents)
    pages = [p async for p in store.scan_entities(page_size=2)]
    assert [len(p) for p in pages] == [2, 2, 2, 1]
    assert [e for p in pages for e in p] == await store.find_entities()
    people = [e async for p in store.scan_entities(entity_type="person") for e in p]
    assert people == await store.find_entities(entity_type="person")

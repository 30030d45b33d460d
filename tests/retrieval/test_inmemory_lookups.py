"""The in-memory store's inverted indexes stay in step with its records."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cycgraph_memory import (
    Entity,
    InMemoryMemoryStore,
    Provenance,
    Relationship,
    SemanticFact,
    Theme,
)

PROV = Provenance(source="agent", created_at=datetime(2025, 1, 1, tzinfo=UTC))
E = [uuid.UUID(int=i + 1) for i in range(4)]
TAGS = ["a", "b", "c"]

ops = st.lists(
    st.one_of(
        st.tuples(st.just("fact"), st.integers(0, 5), st.lists(st.sampled_from(TAGS), max_size=2),
                  st.lists(st.sampled_from(E), max_size=2), st.sampled_from([None, *E])),
        st.tuples(st.just("rel"), st.integers(0, 5), st.sampled_from(E), st.sampled_from(E)),
        st.tuples(st.just("del_fact"), st.integers(0, 5)),
        st.tuples(st.just("del_rel"), st.integers(0, 5)),
        st.tuples(st.just("del_entity"), st.integers(0, 3)),
        st.tuples(st.just("rollback"), st.integers(0, 5), st.sampled_from(TAGS)),
    ),
    max_size=25,
)


def _entity(entity_id: uuid.UUID) -> Entity:
    return Entity(id=entity_id, name=str(entity_id), entity_type="t", provenance=PROV)


class Boom(Exception):
    pass


@settings(max_examples=150, deadline=None)
@given(ops=ops)
async def test_indexed_listings_equal_full_scans(ops: list[tuple[object, ...]]) -> None:
    store = InMemoryMemoryStore()
    for op in ops:
        kind, n = op[0], int(op[1])  # type: ignore[call-overload]
        fid, rid = uuid.UUID(int=100 + n), uuid.UUID(int=200 + n)
        if kind == "fact":
            # Facts cite only stored records (a deleted entity is stored again).
            await store.put_entities([_entity(e) for e in op[3]])  # type: ignore[union-attr]
            if op[4] is not None:
                await store.put_theme(Theme(id=op[4], label="t", provenance=PROV))
            await store.put_fact(SemanticFact(
                id=fid, content="x", tags=op[2], entity_ids=op[3], theme_id=op[4],
                provenance=PROV, valid_from=datetime(2025, 1, 1 + len(op[2]), tzinfo=UTC),
                invalidated_by="x" if n == 5 else None,
            ))
        elif kind == "rel":
            # Relationships need their endpoints (a deleted entity is stored again).
            await store.put_entities([_entity(op[2]), _entity(op[3])])  # type: ignore[arg-type]
            await store.put_relationship(Relationship(id=rid, source_id=op[2], target_id=op[3],
                                                      relation_type="r", provenance=PROV))
        elif kind == "del_fact":
            await store.delete_fact(fid)
        elif kind == "del_rel":
            await store.delete_relationship(rid)
        elif kind == "del_entity":
            await store.delete_entity(E[n])  # cascades to its edges (and their lookups)
        else:
            with pytest.raises(Boom):
                async with store.transaction():
                    await store.put_entity(_entity(E[0]))
                    await store.put_fact(SemanticFact(id=fid, content="y", tags=[op[2]],
                                                      entity_ids=E[:1], provenance=PROV))
                    await store.delete_relationship(rid)
                    raise Boom
        # Warm the cached tag orders between writes, so a stale cache would show below.
        for tag in TAGS:
            await store.find_facts(tags=[tag], limit=3)
    facts = await store.find_facts()
    rels = await store.get_relationships(uuid.UUID(int=200 + i) for i in range(6))
    everything = await store.find_facts(include_invalidated=True)
    for tag in TAGS:
        assert await store.find_facts(tags=[tag]) == [f for f in facts if tag in f.tags]
        for offset, limit in ((0, 1), (1, 2), (0, 50)):
            tagged = [f for f in facts if tag in f.tags]
            assert await store.find_facts(tags=[tag], offset=offset, limit=limit) == (
                tagged[offset : offset + limit]
            )
            assert await store.find_facts(
                tags=[tag, "a"] if tag != "a" else [tag], exclude_tags=["c"],
                include_invalidated=True, offset=offset, limit=limit,
            ) == [f for f in everything
                  if ({tag, "a"} & set(f.tags)) and "c" not in f.tags][offset : offset + limit]
    for e in E:
        assert await store.find_facts(entity_id=e) == [f for f in facts if e in f.entity_ids]
        assert await store.find_facts(theme_id=e) == [f for f in facts if f.theme_id == e]
        expected = sorted((r for r in rels.values() if e in (r.source_id, r.target_id)),
                          key=lambda r: (r.valid_from, str(r.id)))
        assert await store.get_relationships_for_entity(e) == expected
    await store.clear()
    assert await store.find_facts(tags=TAGS) == []
    assert await store.get_relationships_for_entities(E) == []

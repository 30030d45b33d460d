"""Postgres-specific store behaviour: upserts, bulk writes, validation, error translation."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from pydantic import ValidationError
from sqlalchemy import func, select, text

from cycgraph_memory.errors import (
    EmbeddingDimensionMismatchError,
    InvalidInputError,
    InvalidTenantError,
)
from cycgraph_memory.records import Message

from ._records import (
    entity,
    episode,
    fact,
    prov,
    relationship,
    theme,
    ts,
    unit,
)

pytestmark = pytest.mark.postgres


@pytest.mark.parametrize("tenant", ["", "x" * 65, "has space", "semi;colon", "ünï", None, 7])
def test_malformed_tenant_rejected(pg_sessionmaker: Any, tenant: Any) -> None:
    from cycgraph_memory.postgres import PostgresMemoryIndex, PostgresMemoryStore

    with pytest.raises(InvalidTenantError):
        PostgresMemoryStore(pg_sessionmaker, tenant_id=tenant)
    with pytest.raises(InvalidTenantError):
        PostgresMemoryIndex(pg_sessionmaker, tenant_id=tenant)


def test_valid_tenants_accepted(pg_sessionmaker: Any) -> None:
    from cycgraph_memory.postgres import DEFAULT_TENANT, PostgresMemoryStore

    for tenant in ("a", "x" * 64, "org:acme.prod-1_eu"):
        assert PostgresMemoryStore(pg_sessionmaker, tenant_id=tenant).tenant_id == tenant
    assert PostgresMemoryStore(pg_sessionmaker).tenant_id == DEFAULT_TENANT == "default"


async def _count(sm: Any, table: str) -> int:
    async with sm() as s:
        return int((await s.execute(text(f"SELECT count(*) FROM {table}"))).scalar_one())


async def test_dimension_mismatch_leaves_db_unchanged(
    pg_store: Any, pg_index: Any, pg_sessionmaker: Any
) -> None:
    good = fact()
    await pg_store.put_fact(good)
    before = await _count(pg_sessionmaker, "facts")
    bad = [fact(), fact(embedding=[0.5] * 9)]
    with pytest.raises(EmbeddingDimensionMismatchError) as info:
        await pg_store.put_facts(bad)
    assert (info.value.expected, info.value.actual) == (8, 9)
    assert await _count(pg_sessionmaker, "facts") == before
    for put, rec in (
        (pg_store.put_entity, entity(embedding=[1.0] * 3)),
        (pg_store.put_episode, episode(embedding=[1.0] * 3)),
        (pg_store.put_theme, theme(embedding=[1.0] * 3)),
    ):
        with pytest.raises(EmbeddingDimensionMismatchError):
            await put(rec)
    assert await _count(pg_sessionmaker, "entities") == 0
    assert await _count(pg_sessionmaker, "episode_messages") == 0
    with pytest.raises(EmbeddingDimensionMismatchError):
        await pg_index.search_facts([1.0] * 7)


async def test_mismatch_rejected_before_any_sql(pg_sessionmaker: Any) -> None:
    from cycgraph_memory.postgres import PostgresMemoryIndex, PostgresMemoryStore

    calls: list[str] = []

    class Spy:
        def __call__(self) -> Any:
            calls.append("session")
            return pg_sessionmaker()

    store = PostgresMemoryStore(pg_sessionmaker, tenant_id="spy", embedding_dim=8)
    index = PostgresMemoryIndex(pg_sessionmaker, tenant_id="spy", embedding_dim=8)
    store._sessionmaker = Spy()  # type: ignore[assignment]
    index._sessionmaker = Spy()  # type: ignore[assignment]
    with pytest.raises(EmbeddingDimensionMismatchError):
        await store.put_fact(fact(embedding=[1.0] * 5))
    with pytest.raises(EmbeddingDimensionMismatchError):
        await index.search_entities([1.0] * 5)
    assert calls == []


async def test_configured_dim_must_match_schema(pg_sessionmaker: Any) -> None:
    from cycgraph_memory.postgres import PostgresMemoryStore

    store = PostgresMemoryStore(pg_sessionmaker, tenant_id="cfg", embedding_dim=384)
    with pytest.raises(EmbeddingDimensionMismatchError):
        await store.put_fact(fact(embedding=None))
        await store.put_fact(fact())


async def test_upsert_updates_every_mutable_column(pg_store: Any) -> None:
    e1 = entity()
    e2 = entity(id=e1.id, name="Acme 2", entity_type="company", attributes={"x": [1, 2]},
                embedding=unit(5), provenance=prov(source="tool", tool_name="t"),
                created_at=ts(5), updated_at=ts(6), invalidated_at=ts(7),
                superseded_by=uuid.uuid4())
    await pg_store.put_entity(e1)
    await pg_store.put_entity(e2)
    assert await pg_store.get_entity(e1.id) == e2

    a, b = e1.id, entity().id
    await pg_store.put_entity(entity(id=b))
    r1 = relationship(a, b)
    r2 = relationship(b, a, id=r1.id, relation_type="likes", weight=0.25,
                      attributes={"since": "2020"}, valid_from=ts(1), valid_until=ts(9),
                      provenance=prov(source="human"), invalidated_by="r-other")
    await pg_store.put_relationship(r1)
    await pg_store.put_relationship(r2)
    assert await pg_store.get_relationship(r1.id) == r2

    ep1 = episode()
    ep2 = episode(id=ep1.id, topic="farewell",
                  messages=[Message(role="tool", content="bye", timestamp=ts(3))],
                  started_at=ts(2), ended_at=ts(4), embedding=unit(6),
                  fact_ids=[uuid.uuid4()], provenance=prov(run_id="r9"),
                  invalidated_at=ts(8))
    await pg_store.put_episode(ep1)
    await pg_store.put_episode(ep2)
    assert await pg_store.get_episode(ep1.id) == ep2

    f1 = fact(tags=["candidate"])
    # Facts cite only stored records.
    cited_ep, cited_th = episode(), theme()
    cited_es = [entity(), entity()]
    await pg_store.put_episode(cited_ep)
    await pg_store.put_theme(cited_th)
    await pg_store.put_entities(cited_es)
    f2 = fact(id=f1.id, content="water is wetter", source_episode_ids=[cited_ep.id],
              entity_ids=[e.id for e in cited_es], theme_id=cited_th.id,
              embedding=unit(7), provenance=prov(confidence=0.5), valid_from=ts(1),
              valid_until=ts(2), invalidated_by="eval-gate:harmful", access_count=4,
              last_accessed_at=ts(3), tags=["verified", "lesson"])
    await pg_store.put_fact(f1)
    await pg_store.put_fact(f2)
    got = await pg_store.get_fact(f1.id)
    assert got == f2 and got.tags == ["verified", "lesson"]
    assert await pg_store.find_facts(tags=["candidate"], include_invalidated=True) == []

    t1 = theme()
    t2 = theme(id=t1.id, label="climate", description="d", fact_ids=[f1.id],
               embedding=None, provenance=prov(created_at=ts(99)), invalidated_at=ts(100))
    await pg_store.put_theme(t1)
    await pg_store.put_theme(t2)
    assert await pg_store.get_theme(t1.id) == t2


def _spread(i: int) -> list[float]:
    # Distinct vectors: thousands of identical ones would leave a degenerate clique of dead
    # entries in the shared HNSW graph after the rollback (until autovacuum repairs it).
    return [1.0 + i, float(i % 7), float(i % 11), float(i % 13), 0.5, 0.25, 0.125, 1.0]


async def test_bulk_writes_round_trip(pg_store: Any) -> None:
    facts = [fact(content=f"f{i}", valid_from=ts(i), tags=[f"t{i % 7}"], embedding=_spread(i))
             for i in range(2_500)]  # > 1,000 rows: several batches
    await pg_store.put_facts(facts)
    assert await pg_store.find_facts() == facts
    got = await pg_store.get_facts([f.id for f in facts[::3]])
    assert got == {f.id: f for f in facts[::3]}
    assert await pg_store.find_facts(tags=["t3"], limit=5) == [f for f in facts if
                                                                f.tags == ["t3"]][:5]

    ents = [entity(name=f"e{i}", created_at=ts(i), embedding=_spread(i)) for i in range(1_200)]
    await pg_store.put_entities(ents)
    assert await pg_store.find_entities() == ents
    rels = [relationship(ents[i].id, ents[i + 1].id, valid_from=ts(i)) for i in range(1_100)]
    await pg_store.put_relationships(rels)
    assert (await pg_store.get_relationships([r.id for r in rels])) == {r.id: r for r in rels}
    eps = [episode(started_at=ts(i), ended_at=ts(i + 1), embedding=_spread(i))
           for i in range(600)]
    await pg_store.put_episodes(eps)
    assert await pg_store.list_episodes() == eps
    ths = [theme(label=f"th{i}", provenance=prov(created_at=ts(i)), embedding=_spread(i))
           for i in range(1_050)]
    await pg_store.put_themes(ths)
    assert await pg_store.list_themes() == ths


async def test_duplicates_in_one_batch_last_wins(pg_store: Any) -> None:
    f1 = fact(content="first")
    f2 = fact(id=f1.id, content="second")
    await pg_store.put_facts([f1, f2])
    assert (await pg_store.get_fact(f1.id)).content == "second"


async def test_ids_as_strings_and_malformed(pg_store: Any) -> None:
    f = fact()
    await pg_store.put_fact(f)
    assert await pg_store.get_fact(str(f.id)) == f
    assert list(await pg_store.get_facts([str(f.id)])) == [f.id]
    for bad in ("not-a-uuid", "1234"):
        with pytest.raises(InvalidInputError):
            await pg_store.get_fact(bad)
        with pytest.raises(InvalidInputError):
            await pg_store.get_entities([bad])
        with pytest.raises(InvalidInputError):
            await pg_store.delete_theme(bad)


async def test_uuid_order_matches_string_order(pg_sessionmaker: Any, pg_store: Any) -> None:
    ids = [uuid.uuid4() for _ in range(300)] + [
        uuid.UUID("00000000-0000-0000-0000-00000000000a"),
        uuid.UUID("00000000-0000-0000-0000-000000000009"),
        uuid.UUID("ffffffff-ffff-ffff-ffff-ffffffffffff"),
        uuid.UUID("0fffffff-ffff-ffff-ffff-ffffffffffff"),
        uuid.UUID("a0000000-0000-0000-0000-000000000000"),
    ]
    async with pg_sessionmaker() as s:
        got = (await s.execute(
            select(func.unnest(text(":ids ::uuid[]")).label("u")).order_by(text("u")),
            {"ids": [str(i) for i in ids]},
        )).scalars().all()
    assert [str(u) for u in got] == sorted(str(i) for i in ids)
    # and listings tie-break that way
    same = [fact(id=i, valid_from=ts(0)) for i in ids[:50]]
    await pg_store.put_facts(same)
    assert [f.id for f in await pg_store.find_facts()] == sorted(i for i in ids[:50])


async def test_duplicate_message_ids_are_refused_before_the_database(pg_store: Any) -> None:
    m = Message(role="user", content="x", timestamp=ts(0))
    with pytest.raises(ValidationError):
        episode(messages=[m, m])
    ep = episode(messages=[m]).model_copy(update={"messages": [m, m]})  # skips validation
    with pytest.raises(ValidationError):
        await pg_store.put_episode(ep)
    assert await pg_store.get_episode(ep.id) is None


async def test_touch_facts_single_update(pg_store: Any) -> None:
    f1, f2 = fact(), fact()
    await pg_store.put_facts([f1, f2])
    await pg_store.touch_facts([f1.id, str(f1.id), uuid.uuid4()], at=ts(10))
    g1, g2 = await pg_store.get_fact(f1.id), await pg_store.get_fact(f2.id)
    assert (g1.access_count, g1.last_accessed_at) == (1, ts(10))
    assert (g2.access_count, g2.last_accessed_at) == (0, None)


async def test_get_messages(pg_store: Any) -> None:
    ep = episode()
    await pg_store.put_episode(ep)
    ids = [m.id for m in ep.messages]
    got = await pg_store.get_messages([*ids, uuid.uuid4()])
    assert got == {m.id: m for m in ep.messages}

"""Shapes of the Postgres hot path's client side (no timings): round trips and decoding."""

from __future__ import annotations

import asyncio
import secrets
import uuid
from typing import Any

import pytest
from sqlalchemy import text

from ._records import DIM, entity, fact, prov, relationship

pytestmark = [pytest.mark.postgres]


async def test_a_connection_the_server_closed_is_replaced_at_checkout(pg_dsn: str) -> None:
    # Without pool_pre_ping (the default), checkout tests the connection locally.
    from cycgraph_memory.postgres import PostgresMemoryStore, create_engine_from_dsn

    engine = create_engine_from_dsn(pg_dsn, pool_size=1, max_overflow=0)
    admin = create_engine_from_dsn(pg_dsn, pool_size=1, max_overflow=0)
    tenant = f"hot_{secrets.token_hex(4)}"
    store = PostgresMemoryStore(engine, tenant_id=tenant)
    try:
        f = fact()
        await store.put_fact(f)
        async with engine.connect() as conn:
            pid = (await conn.execute(text("SELECT pg_backend_pid()"))).scalar_one()
        async with admin.connect() as conn:
            assert (await conn.execute(
                text("SELECT pg_terminate_backend(:pid)"), {"pid": pid}
            )).scalar_one()
        await asyncio.sleep(0.2)  # the event loop sees the socket close
        # A read is not retried: it succeeds because the pool replaced the connection.
        assert await store.get_fact(f.id) == f
        async with engine.connect() as conn:
            assert (await conn.execute(text("SELECT pg_backend_pid()"))).scalar_one() != pid
    finally:
        await store.clear()
        await engine.dispose()
        await admin.dispose()


async def test_a_checkout_costs_no_round_trip(pg_dsn: str) -> None:
    # A retrieval's transaction is BEGIN, its statements, COMMIT: no ping around it.
    import asyncpg

    from cycgraph_memory.postgres import PostgresMemoryStore, create_engine_from_dsn

    engine = create_engine_from_dsn(pg_dsn, pool_size=1, max_overflow=0)
    store = PostgresMemoryStore(engine, tenant_id=f"hot_{secrets.token_hex(4)}")
    sent: list[str] = []
    original = asyncpg.Connection.execute

    async def spy(self: Any, query: str, *args: Any, **kwargs: Any) -> Any:
        sent.append(query)
        return await original(self, query, *args, **kwargs)

    try:
        await store.get_fact(uuid.uuid4())  # the pool holds one connection now
        asyncpg.Connection.execute = spy  # type: ignore[method-assign]
        try:
            assert await store.get_fact(uuid.uuid4()) is None
        finally:
            asyncpg.Connection.execute = original  # type: ignore[method-assign]
        assert sent == ["BEGIN;", "COMMIT;"]
    finally:
        await engine.dispose()


async def test_ranked_candidates_decode_provenance_only_for_served_facts(
    pg_store: Any, pg_index: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Candidates the ranking drops are never built with their provenance or vector; the
    # served facts are complete (equal to the stored records).
    from cycgraph_memory import MemoryQuery, retrieve_memory
    from cycgraph_memory.postgres import convert, signals

    facts = [
        fact(content=f"fact {i}", provenance=prov(agent_id=f"agent-{i}"),
             embedding=[1.0, 0.05 * i, *([0.0] * (DIM - 2))])
        for i in range(12)
    ]
    await pg_store.put_facts(facts)
    decoded: list[str | None] = []
    original = convert.provenance_from_json

    def counting(value: Any) -> Any:
        decoded.append(value.get("agent_id"))
        return original(value)

    monkeypatch.setattr(signals.convert, "provenance_from_json", counting)
    for mode in ("vector", "hybrid"):
        decoded.clear()
        query = MemoryQuery(embedding=[1.0, *([0.0] * (DIM - 1))], text="fact", limit=3,
                            min_similarity=0.0)
        result = await retrieve_memory(pg_store, pg_index, query, mode=mode)
        served = result.facts
        assert len(served) == 3
        during = [d for d in decoded if d]
        stored = await pg_store.get_facts([f.id for f in served])
        touched = {"access_count", "last_accessed_at"}  # served as read, before the touch
        assert [f.model_dump(exclude=touched) for f in served] == [
            stored[f.id].model_dump(exclude=touched) for f in served
        ]
        # hybrid: the text hits are built whole (a separate signal); vector: only the served.
        if mode == "vector":
            assert sorted(during) == sorted(
                f.provenance.agent_id or "" for f in served
            )


@pytest.mark.parametrize("document", [
    '{"a": 1, "b": [1, 2.5, -3e-7, true, false, null], "c": {"d": "\\u00e9\\n"}}',
    "[]", "{}", '"text"', "12345678901234567890", "-0.0", "  {\"a\": 1}  ", "[1, 2] ",
    '{"created_at": "2025-01-01T00:00:00Z", "source": "system", "confidence": null}',
])
def test_the_engines_json_reader_gives_json_loads_values(document: str) -> None:
    import json

    from cycgraph_memory.postgres.engine import _json_int, _loads_json

    # json.loads with the engine's integer rule: a literal past 64 bits was a float.
    assert _loads_json(document) == json.loads(document, parse_int=_json_int)


def test_integer_literals_past_64_bits_read_as_floats() -> None:
    from cycgraph_memory.postgres.engine import _loads_json

    assert _loads_json("[9223372036854775807, -9223372036854775808]") == [2**63 - 1, -(2**63)]
    big = _loads_json('{"x": 100000000000000000000, "y": 12345678901234567890}')
    assert big == {"x": 1e20, "y": 1.2345678901234567e19}
    assert all(isinstance(v, float) for v in big.values())


@pytest.mark.parametrize("document", ["", "{", '{"a": 1} x', "[1,]", "nan x"])
def test_the_engines_json_reader_refuses_what_json_loads_refuses(document: str) -> None:
    import json

    from cycgraph_memory.postgres.engine import _loads_json

    with pytest.raises(json.JSONDecodeError):
        _loads_json(document)


async def test_aggregated_arrays_travel_on_one_row(
    pg_store: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The subgraph's traversed edges and the expansion's relationships / episodes are
    # statement-wide values: sent (and decoded) once, not once per entity row.
    from cycgraph_memory.postgres import statements

    people = [entity(name=f"p{i}") for i in range(6)]
    await pg_store.put_entities(people)
    await pg_store.put_relationships(
        [relationship(people[i].id, people[i + 1].id) for i in range(5)]
    )
    seen: list[Any] = []
    original = statements.fetch

    async def spy(session: Any, stmt: Any, params: Any) -> Any:
        rows = await original(session, stmt, params)
        seen.append(rows)
        return rows

    monkeypatch.setattr(statements, "fetch", spy)
    sub = await pg_store.extract_subgraph_native(
        [people[0].id], max_hops=5, valid_at=None, include_invalidated=False,
        max_entities=100, relation_types=None,
    )
    assert len(sub.entities) == 6 and len(sub.relationships) == 5
    cte_rows = seen[0]
    assert len(cte_rows) == 6
    assert [r["edge_docs"] is not None for r in cte_rows] == [True] + [False] * 5
    seen.clear()
    found, rels, _, _, _ = await pg_store.expand_facts(
        [p.id for p in people], include_invalidated=False, entity_types=None,
        relationship_limit=None, episode_ids=[uuid.uuid4()],
    )
    assert len(found) == 6 and len(rels) == 5
    rows = seen[0]
    assert len(rows) == 6
    assert sum(r["relationships"] is not None for r in rows) == 1
    assert sum(r["episodes"] is not None for r in rows) == 1

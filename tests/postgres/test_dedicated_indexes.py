"""Dedicated vector indexes: a tenant's own HNSW graph, found and used by its searches.

``CREATE INDEX CONCURRENTLY`` cannot run inside the per-test rolled-back transaction, so
these tests use a database of their own (migrated once for the module) with committed
rows. Each test builds what it needs and drops it again.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import numpy as np
import pytest
import pytest_asyncio
from sqlalchemy import event, text

from cycgraph_memory import MemoryQuery, retrieve_memory
from cycgraph_memory.errors import InvalidInputError
from cycgraph_memory.postgres import (
    PostgresMemoryIndex,
    PostgresMemoryStore,
    create_engine_from_dsn,
    dedicate_large_tenants,
    dedicate_vector_indexes,
    deferred_vector_indexes,
    drop_dedicated_vector_indexes,
    list_dedicated_vector_indexes,
    upgrade,
)
from cycgraph_memory.postgres.tenant_indexes import KNN_TABLES, dedicated_index_name

from ._records import DIM, fact

pytestmark = pytest.mark.postgres

BIG, SMALL = 1_200, 300
TENANT_BIG, TENANT_SMALL = "ded-big", "ded.small-:x1"  # every class of character allowed
# ("-:x1" would read as a bind parameter in a text() statement: DDL must not use one.)

# Without these the planner reads tables this small sequentially whatever the indexes.
_NO_SHORTCUTS = {"enable_seqscan": "off", "enable_bitmapscan": "off", "enable_sort": "off"}


def _unit_rows(rng: np.random.Generator, n: int) -> np.ndarray:
    a = rng.standard_normal((n, DIM))
    result: np.ndarray = a / np.linalg.norm(a, axis=1, keepdims=True)
    return result


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def shared(pg_databases: Any) -> AsyncIterator[dict[str, Any]]:
    """A database holding a big and a small tenant in one facts table, committed."""
    dsn = await pg_databases.create("cycgraph_dedicated")
    await upgrade(dsn, embedding_dim=DIM)
    engine = create_engine_from_dsn(dsn, connect_args={"server_settings": _NO_SHORTCUTS})
    rng = np.random.default_rng(11)
    vectors = {TENANT_BIG: _unit_rows(rng, BIG), TENANT_SMALL: _unit_rows(rng, SMALL)}
    ids: dict[str, list[uuid.UUID]] = {}
    for tenant, rows in vectors.items():
        ids[tenant] = sorted(uuid.uuid4() for _ in range(len(rows)))
        await PostgresMemoryStore(engine, tenant_id=tenant).put_facts(
            [fact(id=i, embedding=v.tolist()) for i, v in zip(ids[tenant], rows, strict=True)]
        )
    await PostgresMemoryIndex(engine, tenant_id=TENANT_BIG).rebuild(analyze=True)
    try:
        yield {"engine": engine, "vectors": vectors, "ids": ids,
               "queries": _unit_rows(rng, 12)}
    finally:
        await engine.dispose()


@pytest_asyncio.fixture(loop_scope="session")
async def engine(shared: dict[str, Any]) -> AsyncIterator[Any]:
    """The module's engine; every dedicated index is dropped after each test."""
    yield shared["engine"]
    for tenant in (TENANT_BIG, TENANT_SMALL):
        await drop_dedicated_vector_indexes(shared["engine"], tenant)


def _nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", ()):
        yield from _nodes(child)


async def _index_loops(engine: Any, tenant: str, index: PostgresMemoryIndex,
                       q: list[float]) -> dict[str, int]:
    """Loops of every index scan (by index name) when ``search_facts`` runs its statement."""
    captured: list[tuple[str, Any]] = []

    def listen(conn: Any, cursor: Any, statement: str, parameters: Any, context: Any,
               executemany: bool) -> None:
        if "<=>" in statement and "set_config" not in statement:
            captured.append((statement, parameters))

    event.listen(engine.sync_engine, "before_cursor_execute", listen)
    try:
        await index.search_facts(q, limit=10)
    finally:
        event.remove(engine.sync_engine, "before_cursor_execute", listen)
    [(sql, params)] = captured
    loops: dict[str, int] = {}
    async with engine.connect() as conn, conn.begin():
        # The search's own settings (tenant, ef_search, plan mode), then its statement.
        await index._set_tenant(_SessionLike(conn), index._search_settings(40, "facts"))
        rows = (await conn.exec_driver_sql(
            "EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, FORMAT JSON) " + sql, params
        )).scalars().all()
    doc = rows[0] if not isinstance(rows[0], str) else json.loads(rows[0])
    for node in _nodes(doc[0]["Plan"]):
        name = node.get("Index Name")
        if name:
            loops[name] = loops.get(name, 0) + int(node["Actual Loops"])
    return loops


class _SessionLike:
    """Enough of an ``AsyncSession`` for ``_set_tenant`` on a plain connection."""

    def __init__(self, conn: Any) -> None:
        self._conn = conn
        self.info: dict[str, Any] = {}

    async def execute(self, stmt: Any, params: Any = None) -> Any:
        return await self._conn.execute(stmt, params)

    async def connection(self) -> Any:
        return self._conn


async def test_dedicate_lists_and_drops_every_searched_table(engine: Any) -> None:
    built = await dedicate_vector_indexes(engine, TENANT_SMALL)
    assert built == [dedicated_index_name(t, TENANT_SMALL) for t in KNN_TABLES]
    assert await dedicate_vector_indexes(engine, TENANT_SMALL) == []  # idempotent
    listed = await list_dedicated_vector_indexes(engine)
    assert [(d.tenant_id, d.table, d.index_name, d.valid) for d in listed] == [
        (TENANT_SMALL, t, dedicated_index_name(t, TENANT_SMALL), True) for t in KNN_TABLES
    ]
    async with engine.connect() as conn:
        definition = (await conn.execute(text(
            "SELECT pg_get_indexdef(to_regclass(:n))"
        ), {"n": dedicated_index_name("facts", TENANT_SMALL)})).scalar_one()
    # A copy of the shared index (same operator class and build parameters), one tenant.
    assert "USING hnsw (embedding vector_cosine_ops) WITH (m='16', ef_construction='64')" in (
        definition
    )
    assert definition.endswith(f"WHERE (tenant_id = '{TENANT_SMALL}'::text)")
    dropped = await drop_dedicated_vector_indexes(engine, TENANT_SMALL)
    assert sorted(dropped) == sorted(dedicated_index_name(t, TENANT_SMALL) for t in KNN_TABLES)
    assert await list_dedicated_vector_indexes(engine) == []
    assert await drop_dedicated_vector_indexes(engine, TENANT_SMALL) == []


async def test_indexes_rebuilt_by_a_deferred_load_stay_dedicated(engine: Any) -> None:
    await dedicate_vector_indexes(engine, TENANT_SMALL, tables=["facts"])
    store = PostgresMemoryStore(engine, tenant_id=TENANT_SMALL)
    # A bulk load drops every HNSW index of the table and rebuilds it from its definition.
    async with deferred_vector_indexes(store, ["facts"]) as dropped:
        assert dedicated_index_name("facts", TENANT_SMALL) in dropped
        assert await list_dedicated_vector_indexes(engine) == []
    [found] = await list_dedicated_vector_indexes(engine)
    assert (found.tenant_id, found.table, found.valid) == (TENANT_SMALL, "facts", True)


async def test_bad_arguments_are_typed_errors(engine: Any) -> None:
    with pytest.raises(InvalidInputError):
        await dedicate_vector_indexes(engine, "no spaces allowed")
    with pytest.raises(InvalidInputError):
        await dedicate_vector_indexes(engine, TENANT_SMALL, tables=["relationships"])
    with pytest.raises(InvalidInputError):
        await dedicate_vector_indexes(engine, TENANT_SMALL, tables="facts")
    with pytest.raises(InvalidInputError):
        await dedicate_large_tenants(engine, min_documents=0)
    assert await list_dedicated_vector_indexes(engine) == []  # nothing was built


async def test_dedicate_large_tenants_picks_by_fact_count(engine: Any) -> None:
    built = await dedicate_large_tenants(engine, min_documents=BIG)
    assert list(built) == [TENANT_BIG]
    assert await dedicate_large_tenants(engine, min_documents=BIG) == {}
    assert {d.tenant_id for d in await list_dedicated_vector_indexes(engine)} == {TENANT_BIG}


async def test_small_tenant_walks_its_own_graph_and_finds_the_exact_top(
    engine: Any, shared: dict[str, Any]
) -> None:
    vectors, ids = shared["vectors"][TENANT_SMALL], shared["ids"][TENANT_SMALL]
    index = PostgresMemoryIndex(engine, tenant_id=TENANT_SMALL, exact_below=1_000)
    own = dedicated_index_name("facts", TENANT_SMALL)
    q = shared["queries"][0].tolist()
    before = await _index_loops(engine, TENANT_SMALL, index, q)
    assert before.get(own, 0) == 0
    assert before.get("ix_facts_embedding_hnsw", 0) == 0  # exact: below exact_below
    await dedicate_vector_indexes(engine, TENANT_SMALL, tables=["facts"])
    after = await _index_loops(engine, TENANT_SMALL, index, q)
    assert after.get(own, 0) >= 1  # its own graph, not the exact scan
    assert after.get("ix_facts_embedding_hnsw", 0) == 0  # nor the shared graph
    hits = 0
    for qv in shared["queries"]:
        brute = {ids[i] for i in np.argsort(-(vectors @ qv), kind="stable")[:10]}
        found = await index.search_facts(qv.tolist(), limit=10)
        hits += len({h.item.id for h in found} & brute)
    assert hits / (10 * len(shared["queries"])) >= 0.99
    # A retrieval (one statement for every signal) finds the same first fact.
    query = MemoryQuery(embedding=q, limit=5, min_similarity=0.0)
    store = PostgresMemoryStore(engine, tenant_id=TENANT_SMALL)
    result = await retrieve_memory(store, index, query, mode="vector")
    assert result.facts[0].id == ids[int(np.argmax(vectors @ shared["queries"][0]))]


async def test_invalid_index_is_ignored_then_rebuilt(engine: Any, shared: dict[str, Any]) -> None:
    index = PostgresMemoryIndex(engine, tenant_id=TENANT_SMALL, exact_below=1_000)
    own = dedicated_index_name("facts", TENANT_SMALL)
    q = shared["queries"][1].tolist()
    await dedicate_vector_indexes(engine, TENANT_SMALL, tables=["facts"])
    # What a failed CREATE INDEX CONCURRENTLY leaves behind: an invalid index.
    async with engine.connect() as conn, conn.begin():
        await conn.execute(text(
            "UPDATE pg_index SET indisvalid = false WHERE indexrelid = to_regclass(:n)"
        ), {"n": own})
    assert [d.valid for d in await list_dedicated_vector_indexes(engine)] == [False]
    assert (await _index_loops(engine, TENANT_SMALL, index, q)).get(own, 0) == 0
    assert await dedicate_vector_indexes(engine, TENANT_SMALL, tables=["facts"]) == [own]
    assert [d.valid for d in await list_dedicated_vector_indexes(engine)] == [True]
    assert (await _index_loops(engine, TENANT_SMALL, index, q)).get(own, 0) >= 1


async def test_dedicated_tenant_gets_unscaled_ef_and_custom_plans(engine: Any) -> None:
    index = PostgresMemoryIndex(engine, tenant_id=TENANT_SMALL, ef_search=40)

    async def settings_now() -> tuple[str, str]:
        async with engine.connect() as conn, conn.begin():
            await index._set_tenant(_SessionLike(conn), index._search_settings(40, "facts"))
            ef = (await conn.execute(text("SHOW hnsw.ef_search"))).scalar_one()
            mode = (await conn.execute(text("SHOW plan_cache_mode"))).scalar_one()
        return str(ef), str(mode)

    ef, _ = await settings_now()
    assert int(ef) > 40  # a fifth of the table: the shared graph's list is scaled up
    await dedicate_vector_indexes(engine, TENANT_SMALL, tables=["facts"])
    assert await settings_now() == ("40", "force_custom_plan")


async def test_build_under_load_waits_for_open_writes_and_indexes_every_row(
    engine: Any, shared: dict[str, Any]
) -> None:
    # CREATE INDEX CONCURRENTLY while the tenant is written and read from elsewhere: the
    # build waits for the unit of work open when it started, reads and writes of other
    # sessions go on meanwhile, and every row committed before it ends is in the index.
    live = "ded-live"
    rng = np.random.default_rng(23)
    batches = [_unit_rows(rng, n) for n in (300, 20, 20, 20)]
    ids = [[uuid.uuid4() for _ in b] for b in batches]

    def facts_of(k: int) -> list[Any]:
        return [fact(id=i, embedding=v.tolist()) for i, v in zip(ids[k], batches[k],
                                                                  strict=True)]

    store = PostgresMemoryStore(engine, tenant_id=live)
    await store.put_facts(facts_of(0))
    # Other sessions: a second engine, so they do not join this task's unit of work.
    other_engine = create_engine_from_dsn(
        engine.url.render_as_string(hide_password=False),
        connect_args={"server_settings": _NO_SHORTCUTS},
    )
    # (Another tenant: writes of one tenant serialize on its text-search counters.)
    other_store = PostgresMemoryStore(other_engine, tenant_id="ded-live-other")
    other_index = PostgresMemoryIndex(other_engine, tenant_id=live)
    own = dedicated_index_name("facts", live)
    try:
        async with store.transaction():
            await store.put_facts(facts_of(1))
            build = asyncio.create_task(dedicate_vector_indexes(engine, live, tables=["facts"]))
            await asyncio.sleep(0.5)
            assert not build.done()  # waiting for this open unit of work
            # Writes to the table and reads of the tenant go on while the build waits.
            await asyncio.wait_for(other_store.put_facts(facts_of(2)), 30)
            found = await asyncio.wait_for(
                other_index.search_facts(batches[0][0].tolist(), limit=3), 30
            )
            assert found[0].item.id == ids[0][0]
            assert not build.done()
            await store.put_facts(facts_of(3))
        assert await asyncio.wait_for(build, 120) == [own]
        [listed] = [d for d in await list_dedicated_vector_indexes(engine)
                    if d.tenant_id == live]
        assert listed.valid
        index = PostgresMemoryIndex(engine, tenant_id=live)
        assert (await _index_loops(engine, live, index, batches[2][0].tolist())).get(own, 0) >= 1
        # Every row of the tenant, committed before or during the build, is found through
        # its own graph.
        missed = []
        for k in (0, 1, 3):
            for i, v in zip(ids[k], batches[k], strict=True):
                hits = await index.search_facts(v.tolist(), limit=3)
                if i not in {h.item.id for h in hits}:
                    missed.append((k, i))
        assert missed == []
        assert len(await store.get_facts([i for k in (0, 1, 3) for i in ids[k]])) == 340
        assert len(await other_store.get_facts(ids[2])) == 20
    finally:
        await drop_dedicated_vector_indexes(engine, live)
        await other_engine.dispose()

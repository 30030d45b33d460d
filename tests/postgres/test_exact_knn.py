"""kNN of a small tenant sharing a table (and its HNSW graph) with a big one.

A tenant with fewer than ``exact_below`` documents in a table is searched exactly (its rows
reached through the ``tenant_id`` btree, every distance computed); a bigger one through the
HNSW index with ``hnsw.ef_search`` scaled by the inverse of its share of the table. Both
plans are in every kNN statement; a one-time filter runs one. These tests pin the results
(equal to brute force) and the plan shapes, not timings.
"""

from __future__ import annotations

import json
import math
import uuid
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import numpy as np
import pytest
from sqlalchemy import event, text

from cycgraph_memory import MemoryQuery, retrieve_memory

from ._records import DIM, fact

pytestmark = pytest.mark.postgres

HNSW = "ix_facts_embedding_hnsw"
BIG, SMALL = 1_500, 150


def _unit_rows(rng: np.random.Generator, n: int) -> np.ndarray:
    a = rng.standard_normal((n, DIM))
    result: np.ndarray = a / np.linalg.norm(a, axis=1, keepdims=True)
    return result


async def _load(make: Callable[..., Any], tenant: str, vectors: np.ndarray) -> list[uuid.UUID]:
    ids = sorted(uuid.uuid4() for _ in range(len(vectors)))
    await make(tenant).put_facts(
        [fact(id=i, embedding=v.tolist()) for i, v in zip(ids, vectors, strict=True)]
    )
    return ids


async def _force_hnsw(sm: Any) -> None:
    # The planner would scan a table this small exactly; leave it the HNSW index as the
    # only ordered path (the exact plan must still win for a small tenant).
    async with sm() as s, s.begin():
        for guc in ("enable_seqscan", "enable_bitmapscan", "enable_sort"):
            await s.execute(text(f"SET LOCAL {guc} = off"))


def _nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", ()):
        yield from _nodes(child)


class _Captured:
    """The SELECT statements (other than settings) sent while active, with parameters."""

    def __init__(self, sm: Any) -> None:
        self.engine = sm.kw["bind"].sync_engine
        self.statements: list[tuple[str, Any]] = []

    def __call__(self, conn: Any, cursor: Any, statement: str, parameters: Any,
                 context: Any, executemany: bool) -> None:
        head = statement.lstrip().upper()
        if head.startswith(("SELECT", "WITH")) and "set_config" not in statement:
            self.statements.append((statement, parameters))

    async def run(self, call: Callable[[], Awaitable[Any]]) -> Any:
        event.listen(self.engine, "before_cursor_execute", self)
        try:
            return await call()
        finally:
            event.remove(self.engine, "before_cursor_execute", self)


async def _executed_plans(sm: Any, tenant: str, statements: list[tuple[str, Any]]
                          ) -> list[dict[str, Any]]:
    """``EXPLAIN (ANALYZE, FORMAT JSON)`` of each captured statement, for ``tenant``."""
    plans = []
    async with sm() as s, s.begin():
        await s.execute(text("SELECT set_config('cycgraph.tenant_id', :t, true)"), {"t": tenant})
        conn = await s.connection()
        for sql, params in statements:
            rows = (await conn.exec_driver_sql(
                "EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, FORMAT JSON) " + sql, params
            )).scalars().all()
            doc = rows[0] if not isinstance(rows[0], str) else json.loads(rows[0])
            plans.append(doc[0]["Plan"])
    return plans


def _hnsw_loops(plans: list[dict[str, Any]]) -> list[int]:
    return [n["Actual Loops"] for p in plans for n in _nodes(p) if n.get("Index Name") == HNSW]


async def _hnsw_alone(sm: Any, tenant: str, q: np.ndarray) -> list[uuid.UUID]:
    async with sm() as s, s.begin():
        await s.execute(text(
            "SELECT set_config('cycgraph.tenant_id', :t, true), "
            "set_config('hnsw.ef_search', '10', true), "
            "set_config('hnsw.iterative_scan', 'off', true)"
        ), {"t": tenant})
        literal = "[" + ",".join(repr(float(x)) for x in q) + "]"
        rows = await s.execute(text(
            f"SELECT id FROM facts WHERE tenant_id = :t "
            f"ORDER BY embedding <=> '{literal}'::vector({DIM}) LIMIT 10"
        ), {"t": tenant})
        return [uuid.UUID(str(r[0])) for r in rows]


@pytest.fixture
async def shared_table(pg_make_store: Any, pg_sessionmaker: Any) -> dict[str, Any]:
    """A big and a small tenant in one facts table (HNSW graph over both)."""
    rng = np.random.default_rng(7)
    big, small = _unit_rows(rng, BIG), _unit_rows(rng, SMALL)
    t_big, t_small = f"big_{uuid.uuid4().hex[:8]}", f"small_{uuid.uuid4().hex[:8]}"
    await _load(pg_make_store, t_big, big)
    small_ids = await _load(pg_make_store, t_small, small)
    await pg_make_store(t_big, index=True).rebuild(analyze=True)
    return {"big": t_big, "small": t_small, "small_vectors": small, "small_ids": small_ids,
            "queries": _unit_rows(rng, 20)}


async def test_small_tenant_results_equal_brute_force(
    shared_table: dict[str, Any], pg_make_store: Any, pg_sessionmaker: Any
) -> None:
    await _force_hnsw(pg_sessionmaker)
    vectors, ids = shared_table["small_vectors"], shared_table["small_ids"]
    exact_index = pg_make_store(shared_table["small"], index=True, exact_below=1_000)
    found = {"exact": 0, "hnsw": 0}
    for q in shared_table["queries"]:
        brute = [ids[i] for i in np.argsort(-(vectors @ q), kind="stable")[:10]]
        hits = await exact_index.search_facts(q.tolist(), limit=10)
        assert [h.item.id for h in hits] == brute
        assert [h.score for h in hits] == pytest.approx(sorted((vectors @ q), reverse=True)[:10])
        found["exact"] += len({h.item.id for h in hits} & set(brute))
        found["hnsw"] += len(set(await _hnsw_alone(pg_sessionmaker, shared_table["small"], q))
                             & set(brute))
    assert found["exact"] == 10 * len(shared_table["queries"])  # recall@10 = 1.0
    # The same searches on the HNSW index alone (ef_search 10, no iterative scan) miss
    # neighbours: the graph's nearest candidates are mostly the big tenant's.
    assert found["hnsw"] < found["exact"]


async def test_plan_exact_for_small_tenant_hnsw_for_big(
    shared_table: dict[str, Any], pg_make_store: Any, pg_sessionmaker: Any
) -> None:
    await _force_hnsw(pg_sessionmaker)
    q = shared_table["queries"][0].tolist()
    loops = {}
    for who in ("small", "big"):
        index = pg_make_store(shared_table[who], index=True, exact_below=1_000)
        captured = _Captured(pg_sessionmaker)
        await captured.run(lambda index=index: index.search_facts(q, limit=10))
        [(sql, params)] = [st for st in captured.statements if "<=>" in st[0]]
        # Both plans are in the statement (an Append of two branches); the exact one has
        # no HNSW scan (even with every other ordered path disabled) and sorts.
        [plan] = await _executed_plans(pg_sessionmaker, shared_table[who], [(sql, params)])
        [append] = [n for n in _nodes(plan) if n["Node Type"] == "Append"]
        exact = [b for b in append["Plans"] if not _hnsw_loops([b])]
        walk = [b for b in append["Plans"] if _hnsw_loops([b])]
        assert len(exact) == len(walk) == 1, append
        assert any(n["Node Type"] == "Sort" for n in _nodes(exact[0]))
        scans = [n["Actual Loops"] for n in _nodes(exact[0]) if n.get("Relation Name") == "facts"]
        loops[who] = (_hnsw_loops(walk), max(scans))
    assert set(loops["small"][0]) == {0}  # the HNSW scan never ran
    assert loops["small"][1] >= 1  # the exact scan of the tenant's rows ran
    assert max(loops["big"][0]) >= 1  # the HNSW scan ran
    assert loops["big"][1] == 0  # the exact scan did not


async def test_hybrid_retrieval_of_small_tenant_never_walks_hnsw(
    shared_table: dict[str, Any], pg_make_store: Any, pg_sessionmaker: Any
) -> None:
    await _force_hnsw(pg_sessionmaker)
    q = shared_table["queries"][1].tolist()
    query = MemoryQuery(embedding=q, text="water", limit=10, min_similarity=0.0)
    for who, walked in (("small", False), ("big", True)):
        store = pg_make_store(shared_table[who])
        index = pg_make_store(shared_table[who], index=True, exact_below=1_000)
        captured = _Captured(pg_sessionmaker)
        await captured.run(lambda s=store, i=index: retrieve_memory(s, i, query, mode="hybrid"))
        plans = await _executed_plans(pg_sessionmaker, shared_table[who], captured.statements)
        loops = _hnsw_loops(plans)
        assert loops, "the kNN statements carry an HNSW plan"
        assert (max(loops) >= 1) is walked


async def test_ef_search_scaled_by_tenant_share(
    shared_table: dict[str, Any], pg_make_store: Any, pg_sessionmaker: Any
) -> None:
    total = BIG + SMALL
    for who, size in (("big", BIG), ("small", SMALL)):
        index = pg_make_store(shared_table[who], index=True, ef_search=100)
        await index.search_facts(shared_table["queries"][0].tolist(), limit=10)
        async with pg_sessionmaker() as s:
            ef = (await s.execute(text("SELECT current_setting('hnsw.ef_search')"))).scalar()
        assert int(ef) == min(1000, math.ceil(100 * math.sqrt(total / size)))
    # A tenant alone in its table keeps the configured value (share 1).
    async with pg_sessionmaker() as s, s.begin():
        reltuples = (await s.execute(text(
            "SELECT reltuples FROM pg_class WHERE oid = 'facts'::regclass"
        ))).scalar()
    assert reltuples == total


async def test_ef_search_grows_with_a_big_tenants_size(
    shared_table: dict[str, Any], pg_make_store: Any, pg_sessionmaker: Any
) -> None:
    """Past ``EF_GRAPH_ROWS`` documents the list is the base times sqrt(documents / it).

    The tenant's count is raised in ``text_search_corpora`` (what the triggers keep) so
    that it is past the threshold and above the table's rows: the size factor, not the
    share, decides.
    """
    from cycgraph_memory.postgres.statements import EF_GRAPH_ROWS

    tenant = shared_table["big"]
    index = pg_make_store(tenant, index=True, ef_search=100)

    async def ef_after_search() -> int:
        await index.search_facts(shared_table["queries"][0].tolist(), limit=10)
        async with pg_sessionmaker() as s:
            return int((await s.execute(text("SELECT current_setting('hnsw.ef_search')"))
                        ).scalar())

    share = math.ceil(100 * math.sqrt((BIG + SMALL) / BIG))
    assert await ef_after_search() == share
    for documents, expected in ((EF_GRAPH_ROWS, 100), (4 * EF_GRAPH_ROWS, 200),
                                (10 * EF_GRAPH_ROWS, 317), (1_000 * EF_GRAPH_ROWS, 1000)):
        async with pg_sessionmaker() as s, s.begin():
            await s.execute(text(
                "UPDATE text_search_corpora SET documents = :n "
                "WHERE tenant_id = :t AND corpus = 'facts'"
            ), {"n": documents, "t": tenant})
        assert await ef_after_search() == expected, documents


async def test_exact_below_validation(pg_sessionmaker: Any) -> None:
    from cycgraph_memory.errors import InvalidInputError
    from cycgraph_memory.postgres import PostgresMemoryIndex
    from cycgraph_memory.postgres.statements import EXACT_KNN_BELOW

    assert PostgresMemoryIndex(pg_sessionmaker).exact_below == EXACT_KNN_BELOW
    for bad in (-1, 1.5, True, "10"):
        with pytest.raises(InvalidInputError):
            PostgresMemoryIndex(pg_sessionmaker, exact_below=bad)


async def _walks_hnsw(sm: Any, index: Any, tenant: str, q: list[float]) -> bool:
    captured = _Captured(sm)
    await captured.run(lambda: index.search_facts(q, limit=10))
    knn = [st for st in captured.statements if "<=>" in st[0]]
    return max(_hnsw_loops(await _executed_plans(sm, tenant, knn))) >= 1


async def test_tenant_holding_most_of_the_table_walks_hnsw(
    pg_make_store: Any, pg_sessionmaker: Any
) -> None:
    # Above EXACT_KNN_ALWAYS_BELOW documents, a tenant holding half the table or more is
    # searched through the HNSW index even below exact_below (the graph is mostly its
    # own); a small tenant beside it stays exact.
    from cycgraph_memory.postgres.statements import EXACT_KNN_ALWAYS_BELOW

    rng = np.random.default_rng(11)
    big, small = f"major_{uuid.uuid4().hex[:8]}", f"minor_{uuid.uuid4().hex[:8]}"
    await _load(pg_make_store, big, _unit_rows(rng, EXACT_KNN_ALWAYS_BELOW + 500))
    await _load(pg_make_store, small, _unit_rows(rng, 50))
    await pg_make_store(big, index=True).rebuild(analyze=True)
    await _force_hnsw(pg_sessionmaker)
    q = _unit_rows(rng, 1)[0].tolist()
    for tenant, walked in ((big, True), (small, False)):
        index = pg_make_store(tenant, index=True, exact_below=1_000_000)
        assert await _walks_hnsw(pg_sessionmaker, index, tenant, q) is walked

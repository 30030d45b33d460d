"""Generic plans for kNN statements when the planner's guess fits the tenant.

A search's settings statement chooses ``plan_cache_mode`` for the transaction: a generic
plan (planned once per connection, no planning per call) when the rows the planner expects
for an unknown tenant (from ``pg_stats``) lead it to the plan this tenant needs, custom
plans (planned for each call's values) otherwise and whenever the table has no statistics.
These tests pin the choice through Postgres's own plan counters and check that the
results do not depend on it.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from sqlalchemy import event, text

from ._records import DIM, fact

pytestmark = pytest.mark.postgres

BIG, SMALL, TINY, TINY_TENANTS = 1_500, 150, 3, 30


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


async def _knn_plans(sm: Any) -> dict[str, tuple[int, int]]:
    """Generic and custom plans made so far, per prepared kNN statement of the connection."""
    async with sm() as s:
        rows = (await s.execute(text(
            "SELECT name, generic_plans, custom_plans FROM pg_prepared_statements "
            "WHERE statement LIKE '%<=>%' AND statement NOT LIKE '%pg_prepared_statements%'"
        ))).all()
    return {name: (int(g), int(c)) for name, g, c in rows}


def _delta(before: dict[str, tuple[int, int]], after: dict[str, tuple[int, int]]
           ) -> tuple[int, int]:
    # Per statement: the driver's statement cache may drop an old one in between.
    g = sum(a[0] - before.get(name, (0, 0))[0] for name, a in after.items())
    c = sum(a[1] - before.get(name, (0, 0))[1] for name, a in after.items())
    return g, c


async def _plans_of(sm: Any, call: Callable[[], Any], times: int = 3) -> tuple[int, int]:
    before = await _knn_plans(sm)
    for _ in range(times):
        await call()
    return _delta(before, await _knn_plans(sm))


@pytest.fixture
async def zipf_table(pg_make_store: Any, pg_sessionmaker: Any) -> dict[str, Any]:
    """One big tenant, one small, thirty tiny ones in one analyzed facts table."""
    rng = np.random.default_rng(5)
    tag = uuid.uuid4().hex[:8]
    big, small = f"big_{tag}", f"small_{tag}"
    await _load(pg_make_store, big, _unit_rows(rng, BIG))
    small_vectors = _unit_rows(rng, SMALL)
    small_ids = await _load(pg_make_store, small, small_vectors)
    for i in range(TINY_TENANTS):
        await _load(pg_make_store, f"tiny{i}_{tag}", _unit_rows(rng, TINY))
    await pg_make_store(big, index=True).rebuild(analyze=True)
    return {"big": big, "small": small, "small_vectors": small_vectors,
            "small_ids": small_ids, "queries": _unit_rows(rng, 5)}


async def test_small_tenant_gets_a_generic_plan_big_one_custom(
    zipf_table: dict[str, Any], pg_make_store: Any, pg_sessionmaker: Any
) -> None:
    # The planner's guess for an unknown tenant here is the table over its ~32 tenants,
    # ~55 rows: right for the small tenant's exact scan, far too small for the big one,
    # whose generic plan would read its rows through the tenant_id B-tree and sort them
    # instead of walking the HNSW index.
    q = zipf_table["queries"][0].tolist()
    small = pg_make_store(zipf_table["small"], index=True, exact_below=1_000)
    big = pg_make_store(zipf_table["big"], index=True, exact_below=1_000)
    assert await _plans_of(pg_sessionmaker, lambda: small.search_facts(q, limit=10)) == (3, 0)
    assert await _plans_of(pg_sessionmaker, lambda: big.search_facts(q, limit=10)) == (0, 3)


async def test_generic_plan_results_equal_brute_force(
    zipf_table: dict[str, Any], pg_make_store: Any, pg_sessionmaker: Any
) -> None:
    vectors, ids = zipf_table["small_vectors"], zipf_table["small_ids"]
    index = pg_make_store(zipf_table["small"], index=True, exact_below=1_000)
    before = await _knn_plans(pg_sessionmaker)
    for q in zipf_table["queries"]:
        brute = [ids[i] for i in np.argsort(-(vectors @ q), kind="stable")[:10]]
        for limit in (3, 10):
            hits = await index.search_facts(q.tolist(), limit=limit)
            assert [h.item.id for h in hits] == brute[:limit]
    assert _delta(before, await _knn_plans(pg_sessionmaker)) == (
        2 * len(zipf_table["queries"]), 0
    )


async def test_unknown_estimate_means_custom_plans(
    zipf_table: dict[str, Any], pg_make_store: Any, pg_sessionmaker: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The same small tenant that gets a generic plan with the planner's guess gets custom
    # plans when the guess is unknown (a plan without a row estimate).
    from cycgraph_memory.postgres import _base

    async def unknown(self: Any, session: Any, table: str) -> None:
        return None

    monkeypatch.setattr(_base.PostgresBackend, "_generic_rows", unknown)
    index = pg_make_store(zipf_table["small"], index=True, exact_below=1_000)
    q = zipf_table["queries"][2].tolist()
    assert await _plans_of(pg_sessionmaker, lambda: index.search_facts(q, limit=5)) == (0, 3)


async def test_estimate_asked_of_the_planner_once_per_ttl(
    zipf_table: dict[str, Any], pg_make_store: Any, pg_sessionmaker: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from cycgraph_memory.postgres import _base
    from cycgraph_memory.postgres.statements import GENERIC_ROWS_PROBE

    clock = [1_000.0]
    monkeypatch.setattr(_base.time, "monotonic", lambda: clock[0])
    engine = pg_sessionmaker.kw["bind"].sync_engine
    probes: list[str] = []

    def seen(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if statement.startswith(f"PREPARE {GENERIC_ROWS_PROBE}("):
            probes.append(statement)

    index = pg_make_store(zipf_table["small"], index=True, exact_below=1_000)
    q = zipf_table["queries"][1].tolist()
    event.listen(engine, "before_cursor_execute", seen)
    try:
        counts = []
        for step in (0.0, _base.GENERIC_ESTIMATE_TTL / 2, _base.GENERIC_ESTIMATE_TTL):
            clock[0] += step
            await index.search_facts(q, limit=5)
            await index.search_facts(q, limit=5)
            counts.append(len(probes))
    finally:
        event.remove(engine, "before_cursor_execute", seen)
    assert counts == [1, 1, 2]
    # The planner's guess here: the table's 1,740 rows over its 32 tenants.
    estimate = index._generic_estimates["facts"][0]
    assert estimate is not None and 20 <= estimate <= 200
    # No prepared statement of the probe is left on the connection.
    async with pg_sessionmaker() as s:
        left = (await s.execute(text(
            "SELECT count(*) FROM pg_prepared_statements WHERE name = :p"
        ), {"p": GENERIC_ROWS_PROBE})).scalar()
    assert left == 0


def test_probe_refuses_anything_but_plain_identifiers() -> None:
    from cycgraph_memory.postgres.statements import GENERIC_ROWS_PROBE, generic_rows_probe

    assert generic_rows_probe("facts")[1] == (
        f"PREPARE {GENERIC_ROWS_PROBE}(text) AS SELECT 1 FROM facts WHERE tenant_id = $1"
    )
    for table in ("facts; DROP TABLE facts", "facts x", "fäcts", ""):
        with pytest.raises(ValueError):
            generic_rows_probe(table)


async def test_probe_left_behind_by_a_failed_transaction_is_replaced(
    zipf_table: dict[str, Any], pg_make_store: Any, pg_sessionmaker: Any
) -> None:
    from cycgraph_memory.postgres.statements import GENERIC_ROWS_PROBE

    async with pg_sessionmaker() as s:
        # A prepared statement outlives the transaction that made it.
        await s.execute(text(f"PREPARE {GENERIC_ROWS_PROBE}(int) AS SELECT $1"))
    index = pg_make_store(zipf_table["small"], index=True, exact_below=1_000)
    q = zipf_table["queries"][3].tolist()
    assert await _plans_of(pg_sessionmaker, lambda: index.search_facts(q, limit=5)) == (3, 0)
    estimate = index._generic_estimates["facts"][0]
    assert estimate is not None and 20 <= estimate <= 200

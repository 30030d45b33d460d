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
from sqlalchemy import text

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


async def _knn_plans(sm: Any) -> tuple[int, int]:
    """Generic and custom plans made so far for the connection's kNN statements."""
    async with sm() as s:
        row = (await s.execute(text(
            "SELECT coalesce(sum(generic_plans), 0), coalesce(sum(custom_plans), 0) "
            "FROM pg_prepared_statements WHERE statement LIKE '%<=>%' "
            "AND statement NOT LIKE '%pg_prepared_statements%'"
        ))).one()
    return int(row[0]), int(row[1])


async def _plans_of(sm: Any, call: Callable[[], Any], times: int = 3) -> tuple[int, int]:
    before = await _knn_plans(sm)
    for _ in range(times):
        await call()
    after = await _knn_plans(sm)
    return after[0] - before[0], after[1] - before[1]


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
    generic_before, _ = await _knn_plans(pg_sessionmaker)
    for q in zipf_table["queries"]:
        brute = [ids[i] for i in np.argsort(-(vectors @ q), kind="stable")[:10]]
        for limit in (3, 10):
            hits = await index.search_facts(q.tolist(), limit=limit)
            assert [h.item.id for h in hits] == brute[:limit]
    generic_after, _ = await _knn_plans(pg_sessionmaker)
    assert generic_after - generic_before == 2 * len(zipf_table["queries"])


async def test_without_statistics_custom_plans_until_the_estimate_is_read_again(
    pg_make_store: Any, pg_sessionmaker: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # No statistics: every kNN call is planned for its values. The estimate is cached per
    # backend object; new statistics reach the choice once the cached value is older than
    # GENERIC_ESTIMATE_TTL.
    from cycgraph_memory.postgres import _base

    clock = [1_000.0]
    monkeypatch.setattr(_base.time, "monotonic", lambda: clock[0])
    tenant = f"fresh_{uuid.uuid4().hex[:8]}"
    await _load(pg_make_store, tenant, _unit_rows(np.random.default_rng(3), 20))
    index = pg_make_store(tenant, index=True)
    q = [1.0] + [0.0] * (DIM - 1)

    def call() -> Any:
        return index.search_facts(q, limit=5)

    assert await _plans_of(pg_sessionmaker, call) == (0, 3)
    async with pg_sessionmaker() as s, s.begin():
        await s.execute(text("ANALYZE facts"))
    clock[0] += _base.GENERIC_ESTIMATE_TTL / 2
    assert await _plans_of(pg_sessionmaker, call) == (0, 3)
    clock[0] += _base.GENERIC_ESTIMATE_TTL
    assert await _plans_of(pg_sessionmaker, call) == (3, 0)

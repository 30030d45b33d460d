"""Benchmark PostgresMemoryStore / PostgresMemoryIndex on an embedded Postgres server.

Clustered data (facts scattered around ``--centres`` theme centres with Gaussian noise),
384 dimensions, HNSW index in place while loading (the migration creates it, so the insert
rate below includes index maintenance). Measures:

* bulk insert rate through ``put_facts`` (batches of 1,000);
* ``search_facts(limit=20)`` p50/p95 and recall@20 against exact search (same query through
  the same API with ``enable_indexscan = off``) for ef_search 40/100/200/400, plus exact p50;
* ``find_facts(tags=[...], limit=10)`` p50 (GIN);
* ``get_facts`` of 100 ids p50 (one round trip).

Usage: python bench/postgres_store.py [--sizes 10000 100000] [--queries 100]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

from cycgraph_memory.postgres import (
    PostgresMemoryIndex,
    PostgresMemoryStore,
    create_engine_from_dsn,
    downgrade,
    start_embedded_server,
    upgrade,
)
from cycgraph_memory.records import Provenance, SemanticFact

DIM = 384
EF_VALUES = (40, 100, 200, 400)


class ExactIndex(PostgresMemoryIndex):
    """The same kNN query with index scans disabled: the exact ground truth."""

    async def _set_search_gucs(self, session: AsyncSession, ef: int) -> None:
        await super()._set_search_gucs(session, ef)
        await session.execute(text("SET LOCAL enable_indexscan = off"))


def make_data(
    n: int, centres: int, seed: int, noise: float = 0.55
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    c = rng.standard_normal((centres, DIM)).astype(np.float32)
    c /= np.linalg.norm(c, axis=1, keepdims=True)
    labels = rng.integers(0, centres, size=n)
    x = c[labels] + noise * rng.standard_normal((n, DIM)).astype(np.float32) / np.sqrt(DIM)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    return c, labels, x


def pct(values: list[float], q: float) -> float:
    return float(np.percentile(np.array(values), q)) * 1000.0  # ms


async def timed(fn: Any, reps: int) -> list[float]:
    out = []
    for _ in range(reps):
        t0 = time.perf_counter()
        await fn()
        out.append(time.perf_counter() - t0)
    return out


async def run_size(
    engine: Any, n: int, centres: int, queries: int, explain: bool = False,
    hnsw: tuple[int, int] = (16, 64),
) -> dict[str, Any]:
    await downgrade(engine)
    await upgrade(engine, embedding_dim=DIM, hnsw_m=hnsw[0], hnsw_ef_construction=hnsw[1])
    store = PostgresMemoryStore(engine, tenant_id="bench")
    c, labels, x = make_data(n, centres, seed=n)
    prov = Provenance(source="system")
    base = datetime(2026, 1, 1, tzinfo=UTC)
    t_build = time.perf_counter()
    facts = [
        SemanticFact(
            content=f"fact {i} about theme {labels[i]}",
            embedding=x[i].tolist(),
            provenance=prov,
            valid_from=base + timedelta(seconds=i),
            tags=[f"theme-{labels[i]}"] + (["lesson"] if i % 10 == 0 else []),
        )
        for i in range(n)
    ]
    build_s = time.perf_counter() - t_build
    t0 = time.perf_counter()
    for start in range(0, n, 1000):
        await store.put_facts(facts[start : start + 1000])
    insert_s = time.perf_counter() - t0
    async with engine.begin() as conn:
        await conn.execute(text("ANALYZE facts"))

    # Alternative bulk-load path for comparison: load without the HNSW index, then build it.
    alt = PostgresMemoryStore(engine, tenant_id="bench_noindex")
    async with engine.begin() as conn:
        await conn.execute(text("DROP INDEX ix_facts_embedding_hnsw"))
    t0 = time.perf_counter()
    for start in range(0, n, 1000):
        await alt.put_facts(facts[start : start + 1000])
    noindex_s = time.perf_counter() - t0
    await alt.clear()
    async with engine.begin() as conn:
        await conn.execute(text("SET LOCAL maintenance_work_mem = '1GB'"))
        t0 = time.perf_counter()
        await conn.execute(
            text(
                "CREATE INDEX ix_facts_embedding_hnsw ON facts USING hnsw "
                "(embedding vector_cosine_ops) WITH (m = 16, ef_construction = 64)"
            )
        )
        build_index_s = time.perf_counter() - t0
        await conn.execute(text("ANALYZE facts"))

    rng = np.random.default_rng(7)
    qlabels = rng.integers(0, centres, size=queries)
    qv = c[qlabels] + 0.55 * rng.standard_normal((queries, DIM)).astype(np.float32) / np.sqrt(DIM)
    qv /= np.linalg.norm(qv, axis=1, keepdims=True)
    qlist = [q.tolist() for q in qv]

    exact = ExactIndex(engine, tenant_id="bench")
    truth: list[set[Any]] = []
    exact_times: list[float] = []
    for q in qlist:
        t = time.perf_counter()
        res = await exact.search_facts(q, limit=20)
        exact_times.append(time.perf_counter() - t)
        truth.append({r.item.id for r in res})

    result: dict[str, Any] = {
        "n": n,
        "build_records_s": build_s,
        "insert_rate": n / insert_s,
        "insert_rate_noindex": n / noindex_s,
        "index_build_s": build_index_s,
        "exact_p50": pct(exact_times, 50),
        "ef": {},
    }
    for ef in EF_VALUES:
        index = PostgresMemoryIndex(engine, tenant_id="bench", ef_search=ef)
        await index.search_facts(qlist[0], limit=20)  # warm-up
        times: list[float] = []
        recalls: list[float] = []
        for q, t_ids in zip(qlist, truth, strict=True):
            t = time.perf_counter()
            res = await index.search_facts(q, limit=20)
            times.append(time.perf_counter() - t)
            recalls.append(len({r.item.id for r in res} & t_ids) / max(1, len(t_ids)))
        result["ef"][ef] = (pct(times, 50), pct(times, 95), statistics.mean(recalls))

    tag_times = await timed(
        lambda: store.find_facts(tags=[f"theme-{int(rng.integers(0, centres))}"], limit=10), 200
    )
    result["find_facts_p50"] = pct(tag_times, 50)
    if explain:
        async with engine.begin() as conn:
            plan = await conn.execute(text(
                "EXPLAIN ANALYZE SELECT * FROM facts WHERE tenant_id = 'bench' "
                "AND invalidated_by IS NULL AND tags && ARRAY['theme-7'] "
                "ORDER BY valid_from, id LIMIT 10"
            ))
            print("\n".join(plan.scalars().all()), flush=True)
    ids = [f.id for f in facts]

    async def batch() -> None:
        picks = rng.choice(n, size=100, replace=False)
        got = await store.get_facts([ids[i] for i in picks])
        assert len(got) == 100

    result["get_facts_p50"] = pct(await timed(batch, 200), 50)
    return result


def report(results: list[dict[str, Any]]) -> str:
    lines = [
        f"dim={DIM}, clustered data, HNSW index present during load (parameters above)",
        "",
        "| N | insert facts/s | ef_search | search p50 ms | p95 ms | recall@20 | exact p50 ms "
        "| speed-up p50 | find_facts(tags) p50 ms | get_facts(100) p50 ms |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        for i, ef in enumerate(EF_VALUES):
            p50, p95, rec = r["ef"][ef]
            first = i == 0
            lines.append(
                f"| {r['n'] if first else ''} | {r['insert_rate']:.0f}" * first
                + ("| | " if not first else " | ")
                + f"{ef} | {p50:.2f} | {p95:.2f} | {rec:.3f} | "
                + (f"{r['exact_p50']:.1f}" if first else "")
                + f" | {r['exact_p50'] / p50:.1f}x | "
                + (f"{r['find_facts_p50']:.2f} | {r['get_facts_p50']:.2f} |" if first else " | |")
            )
    lines.append("")
    for r in results:
        lines.append(
            f"N={r['n']}: insert with HNSW in place {r['insert_rate']:.0f} facts/s; "
            f"without HNSW {r['insert_rate_noindex']:.0f} facts/s; "
            f"HNSW build over {r['n']} rows afterwards {r['index_build_s']:.1f}s"
        )
    return "\n".join(lines)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--centres", type=int, default=150)
    parser.add_argument("--explain", action="store_true", help="print the find_facts plan")
    parser.add_argument("--hnsw-m", type=int, default=16)
    parser.add_argument("--hnsw-ef-construction", type=int, default=64)
    args = parser.parse_args()
    print(f"HNSW m={args.hnsw_m} ef_construction={args.hnsw_ef_construction}", flush=True)
    with tempfile.TemporaryDirectory(prefix="cycgraph-bench-") as tmp:
        server = start_embedded_server(Path(tmp) / "data", cleanup_mode="delete")
        admin = create_engine_from_dsn(server.dsn, isolation_level="AUTOCOMMIT")
        async with admin.connect() as conn:
            await conn.execute(text("CREATE DATABASE cycgraph_bench"))
        await admin.dispose()
        engine = create_engine_from_dsn(server.dsn_for("cycgraph_bench"))
        results = []
        try:
            for n in args.sizes:
                t0 = time.perf_counter()
                results.append(
                    await run_size(engine, n, args.centres, args.queries, args.explain,
                                   (args.hnsw_m, args.hnsw_ef_construction))
                )
                print(f"N={n} done in {time.perf_counter() - t0:.0f}s", flush=True)
                print(report(results), flush=True)
        finally:
            await engine.dispose()
            server.stop()


if __name__ == "__main__":
    asyncio.run(main())

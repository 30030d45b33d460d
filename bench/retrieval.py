"""Benchmark ``retrieve_memory`` on the reference workload (shared/bench/reference-workload.md).

Same generator, same queries, same protocol as the TypeScript figures it is compared
with: load order entities, themes, facts, relationships; per strategy 20 warm-up queries
then 200 timed; p50/p95 by nearest rank; served facts are touched (part of the cost).

Prints per strategy p50/p95 (ms), the ratio to the TypeScript p50, database statements per
call (Postgres: counted with a SQLAlchemy ``before_cursor_execute`` listener), result shape
(mean facts / entities / relationships) and, for embedding queries, how often the query's
own fact is returned. In memory it also prints RSS after loading.

Usage:
    python bench/retrieval.py --backend memory --n 10000
    python bench/retrieval.py --backend postgres --n 100000
"""

from __future__ import annotations

import os

# One BLAS thread: on a shared 2-core machine a multi-threaded OpenBLAS spin-waits and a
# 10,000 x 384 scan goes from ~0.5 ms to ~30 ms. Set before numpy is imported.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse
import asyncio
import math
import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from cycgraph_memory import (
    InMemoryMemoryIndex,
    InMemoryMemoryStore,
    MemoryQuery,
    retrieve_memory,
)
from reference_workload import Workload, build_facts, fact_id, generate

# TypeScript p50 / p95 (ms) from the reference file.
TS = {
    ("memory", 10_000): {"embedding": (24.4, 35.7), "tags": (13.2, 17.2), "entity": (187, 345)},
    ("memory", 100_000): {"embedding": (24.4, 36.1), "tags": (68.7, 94.0),
                          "entity": (1619, 3130)},
    ("postgres", 10_000): {"embedding": (52.0, 75.1), "tags": (24.1, 31.9),
                           "entity": (165, 268)},
    ("postgres", 100_000): {"embedding": (63.3, 92.6), "tags": (19.6, 26.2),
                            "entity": (203, 378)},
}
WARMUP = 20


def nearest_rank(values: list[float], p: float) -> float:
    """Nearest-rank percentile."""
    ordered = sorted(values)
    k = max(1, math.ceil(p / 100 * len(ordered)))
    return ordered[k - 1]


def queries(w: Workload, strategy: str) -> list[tuple[MemoryQuery, int | None]]:
    if strategy == "embedding":
        return [
            (MemoryQuery(embedding=v, limit=20, max_hops=2, min_similarity=0.5), j)
            for v, j in w.embedding_queries
        ]
    if strategy == "tags":
        q = MemoryQuery(tags=["lesson"], limit=10, max_hops=2, min_similarity=0.5)
        return [(q, None)] * 200
    return [
        (MemoryQuery(entity_ids=[a, b], max_hops=2, limit=20, min_similarity=0.5), None)
        for a, b in w.entity_queries
    ]


class StatementCounter:
    """Counts statements sent to the database (a SQLAlchemy event listener)."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, *args: Any, **kwargs: Any) -> None:
        self.count += 1


async def run_strategies(
    store: Any, index: Any, w: Workload, counter: StatementCounter | None
) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    own = {j: fact_id(j) for _, j in w.embedding_queries}
    for strategy in ("embedding", "tags", "entity"):
        qs = queries(w, strategy)
        warm = qs[:WARMUP]
        for q, _ in warm:
            await retrieve_memory(store, index, q)
        times: list[float] = []
        shapes = [0, 0, 0]
        hits = 0
        statements = 0
        for q, j in qs:
            before = counter.count if counter else 0
            t0 = time.perf_counter()
            result = await retrieve_memory(store, index, q)
            times.append((time.perf_counter() - t0) * 1000)
            statements += (counter.count - before) if counter else 0
            shapes[0] += len(result.facts)
            shapes[1] += len(result.entities)
            shapes[2] += len(result.relationships)
            if j is not None:
                hits += any(f.id == own[j] for f in result.facts)
        n = len(qs)
        out[strategy] = {
            "p50": nearest_rank(times, 50),
            "p95": nearest_rank(times, 95),
            "statements": statements / n,
            "facts": shapes[0] / n,
            "entities": shapes[1] / n,
            "relationships": shapes[2] / n,
            "own_hit": hits / n if strategy == "embedding" else float("nan"),
        }
    return out


def rss_mb() -> float:
    """Peak resident set size of this process in MB."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def current_rss_mb() -> float:
    """Current resident set size in MB (Linux /proc)."""
    with open("/proc/self/statm") as fh:
        pages = int(fh.read().split()[1])
    return pages * resource.getpagesize() / 2**20


async def load(store: Any, w: Workload) -> float:
    t0 = time.perf_counter()
    await store.put_entities(w.entities)
    await store.put_themes(w.themes)
    step = 5_000
    for i in range(0, w.n, step):
        await store.put_facts(build_facts(w, i, min(w.n, i + step)))
    await store.put_relationships(w.relationships)
    return time.perf_counter() - t0


async def bench_memory(w: Workload) -> tuple[dict[str, dict[str, float]], dict[str, float]]:
    store = InMemoryMemoryStore(expected_dimensions=384)
    index = InMemoryMemoryIndex(expected_dimensions=384)
    seconds = await load(store, w)
    await index.rebuild(store)
    w.entities, w.themes, w.relationships, w.raw = [], [], [], []
    w.fact_embeddings = None  # the generator's matrix; only the store and index remain
    import gc

    gc.collect()
    import numpy as np

    matrix = np.random.default_rng(0).standard_normal((w.n, 384)).astype(np.float32)
    vector = matrix[0].copy()
    scan = []
    for _ in range(50):
        t0 = time.perf_counter()
        np.argpartition(matrix @ vector, -20)[-20:]
        scan.append((time.perf_counter() - t0) * 1000)
    del matrix
    gc.collect()
    extra = {"load_s": seconds, "rss_mb": current_rss_mb(),
             "numpy_scan_floor_p50_ms": nearest_rank(scan, 50)}
    return await run_strategies(store, index, w, None), extra


async def bench_postgres(
    w: Workload, data_dir: str | None
) -> tuple[dict[str, dict[str, float]], dict[str, float]]:
    from sqlalchemy import event, text

    from cycgraph_memory.postgres import (
        PostgresMemoryIndex,
        PostgresMemoryStore,
        create_engine_from_dsn,
        start_embedded_server,
        upgrade,
    )

    with tempfile.TemporaryDirectory(prefix="cycgraph-retrieval-bench-") as tmp:
        server = start_embedded_server(
            Path(data_dir or tmp) / "data", cleanup_mode="delete"
        )
        try:
            admin = create_engine_from_dsn(server.dsn, isolation_level="AUTOCOMMIT")
            async with admin.connect() as conn:
                await conn.execute(text("DROP DATABASE IF EXISTS cycgraph_retrieval"))
                await conn.execute(text("CREATE DATABASE cycgraph_retrieval"))
            await admin.dispose()
            engine = create_engine_from_dsn(server.dsn_for("cycgraph_retrieval"))
            await upgrade(engine, embedding_dim=384)
            store = PostgresMemoryStore(engine)
            index = PostgresMemoryIndex(engine)
            seconds = await load(store, w)
            await index.rebuild(analyze=True)
            # Only the queries are needed from here: the client holds no records whose
            # garbage-collector passes would be timed with the queries.
            w.entities, w.themes, w.relationships, w.raw = [], [], [], []
            w.fact_embeddings = None
            # A settled database, as in service: right after a bulk load, autovacuum and
            # first-read hint-bit writes would compete with the timed queries.
            vac = create_engine_from_dsn(
                server.dsn_for("cycgraph_retrieval"), isolation_level="AUTOCOMMIT"
            )
            async with vac.connect() as conn:
                await conn.execute(text("VACUUM (ANALYZE)"))
            await vac.dispose()
            baseline = await session_baseline(engine)
            counter = StatementCounter()
            event.listen(engine.sync_engine, "before_cursor_execute", counter)
            results = await run_strategies(store, index, w, counter)
            await engine.dispose()
        finally:
            server.stop()
    return results, {"load_s": seconds, "one_session_select1_p50_ms": baseline}


async def session_baseline(engine: Any) -> float:
    """p50 (ms) of ``SELECT 1`` in its own session: the floor of one store call here.

    Reported so figures from a loaded, shared machine can be read against it.
    """
    from sqlalchemy import text
    from sqlalchemy.ext.asyncio import async_sessionmaker

    maker = async_sessionmaker(engine, expire_on_commit=False)
    times = []
    for _ in range(100):
        t0 = time.perf_counter()
        async with maker() as session, session.begin():
            await session.execute(text("SELECT 1"))
        times.append((time.perf_counter() - t0) * 1000)
    return nearest_rank(times, 50)


def report(backend: str, n: int, results: dict[str, dict[str, float]],
           extra: dict[str, float]) -> None:
    ts = TS.get((backend, n), {})
    print(f"\n## retrieve_memory, {backend}, N = {n:,}")
    for k, v in extra.items():
        print(f"{k}: {v:,.1f}")
    print("| strategy | p50 ms | p95 ms | TS p50 / p95 | ratio p50 (TS/ours) | statements/call "
          "| facts | entities | relationships | own fact |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for strategy, r in results.items():
        t = ts.get(strategy)
        ts_s = f"{t[0]} / {t[1]}" if t else "-"
        ratio = f"{t[0] / r['p50']:.1f}x" if t else "-"
        own = f"{r['own_hit']:.1%}" if strategy == "embedding" else "-"
        stmts = f"{r['statements']:.1f}" if backend == "postgres" else "-"
        print(f"| {strategy} | {r['p50']:.2f} | {r['p95']:.2f} | {ts_s} | {ratio} | {stmts} "
              f"| {r['facts']:.1f} | {r['entities']:.1f} | {r['relationships']:.1f} | {own} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=["memory", "postgres"], default="memory")
    parser.add_argument("--n", type=int, default=10_000, help="facts (N)")
    parser.add_argument("--pg-data", default=None, help="parent dir for the embedded server")
    args = parser.parse_args()
    t0 = time.perf_counter()
    w = generate(args.n, records=False)
    print(f"generated N={args.n:,} in {time.perf_counter() - t0:.1f}s")
    if args.backend == "memory":
        results, extra = asyncio.run(bench_memory(w))
    else:
        results, extra = asyncio.run(bench_postgres(w, args.pg_data))
    report(args.backend, args.n, results, extra)


if __name__ == "__main__":
    main()

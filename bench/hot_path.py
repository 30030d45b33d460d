"""Client-side cost of a retrieval: CPU per call and where it goes (a profiling harness).

Runs the reference workload's strategies (``bench/scale.py``: vector, hybrid, text, tags,
entity) against a database a ``bench/scale.py --scale reference --keep --db NAME`` run left
(or in memory), and prints per strategy the p50 and p95 of the wall time, the p50 and
the mean of the client CPU (``time.process_time``), the full (generation-2) garbage
collections per 100 calls, and the statements per call. The bench holds the whole
workload in memory, a large heap like a long-running service's, so each full collection
is expensive: it lands in the p95 and the mean, not in the p50. ``--profile`` also runs
each strategy under ``cProfile`` and prints the functions that take the most CPU (own
time and cumulative), which is how the Postgres hot path was cut.

    python bench/scale.py --dsn $DSN --scale reference --n 10000 --backend postgres \\
        --keep --db bench_hot
    python bench/hot_path.py --dsn $DSN --db bench_hot --n 10000 --profile vector
    python bench/hot_path.py --backend memory --n 10000
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse
import asyncio
import cProfile
import gc
import io
import pickle
import pstats
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from reference_workload import generate
from scale import DIM, Counter, load_average, load_reference, nearest_rank, reference_calls


def workload(n: int) -> Any:
    """The reference workload of ``n`` facts (cached in ``/tmp``: generating is slow)."""
    path = Path(f"/tmp/cycgraph_reference_{n}.pickle")
    if path.exists():
        return pickle.loads(path.read_bytes())
    w = generate(n, records=False)
    path.write_bytes(pickle.dumps(w))
    return w


async def measure(calls: list[Any], counter: Counter | None, warmup: int) -> dict[str, float]:
    """p50 wall / CPU (ms) and statements per call of ``calls`` (after ``warmup``)."""
    for call in calls[:warmup]:
        await call()
    gc.collect()
    wall, cpu, statements = [], [], 0
    full_before = gc.get_stats()[2]["collections"]
    for call in calls[warmup:]:
        before = counter.count if counter else 0
        c0, t0 = time.process_time(), time.perf_counter()
        await call()
        wall.append((time.perf_counter() - t0) * 1000)
        cpu.append((time.process_time() - c0) * 1000)
        statements += (counter.count - before) if counter else 0
    n = max(1, len(wall))
    return {"p50": nearest_rank(wall, 50), "p95": nearest_rank(wall, 95),
            "cpu": nearest_rank(cpu, 50), "cpu_mean": sum(cpu) / n,
            "statements": statements / n,
            "full_gc": 100 * (gc.get_stats()[2]["collections"] - full_before) / n}


async def python_calls(calls: list[Any]) -> float:
    """Python function calls per call (cProfile's count): a figure the load cannot move."""
    for call in calls[:5]:
        await call()
    prof = cProfile.Profile()
    prof.enable()
    for call in calls[5:25]:
        await call()
    prof.disable()
    return pstats.Stats(prof).total_calls / len(calls[5:25])  # type: ignore[attr-defined]


async def profile(calls: list[Any], top: int) -> str:
    """Run ``calls`` under cProfile; the top functions by own and by cumulative time."""
    for call in calls[:5]:
        await call()
    prof = cProfile.Profile(time.process_time)
    prof.enable()
    for call in calls[5:]:
        await call()
    prof.disable()
    out = io.StringIO()
    stats = pstats.Stats(prof, stream=out)
    stats.sort_stats("tottime").print_stats(top)
    stats.sort_stats("cumulative").print_stats(top)
    return out.getvalue()


async def run(args: argparse.Namespace) -> None:
    w = workload(args.n)
    engine = None
    counter: Counter | None = None
    if args.backend == "memory":
        from cycgraph_memory import InMemoryMemoryIndex, InMemoryMemoryStore

        store: Any = InMemoryMemoryStore(expected_dimensions=DIM)
        index: Any = InMemoryMemoryIndex(expected_dimensions=DIM)
        await load_reference(store, w)
        await index.rebuild(store)
    else:
        from sqlalchemy import event
        from sqlalchemy.engine import make_url

        from cycgraph_memory.postgres import (
            PostgresMemoryIndex,
            PostgresMemoryStore,
            create_engine_from_dsn,
            upgrade,
        )

        dsn = make_url(args.dsn).set(database=args.db).render_as_string(hide_password=False)
        engine = create_engine_from_dsn(dsn)
        await upgrade(engine, embedding_dim=DIM)  # a --keep run's database, at this head
        store, index = PostgresMemoryStore(engine), PostgresMemoryIndex(engine)
        counter = Counter()
        event.listen(engine.sync_engine, "before_cursor_execute", counter)
    try:
        print(f"# {args.backend}, N = {args.n:,}; {load_average()}")
        print("| strategy | p50 ms | p95 ms | client CPU p50 ms | client CPU mean ms "
              "| full GC per 100 calls | statements/call | Python calls/call |"
              "\n|---|---|---|---|---|---|---|---|")
        strategies = reference_calls(store, index, w, args.calls + args.warmup)
        wanted = args.strategies or list(strategies)
        for name in wanted:
            f = await measure(strategies[name], counter, args.warmup)
            n_calls = await python_calls(strategies[name])
            print(f"| {name} | {f['p50']:.2f} | {f['p95']:.2f} | {f['cpu']:.2f} "
                  f"| {f['cpu_mean']:.2f} | {f['full_gc']:.1f} | {f['statements']:.1f} "
                  f"| {n_calls:,.0f} |")
        for name in args.profile or ():
            print(f"\n## cProfile: {name}\n")
            print(await profile(strategies[name], args.top))
    finally:
        if engine is not None:
            await engine.dispose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", default=os.environ.get("CYCGRAPH_MEMORY_DSN"))
    parser.add_argument("--db", default="bench_scale_reference")
    parser.add_argument("--backend", choices=["memory", "postgres"], default="postgres")
    parser.add_argument("--n", type=int, default=10_000, help="facts the database holds")
    parser.add_argument("--calls", type=int, default=100, help="timed calls per strategy")
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--strategies", nargs="*", default=None)
    parser.add_argument("--profile", nargs="*", default=None, help="strategies to profile")
    parser.add_argument("--top", type=int, default=35)
    args = parser.parse_args()
    if args.backend == "postgres" and not args.dsn:
        parser.error("--dsn (or CYCGRAPH_MEMORY_DSN) is needed for Postgres")
    asyncio.run(run(args))


if __name__ == "__main__":
    main()

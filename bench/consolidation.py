"""Benchmark MemoryConsolidator (near-duplicate merging) and EntityResolver at scale.

Consolidation data: ``--facts`` random unit vectors in ``--dim`` dimensions; 5% of them
are planted near-duplicates of another fact (cosine drawn in [0.92, 0.99]) and 1% are
planted near-misses (cosine in [0.80, 0.88], below the 0.9 threshold: merging one is a
false merge). Reports wall time of ``consolidate()``, the peak RSS growth during it
(sampled every 20 ms from /proc/self/statm, minus the RSS just before), the planted
duplicates recalled, and merges below the threshold (exact float64 cosine of the two
original vectors).

Entity resolution data: ``--entities`` person entities, 10% of them later duplicates of
another under a name variant ("the Person 17.", "PERSON 17"); one fact and one edge per
fifth entity. Reports wall time of ``resolve()`` and groups found vs planted.

Wall and CPU seconds (``time.process_time``, all threads) are both printed: on a shared
machine the CPU time is the steadier figure.

Usage:
    python bench/consolidation.py --backend memory --facts 10000 100000 --entities 50000
    python bench/consolidation.py --backend postgres --facts 10000 --entities 50000
    python bench/consolidation.py --facts 10000 --dedup-method lsh
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import threading
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

from cycgraph_memory import EntityResolver, MemoryConsolidator
from cycgraph_memory.inmemory import InMemoryMemoryStore
from cycgraph_memory.records import Entity, Provenance, Relationship, SemanticFact

PAGE = os.sysconf("SC_PAGE_SIZE")
BASE = datetime(2026, 1, 1, tzinfo=UTC)
PROV = Provenance(source="system", created_at=BASE)


def rss() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * PAGE


class PeakRss:
    """Samples RSS in a thread while the block runs; ``growth`` = peak - start."""

    def __enter__(self) -> PeakRss:
        self.start = rss()
        self.peak = self.start
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(0.02):
            self.peak = max(self.peak, rss())

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, rss())

    @property
    def growth_mb(self) -> float:
        return (self.peak - self.start) / 2**20


def at_cosine(rng: np.random.Generator, v: np.ndarray, cos: float) -> np.ndarray:
    """A unit vector at exactly cosine ``cos`` from the unit vector ``v``."""
    u = rng.standard_normal(v.shape[0])
    u -= (u @ v) * v
    u /= np.linalg.norm(u)
    return cos * v + np.sqrt(1 - cos * cos) * u


def make_facts(n: int, dim: int, seed: int) -> tuple[np.ndarray, list[tuple[int, int]],
                                                     list[tuple[int, int]]]:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, dim))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    n_dup, n_miss = n * 5 // 100, n // 100
    slots = rng.permutation(n)
    dup_slots, miss_slots = slots[:n_dup], slots[n_dup : n_dup + n_miss]
    originals = slots[n_dup + n_miss :]
    planted: list[tuple[int, int]] = []
    misses: list[tuple[int, int]] = []
    for slot, base in zip(dup_slots, rng.choice(originals, n_dup, replace=False), strict=True):
        x[slot] = at_cosine(rng, x[base], float(rng.uniform(0.92, 0.99)))
        planted.append((int(base), int(slot)))
    for slot, base in zip(miss_slots, rng.choice(originals, n_miss, replace=False), strict=True):
        x[slot] = at_cosine(rng, x[base], float(rng.uniform(0.80, 0.88)))
        misses.append((int(base), int(slot)))
    return x, planted, misses


async def load_facts(store: Any, x: np.ndarray) -> list[uuid.UUID]:
    ids = [uuid.uuid4() for _ in range(len(x))]
    for start in range(0, len(x), 1000):
        await store.put_facts(
            SemanticFact(
                id=ids[i], content=f"fact {i}", embedding=x[i].astype(np.float32).tolist(),
                provenance=PROV, valid_from=BASE + timedelta(seconds=i),
            )
            for i in range(start, min(start + 1000, len(x)))
        )
    return ids


async def bench_consolidation(
    store: Any, n: int, dim: int, batch: int, method: str = "auto"
) -> dict[str, Any]:
    x, planted, misses = make_facts(n, dim, seed=n)
    t0 = time.perf_counter()
    ids = await load_facts(store, x)
    load_s = time.perf_counter() - t0
    consolidator = MemoryConsolidator(
        store, None, batch_size=batch, dedup_method=method  # type: ignore[arg-type]
    )
    with PeakRss() as mem:
        t0, c0 = time.perf_counter(), time.process_time()
        report = await consolidator.consolidate()
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    pos = {fid: i for i, fid in enumerate(ids)}
    keeper_of: dict[int, int] = {}
    offset = 0
    while True:
        page = await store.find_facts(include_invalidated=True, limit=5000, offset=offset)
        for f in page:
            if f.invalidated_by is not None:
                keeper_of[pos[f.id]] = pos[uuid.UUID(f.invalidated_by)]
        if len(page) < 5000:
            break
        offset += 5000

    def root(i: int) -> int:
        return keeper_of.get(i, i)

    found = sum(1 for a, b in planted if root(a) == root(b))
    cos = [float(x[a] @ x[b]) for a, b in keeper_of.items()]
    below = sum(1 for c in cos if c < 0.9)
    misses_merged = sum(1 for a, b in misses if root(a) == root(b))
    second = await consolidator.plan()
    return {
        "n": n, "dim": dim, "method": method, "load_s": load_s, "wall_s": wall, "cpu_s": cpu,
        "rss_growth_mb": mem.growth_mb,
        "planted": len(planted), "found": found, "recall": found / max(len(planted), 1),
        "merged": report.facts_deduped, "below_threshold": below,
        "near_misses_merged": misses_merged, "second_plan": len(second),
    }


async def bench_resolution(store: Any, m: int) -> dict[str, Any]:
    rng = np.random.default_rng(m)
    n_dup = m // 10
    n_unique = m - n_dup
    entities = [
        Entity(name=f"Person {i}", entity_type="person", provenance=PROV,
               created_at=BASE + timedelta(seconds=i), updated_at=BASE)
        for i in range(n_unique)
    ]
    variants = ("the Person {}.", "PERSON {}", "person  {}!")
    for k, base in enumerate(rng.choice(n_unique, n_dup, replace=True)):
        entities.append(
            Entity(name=variants[k % 3].format(base), entity_type="person", provenance=PROV,
                   created_at=BASE + timedelta(days=1, seconds=k), updated_at=BASE)
        )
    planted_groups = len({e.name.lower().strip(".!").removeprefix("the ").replace("  ", " ")
                          for e in entities[n_unique:]})
    facts = [
        SemanticFact(content=f"fact about {e.name}", entity_ids=[e.id], provenance=PROV)
        for e in entities[::5]
    ]
    edges = [
        Relationship(source_id=a.id, target_id=b.id, relation_type="knows", provenance=PROV)
        for a, b in zip(entities[::5], entities[1::5], strict=False)
    ]
    t0 = time.perf_counter()
    for start in range(0, len(entities), 1000):
        await store.put_entities(entities[start : start + 1000])
    for start in range(0, len(facts), 1000):
        await store.put_facts(facts[start : start + 1000])
        await store.put_relationships(edges[start : start + 1000])
    load_s = time.perf_counter() - t0
    with PeakRss() as mem:
        t0, c0 = time.perf_counter(), time.process_time()
        report = await EntityResolver(store).resolve()
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    return {
        "m": m, "load_s": load_s, "wall_s": wall, "cpu_s": cpu, "rss_growth_mb": mem.growth_mb,
        "planted_groups": planted_groups, "groups_merged": report.groups_merged,
        "absorbed": report.entities_absorbed, "planted_absorbed": n_dup,
        "facts_rewritten": report.facts_rewritten,
        "relationships_rewritten": report.relationships_rewritten,
    }


async def run(args: argparse.Namespace) -> None:
    if args.backend == "memory":
        for n in args.facts:
            for rep in range(args.repeat):
                r = await bench_consolidation(
                    InMemoryMemoryStore(), n, args.dim, args.batch, args.dedup_method
                )
                print({"backend": "memory", "rep": rep, **r}, flush=True)
        if args.entities:
            for rep in range(args.repeat):
                r2 = await bench_resolution(InMemoryMemoryStore(), args.entities)
                print({"backend": "memory", "rep": rep, **r2}, flush=True)
        return
    from sqlalchemy import text

    from cycgraph_memory.postgres import (
        PostgresMemoryStore,
        create_engine_from_dsn,
        start_embedded_server,
        upgrade,
    )

    with tempfile.TemporaryDirectory(prefix="cycgraph-consolidation-") as tmp:
        server = start_embedded_server(Path(tmp) / "data", cleanup_mode="delete")
        admin = create_engine_from_dsn(server.dsn, isolation_level="AUTOCOMMIT")
        async with admin.connect() as conn:
            await conn.execute(text("CREATE DATABASE cycgraph_bench"))
        await admin.dispose()
        engine = create_engine_from_dsn(server.dsn_for("cycgraph_bench"))
        try:
            await upgrade(engine, embedding_dim=args.dim)
            for n in args.facts:
                for rep in range(args.repeat):
                    store = PostgresMemoryStore(engine, tenant_id=f"c{n}_{rep}")
                    r = await bench_consolidation(store, n, args.dim, args.batch, args.dedup_method)
                    print({"backend": "postgres", "rep": rep, **r}, flush=True)
                    await store.clear()
            if args.entities:
                for rep in range(args.repeat):
                    store = PostgresMemoryStore(engine, tenant_id=f"e_{rep}")
                    r2 = await bench_resolution(store, args.entities)
                    print({"backend": "postgres", "rep": rep, **r2}, flush=True)
                    await store.clear()
        finally:
            await engine.dispose()
            server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--backend", choices=["memory", "postgres"], default="memory")
    parser.add_argument("--facts", type=int, nargs="*", default=[10_000])
    parser.add_argument("--entities", type=int, default=0)
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--dedup-method", choices=["auto", "exact", "lsh"], default="auto")
    args = parser.parse_args()
    asyncio.run(run(args))


if __name__ == "__main__":
    main()

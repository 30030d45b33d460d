"""Lifecycle bench: export/import, bulk import, purge and re-embedding at scale.

For each backend (in-memory, Postgres), with N facts carrying 384-d embeddings:

* bulk import (Postgres): entities, episodes with messages, facts and relationships with
  ``bulk_import`` into an empty deployment whose HNSW indexes are built after the load
  (records/s for the load, then the build; target >= 5,000), and a 2,000-fact load with
  the HNSW indexes in place for comparison. Last measured at 100,000 facts: 7,289
  records/s (15.8 s for 115,000 records, load average 2.4-2.6; 4,520 on a busier machine,
  3,994 before the validation path checked embeddings as numpy blocks), see
  ``docs/lifecycle.md``. ``--bulk-only`` runs this row alone;
* export of the store to a JSON Lines file (target <= 60 s at 100,000 facts) and import of
  that file into an empty store (target <= 60 s), each with the peak RSS growth during the
  call (sampled every 10 ms; flat memory = the same growth at any N). On Postgres the
  import goes into a second, empty database (memory moved between deployments) through
  ``import_`` (COPY batches, one transaction) with the HNSW indexes deferred: the load and
  the index rebuild are timed apart;
* purge of one entity mentioned by 1,000 facts (target <= 2 s);
* re-embedding every fact with the hashing embedder (target <= 120 s at 100,000); on
  Postgres through the staging table (``begin_width_change`` with the same width), the
  swap (fill of the new column, HNSW builds) reported separately.

Postgres: databases ``--db`` (default ``bench_lifecycle``) and ``<db>_copy`` are created on
the server named by ``--dsn`` (or ``CYCGRAPH_MEMORY_BENCH_DSN``), migrated, and dropped at
the end.

Usage: python bench/lifecycle.py --facts 100000 [--backends memory postgres] [--dsn DSN]
       [--db NAME]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import sys
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

from cycgraph_memory import (
    Entity,
    Episode,
    HashingEmbeddingProvider,
    InMemoryMemoryStore,
    Message,
    Provenance,
    Relationship,
    SemanticFact,
)
from cycgraph_memory.lifecycle import export, import_, purge, reembed

DIM = 384
T0 = datetime(2026, 1, 1, tzinfo=UTC)
PAGE = os.sysconf("SC_PAGE_SIZE")


class RssPeak:
    """Peak resident set size growth while the block runs (sampled every 10 ms)."""

    def __init__(self) -> None:
        self.peak = 0
        self._stop = threading.Event()

    @staticmethod
    def rss() -> int:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * PAGE

    def __enter__(self) -> RssPeak:
        gc.collect()
        self.base = self.rss()
        self.peak = self.base
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self.rss())
            time.sleep(0.01)

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self.rss())

    @property
    def growth_mb(self) -> float:
        return (self.peak - self.base) / 1e6


def dataset(n: int, seed: int = 0) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    prov = Provenance(source="agent", agent_id="bench", run_id="load", created_at=T0)
    entities = [
        Entity(name=f"Entity {i}", entity_type="thing", provenance=prov, created_at=T0,
               updated_at=T0, embedding=_unit(rng))
        for i in range(1000)
    ]
    target = entities[0].id
    episodes = [
        Episode(topic=f"topic {i}", started_at=T0 + timedelta(seconds=i),
                ended_at=T0 + timedelta(seconds=i + 1), provenance=prov,
                messages=[Message(role="user", content=f"message {i} {j} about things",
                                  timestamp=T0 + timedelta(seconds=i), embedding=_unit(rng))
                          for j in range(5)])
        for i in range(max(1, n // 50))
    ]
    relationships = [
        Relationship(source_id=entities[i % 1000].id, target_id=entities[(i * 7 + 1) % 1000].id,
                     relation_type="related_to", provenance=prov, valid_from=T0)
        for i in range(2000)
    ]
    vectors = rng.standard_normal((n, DIM)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    facts = []
    for i in range(n):
        eid = target if i < 1000 else entities[1 + i % 999].id
        facts.append(
            SemanticFact(content=f"fact {i}: entity {eid.hex[:6]} has property {i % 97}",
                         entity_ids=[eid], provenance=prov,
                         valid_from=T0 + timedelta(seconds=i), tags=[f"t{i % 10}"],
                         embedding=vectors[i].tolist())
        )
    return {"entities": entities, "episodes": episodes, "relationships": relationships,
            "facts": facts, "target": target}


def _unit(rng: np.random.Generator) -> list[float]:
    v = rng.standard_normal(DIM).astype(np.float32)
    return (v / np.linalg.norm(v)).tolist()  # type: ignore[no-any-return]


async def timed(fn: Callable[[], Awaitable[Any]]) -> tuple[float, float, Any]:
    with RssPeak() as rss:
        t0 = time.perf_counter()
        out = await fn()
        elapsed = time.perf_counter() - t0
    return elapsed, rss.growth_mb, out


async def _drop_hnsw(engine: Any) -> list[str]:
    """Drop the HNSW indexes (an empty deployment's first load); return their DDL."""
    from sqlalchemy import text

    async with engine.begin() as conn:
        rows = (await conn.execute(text(
            "SELECT indexname, indexdef FROM pg_indexes WHERE indexdef ILIKE '%using hnsw%'"
        ))).all()
        for name, _ in rows:
            await conn.execute(text(f'DROP INDEX "{name}"'))
    return [str(d) for _, d in rows]


async def _build_hnsw(store: Any, definitions: list[str]) -> None:
    from cycgraph_memory.postgres.bulk import build_vector_indexes

    await build_vector_indexes(store, definitions)


def row(rows: list[list[str]], backend: str, what: str, value: str, target: str,
        ratio: float | None) -> None:
    rows.append([backend, what, value, target, "" if ratio is None else f"{ratio:.2f}"])
    print(time.strftime("%H:%M:%S"), *rows[-1], sep=" | ", file=sys.stderr, flush=True)


async def bench_memory(n: int, rows: list[list[str]], tmp: Path) -> None:
    data = dataset(n)
    store = InMemoryMemoryStore(expected_dimensions=DIM)
    await store.put_entities(data["entities"])
    await store.put_relationships(data["relationships"])
    await store.put_episodes(data["episodes"])
    for s in range(0, n, 10_000):
        await store.put_facts(data["facts"][s : s + 10_000])
    target = data["target"]
    data.clear()
    gc.collect()
    path = tmp / "memory.jsonl"
    secs, mb, rep = await timed(lambda: export(store, path))
    row(rows, "memory", f"export {n:,} facts", f"{secs:.1f} s (+{mb:.0f} MB peak RSS)",
        "<= 60 s", 60 / secs)
    other = InMemoryMemoryStore(expected_dimensions=DIM)
    secs, mb, rep = await timed(lambda: import_(other, path))
    row(rows, "memory", f"import {n:,} facts", f"{secs:.1f} s (+{mb:.0f} MB peak RSS, "
        "the store itself holds the data)", "<= 60 s", 60 / secs)
    await other.clear()
    gc.collect()
    secs, _, rep = await timed(lambda: purge(store, entity_ids=[target]))
    row(rows, "memory", f"purge 1 entity ({rep.facts:,} facts)", f"{secs:.2f} s", "<= 2 s",
        2 / secs)
    provider = HashingEmbeddingProvider(dimensions=DIM)
    secs, _, rep = await timed(
        lambda: reembed(store, provider, record_types=["fact"], batch_size=1000)
    )
    row(rows, "memory", f"reembed {rep.counts['fact']:,} facts", f"{secs:.1f} s",
        "<= 120 s", 120 / secs)


async def bench_postgres(
    n: int, rows: list[list[str]], tmp: Path, server_dsn: str, db_name: str,
    bulk_only: bool = False,
) -> None:
    from sqlalchemy import text

    from cycgraph_memory.postgres import (
        PostgresMemoryStore,
        begin_width_change,
        bulk_import,
        create_engine_from_dsn,
        finish_width_change,
        upgrade,
    )

    admin = create_engine_from_dsn(server_dsn, isolation_level="AUTOCOMMIT")
    name = db_name
    async with admin.connect() as conn:
        await conn.execute(text(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        await conn.execute(text(f"CREATE DATABASE {name}"))
    from sqlalchemy.engine import make_url

    engine = create_engine_from_dsn(make_url(server_dsn).set(database=name))
    try:
        await upgrade(engine, embedding_dim=DIM)
        saved = await _drop_hnsw(engine)
        data = dataset(n)
        store = PostgresMemoryStore(engine, tenant_id="bench")
        records = (len(data["entities"]) + len(data["relationships"]) + len(data["facts"])
                   + sum(1 + len(e.messages) for e in data["episodes"]))
        # No RSS sampler here: the row reports no memory figure, and the sampler's thread
        # competes for the interpreter lock with the validation pass.
        gc.collect()
        t0 = time.perf_counter()
        await bulk_import(
            store, entities=data["entities"], episodes=data["episodes"], facts=data["facts"],
            relationships=data["relationships"], batch_size=5000)
        load = time.perf_counter() - t0
        row(rows, "postgres", f"bulk import {records:,} records (no HNSW during the load)",
            f"{records / load:,.0f} records/s ({load:.1f} s)", ">= 5,000/s",
            records / load / 5000)
        if bulk_only:
            return
        secs, _, _ = await timed(lambda: _build_hnsw(store, saved))
        row(rows, "postgres", "  + HNSW build after the load (4 indexes)", f"{secs:.1f} s",
            "", None)
        row(rows, "postgres", "  = load + build", f"{records / (load + secs):,.0f} records/s",
            ">= 5,000/s", records / (load + secs) / 5000)
        extra = dataset(min(n, 2_000), seed=1)
        live = PostgresMemoryStore(engine, tenant_id="bench_live")
        secs, _, _ = await timed(lambda: bulk_import(live, facts=extra["facts"],
                                                     batch_size=5000))
        m = len(extra["facts"])
        row(rows, "postgres", f"bulk import {m:,} facts, HNSW in place",
            f"{m / secs:,.0f} records/s ({secs:.1f} s)", "(trade-off)", None)
        target = data["target"]
        data.clear()
        extra.clear()
        gc.collect()
        async with engine.begin() as conn:
            await conn.execute(text("ANALYZE"))
        path = tmp / "postgres.jsonl"
        secs, mb, rep = await timed(lambda: export(store, path, page_size=2000))
        row(rows, "postgres", f"export {n:,} facts", f"{secs:.1f} s (+{mb:.0f} MB peak RSS)",
            "<= 60 s", 60 / secs)
        # Import into an empty deployment (memory moved between systems): import_ loads
        # with COPY and, the file being large, defers the HNSW indexes (timed apart).
        copy_name = f"{name}_copy"
        async with admin.connect() as conn:
            await conn.execute(text(f"DROP DATABASE IF EXISTS {copy_name} WITH (FORCE)"))
            await conn.execute(text(f"CREATE DATABASE {copy_name}"))
        copy_engine = create_engine_from_dsn(make_url(server_dsn).set(database=copy_name))
        try:
            await upgrade(copy_engine, embedding_dim=DIM)
            other = PostgresMemoryStore(copy_engine, tenant_id="bench_copy")
            tables = ["entities", "episodes", "episode_messages", "facts", "themes"]
            t0 = time.perf_counter()
            async with other.deferred_vector_indexes(tables):
                secs, mb, rep = await timed(
                    lambda: import_(other, path, batch_size=2000, defer_vector_indexes=False)
                )
            total = time.perf_counter() - t0
            m = rep.counts["fact"]
            row(rows, "postgres", f"import {m:,} facts (COPY, one transaction)",
                f"{secs:.1f} s (+{mb:.0f} MB peak RSS)", "<= 60 s", 60 / secs)
            row(rows, "postgres", "  + HNSW rebuild after the import (5 indexes)",
                f"{total - secs:.1f} s", "", None)
            row(rows, "postgres", "  = import + rebuild", f"{total:.1f} s", "<= 60 s",
                60 / total)
        finally:
            await copy_engine.dispose()
            async with admin.connect() as conn:
                await conn.execute(text(f"DROP DATABASE IF EXISTS {copy_name} WITH (FORCE)"))
        secs, _, rep = await timed(lambda: purge(store, entity_ids=[target]))
        row(rows, "postgres", f"purge 1 entity ({rep.facts:,} facts)", f"{secs:.2f} s",
            "<= 2 s", 2 / secs)
        # Same width through the staging column: the HNSW index is built once at the
        # swap instead of updated per row (see docs/lifecycle.md).
        provider = HashingEmbeddingProvider(dimensions=DIM)
        t0 = time.perf_counter()
        await begin_width_change(engine, DIM)
        secs, _, rep = await timed(lambda: reembed(
            store, provider, record_types=["fact"], batch_size=2000, target="next"))
        for tenant, types in (("bench", ["episode", "entity", "theme"]),
                              ("bench_live", ["episode", "entity", "fact", "theme"])):
            await reembed(PostgresMemoryStore(engine, tenant_id=tenant), provider,
                          record_types=types, batch_size=2000, target="next")
        other_secs = time.perf_counter() - t0 - secs
        swap_secs, _, _ = await timed(
            lambda: finish_width_change(engine, ["bench", "bench_live"])
        )
        row(rows, "postgres", f"reembed {rep.counts['fact']:,} facts (staging table)",
            f"{secs:.1f} s", "<= 120 s", 120 / secs)
        row(rows, "postgres", "  + swap (fill, HNSW built on 5 tables)",
            f"{swap_secs:.1f} s (other records' backfill {other_secs:.1f} s, not counted)",
            "", None)
    finally:
        await engine.dispose()
        async with admin.connect() as conn:
            await conn.execute(text(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        await admin.dispose()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--facts", type=int, default=100_000)
    parser.add_argument("--backends", nargs="+", default=["memory", "postgres"])
    parser.add_argument("--dsn", default=os.environ.get("CYCGRAPH_MEMORY_BENCH_DSN"))
    parser.add_argument("--db", default="bench_lifecycle",
                        help="database to create (and drop) on the server")
    parser.add_argument("--bulk-only", action="store_true",
                        help="postgres: only the bulk import row (no HNSW build, no other rows)")
    args = parser.parse_args()
    rows: list[list[str]] = []
    with tempfile.TemporaryDirectory() as tmp:
        if "memory" in args.backends:
            await bench_memory(args.facts, rows, Path(tmp))
        if "postgres" in args.backends:
            if not args.dsn:
                raise SystemExit("postgres: give --dsn or CYCGRAPH_MEMORY_BENCH_DSN")
            await bench_postgres(args.facts, rows, Path(tmp), args.dsn, args.db,
                                 args.bulk_only)
    print(f"load average (1, 5, 15 min) at the end: {os.getloadavg()}")
    header = ["backend", "measure", "result", "target", "ratio (>= 1 meets)"]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    for r in [header, ["-" * w for w in widths], *rows]:
        print(" | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)))


if __name__ == "__main__":
    asyncio.run(main())

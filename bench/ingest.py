"""Throughput of the whole ingest pipeline (messages/s).

Per backend, each on a fresh store: ``MemoryPipeline.ingest`` once per batch, and
``MemoryPipeline.ingest_many`` over the same batches (CPU stages of batch n+1 overlap the
database write of batch n).

Rule-based extractor, hashing embedder (384-d), consolidating clusterer, and the store:
the embedded Postgres server (default) and the in-memory store for comparison.
Target: >= 1,000 messages/s on Postgres at 10,000 messages.

    python bench/ingest.py [--messages 10000] [--batch 500] [--backend postgres|memory|both]
    python bench/ingest.py --tiers [--messages 2000] [--batch 500] [--processes 2]
        [--backend memory|postgres|both] [--dsn URL]

``--tiers`` times the rule and the parser extractor tiers side by side through
``MemoryPipeline.ingest`` with the hashing embedder (target: parser >= 500 msg/s in
memory): in memory (rule, parser, parser without the parse cache, parser with worker
processes) and on Postgres (rule, parser; a fresh database on ``--dsn``, else on an
embedded server). Last runs (10,000 messages, batches of 1,000, three runs on an idle
two-core machine, load 1.1-1.3): in memory rule 1,136-1,190 msg/s, parser 794-819,
parser without the parse cache 650-716, parser with 2 processes 840-984; on Postgres rule
275-305, parser 267-280. Run-to-run noise on a busy two-core machine is about +-20%, and
machines differ: compare a tier with the rule tier of the same run.

``--growth`` runs instead the growth section (``bench/_ingest_growth.py``): one tenant
receiving many small calls, cost of the first vs the last calls, themes per 1,000 facts:

    python bench/ingest.py --growth [--calls 260] [--call-size 20] [--preload 100000]
        [--embedders hashing,minilm] [--backend memory|postgres|both] [--dsn URL]
"""

from __future__ import annotations

import os

# numpy's multi-threaded BLAS spin-waits on a busy 2-core machine (the in-memory index's
# products at 100,000 facts took 5x longer under load); the other benches run with one
# BLAS thread too (bench/hot_path.py, bench/retrieval.py, bench/scale.py).
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import argparse
import asyncio
import random
import statistics
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from cycgraph_memory.embeddings.hashing import HashingEmbeddingProvider
from cycgraph_memory.hierarchy.extractors.rules import RuleBasedExtractor
from cycgraph_memory.hierarchy.pipeline import MemoryPipeline
from cycgraph_memory.inmemory import InMemoryMemoryIndex, InMemoryMemoryStore
from cycgraph_memory.records import Message

FIRST = ["Alice", "Bob", "Carol", "Dave", "Erin", "Frank", "Grace", "Heidi", "Ivan", "Judy"]
LAST = ["Smith", "Jones", "Diaz", "Kim", "Walsh", "Novak", "Okafor", "Berg", "Rossi", "Tanaka"]
ORGS = ["Acme Corp", "Globex Inc", "Initech Labs", "Umbrella Group", "Stark Industries"]
TOOLS = ["PostgreSQL", "Redis", "Kubernetes", "Terraform", "GitHub Actions", "Kafka"]
CITIES = ["Berlin", "Lisbon", "Toronto", "Nairobi", "Osaka"]
TEMPLATES = [
    "{p} works at {o} on the platform team.",
    "{p} manages the data pipeline that depends on {t}.",
    "The billing service uses {t} and {t2} for caching.",
    "{p} reports to {p2} and maintains the deployment scripts.",
    "{o} acquired a small startup to speed up the move to {t}.",
    "{p} lives in {c} and joined {o} last year.",
    "We should always check the {t} limits before a release, because the cache filled up.",
    "Can you remind me what {p} said about the {t} migration?",
    "{p2} built the first prototype of the scheduler over a weekend.",
    "{o} is headquartered in {c} and has a second office in {c2}.",
]


HNSW = (16, 64)  # set from --hnsw-m / --hnsw-ef-construction


def make_messages(n: int, seed: int = 7) -> list[Message]:
    """Deterministic synthetic conversation: episodes of ~10 turns separated by gaps."""
    rng = random.Random(seed)
    t = datetime(2026, 1, 1, tzinfo=UTC)
    out: list[Message] = []
    for i in range(n):
        t += timedelta(minutes=30) if i % 10 == 0 else timedelta(seconds=rng.randint(5, 90))
        text = rng.choice(TEMPLATES).format(
            p=f"{rng.choice(FIRST)} {rng.choice(LAST)}",
            p2=f"{rng.choice(FIRST)} {rng.choice(LAST)}",
            o=rng.choice(ORGS),
            t=rng.choice(TOOLS),
            t2=rng.choice(TOOLS),
            c=rng.choice(CITIES),
            c2=rng.choice(CITIES),
        )
        role = "user" if i % 2 == 0 else "assistant"
        out.append(Message(id=uuid.UUID(int=rng.getrandbits(128)), role=role, content=text,
                           timestamp=t))
    return out


async def run_memory(messages: list[Message], batch: int, many: bool) -> tuple[float, float]:
    store = InMemoryMemoryStore()
    index = InMemoryMemoryIndex(expected_dimensions=384, silence_scale_warning=True)
    pipeline = MemoryPipeline(store, embedder=HashingEmbeddingProvider(dimensions=384),
                              index=index, extractor=RuleBasedExtractor())
    return await _drive(pipeline, messages, batch, many)


async def run_postgres(messages: list[Message], batch: int, many: bool) -> tuple[float, float]:
    from cycgraph_memory.postgres import (
        PostgresMemoryIndex,
        PostgresMemoryStore,
        create_engine_from_dsn,
        start_embedded_server,
        upgrade,
    )

    with tempfile.TemporaryDirectory(prefix="cycgraph-bench-") as tmp:
        server = start_embedded_server(Path(tmp) / "pg")
        engine = create_engine_from_dsn(server.dsn)
        try:
            await upgrade(engine, embedding_dim=384, hnsw_m=HNSW[0],
                          hnsw_ef_construction=HNSW[1])
            store = PostgresMemoryStore(engine, tenant_id="bench")
            index = PostgresMemoryIndex(engine, tenant_id="bench")
            pipeline = MemoryPipeline(store, embedder=HashingEmbeddingProvider(dimensions=384),
                                      index=index, extractor=RuleBasedExtractor())
            return await _drive(pipeline, messages, batch, many)
        finally:
            await engine.dispose()
            stop = getattr(server, "stop", None)
            if stop is not None:
                stop()


async def _drive(
    pipeline: MemoryPipeline, messages: list[Message], batch: int, many: bool
) -> tuple[float, float]:
    """Return (overall msg/s, median per-batch msg/s) on a fresh store."""
    batches = [messages[i : i + batch] for i in range(0, len(messages), batch)]
    start = time.perf_counter()
    if many:
        reports = await pipeline.ingest_many(batches, tags=["bench"])
        assert sum(r.messages_ingested for r in reports) == len(messages)
        return len(messages) / (time.perf_counter() - start), float("nan")
    per_batch: list[float] = []
    for chunk in batches:
        t0 = time.perf_counter()
        await pipeline.ingest(chunk, tags=["bench"])
        per_batch.append(len(chunk) / (time.perf_counter() - t0))
    return len(messages) / (time.perf_counter() - start), statistics.median(per_batch)


async def _tier_postgres(
    extractor: object, messages: list[Message], batch: int, dsn: str | None
) -> tuple[float, float, float]:
    """One tier on Postgres: a fresh database (on ``dsn``, else an embedded server).

    Returns (msg/s, median batch msg/s, msg per CPU-second of this process).
    """
    import secrets

    from sqlalchemy import make_url, text

    from cycgraph_memory.postgres import (
        PostgresMemoryIndex,
        PostgresMemoryStore,
        asyncpg_url,
        create_engine_from_dsn,
        start_embedded_server,
        upgrade,
    )

    with tempfile.TemporaryDirectory(prefix="cycgraph-tiers-") as tmp:
        server = None
        if dsn is None:
            server = start_embedded_server(Path(tmp) / "pg")
            dsn = server.dsn
        admin = create_engine_from_dsn(dsn, isolation_level="AUTOCOMMIT")
        name = f"bench_tiers_{secrets.token_hex(4)}"
        async with admin.connect() as conn:
            await conn.execute(text(f"CREATE DATABASE {name}"))
        engine = create_engine_from_dsn(make_url(asyncpg_url(dsn)).set(database=name))
        try:
            await upgrade(engine, embedding_dim=384, hnsw_m=HNSW[0],
                          hnsw_ef_construction=HNSW[1])
            store = PostgresMemoryStore(engine, tenant_id="bench")
            index = PostgresMemoryIndex(engine, tenant_id="bench")
            pipeline = MemoryPipeline(store, embedder=HashingEmbeddingProvider(dimensions=384),
                                      index=index, extractor=extractor)  # type: ignore[arg-type]
            c0 = time.process_time()
            rate, median = await _drive(pipeline, messages, batch, False)
            cpu = len(messages) / max(time.process_time() - c0, 1e-9)
            return rate, median, cpu
        finally:
            await engine.dispose()
            async with admin.connect() as conn:
                await conn.execute(text(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
            await admin.dispose()
            stop = getattr(server, "stop", None)
            if stop is not None:
                stop()


def tiers(messages: list[Message], batch: int, processes: int, backend: str,
          dsn: str | None) -> None:
    """The rule and parser tiers side by side, hashing embedder, per backend.

    In memory: rule, parser, parser without the parse cache, parser with worker
    processes. On Postgres (``--backend postgres|both``): rule and parser, each on a fresh
    database. msg/CPU-s counts this process only (the database server and worker processes
    are apart).
    """
    from cycgraph_memory.hierarchy.extractors.parser import ParserExtractor

    print(f"\nextractor tiers: {len(messages)} messages in batches of {batch}")
    print(f"{'tier':<34}{'msg/s':>8}{'median batch':>14}{'vs 500/s':>10}{'msg/CPU-s':>12}")
    rows: list[tuple[str, str, Any]] = [
        ("memory", "rule", RuleBasedExtractor),
        ("memory", "parser", ParserExtractor),
        # The synthetic chat repeats texts (10 templates): this row shows the parser
        # without reusing the parse of a text seen in an earlier batch.
        ("memory", "parser, parse_cache=0", lambda: ParserExtractor(parse_cache=0)),
        ("memory", f"parser, {processes} processes",
         lambda: ParserExtractor(processes=processes, process_min_messages=batch)),
        ("postgres", "rule", RuleBasedExtractor),
        ("postgres", "parser", ParserExtractor),
        # Last: the freeze is process-wide and would change every row after it.
        ("memory", "parser, freeze_gc=True", lambda: ParserExtractor(freeze_gc=True)),
    ]
    for where, label, make in rows:
        if backend not in ("both", where):
            continue
        if "processes" in label and processes <= 1:
            continue
        extractor = make()
        warm = MemoryPipeline(InMemoryMemoryStore(),
                              embedder=HashingEmbeddingProvider(dimensions=384),
                              extractor=extractor)
        asyncio.run(warm.ingest(make_messages(batch, seed=99)))  # loads spaCy / workers
        if where == "postgres":
            rate, median, cpu = asyncio.run(_tier_postgres(extractor, messages, batch, dsn))
        else:
            store = InMemoryMemoryStore()
            index = InMemoryMemoryIndex(expected_dimensions=384, silence_scale_warning=True)
            pipeline = MemoryPipeline(store, embedder=HashingEmbeddingProvider(dimensions=384),
                                      index=index, extractor=extractor)
            c0 = time.process_time()
            rate, median = asyncio.run(_drive(pipeline, messages, batch, False))
            cpu = len(messages) / max(time.process_time() - c0, 1e-9)
        close = getattr(extractor, "close", None)
        if close is not None:
            close()
        cpu_text = "-" if "processes" in label else f"{cpu:.0f}"
        name = f"{label} ({'in memory' if where == 'memory' else 'Postgres'})"
        print(f"{name:<34}{rate:>8.0f}{median:>14.0f}{rate / 500:>9.2f}x{cpu_text:>12}")
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


def growth_main(args: argparse.Namespace) -> None:
    """The ``--growth`` section: per backend and embedder, one tenant, many small calls."""
    from _ingest_growth import growth_memory, growth_postgres, print_growth

    rows = []
    for name in args.embedders.split(","):
        if args.backend in ("memory", "both"):
            result = asyncio.run(growth_memory(name, args.calls, args.call_size, args.preload))
            rows.append(("in-memory", name, args.preload, result))
            print_growth(rows[-1:], args.call_size)
        if args.backend in ("postgres", "both"):
            result = asyncio.run(
                growth_postgres(name, args.calls, args.call_size, args.preload, args.dsn)
            )
            rows.append(("postgres", name, args.preload, result))
            print_growth(rows[-1:], args.call_size)
    print_growth(rows, args.call_size)


def main() -> None:
    global HNSW
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=10_000)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--backend", choices=["postgres", "memory", "both"], default="both")
    parser.add_argument("--hnsw-m", type=int, default=16)
    parser.add_argument("--hnsw-ef-construction", type=int, default=64)
    parser.add_argument("--tiers", action="store_true",
                        help="only compare the rule and parser extractor tiers (--backend: "
                             "in memory, Postgres or both)")
    parser.add_argument("--processes", type=int, default=2,
                        help="worker processes of the parser tier row (with --tiers)")
    parser.add_argument("--growth", action="store_true", help="run the growth section")
    parser.add_argument("--calls", type=int, default=260)
    parser.add_argument("--call-size", type=int, default=20)
    parser.add_argument("--preload", type=int, default=0)
    parser.add_argument("--embedders", default="hashing,minilm")
    parser.add_argument("--dsn", default=None, help="Postgres server (default: embedded)")
    args = parser.parse_args()
    if args.tiers:
        HNSW = (args.hnsw_m, args.hnsw_ef_construction)
        tiers(make_messages(args.messages), args.batch, args.processes, args.backend, args.dsn)
        return
    if args.growth:
        growth_main(args)
        return
    HNSW = (args.hnsw_m, args.hnsw_ef_construction)
    messages = make_messages(args.messages)
    rows: list[tuple[str, str, float, float]] = []
    for backend, runner in (("in-memory", run_memory), ("postgres (embedded)", run_postgres)):
        if args.backend not in ("both", backend.split()[0].replace("in-memory", "memory")):
            continue
        for many in (False, True):
            rate, median = asyncio.run(runner(messages, args.batch, many))
            rows.append((backend, "ingest_many" if many else "ingest", rate, median))
    print(f"\ningest: {args.messages} messages in batches of {args.batch}, fresh store per row")
    print(f"{'backend':<22}{'call':<13}{'msg/s':>8}{'median batch':>14}{'vs 1000/s':>11}")
    for backend, call, rate, median in rows:
        med = "-" if median != median else f"{median:.0f}"
        print(f"{backend:<22}{call:<13}{rate:>8.0f}{med:>14}{rate / 1000:>10.2f}x")


if __name__ == "__main__":
    main()

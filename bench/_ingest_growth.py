"""Ingest cost as one tenant grows (the ``--growth`` section of ``bench/ingest.py``).

One tenant receives many small ``MemoryPipeline.ingest`` calls (``--call-size`` messages
each), the way a user grows a tenant: the turns of the frozen conversation set
(``bench/data/conversations/conversations.json``) in order, cycled with fresh ids and
later dates until ``--calls`` calls are made. Rule-based extractor (flat extraction cost),
default (tenant-calibrated) clustering, the index the user retrieves with. Reported per
backend and embedder: the median per call of the first 20 and the last 20 calls and their
ratio (target <= 1.5x), the same for the client CPU of a call (``time.process_time``: what
the calling process spent, less moved by the machine's load than the wall time, though not
free of it on a shared VM), facts and themes at the end, themes per 1,000 facts (band 5-100),
and the machine's 1-minute load average when the row started and ended (the ratio is only
meaningful when the load did not change much between the first and the last calls).

``--preload N`` first stores N facts cheaply (vectors of the conversation turns plus a
little noise, grouped into themes of ~25 facts by session) and then times the calls on top;
the time the preload took (and, on Postgres, the index rebuild, ``ANALYZE`` and a ``VACUUM``
of the new tables, so that autovacuum does not start during the timed calls) is printed
before the row.

What grew per call and was fixed, and what still grows (HNSW inserts while the graphs are
small, themes filling up to ``max_theme_facts``), is in ``docs/ingest-at-scale.md``.
"""

from __future__ import annotations

import json
import os
import statistics
import time
import uuid
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np

from cycgraph_memory.contracts import EmbeddingProvider
from cycgraph_memory.hierarchy.extractors.rules import RuleBasedExtractor
from cycgraph_memory.hierarchy.pipeline import DEFAULT_RULE_MAX_FACTS, MemoryPipeline
from cycgraph_memory.records import Message, Provenance, SemanticFact, Theme

DATA = Path(__file__).parent / "data" / "conversations" / "conversations.json"
NS = uuid.UUID("0e4c7a52-55d8-4b6e-9d0a-18a5c0de0018")
WINDOW = 20


def make_embedder(name: str) -> EmbeddingProvider:
    """``hashing`` (384-d, built in) or ``minilm`` (all-MiniLM-L6-v2, local-embeddings)."""
    if name == "hashing":
        from cycgraph_memory.embeddings.hashing import HashingEmbeddingProvider

        return HashingEmbeddingProvider(dimensions=384)
    import torch  # the local-embeddings extra brings it

    # One inference thread: on 2 shared cores more threads only contend with the database.
    torch.set_num_threads(1)
    from cycgraph_memory.embeddings.local import LocalEmbeddingProvider

    return LocalEmbeddingProvider()


def _turns() -> list[dict[str, Any]]:
    data = json.loads(DATA.read_text(encoding="utf-8"))
    return [t for c in data["conversations"] for s in c["sessions"] for t in s["turns"]]


def growth_calls(calls: int, size: int) -> list[list[Message]]:
    """``calls`` batches of ``size`` messages: the turns in order, cycled with new ids/dates."""
    from datetime import datetime

    turns = _turns()
    out: list[list[Message]] = []
    batch: list[Message] = []
    cycle = 0
    while len(out) < calls:
        for t in turns:
            batch.append(
                Message(
                    id=uuid.uuid5(NS, f"{cycle}:{t['id']}"),
                    role=t["role"],
                    content=t["text"],
                    timestamp=datetime.fromisoformat(t["timestamp"])
                    + timedelta(days=400 * cycle),
                    metadata={"name": t["name"]},
                )
            )
            if len(batch) == size:
                out.append(batch)
                batch = []
                if len(out) == calls:
                    break
        cycle += 1
    return out


async def preload(
    store: Any, index: Any, embedder: EmbeddingProvider, n: int, seed: int = 18
) -> None:
    """Store ``n`` facts and their themes in bulk (no pipeline), cheaply and reproducibly."""
    from datetime import UTC, datetime

    turns = _turns()
    base = np.asarray(await embedder.embed([t["text"] for t in turns]), dtype=np.float64)
    base /= np.maximum(np.linalg.norm(base, axis=1, keepdims=True), 1e-12)
    rng = np.random.default_rng(seed)
    prov = Provenance(source="system", created_at=datetime(2020, 1, 1, tzinfo=UTC))
    t0 = datetime(2020, 1, 1, tzinfo=UTC)
    per_theme = 25
    for start in range(0, n, 5000):
        count = min(5000, n - start)
        picks = (np.arange(start, start + count)) % len(turns)
        noise = rng.normal(scale=0.15 / np.sqrt(base.shape[1]), size=(count, base.shape[1]))
        vecs = base[picks] + noise
        vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
        facts: list[SemanticFact] = []
        themes: list[Theme] = []
        for j in range(count):
            i = start + j
            t = turns[int(picks[j])]
            facts.append(SemanticFact(
                id=uuid.uuid5(NS, f"pre-fact:{i}"),
                content=f"{t['name']} (archive {i // len(turns)}): {t['text']}"[:2000],
                embedding=vecs[j].tolist(),
                theme_id=uuid.uuid5(NS, f"pre-theme:{i // per_theme}"),
                valid_from=t0 + timedelta(minutes=i),
                provenance=prov,
            ))
        for k in range(0, count, per_theme):
            members = facts[k : k + per_theme]
            centroid = vecs[k : k + per_theme].mean(axis=0)
            centroid /= np.linalg.norm(centroid)
            themes.append(Theme(
                id=members[0].theme_id or uuid.uuid4(),
                label=members[0].content[:60],
                fact_ids=[f.id for f in members],
                embedding=centroid.tolist(),
                provenance=prov,
            ))
        async with store.transaction():
            await store.put_themes(themes)
            await store.put_facts(facts)
        upsert = getattr(index, "upsert_many", None)
        if upsert is not None:
            upsert([*themes, *facts])


def _median_ms(values: Sequence[float]) -> float:
    return 1000 * statistics.median(values)


async def drive_growth(
    store: Any, index: Any, embedder: EmbeddingProvider, calls: int, size: int
) -> dict[str, Any]:
    """Time ``calls`` ingest calls into one tenant; return the figures."""
    pipeline = MemoryPipeline(
        store, embedder=embedder, index=index,
        extractor=RuleBasedExtractor(max_facts=DEFAULT_RULE_MAX_FACTS),
    )
    batches = growth_calls(calls, size)
    load_before = os.getloadavg()[0]
    times: list[float] = []
    cpu: list[float] = []
    facts = 0
    for batch in batches:
        c0, t0 = time.process_time(), time.perf_counter()
        report = await pipeline.ingest(batch)
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
        facts += len(report.fact_ids)
    live_facts = len(await store.find_facts())
    live_themes = len(await store.list_themes())
    calibration = pipeline.calibrator.last if pipeline.calibrator is not None else None
    first, last = _median_ms(times[:WINDOW]), _median_ms(times[-WINDOW:])
    cpu_first, cpu_last = _median_ms(cpu[:WINDOW]), _median_ms(cpu[-WINDOW:])
    return {
        "calls": len(times), "first_ms": first, "last_ms": last, "ratio": last / first,
        "cpu_first_ms": cpu_first, "cpu_last_ms": cpu_last,
        "cpu_ratio": cpu_last / cpu_first if cpu_first else float("nan"),
        "facts": live_facts, "themes": live_themes,
        "themes_per_1000": 1000 * live_themes / max(live_facts, 1),
        "assign": None if calibration is None else calibration.assignment_threshold,
        "merge": None if calibration is None else calibration.merge_threshold,
        "load": (load_before, os.getloadavg()[0]),
    }


async def growth_memory(embedder_name: str, calls: int, size: int, pre: int) -> dict[str, Any]:
    """The growth run on the in-memory store and index."""
    from cycgraph_memory.inmemory import InMemoryMemoryIndex, InMemoryMemoryStore

    embedder = make_embedder(embedder_name)
    store = InMemoryMemoryStore()
    index = InMemoryMemoryIndex(expected_dimensions=embedder.dimensions,
                                silence_scale_warning=True)
    if pre:
        t0 = time.perf_counter()
        await preload(store, index, embedder, pre)
        print(f"in memory: preloaded {pre} facts in {time.perf_counter() - t0:.0f} s", flush=True)
    return await drive_growth(store, index, embedder, calls, size)


async def growth_postgres(
    embedder_name: str, calls: int, size: int, pre: int, dsn: str | None
) -> dict[str, Any]:
    """The growth run on Postgres (``dsn``: an existing server; else an embedded one)."""
    import secrets
    import tempfile

    from sqlalchemy import make_url, text

    from cycgraph_memory.postgres import (
        PostgresMemoryIndex,
        PostgresMemoryStore,
        asyncpg_url,
        create_engine_from_dsn,
        start_embedded_server,
        upgrade,
    )

    embedder = make_embedder(embedder_name)
    with tempfile.TemporaryDirectory(prefix="cycgraph-growth-") as tmp:
        server = None
        if dsn is None:
            server = start_embedded_server(Path(tmp) / "pg")
            dsn = server.dsn
        admin = create_engine_from_dsn(dsn, isolation_level="AUTOCOMMIT")
        name = f"bench_growth_{secrets.token_hex(4)}"
        async with admin.connect() as conn:
            await conn.execute(text(f"CREATE DATABASE {name}"))
        engine = create_engine_from_dsn(make_url(asyncpg_url(dsn)).set(database=name))
        try:
            await upgrade(engine, embedding_dim=embedder.dimensions)
            store = PostgresMemoryStore(engine, tenant_id="growth")
            index = PostgresMemoryIndex(engine, tenant_id="growth")
            if pre:
                t0 = time.perf_counter()
                await preload(store, index, embedder, pre)
                loaded = time.perf_counter() - t0
                await index.rebuild(analyze=True)
                # Vacuumed, as a long-lived database's tables are: otherwise autovacuum of
                # the freshly loaded tables (an HNSW index scan per vacuum) lands at a
                # random point of the timed calls.
                vacuum = create_engine_from_dsn(
                    make_url(asyncpg_url(dsn)).set(database=name), isolation_level="AUTOCOMMIT"
                )
                try:
                    async with vacuum.connect() as conn:
                        await conn.execute(text("VACUUM (ANALYZE)"))
                finally:
                    await vacuum.dispose()
                print(f"postgres: preloaded {pre} facts in {loaded:.0f} s, index rebuild, "
                      f"analyze and vacuum {time.perf_counter() - t0 - loaded:.0f} s",
                      flush=True)
            return await drive_growth(store, index, embedder, calls, size)
        finally:
            await engine.dispose()
            async with admin.connect() as conn:
                await conn.execute(text(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
            await admin.dispose()
            stop = getattr(server, "stop", None)
            if stop is not None:
                stop()


def print_growth(rows: list[tuple[str, str, int, dict[str, Any]]], size: int) -> None:
    """The table of the growth section."""
    print(f"\ningest as a tenant grows: calls of {size} messages, median per call "
          f"(first {WINDOW} vs last {WINDOW}); target last/first <= 1.5x; themes band 5-100")
    print(f"{'backend':<11}{'embedder':<10}{'preload':>8}{'calls':>6}{'first ms':>10}"
          f"{'last ms':>9}{'ratio':>7}{'CPU first':>10}{'CPU last':>9}{'CPU ratio':>10}"
          f"{'facts':>8}{'themes':>8}{'/1000':>7}{'assign':>8}"
          f"{'load 1m':>12}")
    for backend, emb, pre, r in rows:
        assign = "-" if r["assign"] is None else f"{r['assign']:.3f}"
        print(f"{backend:<11}{emb:<10}{pre:>8}{r['calls']:>6}{r['first_ms']:>10.0f}"
              f"{r['last_ms']:>9.0f}{r['ratio']:>6.2f}x{r['cpu_first_ms']:>10.0f}"
              f"{r['cpu_last_ms']:>9.0f}{r['cpu_ratio']:>9.2f}x{r['facts']:>8}{r['themes']:>8}"
              f"{r['themes_per_1000']:>7.1f}{assign:>8}"
              f"{r['load'][0]:>6.1f}-{r['load'][1]:<5.1f}")

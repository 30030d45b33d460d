"""Soak: N concurrent clients for T seconds against an embedded Postgres server.

Every client loops over a weighted mix of operations on ONE shared tenant (the contended
case), each through the public API with the default retry policy:

* ``ingest``: ``MemoryPipeline.ingest`` of 6 fresh messages (10% of the time a batch some
  client already ingested, which must add nothing);
* ``put_facts``: a bulk upsert of 20 facts drawn from a shared pool of ids (overlapping,
  unordered: the deadlock-prone case);
* ``touch``: ``touch_facts`` on 10 ids of a second pool that is written once up front (so
  every access count is predictable);
* retrieval: ``search_facts`` (HNSW kNN), ``search_episodes``, ``find_facts(tags=...)``
  (GIN), ``get_facts`` (batch), ``list_themes``.

* ``retrieve_memory`` by every strategy: entity (``entity_ids`` of stored entities),
  hybrid (text + embedding), tags; ``retrieve_gated_lessons``;
* ``record_outcome``: a ``PostgresOutcomeLedger`` run outcome naming 3 pool facts.

A maintenance task runs a consolidation pass (``MemoryConsolidator.consolidate``) and a
retention-gate pass (``evaluate_retention``) every ``--pass-every`` seconds (default 20),
both through their exclusive passes. Consolidation legitimately invalidates duplicates, so
acknowledged facts are reconciled as present (live or invalidated), never lost.

At the end the run is reconciled against the database: every acknowledged message is
stored exactly once, every acknowledged fact upsert is present, every fact's
``access_count`` equals the number of acknowledged touches that named it, and every live
fact with a theme is listed by exactly that live theme and by no other.

Usage: python bench/soak.py [--clients 16] [--seconds 120] [--seed 0] [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import random
import statistics
import tempfile
import time
import uuid
from collections import Counter, defaultdict
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import text

from cycgraph_memory import Message, Provenance, RunOutcome, SemanticFact
from cycgraph_memory.consolidation import MemoryConsolidator
from cycgraph_memory.demo import load_sample_messages
from cycgraph_memory.embeddings.hashing import HashingEmbeddingProvider
from cycgraph_memory.hierarchy.pipeline import MemoryPipeline
from cycgraph_memory.postgres import (
    PostgresMemoryIndex,
    PostgresMemoryStore,
    PostgresOutcomeLedger,
    create_engine_from_dsn,
    start_embedded_server,
    upgrade,
)
from cycgraph_memory.retention import evaluate_retention
from cycgraph_memory.retrieval import retrieve_gated_lessons, retrieve_memory

DIM = 64
TENANT = "soak"
POOL = 400  # shared fact ids for upserts
TOUCH_POOL = 200  # facts written once, then only touched
WEIGHTS = {
    "ingest": 20,
    "put_facts": 15,
    "touch": 15,
    "search_facts": 15,
    "search_episodes": 8,
    "find_facts_tags": 10,
    "get_facts": 10,
    "list_themes": 7,
    "retrieve_entity": 6,
    "retrieve_hybrid": 8,
    "retrieve_tags": 6,
    "gated_lessons": 4,
    "record_outcome": 6,
}
TAGS = ["lesson", "ops", "billing", "infra", "people"]


class RetryCounter(logging.Handler):
    """Counts the retries the library logged (deadlocks, serialization failures, ...)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.retries: Counter[str] = Counter()

    def emit(self, record: logging.LogRecord) -> None:
        name, error = record.args[0], record.args[1]  # type: ignore[index]
        self.retries[f"{name}: {error}"] += 1


class Ledger:
    """What the clients were told succeeded (the reconciliation's ground truth)."""

    def __init__(self) -> None:
        self.messages: set[uuid.UUID] = set()
        self.batches: list[list[Message]] = []
        self.upserted: set[uuid.UUID] = set()
        self.touches: Counter[uuid.UUID] = Counter()
        self.latency: dict[str, list[float]] = defaultdict(list)
        self.errors: Counter[str] = Counter()
        self.outcomes: set[str] = set()
        self.passes: Counter[str] = Counter()


def _fresh_batch(rng: random.Random, serial: int) -> list[Message]:
    sample = load_sample_messages()
    start = rng.randrange(0, len(sample) - 6)
    base = datetime(2026, 1, 1, tzinfo=UTC) + timedelta(hours=serial)
    return [
        m.model_copy(update={"id": uuid.uuid4(), "timestamp": base + timedelta(seconds=30 * i)})
        for i, m in enumerate(sample[start : start + 6])
    ]


def _fact(fid: uuid.UUID, rng: random.Random) -> SemanticFact:
    vec = [rng.gauss(0.0, 1.0) for _ in range(DIM)]
    return SemanticFact(
        id=fid,
        content=f"pooled fact {fid.hex[:8]} v{rng.randrange(1000)}",
        embedding=vec,
        tags=[rng.choice(TAGS)],
        provenance=Provenance(source="system", created_at=datetime(2026, 1, 1, tzinfo=UTC)),
        valid_from=datetime(2026, 1, 1, tzinfo=UTC),
    )


async def client(
    cid: int, engine: Any, ledger: Ledger, deadline: float, seed: int, serials: list[int]
) -> None:
    rng = random.Random(seed * 1000 + cid)
    store = PostgresMemoryStore(engine, tenant_id=TENANT)
    index = PostgresMemoryIndex(engine, tenant_id=TENANT)
    pipeline = MemoryPipeline(store, embedder=HashingEmbeddingProvider(dimensions=DIM))
    embedder = HashingEmbeddingProvider(dimensions=DIM)
    pool = [uuid.UUID(int=i + 1) for i in range(POOL)]
    touch_pool = [uuid.UUID(int=100_000 + i) for i in range(TOUCH_POOL)]
    outcomes = PostgresOutcomeLedger(engine, tenant_id=TENANT)
    ops, weights = zip(*WEIGHTS.items(), strict=True)
    while time.perf_counter() < deadline:
        op = rng.choices(ops, weights)[0]
        started = time.perf_counter()
        try:
            if op == "ingest":
                if ledger.batches and rng.random() < 0.1:
                    batch = rng.choice(ledger.batches)
                else:
                    serials[0] += 1
                    batch = _fresh_batch(rng, serials[0])
                await pipeline.ingest(batch)
                ledger.messages.update(m.id for m in batch)
                ledger.batches.append(batch)
            elif op == "put_facts":
                ids = rng.sample(pool, 20)  # unordered, overlapping between clients
                await store.put_facts([_fact(i, rng) for i in ids])
                ledger.upserted.update(ids)
            elif op == "touch":
                ids = rng.sample(touch_pool, 10)
                await store.touch_facts(ids)
                ledger.touches.update(ids)
            elif op == "search_facts":
                (q,) = await embedder.embed([rng.choice(["billing", "redis cache", "oncall"])])
                await index.search_facts(q, limit=10)
            elif op == "search_episodes":
                (q,) = await embedder.embed(["planning meeting notes"])
                await index.search_episodes(q, limit=5)
            elif op == "find_facts_tags":
                await store.find_facts(tags=[rng.choice(TAGS)], limit=20)
            elif op == "get_facts":
                await store.get_facts(rng.sample(pool, 50))
            elif op == "list_themes":
                await store.list_themes(limit=50)
            elif op == "retrieve_entity":
                entities = await store.find_entities(limit=20)
                ids = [e.id for e in rng.sample(entities, min(2, len(entities)))]
                if ids:
                    await retrieve_memory(store, index, {"entity_ids": ids, "limit": 10})
            elif op == "retrieve_hybrid":
                await retrieve_memory(
                    store,
                    index,
                    {"text": rng.choice(["billing", "redis cache", "oncall"]), "limit": 10},
                    embedder=embedder,
                    mode="hybrid",
                )
            elif op == "retrieve_tags":
                await retrieve_memory(store, index, {"tags": [rng.choice(TAGS)], "limit": 10})
            elif op == "gated_lessons":
                await retrieve_gated_lessons(store, tags=[rng.choice(TAGS)])
            elif op == "record_outcome":
                run_id = f"run-{cid}-{rng.getrandbits(64):x}"
                await outcomes.record_outcome(
                    RunOutcome(run_id=run_id, score=rng.random(), fact_ids=rng.sample(pool, 3))
                )
                ledger.outcomes.add(run_id)
        except Exception as exc:  # the soak counts every failure by type
            ledger.errors[f"{op}: {type(exc).__name__}"] += 1
            continue
        ledger.latency[op].append(time.perf_counter() - started)


async def maintenance(engine: Any, ledger: Ledger, deadline: float, every: float) -> None:
    """A consolidation pass and a retention-gate pass every ``every`` seconds."""
    store = PostgresMemoryStore(engine, tenant_id=TENANT)
    index = PostgresMemoryIndex(engine, tenant_id=TENANT)
    outcomes = PostgresOutcomeLedger(engine, tenant_id=TENANT)
    while time.perf_counter() + every < deadline:
        await asyncio.sleep(every)
        for op in ("consolidation_pass", "gate_pass"):
            started = time.perf_counter()
            try:
                if op == "consolidation_pass":
                    await MemoryConsolidator(store, index).consolidate()
                else:
                    await evaluate_retention(store, outcomes)
            except Exception as exc:  # counted like the clients' failures
                ledger.errors[f"{op}: {type(exc).__name__}"] += 1
                continue
            ledger.latency[op].append(time.perf_counter() - started)


async def reconcile(engine: Any, ledger: Ledger) -> dict[str, int]:
    store = PostgresMemoryStore(engine, tenant_id=TENANT)
    async with engine.connect() as conn:
        counts = dict(
            (row[0], row[1])
            for row in await conn.execute(
                text("SELECT id, count(*) FROM episode_messages WHERE tenant_id = :t GROUP BY id"),
                {"t": TENANT},
            )
        )
        runs = Counter(
            row[0]
            for row in await conn.execute(
                text("SELECT run_id FROM outcome_runs WHERE tenant_id = :t"), {"t": TENANT}
            )
        )
    facts = await store.find_facts(include_invalidated=True)
    by_id = {f.id: f for f in facts}
    live_themes = await store.list_themes()
    claims: dict[uuid.UUID, list[uuid.UUID]] = defaultdict(list)
    for theme in live_themes:
        for fid in theme.fact_ids:
            claims[fid].append(theme.id)
    live_theme_ids = {t.id for t in live_themes}
    theme_problems = 0
    for f in facts:
        if f.invalidated_by is not None or f.theme_id is None:
            continue
        if f.theme_id not in live_theme_ids or claims.get(f.id) != [f.theme_id]:
            theme_problems += 1
    return {
        "acked_messages": len(ledger.messages),
        "messages_missing": sum(1 for m in ledger.messages if m not in counts),
        "messages_duplicated": sum(1 for c in counts.values() if c > 1),
        "messages_unacknowledged": sum(1 for m in counts if m not in ledger.messages),
        "acked_fact_upserts": len(ledger.upserted),
        "facts_missing": sum(1 for i in ledger.upserted if i not in by_id),
        "acked_touches": sum(ledger.touches.values()),
        "access_count_mismatches": sum(
            1
            for i in (uuid.UUID(int=100_000 + k) for k in range(TOUCH_POOL))
            if i not in by_id or by_id[i].access_count != ledger.touches[i]
        ),
        "facts_invalidated": sum(1 for f in facts if f.invalidated_by is not None),
        "acked_outcomes": len(ledger.outcomes),
        "outcomes_missing": sum(1 for r in ledger.outcomes if r not in runs),
        "outcomes_duplicated": sum(1 for c in runs.values() if c > 1),
        "facts_total": len(facts),
        "live_themes": len(live_themes),
        "theme_inconsistencies": theme_problems,
    }


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


async def main(args: argparse.Namespace) -> dict[str, Any]:
    retries = RetryCounter()
    retry_log = logging.getLogger("cycgraph_memory.retry")
    retry_log.addHandler(retries)
    retry_log.propagate = False
    with tempfile.TemporaryDirectory(prefix="cycgraph-soak-") as tmp:
        server = start_embedded_server(tmp)
        try:
            admin = create_engine_from_dsn(server.dsn, isolation_level="AUTOCOMMIT")
            async with admin.connect() as conn:
                await conn.execute(text('CREATE DATABASE "soak"'))
            await admin.dispose()
            dsn = server.dsn_for("soak")
            await upgrade(dsn, embedding_dim=DIM)
            engine = create_engine_from_dsn(
                dsn, pool_size=args.clients, max_overflow=args.clients
            )
            setup = random.Random(args.seed)
            await PostgresMemoryStore(engine, tenant_id=TENANT).put_facts(
                [_fact(uuid.UUID(int=100_000 + k), setup) for k in range(TOUCH_POOL)]
            )
            ledger = Ledger()
            serials = [0]
            started = time.perf_counter()
            deadline = started + args.seconds
            await asyncio.gather(
                maintenance(engine, ledger, deadline, args.pass_every),
                *(client(c, engine, ledger, deadline, args.seed, serials)
                  for c in range(args.clients)),
            )
            elapsed = time.perf_counter() - started
            report = await reconcile(engine, ledger)
            await engine.dispose()
        finally:
            server.stop()
    total = sum(len(v) for v in ledger.latency.values())
    per_op = {
        op: {
            "count": len(v),
            "p50_ms": round(statistics.median(v) * 1000, 2),
            "p99_ms": round(_pct(v, 0.99), 2),
        }
        for op, v in sorted(ledger.latency.items())
    }
    result = {
        "clients": args.clients,
        "seconds": round(elapsed, 1),
        "ops": total,
        "throughput_ops_s": round(total / elapsed, 1),
        "per_op": per_op,
        "errors": dict(ledger.errors),
        "retries": dict(retries.retries),
        "reconciliation": report,
    }
    return result


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=120.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--pass-every", type=float, default=20.0)
    parser.add_argument("--json", type=str, default=None)
    cli = parser.parse_args()
    out = asyncio.run(main(cli))
    print(json.dumps(out, indent=2))
    if cli.json:
        with open(cli.json, "w", encoding="utf-8") as fh:
            json.dump(out, fh, indent=2)

"""Retrieval at scale: the reference workload in one tenant, and many Zipf-sized tenants.

Two benches (issue 18), both against a Postgres server given by ``--dsn`` (a database
``bench_scale_<scale>`` is created on it, migrated, loaded and dropped at the end unless
``--keep``), and the reference one also in memory:

``--scale reference --n 100000``
    The reference workload (``bench/reference_workload.py``) in one tenant. Strategies:
    ``vector`` (``mode="vector"``, the reference embedding query, limit 20), ``hybrid`` and
    ``text`` (the embedding query with the text of its own fact, limit 10,
    ``min_similarity=0``, as ``bench/hybrid_latency.py``), ``tags`` (``["lesson"]``, limit 10)
    and ``entity`` (two entities, 2 hops, limit 20). In memory too (``--backend both``).

``--scale tenants --total 1000000 --tenants 1000``
    ``total`` facts across ``tenants`` tenants whose sizes follow Zipf's law (tenant ``k``
    holds ~``total / (k * H)`` facts, ``H`` the harmonic number), each generated like the
    reference workload (topic centres, facts near them, 2 entities per fact, themes, edges)
    from its own seed. The HNSW indexes are dropped before the load and built after it.
    Figures per tenant-size class (``<1k``, ``1k-10k``, ``>=10k`` facts); strategies
    ``vector`` (limit 20, ``min_similarity=0.5``), ``hybrid`` (limit 10), ``text`` (the
    query's words and an entity name, limit 10), ``tags`` and ``entity`` (2 hops).

Printed per strategy: p50 / p95 latency (ms), statements per call (a
``before_cursor_execute`` listener), client CPU per call (``time.process_time``, p50), the
result size; kNN recall@10 against the exact nearest ten (``enable_indexscan = off``) of
``search_facts`` and, for the tenants bench, of the fact kNN the strategies run
(``hierarchical_candidates``' direct hits); the floor: ``SELECT 1`` in its own session
(p50), the least any call costs on this machine at the time; and the load average.

A tenant below ``PostgresMemoryIndex.exact_below`` documents (default 50,000) holding less
than half of the table is searched exactly, a bigger one through HNSW with ``ef_search``
scaled by its share (``docs/scaling.md``). After the load (or on ``--reuse``) the tenants
bench gives every tenant of at least ``--dedicate-above`` facts (default 10,000; 0: none)
dedicated vector indexes, as an operator would (``dedicate_large_tenants``): those tenants
walk their own HNSW graphs, so the class ``>=10k`` does not take the exact plan; the
classes ``<1k`` and ``1k-10k`` do.

    python bench/scale.py --dsn postgresql://... --scale reference --n 100000
    python bench/scale.py --dsn postgresql://... --scale tenants --total 200000 --tenants 200
    # load once and keep, then query again later (e.g. after a change) without reloading:
    python bench/scale.py --dsn ... --scale tenants --total 1000000 --tenants 1000 --keep
    python bench/scale.py --dsn ... --scale tenants --total 1000000 --tenants 1000 --reuse
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse
import asyncio
import gc
import math
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from cycgraph_memory import (
    Entity,
    MemoryQuery,
    Provenance,
    Relationship,
    SemanticFact,
    Theme,
    retrieve_memory,
)
from reference_workload import build_facts, fact_id, generate

DIM = 384
WARMUP = 10
BASE = datetime(2025, 1, 1, tzinfo=UTC)
TAGS = ["lesson", *(f"graph:g{i}" for i in range(19))]
WORDS = ["alpha", "budget", "cache", "deploy", "engine", "filter", "gateway", "harbor",
         "index", "journal", "kernel", "ledger", "matrix", "network", "orbit", "payment",
         "queue", "render", "schema", "ticket", "upload", "vector", "widget", "yield"]


def nearest_rank(values: Sequence[float], p: float) -> float:
    """Nearest-rank percentile (``nan`` for no values)."""
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[max(1, math.ceil(p / 100 * len(ordered))) - 1]


class Counter:
    """Counts statements sent through an engine."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, *args: Any, **kwargs: Any) -> None:
        self.count += 1


@dataclass
class Figures:
    """Latencies (ms), client CPU (ms) and statements of one strategy."""

    times: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)
    statements: int = 0
    facts: int = 0

    def row(self, name: str, floor: float, target: float | None) -> str:
        n = max(1, len(self.times))
        p50 = nearest_rank(self.times, 50)
        ratio = f"{p50 / target:.2f}" if target else "-"
        return (f"| {name} | {p50:.2f} | {nearest_rank(self.times, 95):.2f} | "
                f"{nearest_rank(self.cpu, 50):.2f} | {self.statements / n:.1f} | "
                f"{self.facts / n:.1f} | {p50 / floor:.1f} | {ratio} |")


HEADER = ("| strategy | p50 ms | p95 ms | client CPU p50 ms | statements/call | facts/call "
          "| p50 / floor | p50 / target |\n|---|---|---|---|---|---|---|---|")
TARGETS = {"hybrid": 30.0, "vector": 15.0, "tags": 3.0, "entity": 15.0}


async def timed(
    calls: Sequence[Callable[[], Any]], counter: Counter | None, figures: Figures
) -> None:
    """Run the calls (the first ``WARMUP`` untimed) and record their figures."""
    for call in calls[:WARMUP]:
        await call()
    gc.collect()
    for call in calls[WARMUP:]:
        before = counter.count if counter else 0
        c0, t0 = time.process_time(), time.perf_counter()
        result = await call()
        figures.times.append((time.perf_counter() - t0) * 1000)
        figures.cpu.append((time.process_time() - c0) * 1000)
        figures.statements += (counter.count - before) if counter else 0
        figures.facts += len(result.facts)


def load_average() -> str:
    """The machine's 1 / 5 / 15-minute load averages (``uptime``)."""
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f}, {five:.2f}, {fifteen:.2f} ({os.cpu_count()} cores)"


FLOOR_CPU: list[float] = []
"""Client CPU p50 (ms) of each :func:`floor_ms` run, in order (see :func:`floor_cpu`)."""


async def floor_ms(engine: Any) -> float:
    """p50 of ``SELECT 1`` in its own session: the least one call costs here, now.

    Its client CPU p50 is kept in ``FLOOR_CPU``: the least CPU one call costs here (on
    this machine's VMs a blocked wait is itself charged some CPU, ~0.17 ms for a 15 ms
    ``asyncio.sleep``, so a call's CPU grows a little with its server time).
    """
    from sqlalchemy import text
    from sqlalchemy.ext.asyncio import async_sessionmaker

    maker = async_sessionmaker(engine, expire_on_commit=False)
    times, cpu = [], []
    for _ in range(200):
        c0, t0 = time.process_time(), time.perf_counter()
        async with maker() as session, session.begin():
            await session.execute(text("SELECT 1"))
        times.append((time.perf_counter() - t0) * 1000)
        cpu.append((time.process_time() - c0) * 1000)
    FLOOR_CPU.append(nearest_rank(cpu, 50))
    return nearest_rank(times, 50)


def floor_cpu() -> str:
    """The client CPU of the last floor run, for the printed line."""
    return f" (client CPU {FLOOR_CPU[-1]:.2f} ms)" if FLOOR_CPU else ""


# ----------------------------------------------------------------------------- database


async def create_database(dsn: str, name: str) -> str:
    """(Re)create database ``name`` on the server of ``dsn``; its DSN."""
    from sqlalchemy import text
    from sqlalchemy.engine import make_url

    from cycgraph_memory.postgres import create_engine_from_dsn

    admin = create_engine_from_dsn(dsn, isolation_level="AUTOCOMMIT")
    async with admin.connect() as conn:
        await conn.execute(text(f"DROP DATABASE IF EXISTS {name}"))
        await conn.execute(text(f"CREATE DATABASE {name}"))
    await admin.dispose()
    return make_url(dsn).set(database=name).render_as_string(hide_password=False)


def make_url_for(dsn: str, name: str) -> str:
    """The DSN of database ``name`` on the server of ``dsn``."""
    from sqlalchemy.engine import make_url

    return make_url(dsn).set(database=name).render_as_string(hide_password=False)


async def database_exists(dsn: str, name: str) -> bool:
    """Whether database ``name`` exists on the server of ``dsn``."""
    from sqlalchemy import text

    from cycgraph_memory.postgres import create_engine_from_dsn

    admin = create_engine_from_dsn(dsn, isolation_level="AUTOCOMMIT")
    async with admin.connect() as conn:
        found = (await conn.execute(
            text("SELECT 1 FROM pg_database WHERE datname = :n"), {"n": name}
        )).first()
    await admin.dispose()
    return found is not None


async def drop_database(dsn: str, name: str) -> None:
    """Drop database ``name``."""
    from sqlalchemy import text

    from cycgraph_memory.postgres import create_engine_from_dsn

    admin = create_engine_from_dsn(dsn, isolation_level="AUTOCOMMIT")
    async with admin.connect() as conn:
        await conn.execute(text(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
    await admin.dispose()


async def drop_hnsw(engine: Any) -> list[str]:
    """Drop the HNSW indexes (built again after the load); their definitions."""
    from sqlalchemy import text

    async with engine.begin() as conn:
        rows = (await conn.execute(text(
            "SELECT indexname, indexdef FROM pg_indexes "
            "WHERE schemaname = current_schema() AND indexdef ILIKE '%USING hnsw%'"
        ))).all()
        for name, _ in rows:
            await conn.execute(text(f'DROP INDEX "{name}"'))
    return [d for _, d in rows]


async def build_hnsw(dsn: str, definitions: Sequence[str]) -> float:
    """Create the HNSW indexes, then ``VACUUM (ANALYZE)``; seconds taken."""
    from sqlalchemy import text

    from cycgraph_memory.postgres import create_engine_from_dsn

    t0 = time.perf_counter()
    engine = create_engine_from_dsn(dsn, isolation_level="AUTOCOMMIT")
    async with engine.connect() as conn:
        await conn.execute(text("SET maintenance_work_mem = '4GB'"))
        for definition in definitions:
            await conn.execute(text(definition))
        await conn.execute(text("VACUUM (ANALYZE)"))
    await engine.dispose()
    return time.perf_counter() - t0


async def exact_top(engine: Any, tenant: str, vector: Sequence[float], k: int) -> list[uuid.UUID]:
    """The exact ``k`` nearest live facts of ``tenant`` (no index scan)."""
    from sqlalchemy import text

    literal = "[" + ",".join(f"{x:.9g}" for x in vector) + "]"
    async with engine.begin() as conn:
        await conn.execute(text("SET LOCAL enable_indexscan = off"))
        await conn.execute(text("SELECT set_config('cycgraph.tenant_id', :t, true)"), {"t": tenant})
        rows = await conn.execute(text(
            "SELECT id FROM facts WHERE tenant_id = :t AND invalidated_by IS NULL "
            "AND embedding IS NOT NULL ORDER BY embedding <=> CAST(:q AS vector) LIMIT :k"
        ), {"t": tenant, "q": literal, "k": k})
        return [uuid.UUID(str(r[0])) for r in rows]


async def recall_at_10(engine: Any, index: Any, tenant: str, vectors: Sequence[Any]
                       ) -> tuple[float, float]:
    """Mean recall@10 against the exact ten: of ``index.search_facts``, and of the fact
    kNN the retrieval strategies run (``hierarchical_candidates``' direct hits)."""
    total = hot = 0.0
    for vector in vectors:
        exact = set(await exact_top(engine, tenant, vector, 10))
        hits = await index.search_facts(vector, limit=10)
        total += len({h.item.id for h in hits} & exact) / max(1, len(exact))
        _, direct, _ = await index.hierarchical_candidates(
            vector, theme_limit=0, max_facts_per_theme=None, fact_limit=10,
            min_similarity=-1.0, include_invalidated=False, tags=None, exclude_tags=None,
        )
        hot += len({f.id for f in direct} & exact) / max(1, len(exact))
    n = max(1, len(vectors))
    return total / n, hot / n


# ----------------------------------------------------------------------------- reference


def reference_calls(store: Any, index: Any, w: Any, n_queries: int
                    ) -> dict[str, list[Callable[[], Any]]]:
    """The reference workload's calls per strategy."""
    emb = w.embedding_queries[:n_queries]
    texts = {j: build_facts(w, j, j + 1)[0].content for _, j in emb}
    vector_q = [MemoryQuery(embedding=v, limit=20, max_hops=2, min_similarity=0.5)
                for v, _ in emb]
    fused_q = [MemoryQuery(embedding=v, text=texts[j], limit=10, min_similarity=0.0)
               for v, j in emb]
    tags_q = MemoryQuery(tags=["lesson"], limit=10, max_hops=2, min_similarity=0.5)
    entity_q = [MemoryQuery(entity_ids=[a, b], max_hops=2, limit=20, min_similarity=0.5)
                for a, b in w.entity_queries[:n_queries]]

    def call(q: MemoryQuery, mode: str | None = None) -> Callable[[], Any]:
        return lambda: retrieve_memory(store, index, q, mode=mode)  # type: ignore[arg-type]

    return {
        "vector": [call(q, "vector") for q in vector_q],
        "hybrid": [call(q, "hybrid") for q in fused_q],
        "text": [call(q, "text") for q in fused_q],
        "tags": [call(tags_q) for _ in range(n_queries)],
        "entity": [call(q) for q in entity_q],
    }


async def load_reference(store: Any, w: Any, *, bulk: bool = False) -> float:
    """Load the workload (Postgres with ``bulk``: ``bulk_import``, COPY in batches)."""
    t0 = time.perf_counter()
    if bulk:
        from cycgraph_memory.postgres import bulk_import

        await bulk_import(store, entities=w.entities, themes=w.themes)
        for i in range(0, w.n, 20_000):
            await bulk_import(store, facts=build_facts(w, i, min(w.n, i + 20_000)))
        await bulk_import(store, relationships=w.relationships)
        return time.perf_counter() - t0
    await store.put_entities(w.entities)
    await store.put_themes(w.themes)
    for i in range(0, w.n, 5_000):
        await store.put_facts(build_facts(w, i, min(w.n, i + 5_000)))
    await store.put_relationships(w.relationships)
    return time.perf_counter() - t0


def exact_memory_top(matrix: np.ndarray, vector: Sequence[float], k: int) -> list[int]:
    sims = matrix @ np.asarray(vector, dtype=np.float32)
    top = np.argpartition(-sims, k)[:k]
    return [int(i) for i in top[np.argsort(-sims[top])]]


async def bench_reference(args: argparse.Namespace) -> None:
    w = generate(args.n, records=False)
    assert w.fact_embeddings is not None
    matrix = w.fact_embeddings.astype(np.float32)
    recall_vectors = [v for v, _ in w.embedding_queries[: args.recall_queries]]
    exact_ids = [[fact_id(i) for i in exact_memory_top(matrix, v, 10)] for v in recall_vectors]
    del matrix
    print(f"# reference workload, N = {args.n:,} facts in one tenant")
    if args.backend in ("memory", "both"):
        from cycgraph_memory import InMemoryMemoryIndex, InMemoryMemoryStore

        store = InMemoryMemoryStore(expected_dimensions=DIM)
        index = InMemoryMemoryIndex(expected_dimensions=DIM)
        seconds = await load_reference(store, w)
        await index.rebuild(store)
        gc.collect()
        recall = 0.0
        for v, exact in zip(recall_vectors, exact_ids, strict=True):
            hits = await index.search_facts(v, limit=10)
            recall += len({h.item.id for h in hits} & set(exact)) / 10
        print(f"\n## in memory (loaded in {seconds:.0f} s); kNN recall@10 "
              f"{recall / len(recall_vectors):.3f}\n")
        print(HEADER)
        for name, calls in reference_calls(store, index, w, args.queries + WARMUP).items():
            figures = Figures()
            await timed(calls, None, figures)
            print(figures.row(name, 1.0, TARGETS.get(name)).replace(
                f"| {nearest_rank(figures.times, 50) / 1.0:.1f} |", "| - |", 1))
        del store, index
        gc.collect()
    if args.backend in ("postgres", "both"):
        await _reference_postgres(args, w, recall_vectors, exact_ids)


async def _reference_postgres(args: argparse.Namespace, w: Any, recall_vectors: list[Any],
                              exact_ids: list[list[uuid.UUID]]) -> None:
    from sqlalchemy import event

    from cycgraph_memory.postgres import (
        PostgresMemoryIndex,
        PostgresMemoryStore,
        create_engine_from_dsn,
        upgrade,
    )

    name = args.db or "bench_scale_reference"
    if args.reuse:
        from sqlalchemy.engine import make_url

        dsn = make_url(args.dsn).set(database=name).render_as_string(hide_password=False)
    else:
        dsn = await create_database(args.dsn, name)
    engine = create_engine_from_dsn(dsn)
    try:
        store, index = PostgresMemoryStore(engine), PostgresMemoryIndex(engine)
        seconds = build = 0.0
        # A reused database (a --keep run's) is brought to this code's head revision too.
        await upgrade(engine, embedding_dim=DIM)
        if not args.reuse:
            definitions = await drop_hnsw(engine)
            seconds = await load_reference(store, w, bulk=True)
            build = await build_hnsw(dsn, definitions)
        gc.collect()
        recall = 0.0
        for v, exact in zip(recall_vectors, exact_ids, strict=True):
            hits = await index.search_facts(v, limit=10)
            recall += len({h.item.id for h in hits} & set(exact)) / 10
        floor = await floor_ms(engine)
        print(f"\n## Postgres (loaded in {seconds:.0f} s, HNSW built after the load in "
              f"{build:.0f} s); kNN recall@10 {recall / len(recall_vectors):.3f}; "
              f"floor SELECT 1 p50 {floor:.2f} ms{floor_cpu()}; {load_average()}\n")
        print(HEADER)
        counter = Counter()
        event.listen(engine.sync_engine, "before_cursor_execute", counter)
        for strategy, calls in reference_calls(store, index, w, args.queries + WARMUP).items():
            figures = Figures()
            await timed(calls, counter, figures)
            print(figures.row(strategy, floor, TARGETS.get(strategy)))
        after = await floor_ms(engine)
        print(f"\nfloor after the run: SELECT 1 p50 {after:.2f} ms{floor_cpu()}; "
              f"{load_average()}")
    finally:
        await engine.dispose()
        if not (args.keep or args.reuse):
            await drop_database(args.dsn, name)


# ----------------------------------------------------------------------------- tenants


def zipf_sizes(total: int, tenants: int) -> list[int]:
    """Tenant sizes ~ total / (k * H_tenants), at least 1, summing to ``total``."""
    harmonic = sum(1 / k for k in range(1, tenants + 1))
    sizes = [max(1, int(total / (k * harmonic))) for k in range(1, tenants + 1)]
    sizes[0] += total - sum(sizes)
    return sizes


def size_class(size: int) -> str:
    return "<1k" if size < 1_000 else ("1k-10k" if size < 10_000 else ">=10k")


def _unit(a: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(a, axis=-1, keepdims=True)
    result: np.ndarray = a / norms
    return result


@dataclass
class TenantData:
    """One tenant's records and queries."""

    name: str
    size: int
    entities: list[Entity]
    themes: list[Theme]
    relationships: list[Relationship]
    queries: list[tuple[list[float], str]]
    seed_entities: list[tuple[uuid.UUID, uuid.UUID]]
    facts: Callable[[int, int], list[SemanticFact]]


def tenant_data(k: int, size: int, queries: int) -> TenantData:
    """Tenant ``k``'s data, generated like the reference workload from seed ``k``."""
    rng = np.random.default_rng(1_000 + k)
    prov = Provenance(source="system", created_at=BASE)
    t_count, e_count = max(1, size // 100), max(2, size // 10)
    centres = _unit(rng.standard_normal((t_count, DIM)))
    topic = np.arange(size) % t_count
    emb = _unit(centres[topic] + (0.6 / math.sqrt(DIM)) * rng.standard_normal((size, DIM)))
    pairs = rng.integers(0, e_count, size=(size, 2))
    tag_a = rng.integers(0, len(TAGS), size=size)
    words = rng.integers(0, len(WORDS), size=(size, 3))
    ent_ids = [uuid.uuid5(uuid.NAMESPACE_OID, f"{k}:e{e}") for e in range(e_count)]
    fact_ids = [uuid.uuid5(uuid.NAMESPACE_OID, f"{k}:f{i}") for i in range(size)]

    def facts(start: int, stop: int) -> list[SemanticFact]:
        lists = emb[start:stop].tolist()
        out = []
        for j, i in enumerate(range(start, stop)):
            a, b = int(pairs[i, 0]), int(pairs[i, 1])
            if a == b:
                b = (b + 1) % e_count
            text = " ".join(WORDS[int(x)] for x in words[i])
            out.append(SemanticFact(
                id=fact_ids[i],
                content=f"Fact {i} of tenant {k} on topic {int(topic[i])}: {text} "
                        f"entity-{a} relates to entity-{b}.",
                entity_ids=[ent_ids[a], ent_ids[b]],
                embedding=lists[j], provenance=prov,
                valid_from=BASE + timedelta(minutes=i), tags=[TAGS[int(tag_a[i])]],
            ))
        return out

    themes = [
        Theme(id=uuid.uuid5(uuid.NAMESPACE_OID, f"{k}:t{t}"), label=f"topic-{t}",
              fact_ids=[fact_ids[i] for i in range(t, size, t_count)],
              embedding=_unit(emb[t::t_count].mean(axis=0)).tolist(), provenance=prov)
        for t in range(t_count)
    ]
    entities = [Entity(id=ent_ids[e], name=f"entity-{e}", entity_type="thing",
                       provenance=prov, created_at=BASE, updated_at=BASE)
                for e in range(e_count)]
    rel_pairs = rng.integers(0, e_count, size=(size // 5, 2))
    relationships = [
        Relationship(source_id=ent_ids[int(s)], target_id=ent_ids[int(d)],
                     relation_type="relates", provenance=prov,
                     valid_from=BASE - timedelta(days=int(r % 365)))
        for r, (s, d) in enumerate(rel_pairs) if s != d
    ]
    qs: list[tuple[list[float], str]] = []
    for j in rng.integers(0, size, size=queries):
        vec = _unit(emb[j] + (0.3 / math.sqrt(DIM)) * rng.standard_normal(DIM)).tolist()
        qs.append((vec, " ".join(WORDS[int(x)] for x in words[j]) + f" entity-{pairs[j, 0]}"))
    seeds = [(ent_ids[int(a)], ent_ids[int(b)])
             for a, b in rng.integers(0, e_count, size=(queries, 2))]
    return TenantData(f"t{k:04d}", size, entities, themes, relationships, qs, seeds, facts)


def tenant_calls(store: Any, index: Any, d: TenantData) -> dict[str, list[Callable[[], Any]]]:
    """One tenant's calls per strategy."""

    def call(q: MemoryQuery, mode: str | None = None) -> Callable[[], Any]:
        return lambda: retrieve_memory(store, index, q, mode=mode)  # type: ignore[arg-type]

    return {
        "vector": [call(MemoryQuery(embedding=v, limit=20, min_similarity=0.5), "vector")
                   for v, _ in d.queries],
        "hybrid": [call(MemoryQuery(embedding=v, text=t, limit=10, min_similarity=0.0),
                        "hybrid") for v, t in d.queries],
        "text": [call(MemoryQuery(text=t, limit=10), "text") for _, t in d.queries],
        "tags": [call(MemoryQuery(tags=["lesson"], limit=10)) for _ in d.queries],
        "entity": [call(MemoryQuery(entity_ids=[a, b], max_hops=2, limit=20))
                   for a, b in d.seed_entities],
    }


async def bench_tenants(args: argparse.Namespace) -> None:
    from sqlalchemy import event

    from cycgraph_memory.postgres import (
        PostgresMemoryIndex,
        PostgresMemoryStore,
        bulk_import,
        create_engine_from_dsn,
        upgrade,
    )
    from cycgraph_memory.postgres.tenant_indexes import (
        dedicate_large_tenants,
        list_dedicated_vector_indexes,
    )

    sizes = zipf_sizes(args.total, args.tenants)
    name = args.db or "bench_scale_tenants"
    reused = args.reuse and await database_exists(args.dsn, name)
    dsn = (make_url_for(args.dsn, name) if reused else await create_database(args.dsn, name))
    engine = create_engine_from_dsn(dsn)
    # Which tenants are queried: up to ``per_class`` of each size class, spread out.
    classes: dict[str, list[int]] = {}
    for k, size in enumerate(sizes):
        classes.setdefault(size_class(size), []).append(k)
    queried = {c: ks[:: max(1, len(ks) // args.per_class)][: args.per_class]
               for c, ks in classes.items()}
    per_tenant = WARMUP + args.queries // args.per_class + 1
    try:
        await upgrade(engine, embedding_dim=DIM)
        data: dict[int, TenantData] = {}
        if reused:
            # The data of a previous ``--keep`` run (same sizes and seeds): regenerate the
            # queried tenants' queries only.
            for k in sorted({k for ks in queried.values() for k in ks}):
                data[k] = tenant_data(k, sizes[k], per_tenant)
            print(f"\n# reusing database {name} ({args.total:,} facts across "
                  f"{args.tenants:,} tenants, Zipf sizes {sizes[0]:,} .. {sizes[-1]:,})")
        else:
            definitions = await drop_hnsw(engine)
            t0 = time.perf_counter()
            for k, size in enumerate(sizes):
                d = tenant_data(k, size, per_tenant)
                store = PostgresMemoryStore(engine, tenant_id=d.name)
                # The library's bulk path (COPY, validated, one transaction per batch); the
                # HNSW indexes were dropped above and are built once after every tenant.
                await bulk_import(
                    store, entities=d.entities, themes=d.themes, facts=d.facts(0, size),
                    relationships=d.relationships, batch_size=args.batch_size,
                )
                if any(k in ks for ks in queried.values()):
                    d.entities, d.themes, d.relationships = [], [], []
                    data[k] = d
                if k % 50 == 0:
                    print(f"  loaded {k + 1} tenants, {sum(sizes[: k + 1]):,} facts, "
                          f"{time.perf_counter() - t0:.0f} s", flush=True)
            seconds = time.perf_counter() - t0
            build = await build_hnsw(dsn, definitions)
            records = sum(sizes) + sum(max(2, z // 10) + max(1, z // 100) for z in sizes)
            print(f"\n# {args.total:,} facts across {args.tenants:,} tenants (Zipf sizes "
                  f"{sizes[0]:,} .. {sizes[-1]:,}); loaded in {seconds:.0f} s "
                  f"(~{records / seconds:,.0f} facts+entities+themes/s, edges besides), "
                  f"HNSW built after the load in {build:.0f} s")
        if args.dedicate_above:
            # What an operator runs after a load (like ANALYZE): the tenants of at least
            # this many facts get HNSW indexes of their own (idempotent: a reused database
            # keeps the ones built before).
            t0 = time.perf_counter()
            built = await dedicate_large_tenants(engine, min_documents=args.dedicate_above)
            dedicated = [d for d in await list_dedicated_vector_indexes(engine)
                         if d.table == "facts" and d.valid]
            print(f"# dedicated vector indexes: {len(dedicated)} tenants of >= "
                  f"{args.dedicate_above:,} facts ({sum(map(len, built.values()))} indexes "
                  f"built now in {time.perf_counter() - t0:.0f} s)")
        floor = await floor_ms(engine)
        print(f"floor SELECT 1 p50 {floor:.2f} ms{floor_cpu()}; {load_average()}\n")
        counter = Counter()
        event.listen(engine.sync_engine, "before_cursor_execute", counter)
        print("| class | tenants (sizes) | strategy | p50 ms | p95 ms | client CPU p50 ms "
              "| statements/call | facts/call | p50 / floor | p50 / target |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        recalls: dict[str, tuple[float, float]] = {}
        for cls in ("<1k", "1k-10k", ">=10k"):
            ks = queried.get(cls, [])
            if not ks:
                continue
            figures = {s: Figures() for s in ("vector", "hybrid", "text", "tags", "entity")}
            recall = hot = 0.0
            for k in ks:
                d = data[k]
                store = PostgresMemoryStore(engine, tenant_id=d.name)
                index = PostgresMemoryIndex(engine, tenant_id=d.name)
                calls = tenant_calls(store, index, d)
                for strategy, cs in calls.items():
                    await timed(cs, counter, figures[strategy])
                r, h = await recall_at_10(
                    engine, index, d.name, [v for v, _ in d.queries[: args.recall_queries]]
                )
                recall, hot = recall + r, hot + h
            recalls[cls] = (recall / len(ks), hot / len(ks))
            label = f"{len(ks)} ({', '.join(f'{sizes[k]:,}' for k in ks)})"
            for strategy, f in figures.items():
                print(f"| {cls} | {label} " + f.row(strategy, floor, TARGETS.get(strategy)))
        print("\nkNN recall@10 vs exact per class (search_facts / the strategies' fact kNN): "
              + ", ".join(f"{c} {r:.3f} / {h:.3f}" for c, (r, h) in recalls.items()))
        after = await floor_ms(engine)
        print(f"floor after the run: SELECT 1 p50 {after:.2f} ms{floor_cpu()}; "
              f"{load_average()}")
    finally:
        await engine.dispose()
        if not (args.keep or reused):
            await drop_database(args.dsn, name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", default=os.environ.get("CYCGRAPH_MEMORY_DSN"))
    parser.add_argument("--scale", choices=["reference", "tenants"], default="reference")
    parser.add_argument("--backend", choices=["memory", "postgres", "both"], default="both")
    parser.add_argument("--n", type=int, default=100_000, help="reference: facts")
    parser.add_argument("--total", type=int, default=1_000_000, help="tenants: facts")
    parser.add_argument("--tenants", type=int, default=1_000)
    parser.add_argument("--per-class", type=int, default=4, help="tenants queried per class")
    parser.add_argument("--queries", type=int, default=200, help="timed calls per strategy")
    parser.add_argument("--recall-queries", type=int, default=20)
    parser.add_argument("--dedicate-above", type=int, default=10_000,
                        help="tenants: facts from which a tenant gets dedicated vector "
                             "indexes after the load (0: none)")
    parser.add_argument("--keep", action="store_true", help="keep the database")
    parser.add_argument("--db", default=None,
                        help="database name (default bench_scale_<scale>)")
    parser.add_argument("--reuse", action="store_true",
                        help="query the kept database without loading it (reference: --db; "
                             "tenants: the database a previous --keep run left, loaded when "
                             "missing)")
    parser.add_argument("--batch-size", type=int, default=5_000,
                        help="tenants: records per bulk-import transaction")
    args = parser.parse_args()
    if args.backend != "memory" and not args.dsn:
        parser.error("--dsn (or CYCGRAPH_MEMORY_DSN) is needed for Postgres")
    asyncio.run(bench_reference(args) if args.scale == "reference" else bench_tenants(args))


if __name__ == "__main__":
    main()

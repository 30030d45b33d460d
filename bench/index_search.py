"""Benchmark: InMemoryMemoryIndex.search_facts against a bare numpy floor and pure Python.

Run: ``.venv/bin/python bench/index_search.py`` (about a minute; most of it is building
100k records). Prints p50/p95 latency of ``search_facts(q, limit=20)``, the bare numpy
floor (normalised float32 matrix @ q + argpartition on the same matrix) and, at 10k, a
pure-Python cosine loop. Targets: p50/floor <= 1.5 at 100k; speed-up >= 30x at 10k.
"""

from __future__ import annotations

import asyncio
import math
import statistics
import time
import uuid
from datetime import UTC, datetime, timedelta

import numpy as np

from cycgraph_memory.inmemory import InMemoryMemoryIndex
from cycgraph_memory.records import Provenance, SemanticFact

DIM = 384
LIMIT = 20
QUERIES = 50
PY_QUERIES = 5
SEED = 7


def build_facts(n: int, rng: np.random.Generator) -> tuple[list[SemanticFact], np.ndarray]:
    """Clustered random embeddings; facts built with model_construct.

    ``SemanticFact.model_construct`` skips validation: validating 100k x 384 floats
    dominates setup time and is not what this benchmark measures.
    """
    centers = rng.standard_normal((64, DIM))
    labels = rng.integers(0, 64, size=n)
    vectors = centers[labels] + 0.5 * rng.standard_normal((n, DIM))
    base = datetime(2025, 1, 1, tzinfo=UTC)
    prov = Provenance(source="agent")
    facts = [
        SemanticFact.model_construct(
            id=uuid.UUID(int=int(rng.integers(0, 2**63)) << 64 | i),
            content=f"fact {i}",
            source_episode_ids=[],
            entity_ids=[],
            theme_id=None,
            embedding=vectors[i].tolist(),
            provenance=prov,
            valid_from=base + timedelta(seconds=i),
            valid_until=None,
            invalidated_by=None,
            access_count=0,
            last_accessed_at=None,
            tags=["lesson"] if i % 3 == 0 else [],
        )
        for i in range(n)
    ]
    return facts, vectors


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    idx = min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))
    return ordered[idx]


async def time_index(index: InMemoryMemoryIndex, queries: np.ndarray) -> list[float]:
    out = []
    for q in queries:
        qq = q.tolist()
        t0 = time.perf_counter()
        await index.search_facts(qq, limit=LIMIT)
        out.append((time.perf_counter() - t0) * 1000)
    return out


def time_floor(vectors: np.ndarray, queries: np.ndarray) -> list[float]:
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    matrix = (vectors / norms).astype(np.float32)
    n = matrix.shape[0]
    out = []
    for q in queries:
        qq = q.tolist()
        t0 = time.perf_counter()
        qv = np.asarray(qq, dtype=np.float32)
        qv /= np.linalg.norm(qv)
        scores = matrix @ qv
        top = np.argpartition(scores, n - LIMIT)[n - LIMIT :]
        top[np.argsort(-scores[top])]
        out.append((time.perf_counter() - t0) * 1000)
    return out


def py_cosine(a: list[float], b: list[float]) -> float:
    dot = na = nb = 0.0
    for x, y in zip(a, b, strict=True):
        dot += x * y
        na += x * x
        nb += y * y
    return dot / math.sqrt(na * nb) if na and nb else 0.0


def time_python(facts: list[SemanticFact], queries: np.ndarray) -> list[float]:
    out = []
    for q in queries:
        qq = q.tolist()
        t0 = time.perf_counter()
        scored = [(py_cosine(qq, f.embedding or []), f) for f in facts]
        scored.sort(key=lambda s: s[0], reverse=True)
        scored[:LIMIT]
        out.append((time.perf_counter() - t0) * 1000)
    return out


async def main() -> None:
    rng = np.random.default_rng(SEED)
    rows = []
    for n in (10_000, 100_000):
        facts, vectors = build_facts(n, rng)
        index = InMemoryMemoryIndex(expected_dimensions=DIM, silence_scale_warning=True)
        t0 = time.perf_counter()
        index.upsert_many(facts)
        build_s = time.perf_counter() - t0
        queries = rng.standard_normal((QUERIES, DIM))
        await time_index(index, queries[:5])  # warm-up
        idx_ms = await time_index(index, queries)
        floor_ms = time_floor(vectors, queries)
        p50 = statistics.median(idx_ms)
        floor = statistics.median(floor_ms)
        py = statistics.median(time_python(facts, queries[:PY_QUERIES])) if n == 10_000 else None
        rows.append((n, build_s, p50, percentile(idx_ms, 0.95), floor, p50 / floor, py))
    print(
        f"{'N':>8} | {'build s':>7} | {'p50 ms':>7} | {'p95 ms':>7} | {'floor p50':>9} | "
        f"{'p50/floor':>9} | {'py p50 ms':>9} | {'speed-up':>8}"
    )
    print("-" * 88)
    for n, build_s, p50, p95, floor, ratio, py in rows:
        py_s = f"{py:9.1f}" if py is not None else f"{'-':>9}"
        sp_s = f"{py / p50:7.0f}x" if py is not None else f"{'-':>8}"
        print(
            f"{n:>8} | {build_s:7.2f} | {p50:7.3f} | {p95:7.3f} | {floor:9.3f} | "
            f"{ratio:9.2f} | {py_s} | {sp_s}"
        )
    print(f"targets: p50/floor <= 1.5 at N=100000; speed-up >= 30x at N=10000 (limit={LIMIT})")


if __name__ == "__main__":
    asyncio.run(main())

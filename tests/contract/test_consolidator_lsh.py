"""MemoryConsolidator's LSH near-duplicate path on both backends: same plan as exact."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import numpy as np

from cycgraph_memory import MemoryConsolidator

from .factories import EMBED_DIM, at, make_fact


def clock() -> datetime:
    return at(days=100)


def planted_embeddings(n: int, seed: int) -> tuple[list[list[float]], list[tuple[int, int]]]:
    """``n`` random directions; every fifth row a copy of the previous at cosine ~0.97."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, EMBED_DIM))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    pairs = []
    for i in range(4, n, 5):
        u = rng.standard_normal(EMBED_DIM)
        u -= (u @ x[i - 1]) * x[i - 1]
        u /= np.linalg.norm(u)
        x[i] = 0.97 * x[i - 1] + np.sqrt(1 - 0.97**2) * u
        pairs.append((i - 1, i))
    return [[round(float(v), 6) for v in row] for row in x], pairs


async def test_lsh_and_exact_plan_the_same_merges(store: Any) -> None:
    embeddings, planted = planted_embeddings(80, seed=4)
    facts = [
        make_fact(content=f"fact {i}", embedding=e, valid_from=at(days=i % 7),
                  tags=["verified"] if i % 3 == 0 else [])
        for i, e in enumerate(embeddings)
    ]
    await store.put_facts(facts)
    exact = MemoryConsolidator(store, None, clock=clock, dedup_method="exact", batch_size=8)
    lsh = MemoryConsolidator(store, None, clock=clock, dedup_method="lsh", seed=3, batch_size=8)
    exact_plan = await exact.plan()
    lsh_plan = await lsh.plan()
    assert exact_plan.report is not None
    assert exact_plan.report.facts_deduped >= len(planted)
    assert lsh_plan.report == exact_plan.report
    assert lsh_plan.mutations == exact_plan.mutations
    report = await lsh.consolidate()
    assert report == exact_plan.report
    # every planted copy was merged with its original (one of the two survives)
    live = {f.id for f in await store.find_facts(limit=1000)}
    assert all((facts[a].id in live) != (facts[b].id in live) for a, b in planted)
    assert (await lsh.plan()).empty
    assert (await exact.plan()).empty

"""Pure consolidation helpers: blocked similarity scan, decay score, words, plans."""

from __future__ import annotations

import math
import uuid
from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from cycgraph_memory import InMemoryMemoryStore
from cycgraph_memory.consolidation import Delete, MutationPlan, Put, decay_score
from cycgraph_memory.consolidation.conflicts import word_overlap, words
from cycgraph_memory.consolidation.consolidator import near_duplicate_pairs
from cycgraph_memory.consolidation.plan import apply_mutations
from cycgraph_memory.records import Provenance, SemanticFact


def brute_force(vectors: np.ndarray, threshold: float) -> set[tuple[int, int]]:
    sims = vectors.astype(np.float64) @ vectors.astype(np.float64).T
    n = len(vectors)
    return {(i, j) for i in range(n) for j in range(i + 1, n) if sims[i, j] >= threshold}


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(0, 40),
    dim=st.integers(2, 6),
    block=st.integers(1, 17),
    threshold=st.floats(0.5, 0.99),
    seed=st.integers(0, 2**31),
)
def test_blocked_scan_finds_exactly_the_brute_force_pairs(
    n: int, dim: int, block: int, threshold: float, seed: int
) -> None:
    rng = np.random.default_rng(seed)
    raw = rng.normal(size=(n, dim))
    if n > 3:
        raw[1] = raw[0] + 0.01 * rng.normal(size=dim)  # guarantee some near duplicates
    norms = np.linalg.norm(raw, axis=1, keepdims=True)
    norms[norms == 0] = 1
    vectors = (raw / norms).astype(np.float32)
    found: set[tuple[int, int]] = set()
    for a, b in near_duplicate_pairs(vectors, threshold, block):
        found.update(zip(a.tolist(), b.tolist(), strict=True))
    expected = brute_force(vectors, threshold)
    # float32 products may only add pairs within 1e-5 of the threshold
    sims = vectors.astype(np.float64) @ vectors.astype(np.float64).T
    assert expected <= found
    assert all(sims[i, j] >= threshold - 1e-5 for i, j in found - expected)


def test_decay_score_values() -> None:
    assert decay_score(0, 0, 30) == 1.0
    assert decay_score(30, 0, 30) == 0.5
    assert decay_score(60, 0, 30) == 0.25
    assert decay_score(-5, 0, 30) == 1.0
    assert math.isclose(decay_score(30, 1, 30), 0.5 * (1 + math.log(2)))


def test_words_are_whole_words() -> None:
    assert words("Alice CAN'T go; it's significant, knot-free") == [
        "alice", "can't", "go", "it's", "significant", "knot", "free",
    ]
    assert words("don\u2019t") == ["don't"]
    assert word_overlap(["a", "b"], ["b", "c"]) == 1 / 3
    assert word_overlap([], []) == 0.0


async def test_apply_groups_consecutive_puts_and_keeps_order() -> None:
    calls: list[tuple[str, Any]] = []
    inner = InMemoryMemoryStore()

    class Recorder:
        def __getattr__(self, name: str) -> Any:
            fn = getattr(inner, name)

            async def call(arg: Any) -> Any:
                calls.append((name, arg if not isinstance(arg, list) else len(arg)))
                return await fn(arg)

            return call

    p = Provenance(source="system")
    f1, f2, f3 = (SemanticFact(content=str(i), provenance=p) for i in range(3))
    plan: MutationPlan[None] = MutationPlan(
        [Put(f1), Put(f2), Delete("fact", f1.id), Put(f3)]
    )
    assert len(plan) == 4 and not plan.empty and plan
    await apply_mutations(Recorder(), plan.mutations)  # type: ignore[arg-type]
    assert calls == [("put_facts", 2), ("delete_fact", f1.id), ("put_facts", 1)]
    assert set(await inner.get_facts([f1.id, f2.id, f3.id])) == {f2.id, f3.id}
    assert MutationPlan().empty
    assert uuid.UUID(int=0) != f1.id

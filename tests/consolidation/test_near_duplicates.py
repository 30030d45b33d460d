"""Near-duplicate detection: LSH parameters, LSH vs exact pairs, LSH vs exact plans."""

from __future__ import annotations

import asyncio
import math
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from cycgraph_memory import InMemoryMemoryStore, InvalidInputError, MemoryConsolidator
from cycgraph_memory.consolidation.near_duplicates import (
    EXACT_MAX_ROWS,
    LshParameters,
    choose_lsh_parameters,
    collision_probability,
    lsh_near_duplicate_pairs,
    near_duplicate_pairs,
    sign_agreement,
)
from cycgraph_memory.records import Provenance, SemanticFact


def unit_rows(raw: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(raw, axis=1, keepdims=True)
    norms[norms == 0] = 1
    return (raw / norms).astype(np.float32)


def at_cosine(rng: np.random.Generator, v: np.ndarray, cos: float) -> np.ndarray:
    u = rng.standard_normal(v.shape[0])
    u -= (u @ v) * v
    u /= np.linalg.norm(u)
    return cos * v + math.sqrt(1 - cos * cos) * u


def planted(n: int, dim: int, dups: int, seed: int, low: float = 0.92) -> np.ndarray:
    """Random unit rows; rows 1, 3, 5, ... (``dups`` of them) near their predecessor."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, dim))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    for k in range(min(dups, n // 2)):
        x[2 * k + 1] = at_cosine(rng, x[2 * k], float(rng.uniform(low, 0.999)))
    return x.astype(np.float32)


def exact_set(x: np.ndarray, threshold: float, block: int = 7) -> set[tuple[int, int]]:
    found: set[tuple[int, int]] = set()
    for a, b in near_duplicate_pairs(x, threshold, block):
        found.update(zip(a.tolist(), b.tolist(), strict=True))
    return found


def lsh_set(x: np.ndarray, threshold: float, block: int = 7, **kw: object) -> set[tuple[int, int]]:
    a, b = lsh_near_duplicate_pairs(x, threshold, block, **kw)  # type: ignore[arg-type]
    pairs = list(zip(a.tolist(), b.tolist(), strict=True))
    assert len(pairs) == len(set(pairs))  # each pair once
    assert all(i < j for i, j in pairs)
    return set(pairs)


# ---------------------------------------------------------------- the probability formula


def test_sign_agreement_values() -> None:
    assert sign_agreement(1.0) == 1.0
    assert sign_agreement(0.0) == 0.5
    assert sign_agreement(-1.0) == 0.0
    assert math.isclose(sign_agreement(0.5), 2 / 3)
    assert math.isclose(sign_agreement(0.9), 1 - math.acos(0.9) / math.pi)
    assert math.isclose(collision_probability(0.5, 1, 2), 1 - (1 / 3) ** 2)


def test_parameters_for_the_benchmark_shape() -> None:
    p = choose_lsh_parameters(100_000, 128, 0.9)
    assert (p.bits, p.tables) == (16, 53)
    # p(0.9) = 0.85643; 0.85643**16 = 0.08362; 1 - (1 - 0.08362)**53 = 0.99031
    assert math.isclose(p.threshold_collision, 0.99031, abs_tol=1e-5)
    assert p.estimated_cost < p.exact_cost / 20


@settings(max_examples=200, deadline=None)
@given(
    n=st.integers(2, 10**7),
    dim=st.integers(1, 4096),
    threshold=st.floats(0.05, 1.0),
    recall=st.floats(0.5, 0.9999),
)
def test_chosen_parameters_meet_the_recall_at_the_threshold_with_fewest_tables(
    n: int, dim: int, threshold: float, recall: float
) -> None:
    p = choose_lsh_parameters(n, dim, threshold, recall=recall)
    cut = threshold - 1e-6
    assert 1 <= p.bits <= 62 and p.tables >= 1
    assert collision_probability(cut, p.bits, p.tables) >= recall
    assert math.isclose(p.threshold_collision, collision_probability(cut, p.bits, p.tables))
    if p.tables > 1:  # one table fewer would miss the target
        assert collision_probability(cut, p.bits, p.tables - 1) < recall
    # pairs above the threshold collide at least as often
    for above in (cut + (1 - cut) * f for f in (0.1, 0.5, 1.0)):
        assert collision_probability(above, p.bits, p.tables) >= recall


def test_parameter_checks() -> None:
    with pytest.raises(ValueError):
        choose_lsh_parameters(10, 4, 0.9, recall=1.0)
    with pytest.raises(ValueError):
        choose_lsh_parameters(10, 4, 0.0)


def test_measured_collision_rate_at_the_threshold_meets_the_target() -> None:
    """2,000 pairs at cosine 0.9001 (just above a 0.9 threshold): >= 97% found.

    The formula promises 99% per pair; with 2,000 independent pairs the observed rate
    falls below 97% with negligible probability (9 standard deviations).
    """
    rng = np.random.default_rng(7)
    dim, pairs = 64, 2000
    base = rng.standard_normal((pairs, dim))
    base /= np.linalg.norm(base, axis=1, keepdims=True)
    x = np.empty((2 * pairs, dim))
    x[0::2] = base
    x[1::2] = [at_cosine(rng, v, 0.9001) for v in base]
    x32 = x.astype(np.float32)
    params = choose_lsh_parameters(2 * pairs, dim, 0.9)
    found = lsh_set(x32, 0.9, 1000, seed=3, params=params)
    hits = sum((2 * k, 2 * k + 1) in found for k in range(pairs))
    assert hits / pairs >= 0.97
    assert found <= exact_set(x32, 0.9, 1000)


# ---------------------------------------------------------------- LSH pairs vs exact pairs


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(0, 60),
    dim=st.integers(2, 12),
    block=st.integers(1, 17),
    threshold=st.floats(0.5, 0.99),
    seed=st.integers(0, 2**31),
)
def test_lsh_pairs_are_verified_exact_pairs(
    n: int, dim: int, block: int, threshold: float, seed: int
) -> None:
    rng = np.random.default_rng(seed)
    x = unit_rows(rng.normal(size=(n, dim)))
    if n > 3:
        x[1] = unit_rows((x[0] + 0.01 * rng.normal(size=dim))[None, :])[0]
        x[2] = 0.0  # a zero row matches nothing
    found = lsh_set(x, threshold, block, seed=seed % 1000)
    exact = exact_set(x, threshold, block)
    assert found <= exact  # never a pair below the threshold
    if n > 3 and threshold <= 0.99:
        assert (0, 1) in exact
    assert found == lsh_set(x, threshold, block, seed=seed % 1000)  # deterministic


def test_lsh_finds_planted_duplicates_like_the_exact_scan() -> None:
    x = planted(3000, 32, 300, seed=11)
    exact = exact_set(x, 0.9, 256)
    assert {(2 * k, 2 * k + 1) for k in range(300)} <= exact
    assert lsh_set(x, 0.9, 256, seed=5) == exact


def test_huge_buckets_fall_back_to_exact_products() -> None:
    """A tight cluster of 400 rows fills buckets far larger than the block of 16."""
    rng = np.random.default_rng(2)
    centre = rng.standard_normal(24)
    centre /= np.linalg.norm(centre)
    cluster = [at_cosine(rng, centre, float(c)) for c in rng.uniform(0.95, 0.999, 400)]
    x = unit_rows(np.vstack([np.array(cluster), rng.standard_normal((200, 24))]))
    exact = exact_set(x, 0.9, 16)
    assert len(exact) > 10_000
    # one bit per table: two buckets of ~300 rows each, far above the block of 16
    few = LshParameters(bits=1, tables=10, threshold_collision=0.0, estimated_cost=0.0,
                        exact_cost=0.0)
    # a pair at 0.9 is missed by all ten tables with probability 0.144**10 ~ 4e-9
    assert lsh_set(x, 0.9, 16, seed=1, params=few) == exact


def test_zero_and_tiny_inputs() -> None:
    empty = np.zeros((0, 4), dtype=np.float32)
    assert lsh_set(empty, 0.9) == set()
    assert lsh_set(np.zeros((5, 4), dtype=np.float32), 0.9) == set()
    one = unit_rows(np.ones((1, 4)))
    assert lsh_set(one, 0.9) == set()


# ---------------------------------------------------------------- LSH plan vs exact plan

BASE = datetime(2026, 1, 1, tzinfo=UTC)
PROV = Provenance(source="system", created_at=BASE)


async def _plans(
    x: np.ndarray, verified: list[bool], days: list[int], seed: int
) -> tuple[bool, list[object], list[object]]:
    store = InMemoryMemoryStore()
    await store.put_facts(
        SemanticFact(
            content=f"fact {i}", embedding=x[i].tolist(), provenance=PROV,
            valid_from=BASE + timedelta(days=days[i]), access_count=i % 3,
            tags=["verified"] if verified[i] else ["candidate"],
        )
        for i in range(len(x))
    )
    clock = lambda: BASE + timedelta(days=400)  # noqa: E731
    exact = MemoryConsolidator(store, None, dedup_method="exact", batch_size=16, clock=clock)
    lsh = MemoryConsolidator(store, None, dedup_method="lsh", seed=seed, batch_size=16,
                             clock=clock)
    vectors = (await exact._load_facts()).vectors
    exact_pairs = {
        p for a, b in exact._pairs(vectors) for p in zip(a.tolist(), b.tolist(), strict=True)
    }
    lsh_pairs = {
        p for a, b in lsh._pairs(vectors) for p in zip(a.tolist(), b.tolist(), strict=True)
    }
    assert lsh_pairs <= exact_pairs
    p1, p2 = await exact.plan(), await lsh.plan()
    assert p1.report is not None and p2.report is not None
    same = lsh_pairs == exact_pairs
    return same, [p1.report, *p1.mutations], [p2.report, *p2.mutations]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(
    n=st.integers(5, 50),
    dups=st.integers(1, 25),
    dim=st.integers(4, 16),
    seed=st.integers(0, 2**16),
    data=st.data(),
)
def test_lsh_plan_equals_exact_plan_when_every_pair_is_a_candidate(
    n: int, dups: int, dim: int, seed: int, data: st.DataObject
) -> None:
    x = planted(n, dim, dups, seed, low=0.85)  # some planted pairs fall below 0.9
    x[4] = unit_rows(x[0][None, :] + x[1][None, :] + 0.05)[0]  # a chain: near rows 0 and 1
    verified = data.draw(st.lists(st.booleans(), min_size=n, max_size=n))
    days = data.draw(st.lists(st.integers(0, 3), min_size=n, max_size=n))  # ties too
    same, exact_plan, lsh_plan = asyncio.run(_plans(x, verified, days, seed))
    assume(same)
    assert lsh_plan == exact_plan
    assert len(exact_plan) > 1  # row 1 is at cosine >= 0.85 of row 0, row 4 near both


def test_auto_method_and_options() -> None:
    store = InMemoryMemoryStore()
    c = MemoryConsolidator(store)
    assert c.dedup_method == "auto" and c.seed == 0
    small = unit_rows(np.random.default_rng(0).normal(size=(10, 8)))
    assert not c._lsh_pays(small)
    rng = np.random.default_rng(1)
    big = unit_rows(rng.normal(size=(EXACT_MAX_ROWS + 1, 32)))
    assert c._lsh_pays(big)
    assert not c._lsh_pays(big[:EXACT_MAX_ROWS])
    assert not MemoryConsolidator(store, dedup_threshold=0.0)._lsh_pays(big)
    # every row within ~0.95 of one direction: the background sample makes LSH too costly
    clustered = unit_rows(np.ones((EXACT_MAX_ROWS + 1, 32)) + 0.2 * big)
    assert not c._lsh_pays(clustered)
    for kw in ({"dedup_method": "fast"}, {"seed": -1}, {"seed": 1.5},
               {"dedup_method": "lsh", "dedup_threshold": 0.0}):
        with pytest.raises(InvalidInputError):
            MemoryConsolidator(store, None, **kw)  # type: ignore[arg-type]

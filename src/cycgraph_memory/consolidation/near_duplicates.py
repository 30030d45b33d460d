"""Near-duplicate pairs of unit vectors: an exact blocked scan and an LSH candidate scan.

Both functions return the same kind of answer: index pairs ``(i < j)`` of rows whose cosine
is at or above ``threshold`` (minus a 1e-6 tolerance). Both decide a pair by the same
predicate: the float32 product when it is clearly above or below the cut, and the float64
dot product of the two float32 rows when the float32 value lies within ``1e-3`` of the cut.
So a pair found by both is found for the same reason, and :func:`lsh_near_duplicate_pairs`
can only ever return a subset of :func:`near_duplicate_pairs` (it never returns a pair
below the threshold).

**Exact** (:func:`near_duplicate_pairs`): blocked matrix products of ``block`` x ``block``
tiles, O(n^2 d) work, memory one tile.

**LSH** (:func:`lsh_near_duplicate_pairs`): random-hyperplane hashing (SimHash) with
banding. A table draws ``k`` Gaussian hyperplanes (seeded, so runs are deterministic) and
gives every row the ``k``-bit code of the signs of its projections; rows sharing a code
in a table are candidates, and every candidate is verified with the exact cosine. For two
unit vectors at angle ``theta`` one sign bit agrees with probability ``p = 1 - theta/pi``
(Charikar 2002), so the pair lands in the same bucket of a table with probability
``p**k`` and in at least one of ``L`` independent tables with probability::

    P(cos) = 1 - (1 - p(cos)**k) ** L,        p(cos) = 1 - arccos(cos) / pi

``L`` is the smallest number of tables with ``P(threshold) >= recall`` (0.99 by default);
``P`` grows with the cosine, so every pair above the threshold is found with at least that
probability. ``k`` minimises an estimated cost (hashing, sorting, verifying the expected
background candidates, estimated from a seeded sample of row pairs) under that constraint.
A bucket holding more than ``block`` rows is scanned with exact blocked products instead
of pair by pair (same bucket membership seen again in a later table is skipped). Tables
are hashed 16 at a time, so memory stays a few ``block``-sized tiles plus 16 int64 codes
per row, whatever the data.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

__all__ = [
    "EXACT_MAX_ROWS",
    "LSH_RECALL",
    "LshParameters",
    "choose_lsh_parameters",
    "collision_probability",
    "lsh_near_duplicate_pairs",
    "lsh_parameters_for",
    "near_duplicate_pairs",
    "sign_agreement",
]

FloatMatrix = NDArray[np.float32]
IndexArray = NDArray[np.intp]

SIM_TOLERANCE = 1e-6
"""Pairs at ``threshold - SIM_TOLERANCE`` or above count as duplicates."""

LSH_RECALL = 0.99
"""Default probability that a pair at exactly the threshold becomes an LSH candidate."""

EXACT_MAX_ROWS = 20_000
"""``dedup_method="auto"`` scans exactly up to this many embedded facts (about 3 s of
CPU at 128 dimensions), and with LSH above it when LSH is estimated to be cheaper."""

_BAND = 1e-3  # float32 products this close to the cut are re-decided in float64
_MAX_BITS = 62  # codes are int64
_SAMPLE_PAIRS = 2000
_TABLE_GROUP = 16  # tables hashed together: codes take 8 bytes x 16 per row
# Relative costs (one unit ~ one float32 multiply-add inside BLAS), measured roughly here.
_COST_SORT = 40.0  # per row per table: code, argsort, run bookkeeping
_COST_PAIR = 40.0  # per candidate pair: index bookkeeping
_COST_VERIFY = 6.0  # per candidate pair per dimension: gather two rows and dot them


def sign_agreement(cosine: float) -> float:
    """Probability that one random hyperplane puts two unit vectors on the same side.

    Args:
        cosine: The cosine of the two vectors (clipped to [-1, 1]).

    Returns:
        ``1 - arccos(cosine) / pi``.
    """
    return 1.0 - math.acos(min(1.0, max(-1.0, cosine))) / math.pi


def collision_probability(cosine: float, bits: int, tables: int) -> float:
    """Probability that a pair at ``cosine`` shares a bucket in at least one table.

    Args:
        cosine: Cosine of the pair.
        bits: Sign bits per table (``k``).
        tables: Independent tables (``L``).

    Returns:
        ``1 - (1 - p**bits) ** tables`` with ``p = sign_agreement(cosine)``.
    """
    return _collide(sign_agreement(cosine) ** bits, tables)


def _collide(p_bits: float, tables: int) -> float:
    """``1 - (1 - p_bits) ** tables``, computed without cancellation for tiny ``p_bits``."""
    return -math.expm1(tables * math.log1p(-p_bits)) if p_bits < 1.0 else 1.0


@dataclass(frozen=True)
class LshParameters:
    """Banding parameters of one LSH scan.

    Attributes:
        bits: Sign bits per table (``k``).
        tables: Number of tables (``L``).
        threshold_collision: Probability that a pair at the threshold is a candidate.
        estimated_cost: The cost model's estimate (multiply-add units).
        exact_cost: The cost model's estimate for the exact scan, for comparison.
    """

    bits: int
    tables: int
    threshold_collision: float
    estimated_cost: float
    exact_cost: float


def _tables_for(p_bits: float, recall: float) -> int:
    """Smallest ``L`` with ``1 - (1 - p_bits) ** L >= recall``."""
    if p_bits >= 1.0:
        return 1
    tables = max(1, math.ceil(math.log1p(-recall) / math.log1p(-p_bits)))
    # guard the last ulp of the logarithms
    while _collide(p_bits, tables) < recall:
        tables += 1
    while tables > 1 and _collide(p_bits, tables - 1) >= recall:
        tables -= 1
    return tables


def choose_lsh_parameters(
    n: int,
    dim: int,
    threshold: float,
    *,
    recall: float = LSH_RECALL,
    background: NDArray[np.float64] | None = None,
) -> LshParameters:
    """Pick ``k`` and ``L`` so a pair at ``threshold`` collides with probability >= recall.

    For each ``k`` in 1..62, ``L`` is the smallest table count meeting ``recall`` at the
    threshold (see the module docs); the ``k`` with the lowest estimated cost wins. The
    cost counts hashing (``n k d``), sorting (per row) and verifying the expected
    candidates ``n (n - 1) / 2 * mean(p(c) ** k)`` over the ``background`` cosines (a
    sample of the data's pair cosines; ``[0.0]``, unrelated random vectors, by default).

    Args:
        n: Rows to scan.
        dim: Their dimension.
        threshold: Duplicate cosine (the tolerance is subtracted here).
        recall: Required collision probability at the threshold, in (0, 1).
        background: Cosines of a sample of arbitrary pairs of the data.

    Returns:
        The chosen parameters.

    Raises:
        ValueError: When ``recall`` is not in (0, 1) or ``threshold`` is not positive.
    """
    if not 0.0 < recall < 1.0:
        raise ValueError(f"recall must be in (0, 1), got {recall!r}")
    cut = threshold - SIM_TOLERANCE
    if not cut > 0.0:
        raise ValueError(f"LSH needs a positive threshold, got {threshold!r}")
    p_cut = sign_agreement(cut)
    bg = np.zeros(1) if background is None or len(background) == 0 else background
    p_bg = 1.0 - np.arccos(np.clip(bg, -1.0, 1.0)) / math.pi
    pairs = n * (n - 1) / 2.0
    exact_cost = pairs * dim
    best: LshParameters | None = None
    for bits in range(1, _MAX_BITS + 1):
        p_bits = p_cut**bits
        if p_bits < 1e-12:
            break
        tables = _tables_for(p_bits, recall)
        expected = pairs * float(np.mean(p_bg**bits))
        per_table = n * bits * dim + n * _COST_SORT + expected * (
            _COST_PAIR + _COST_VERIFY * dim
        )
        cost = tables * per_table
        if best is None or cost < best.estimated_cost:
            best = LshParameters(
                bits=bits,
                tables=tables,
                threshold_collision=_collide(p_bits, tables),
                estimated_cost=cost,
                exact_cost=exact_cost,
            )
    assert best is not None  # bits=1 always qualifies: p_cut > 1/2
    return best


def _cos64(vectors: FloatMatrix, a: IndexArray, b: IndexArray) -> NDArray[np.float64]:
    """Float64 dot products of the float32 rows ``a[i]`` and ``b[i]``."""
    product: NDArray[np.float64] = vectors[a].astype(np.float64) * vectors[b].astype(np.float64)
    return product.sum(axis=1)  # type: ignore[no-any-return]


def _confirm(
    vectors: FloatMatrix,
    a: IndexArray,
    b: IndexArray,
    sims: NDArray[np.float32],
    cut: float,
) -> tuple[IndexArray, IndexArray]:
    """Keep the pairs at or above ``cut``; float32 values near it are re-decided in f64."""
    accept = sims >= np.float32(cut + _BAND)
    band = (sims >= np.float32(cut - _BAND)) & ~accept
    if band.any():
        accept[band] = _cos64(vectors, a[band], b[band]) >= cut
    return a[accept], b[accept]


def _blocked(
    vectors: FloatMatrix, cut: float, block: int, members: IndexArray | None = None
) -> Iterator[tuple[IndexArray, IndexArray]]:
    """Exact pairs among ``members`` (sorted row indexes; all rows when None), tile by tile."""
    n = vectors.shape[0] if members is None else len(members)
    low = np.float32(cut - _BAND)
    for i0 in range(0, n, block):
        left = vectors[i0 : i0 + block] if members is None else vectors[members[i0 : i0 + block]]
        for j0 in range(i0, n, block):
            right = (
                vectors[j0 : j0 + block] if members is None else vectors[members[j0 : j0 + block]]
            )
            tile = left @ right.T
            rows, cols = np.nonzero(tile >= low)
            keep = rows + i0 < cols + j0
            if not keep.any():
                continue
            rows, cols = rows[keep], cols[keep]
            sims = tile[rows, cols]
            gi = rows + i0
            gj = cols + j0
            if members is not None:
                gi, gj = members[gi], members[gj]
            gi, gj = _confirm(vectors, gi, gj, sims, cut)
            if gi.size:
                yield gi, gj


def near_duplicate_pairs(
    vectors: FloatMatrix, threshold: float, block: int
) -> Iterator[tuple[IndexArray, IndexArray]]:
    """Index pairs ``(i < j)`` of unit rows with cosine >= ``threshold``, tile by tile.

    Each step multiplies a ``block`` x dim slab by a dim x ``block`` slab, so the extra
    memory is one ``block`` x ``block`` float32 tile whatever the number of rows. Every
    pair is yielded once.

    Args:
        vectors: Unit (or zero) float32 rows.
        threshold: Duplicate cosine; pairs within 1e-6 below it count too.
        block: Tile size.

    Yields:
        Arrays ``(i, j)`` of the pairs found in one tile.
    """
    yield from _blocked(vectors, threshold - SIM_TOLERANCE, block)


def _sample_cosines(
    vectors: FloatMatrix, rows: IndexArray, rng: np.random.Generator
) -> NDArray[np.float64]:
    """Cosines of a seeded sample of pairs of distinct ``rows``."""
    m = len(rows)
    if m < 2:
        return np.zeros(1)
    size = min(_SAMPLE_PAIRS, m * (m - 1) // 2)
    a = rng.integers(0, m, size)
    b = (a + rng.integers(1, m, size)) % m
    return _cos64(vectors, rows[a], rows[b])


def _verify(
    vectors: FloatMatrix, a: IndexArray, b: IndexArray, cut: float, chunk: int
) -> Iterator[IndexArray]:
    """Pair codes ``i * n + j`` (``i < j``) of the verified candidates, chunk by chunk."""
    n = vectors.shape[0]
    for s in range(0, len(a), chunk):
        x, y = a[s : s + chunk], b[s : s + chunk]
        lo, hi = np.minimum(x, y), np.maximum(x, y)
        sims = np.einsum("ij,ij->i", vectors[lo], vectors[hi])
        gi, gj = _confirm(vectors, lo, hi, sims, cut)
        if gi.size:
            yield gi.astype(np.int64) * n + gj


def _scan_table(
    vectors: FloatMatrix,
    live: IndexArray,
    codes: NDArray[np.int64],
    cut: float,
    block: int,
    chunk: int,
    scanned: set[bytes],
    found: list[IndexArray],
) -> None:
    """Append the verified pair codes of one table's buckets to ``found``."""
    n = vectors.shape[0]
    m = len(live)
    order = np.argsort(codes, kind="stable")
    sorted_codes = codes[order]
    starts = np.flatnonzero(np.r_[True, sorted_codes[1:] != sorted_codes[:-1]])
    sizes = np.diff(np.r_[starts, m])
    for start, size in zip(starts[sizes > block].tolist(), sizes[sizes > block].tolist(),
                           strict=True):
        members = np.sort(live[order[start : start + size]])
        key = members.tobytes()
        if key in scanned:
            continue
        scanned.add(key)
        for gi, gj in _blocked(vectors, cut, block, members):
            found.append(gi.astype(np.int64) * n + gj)
    small = (sizes > 1) & (sizes <= block)
    ends = np.repeat(starts + sizes, sizes)
    active = np.flatnonzero(np.repeat(small, sizes))
    step = 1
    active = active[ends[active] - active > step]
    while active.size:
        a = live[order[active]]
        b = live[order[active + step]]
        found.extend(_verify(vectors, a, b, cut, chunk))
        step += 1
        active = active[ends[active] - active > step]


def lsh_parameters_for(
    vectors: FloatMatrix, threshold: float, *, seed: int = 0, recall: float = LSH_RECALL
) -> LshParameters:
    """The parameters :func:`lsh_near_duplicate_pairs` would choose for these rows.

    The background cosines are sampled exactly as the scan samples them (same seed, same
    rows), so the estimate is the one the scan uses.

    Args:
        vectors: Unit (or zero) float32 rows.
        threshold: Duplicate cosine, > 1e-6.
        seed: Seed of the scan.
        recall: Collision probability required at the threshold.

    Returns:
        The chosen parameters (with their cost estimate and the exact scan's).
    """
    live = np.flatnonzero(np.any(vectors != 0, axis=1))
    background = _sample_cosines(vectors, live, np.random.default_rng(seed))
    return choose_lsh_parameters(
        max(len(live), 2), vectors.shape[1], threshold, recall=recall, background=background
    )


def lsh_near_duplicate_pairs(
    vectors: FloatMatrix,
    threshold: float,
    block: int,
    *,
    seed: int = 0,
    recall: float = LSH_RECALL,
    params: LshParameters | None = None,
) -> tuple[IndexArray, IndexArray]:
    """Pairs ``(i < j)`` with cosine >= ``threshold`` found through LSH candidates.

    Every returned pair is verified by the exact predicate (never a pair below the
    threshold); each pair above it is returned with probability >= ``recall`` (see the
    module docs). Zero rows never match a positive threshold and are not hashed.

    Args:
        vectors: Unit (or zero) float32 rows.
        threshold: Duplicate cosine, > 1e-6.
        block: Row block for hashing, the largest bucket verified pair by pair, and the
            tile size of the exact scan of larger buckets.
        seed: Seed of the hyperplanes and of the background sample.
        recall: Collision probability required at the threshold.
        params: Fixed ``k``/``L`` (default: :func:`choose_lsh_parameters`).

    Returns:
        Sorted unique arrays ``(i, j)``.
    """
    n, dim = vectors.shape
    cut = threshold - SIM_TOLERANCE
    if not cut > 0.0:
        raise ValueError(f"LSH needs a positive threshold, got {threshold!r}")
    empty = np.zeros(0, dtype=np.intp)
    live = np.flatnonzero(np.any(vectors != 0, axis=1))
    m = len(live)
    if m < 2:
        return empty, empty.copy()
    rng = np.random.default_rng(seed)
    background = _sample_cosines(vectors, live, rng)
    if params is None:
        params = choose_lsh_parameters(m, dim, threshold, recall=recall, background=background)
    k, tables = params.bits, params.tables
    shifts = np.arange(k, dtype=np.int64)
    planes = rng.standard_normal((dim, tables * k)).astype(np.float32)
    chunk = max(1024, block * block // max(1, 2 * dim))
    found: list[IndexArray] = []
    scanned: set[bytes] = set()
    dense = m == n
    for g0 in range(0, tables, _TABLE_GROUP):
        group = min(_TABLE_GROUP, tables - g0)
        cols = planes[:, g0 * k : (g0 + group) * k]
        # codes of every row in this group of tables, one row block at a time
        group_codes = np.empty((group, m), dtype=np.int64)
        for s in range(0, m, block):
            rows = vectors[s : s + block] if dense else vectors[live[s : s + block]]
            signs = (rows @ cols > 0).reshape(len(rows), group, k).astype(np.int64)
            group_codes[:, s : s + block] = (signs << shifts).sum(axis=2).T
        for codes in group_codes:
            _scan_table(vectors, live, codes, cut, block, chunk, scanned, found)
    if not found:
        return empty, empty.copy()
    unique = np.unique(np.concatenate(found))
    return (unique // n).astype(np.intp), (unique % n).astype(np.intp)

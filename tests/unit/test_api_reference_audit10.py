"""Acceptance audit 10: the spec's API reference, low-level utilities and helpers.

Written as an outside checker would, from the spec's tables (defaults, outputs, edges).
The tests named ``test_bug_...`` failed before the fix that came with them.
"""

from __future__ import annotations

import math
import random

import pytest

from cycgraph_memory import cosine_similarity

# ------------------------------------------------------------------ cosineSimilarity


@pytest.mark.parametrize(
    "vector", [[1.0, 1.0, 1.0], [1.0, 1.0], [0.1, 0.1, 0.1], [0.6, 0.8, 0.0, 1.0]]
)
def test_bug_a_vector_is_exactly_as_similar_to_itself_as_possible(vector: list[float]) -> None:
    # Before: cosine_similarity([1, 1, 1], [1, 1, 1]) == 1.0000000000000002 (its negation
    # -1.0000000000000002), outside the range of a cosine; [1, 1] gave 0.9999999999999998.
    assert cosine_similarity(vector, vector) == 1.0
    assert cosine_similarity(vector, [-x for x in vector]) == -1.0


def test_bug_the_result_never_leaves_minus_one_to_one() -> None:
    rng = random.Random(10)
    for _ in range(3000):
        n = rng.randint(1, 40)
        a = [rng.uniform(-1, 1) for _ in range(n)]
        b = [x * rng.uniform(0.5, 2.0) for x in a]  # nearly parallel: the rounding edge
        for left, right in ((a, a), (a, b), (a, [-x for x in b])):
            assert -1.0 <= cosine_similarity(left, right) <= 1.0


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        ([1e160, 1.0], [1e160, 1.0], 1.0),  # was nan (the squared norm overflowed)
        ([1e300, 1e300], [1e300, -1e300], 0.0),  # was nan
        ([3e-170, 4e-170], [4e-170, 3e-170], 0.96),  # was 0.0 (the norm underflowed)
        ([1e-170, 0.0], [1e-170, 0.0], 1.0),  # was 0.0
        ([5e-324], [5e-324], 1.0),  # the smallest subnormal is still a direction
    ],
)
def test_bug_finite_vectors_of_any_magnitude_compare_as_directions(
    a: list[float], b: list[float], expected: float
) -> None:
    assert cosine_similarity(a, b) == pytest.approx(expected, abs=1e-12)


def test_the_spec_edges_of_cosine_similarity_are_unchanged() -> None:
    # "It returns 0 if either vector has zero magnitude."
    assert cosine_similarity([0.0, 0.0], [1.0, 2.0]) == 0.0
    assert cosine_similarity([1.0, 2.0], [0.0, 0.0]) == 0.0
    assert cosine_similarity([], []) == 0.0
    assert cosine_similarity([1.0, 0.0], [0.0, 1.0]) == 0.0
    assert cosine_similarity([1.0, 1.0], [1.0, 0.0]) == pytest.approx(1 / math.sqrt(2))

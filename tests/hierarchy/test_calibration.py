"""Theme thresholds calibrated on the embedder's own similarity distribution."""

from __future__ import annotations

import numpy as np
import pytest

from cycgraph_memory.errors import InvalidInputError
from cycgraph_memory.hierarchy.calibration import (
    calibrate_theme_thresholds,
    calibrated_clusterer,
)


def test_thresholds_are_quantiles_of_pairwise_similarities() -> None:
    rng = np.random.default_rng(7)
    vectors = rng.normal(size=(30, 16))
    unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    sims = (unit @ unit.T)[np.triu_indices(30, k=1)]
    t = calibrate_theme_thresholds(vectors.tolist())
    assert t.pairs == 435
    assert t.assignment_threshold == pytest.approx(float(np.quantile(sims, 0.95)))
    assert t.merge_threshold == pytest.approx(float(np.quantile(sims, 0.99)))
    # a shifted embedder (every vector shares a big common component) gets higher
    # thresholds: the rule follows the embedder's scale, not an absolute cosine
    shifted = calibrate_theme_thresholds((vectors + 4.0).tolist())
    assert shifted.assignment_threshold > t.assignment_threshold + 0.3
    clusterer = calibrated_clusterer(vectors.tolist(), max_themes=5)
    assert clusterer.assignment_threshold == pytest.approx(t.assignment_threshold)
    assert clusterer.max_themes == 5


def test_pair_budget_and_bad_input() -> None:
    vectors = np.eye(20).tolist()
    assert calibrate_theme_thresholds(vectors, max_pairs=45).pairs == 45  # first 10 rows
    with pytest.raises(InvalidInputError):
        calibrate_theme_thresholds(vectors[:5])
    with pytest.raises(InvalidInputError):
        calibrate_theme_thresholds(vectors, assignment_quantile=1.5)
    with pytest.raises(InvalidInputError):
        calibrate_theme_thresholds([[1.0, 2.0]] * 9 + [[1.0]])
    with pytest.raises(InvalidInputError):
        calibrate_theme_thresholds([[float("nan"), 1.0]] * 10)

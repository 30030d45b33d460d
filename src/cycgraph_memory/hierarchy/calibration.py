"""Theme-clustering thresholds calibrated to an embedder's own similarity distribution.

Absolute cosine thresholds do not transfer between embedders: one model scores unrelated
sentences 0.1, another 0.75, so a fixed 0.7 makes one theme per fact with the first and
one theme per conversation with the second. :func:`calibrate_theme_thresholds` reads the
thresholds off the distribution of pairwise similarities of a sample of the embedder's
own vectors (for instance the facts about to be clustered):

* ``assignment_threshold`` = the ``assignment_quantile`` (default 0.95) of the pairwise
  similarities: a fact joins a theme only when it is closer to it than 95% of random
  pairs are to each other;
* ``merge_threshold`` = the ``merge_quantile`` (default 0.99), at least the assignment
  threshold.

:func:`calibrated_clusterer` builds a :class:`ConsolidatingThemeClusterer` from them.
The sample needs at least :data:`MIN_CALIBRATION_SAMPLE` vectors; the default pair budget
(``max_pairs``) keeps the cost bounded for large samples (rows are taken in order, no
randomness).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from cycgraph_memory.errors import InvalidInputError
from cycgraph_memory.hierarchy.clustering import ConsolidatingThemeClusterer

__all__ = [
    "MIN_CALIBRATION_SAMPLE",
    "ThemeThresholds",
    "calibrate_theme_thresholds",
    "calibrated_clusterer",
]

MIN_CALIBRATION_SAMPLE = 10
"""Fewest vectors a calibration sample needs."""


class ThemeThresholds(BaseModel):
    """Calibrated clustering thresholds.

    Attributes:
        assignment_threshold: Minimum similarity for a fact to join a theme.
        merge_threshold: Minimum centroid similarity for two themes to merge.
        pairs: Number of vector pairs the quantiles were read from.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    assignment_threshold: float = Field(ge=-1.0, le=1.0)
    merge_threshold: float = Field(ge=-1.0, le=1.0)
    pairs: int = Field(ge=1)


def calibrate_theme_thresholds(
    vectors: Sequence[Sequence[float]],
    *,
    assignment_quantile: float = 0.95,
    merge_quantile: float = 0.99,
    max_pairs: int = 200_000,
) -> ThemeThresholds:
    """Thresholds at quantiles of the sample's pairwise cosine similarities.

    Args:
        vectors: At least :data:`MIN_CALIBRATION_SAMPLE` embeddings of one embedder.
        assignment_quantile: Quantile (0-1) giving the assignment threshold.
        merge_quantile: Quantile (0-1) giving the merge threshold (raised to at least the
            assignment threshold).
        max_pairs: Use only the first ``n`` rows with ``n * (n - 1) / 2 <= max_pairs``.

    Returns:
        The calibrated thresholds.

    Raises:
        InvalidInputError: Too few vectors, ragged or non-finite vectors, or a quantile
            outside ``[0, 1]``.
    """
    for name, q in (("assignment_quantile", assignment_quantile),
                    ("merge_quantile", merge_quantile)):
        if not 0.0 <= q <= 1.0:
            raise InvalidInputError(f"{name} must be in [0, 1], got {q!r}")
    if len(vectors) < MIN_CALIBRATION_SAMPLE:
        raise InvalidInputError(
            f"calibration needs at least {MIN_CALIBRATION_SAMPLE} vectors, got {len(vectors)}"
        )
    try:
        m = np.asarray(vectors, dtype=np.float64)
    except ValueError as exc:
        raise InvalidInputError("calibration vectors must all have the same length") from exc
    if m.ndim != 2 or not np.all(np.isfinite(m)):
        raise InvalidInputError("calibration vectors must be finite and of one length")
    n = len(m)
    while n > 2 and n * (n - 1) // 2 > max_pairs:
        n -= 1
    m = m[:n]
    norms = np.linalg.norm(m, axis=1, keepdims=True)
    unit = m / np.where(norms == 0.0, 1.0, norms)
    sims = (unit @ unit.T)[np.triu_indices(n, k=1)]
    assign = float(np.quantile(sims, assignment_quantile))
    merge = max(assign, float(np.quantile(sims, merge_quantile)))
    return ThemeThresholds(
        assignment_threshold=min(1.0, max(-1.0, assign)),
        merge_threshold=min(1.0, max(-1.0, merge)),
        pairs=len(sims),
    )


def calibrated_clusterer(
    vectors: Sequence[Sequence[float]],
    *,
    assignment_quantile: float = 0.95,
    merge_quantile: float = 0.99,
    max_themes: int | None = None,
) -> ConsolidatingThemeClusterer:
    """A :class:`ConsolidatingThemeClusterer` with thresholds calibrated on ``vectors``."""
    t = calibrate_theme_thresholds(
        vectors, assignment_quantile=assignment_quantile, merge_quantile=merge_quantile
    )
    return ConsolidatingThemeClusterer(
        assignment_threshold=t.assignment_threshold,
        merge_threshold=t.merge_threshold,
        max_themes=max_themes,
    )

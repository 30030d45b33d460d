"""Vector similarity helpers (numpy)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["cosine_similarity"]


def cosine_similarity(a: Sequence[float], b: Sequence[float]) -> float:
    """Cosine similarity of two equal-length vectors; 0.0 when either has zero magnitude.

    Raises:
        ValueError: If the vectors have different lengths.
    """
    va = np.asarray(a, dtype=np.float64)
    vb = np.asarray(b, dtype=np.float64)
    if va.shape != vb.shape:
        raise ValueError(f"vectors differ in length: {va.shape[0]} != {vb.shape[0]}")
    na = float(np.linalg.norm(va))
    nb = float(np.linalg.norm(vb))
    if na == 0.0 or nb == 0.0:
        return 0.0
    return float(np.dot(va, vb) / (na * nb))

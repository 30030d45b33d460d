"""Vector similarity helpers (numpy)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

from cycgraph_memory.errors import InvalidInputError, InvalidTypeError

__all__ = ["cosine_similarity"]


def cosine_similarity(a: Sequence[float], b: Sequence[float]) -> float:
    """Cosine similarity of two equal-length vectors; 0.0 when either has zero magnitude.

    The result always lies in [-1, 1], and a vector's similarity with itself is exactly
    1.0. Each vector is first divided by its largest absolute component (the cosine does
    not change), so finite vectors of any magnitude are compared as their directions: a
    norm that would overflow (components near 1e160) or underflow (near 1e-170) in the
    plain formula gives neither NaN nor a false 0.0.

    Raises:
        InvalidTypeError: A vector is not a sequence of real numbers (``None``, a string,
            nested lists).
        InvalidInputError: The vectors differ in length or hold NaN / infinity.
            (Both are ``ValueError`` subclasses.)
    """
    va = _vector(a, "a")
    vb = _vector(b, "b")
    if va.shape != vb.shape:
        raise InvalidInputError(f"vectors differ in length: {va.shape[0]} != {vb.shape[0]}")
    scale_a = float(np.max(np.abs(va))) if va.size else 0.0
    scale_b = float(np.max(np.abs(vb))) if vb.size else 0.0
    if scale_a == 0.0 or scale_b == 0.0:
        return 0.0
    ua = va / scale_a
    ub = vb / scale_b
    # One dot routine for all three sums: for equal vectors the cross product equals both
    # squared norms bit for bit, and sqrt(x * x) == x, so the result is exactly 1.0.
    cross = float(np.dot(ua, ub))
    norms = math.sqrt(float(np.dot(ua, ua)) * float(np.dot(ub, ub)))
    return min(1.0, max(-1.0, cross / norms))


def _vector(value: object, name: str) -> NDArray[np.float64]:
    if value is None or isinstance(value, str | bytes | bytearray):
        raise InvalidTypeError(f"vector {name} must be a sequence of numbers, got {value!r}")
    try:
        out = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise InvalidTypeError(
            f"vector {name} must be a sequence of numbers, got {type(value).__name__}"
        ) from None
    if out.ndim != 1:
        raise InvalidTypeError(f"vector {name} must be one-dimensional, got shape {out.shape}")
    if not np.isfinite(out).all():
        raise InvalidInputError(f"vector {name} holds NaN or infinity")
    return out

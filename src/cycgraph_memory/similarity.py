"""Vector similarity helpers (numpy)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

from cycgraph_memory.errors import InvalidInputError, InvalidTypeError

__all__ = ["cosine_similarity"]


def cosine_similarity(a: Sequence[float], b: Sequence[float]) -> float:
    """Cosine similarity of two equal-length vectors; 0.0 when either has zero magnitude.

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
    na = float(np.linalg.norm(va))
    nb = float(np.linalg.norm(vb))
    if na == 0.0 or nb == 0.0:
        return 0.0
    return float(np.dot(va, vb) / (na * nb))


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

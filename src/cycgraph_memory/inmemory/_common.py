"""Private helpers shared by the in-memory store and index: ids, record copies, vectors."""

from __future__ import annotations

import copy
import uuid
from array import array
from datetime import date, datetime
from types import NoneType
from typing import Any, TypeVar

import numpy as np
from numpy.typing import NDArray
from pydantic import BaseModel

from cycgraph_memory._validate import validate_record
from cycgraph_memory.errors import EmbeddingDimensionMismatchError

M = TypeVar("M", bound=BaseModel)


def coerce_record(model: type[M], value: object) -> M:
    """Return a freshly validated copy of ``value`` as a ``model`` (see ``validate_record``).

    Raises:
        pydantic.ValidationError: An invalid record or mapping.
        InvalidTypeError: Anything that is neither a ``model`` nor a mapping.
    """
    return validate_record(model, value)


_ATOMIC = (str, int, float, uuid.UUID, datetime, date, NoneType)
_ATOMIC_TYPES = frozenset({str, int, float, bool, uuid.UUID, datetime, date, NoneType})


def _copy_list(value: list[Any]) -> list[Any]:
    if not value:
        return []
    if type(value[0]) in _ATOMIC_TYPES and all(type(x) in _ATOMIC_TYPES for x in value):
        return list(value)
    for item in value:
        if not isinstance(item, _ATOMIC):
            if isinstance(item, BaseModel):
                return [
                    copy_record(x) if isinstance(x, BaseModel) else copy.deepcopy(x) for x in value
                ]
            return copy.deepcopy(value)
    return list(value)


def copy_record(record: M, *, blank: tuple[str, ...] = ()) -> M:
    """Deep-copy a record (several times faster than ``model_copy(deep=True)``).

    Immutable field values (str, numbers, UUIDs, datetimes) are shared, lists of them are
    copied with ``list()``, nested models recursively, anything else (``attributes`` /
    ``metadata`` dicts) with ``copy.deepcopy``. The copy's ``__dict__`` and pydantic
    bookkeeping are set directly (no ``__copy__``, no re-validation): the values are
    already valid, and the stores copy hundreds of records per retrieval.

    ``blank`` names optional fields the copy gets as ``None`` instead of a copy of the
    value (the caller fills them in; nothing of the value is copied).
    """
    cls = type(record)
    new = cls.__new__(cls)
    fields = dict(record.__dict__)
    for name in blank:
        fields[name] = None
    for name, value in fields.items():
        kind = type(value)
        if kind in _ATOMIC_TYPES:
            continue
        if kind is list:
            fields[name] = list(value) if name == "embedding" else _copy_list(value)
        elif kind is array:  # a packed embedding (see compact_record)
            fields[name] = list(value)
        elif isinstance(value, BaseModel):
            fields[name] = copy_record(value)
        elif kind is dict and not value:
            fields[name] = {}
        elif isinstance(value, _ATOMIC):
            continue
        else:
            fields[name] = copy.deepcopy(value)
    setattr_ = object.__setattr__
    setattr_(new, "__dict__", fields)
    setattr_(new, "__pydantic_fields_set__", set(record.__pydantic_fields_set__))
    extra = record.__pydantic_extra__
    setattr_(new, "__pydantic_extra__", None if extra is None else copy.deepcopy(extra))
    private = record.__pydantic_private__
    setattr_(new, "__pydantic_private__", None if private is None else copy.deepcopy(private))
    return new


def pack_embedding(record: M) -> M:
    """Pack a record's embedding as ``array('d')`` in place (the caller owns the record)."""
    embedding = record.__dict__.get("embedding")
    if type(embedding) is list:
        record.__dict__["embedding"] = array("d", embedding)
    return record


def compact_record(record: M) -> M:
    """Copy a record for storage, its embedding packed as ``array('d')``.

    A 384-d embedding as a list of Python floats takes ~12 KB; packed it takes 3 KB with
    the exact same float64 values. :func:`copy_record` hands out lists again, so callers
    never see the packed form.
    """
    return pack_embedding(copy_record(record))


def check_dimension(expected: int | None, actual: int, context: str) -> None:
    """Raise :class:`EmbeddingDimensionMismatchError` when ``actual != expected``."""
    if expected is not None and actual != expected:
        raise EmbeddingDimensionMismatchError(expected, actual, context)


def normalize_rows(vectors: NDArray[np.float64]) -> NDArray[np.float32]:
    """L2-normalise each row (zero rows stay zero) and return them as float32.

    Rows are scaled by their largest magnitude first so that huge but finite values do
    not overflow the squared norm.
    """
    out = np.array(vectors, dtype=np.float64, copy=True)
    if out.size == 0:
        return out.astype(np.float32)
    peak = np.max(np.abs(out), axis=1, keepdims=True)
    peak[peak == 0.0] = 1.0
    out /= peak
    norms = np.linalg.norm(out, axis=1, keepdims=True)
    norms[norms == 0.0] = 1.0
    out /= norms
    return out.astype(np.float32)


RESCORE_SLACK = 1e-5
"""Rows whose matrix-product score is within this of the k-th best are re-scored exactly.

Well above the error of a single-precision product of unit vectors (about 1e-7)."""


def row_scores(rows: NDArray[np.float32], query: NDArray[np.float32]) -> NDArray[np.float64]:
    """Cosines of ``rows`` with ``query``, each row reduced on its own, in double precision.

    A BLAS matrix-vector product rounds a row differently by its position in the matrix
    (a different SIMD path for the last rows), so identical vectors stored twice scored
    apart and their order followed the insertion order instead of the documented "ties by
    id". Here every row is multiplied and summed the same way, in double precision: the
    same vector always gets the same score. The single-precision unit rows are not exactly
    of length 1, so the dot product is divided by both lengths (as pgvector divides by
    the norms): a vector scores exactly 1.0 against itself, as it does on pgvector,
    instead of 0.99999994.
    """
    wide = rows.astype(np.float64)
    q = query.astype(np.float64)
    dots = np.einsum("ij,j->i", wide, q)
    row_sq = np.einsum("ij,ij->i", wide, wide)
    q_sq = float(np.dot(q, q))
    norms = np.sqrt(row_sq * q_sq)
    out = np.zeros_like(dots)
    np.divide(dots, norms, out=out, where=norms > 0.0)
    return np.clip(out, -1.0, 1.0)  # type: ignore[no-any-return]


SCORE_FLOOR_TOLERANCE = 1e-6
"""How far below ``min_similarity`` an in-memory score may fall and still be kept.

The in-memory index scores the single-precision unit vectors it holds (their rounding
moves a cosine by about 1e-7): a vector at exactly the threshold (cosine 0.5, or 0 for
an orthogonal one) can score 0.49999997 or -1e-9 here while pgvector, which divides in
double precision, gives exactly 0.5 or 0.
Comparing with this margin keeps such results on both backends.
"""

"""Private helpers shared by the in-memory store and index: ids, record copies, vectors."""

from __future__ import annotations

import copy
import uuid
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


def _copy_list(value: list[Any]) -> list[Any]:
    for item in value:
        if not isinstance(item, _ATOMIC):
            if isinstance(item, BaseModel):
                return [
                    copy_record(x) if isinstance(x, BaseModel) else copy.deepcopy(x) for x in value
                ]
            return copy.deepcopy(value)
    return list(value)


def copy_record(record: M) -> M:
    """Deep-copy a record (several times faster than ``model_copy(deep=True)``).

    Immutable field values (str, numbers, UUIDs, datetimes) are shared, lists of them are
    copied with ``list()``, nested models recursively, anything else (``attributes`` /
    ``metadata`` dicts) with ``copy.deepcopy``. The copy is written into the new
    instance's ``__dict__`` directly: the values are already valid, so re-validation would
    only cost time.
    """
    new = copy.copy(record)
    fields = new.__dict__
    for name, value in fields.items():
        if isinstance(value, _ATOMIC):
            continue
        if isinstance(value, BaseModel):
            fields[name] = copy_record(value)
        elif isinstance(value, list):
            fields[name] = list(value) if name == "embedding" else _copy_list(value)
        else:
            fields[name] = copy.deepcopy(value)
    return new


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

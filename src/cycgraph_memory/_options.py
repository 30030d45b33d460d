"""Private helper: accept an option model, a plain mapping, keyword arguments, or none."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from pydantic import BaseModel

from cycgraph_memory.errors import InvalidTypeError

M = TypeVar("M", bound=BaseModel)


def coerce_options(
    model: type[M], value: M | Mapping[str, Any] | None, extra: Mapping[str, Any]
) -> M:
    """Build ``model`` from ``value`` (model, dict or None) with ``extra`` keywords on top.

    Validation errors surface as pydantic ``ValidationError``; unknown keys are rejected
    because every option model forbids extra fields.
    """
    if value is None:
        return model.model_validate(dict(extra))
    if isinstance(value, model):
        if not extra:
            return value
        return model.model_validate({**value.model_dump(exclude_unset=True), **extra})
    if isinstance(value, Mapping):
        return model.model_validate({**value, **extra})
    if isinstance(value, BaseModel):
        return model.model_validate({**value.model_dump(exclude_unset=True), **extra})
    raise InvalidTypeError(
        f"expected {model.__name__}, a mapping or None, got {type(value).__name__}"
    )

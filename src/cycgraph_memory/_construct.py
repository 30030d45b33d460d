"""Private helper: build a pydantic model from values that are already valid, fast.

``model_construct`` skips validation but still walks every field (defaults, aliases) and
costs about 3 us; the retention hot loop builds several small records per gate pass, tens
of thousands of times in a simulated grid. :func:`trusted` sets the instance state directly
(about 1 us). Every field must be given, with a valid value: callers are library code
that computed those values itself.
"""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel

__all__ = ["trusted"]

M = TypeVar("M", bound=BaseModel)

_new = object.__new__  # BaseModel defines no __new__: this is what model.__new__ resolves to
_set = object.__setattr__


def trusted(model: type[M], **values: Any) -> M:
    """Return a ``model`` instance holding ``values`` without validation.

    ``values`` must name every field of ``model`` with a valid value.
    """
    obj: M = _new(model)
    _set(obj, "__dict__", values)
    _set(obj, "__pydantic_fields_set__", set(values))
    _set(obj, "__pydantic_extra__", None)
    _set(obj, "__pydantic_private__", None)
    return obj

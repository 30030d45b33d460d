"""Small helpers shared by the consolidation passes (option checks, capability lookup)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from cycgraph_memory.errors import InvalidInputError

__all__ = ["check_batch_size", "check_delete_mode", "check_unit_interval", "require"]


def check_delete_mode(value: object) -> Any:
    """Return ``value`` when it is ``"soft"`` or ``"hard"``, else raise InvalidInputError."""
    if value not in ("soft", "hard"):
        raise InvalidInputError(f"delete_mode must be 'soft' or 'hard', got {value!r}")
    return value


def check_batch_size(value: object) -> int:
    """Return ``value`` when it is an int in [1, 100000], else raise InvalidInputError."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 100_000:
        raise InvalidInputError(f"batch_size must be an integer in [1, 100000], got {value!r}")
    return value


def check_unit_interval(name: str, value: object) -> float:
    """Return ``value`` as a float when it is a number in [0, 1], else raise."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
        raise InvalidInputError(f"{name} must be a number in [0, 1], got {value!r}")
    return float(value)


def require(store: object, method: str) -> Callable[..., Any]:
    """The store's optional batched-lookup method ``method``, or a clear error."""
    fn = getattr(store, method, None)
    if fn is None:
        raise InvalidInputError(
            f"{type(store).__name__} has no {method}(); consolidation needs the batched "
            "lookups that InMemoryMemoryStore and PostgresMemoryStore provide"
        )
    return fn  # type: ignore[no-any-return]

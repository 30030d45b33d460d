"""Small helpers shared by the consolidation passes (option checks, capability lookup)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any, Literal

from cycgraph_memory.errors import InvalidInputError

__all__ = [
    "check_batch_size",
    "check_delete_mode",
    "check_unit_interval",
    "require",
    "scan",
]


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


async def scan(
    store: Any, kind: Literal["facts", "entities"], page_size: int, **filters: Any
) -> AsyncIterator[list[Any]]:
    """Pages of every matching fact / entity, in the listing order.

    Uses the store's optional ``scan_facts`` / ``scan_entities`` capability (one sort in
    memory, keyset pages on Postgres) when present, else ``find_*`` with ``offset`` paging.
    """
    fast = getattr(store, f"scan_{kind}", None)
    if fast is not None:
        async for page in fast(page_size=page_size, **filters):
            yield page
        return
    finder = store.find_facts if kind == "facts" else store.find_entities
    offset = 0
    while True:
        page = await finder(limit=page_size, offset=offset, **filters)
        if page:
            yield page
        if len(page) < page_size:
            return
        offset += page_size

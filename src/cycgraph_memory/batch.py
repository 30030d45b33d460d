"""Batch-get fallback for custom stores without native batch retrieval."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from typing import TypeVar

from cycgraph_memory.errors import InvalidTypeError

__all__ = ["batch_get_fallback"]

K = TypeVar("K")
V = TypeVar("V")


async def batch_get_fallback(
    ids: Iterable[K],
    get_single: Callable[[K], Awaitable[V | None]],
    *,
    concurrency: int = 16,
) -> dict[K, V]:
    """Resolve ``get_single`` for every id and return the found records by id.

    Missing ids (``get_single`` returned ``None``) are absent from the result. Duplicate
    ids are fetched once. At most ``concurrency`` calls run at the same time, so a large
    batch never floods a connection pool; production backends should implement batch
    getters natively (``WHERE id = ANY(:ids)``).

    Raises:
        InvalidTypeError: ``ids`` is not an iterable of ids (``None``, a single string),
            ``get_single`` is not callable, or ``concurrency`` is not an int >= 1.
    """
    if isinstance(ids, str | bytes) or not isinstance(ids, Iterable):
        raise InvalidTypeError(f"ids must be an iterable of ids, got {type(ids).__name__}")
    if not callable(get_single):
        raise InvalidTypeError(f"get_single must be callable, got {type(get_single).__name__}")
    if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
        raise InvalidTypeError(f"concurrency must be an int >= 1, got {concurrency!r}")
    unique = list(dict.fromkeys(ids))
    gate = asyncio.Semaphore(concurrency)

    async def one(key: K) -> tuple[K, V | None]:
        async with gate:
            return key, await get_single(key)

    pairs = await asyncio.gather(*(one(k) for k in unique))
    return {k: v for k, v in pairs if v is not None}

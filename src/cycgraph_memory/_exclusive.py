"""``exclusive_pass``: run a maintenance pass as one exclusive unit of work on any store."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import cast

from cycgraph_memory.contracts import MemoryStore, SupportsExclusive

__all__ = ["exclusive_pass"]


@asynccontextmanager
async def exclusive_pass(store: MemoryStore, name: str) -> AsyncIterator[None]:
    """Open the store's exclusive unit of work for the pass ``name``.

    Stores with the optional ``exclusive(name)`` capability serialise passes of the same
    name (a per-tenant advisory lock on Postgres); others fall back to a plain
    ``transaction()``, which still makes the pass all-or-nothing.
    """
    # hasattr, not isinstance: a runtime Protocol check costs ~15 us, and passes may run
    # after every agent run (the gate simulator runs tens of thousands).
    if hasattr(store, "exclusive"):
        async with cast(SupportsExclusive, store).exclusive(name):
            yield
    else:
        async with store.transaction():
            yield

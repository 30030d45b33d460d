"""``exclusive_pass``: run a maintenance pass as one exclusive unit of work on any store."""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from typing import cast

from cycgraph_memory.contracts import MemoryStore, SupportsExclusive

__all__ = ["exclusive_pass"]


def exclusive_pass(store: MemoryStore, name: str) -> AbstractAsyncContextManager[None]:
    """Open the store's exclusive unit of work for the pass ``name``.

    Stores with the optional ``exclusive(name)`` capability serialise passes of the same
    name (a per-tenant advisory lock on Postgres); others fall back to a plain
    ``transaction()``, which still makes the pass all-or-nothing. Use it as
    ``async with exclusive_pass(store, "retention-gate"): ...``.
    """
    # hasattr, not isinstance: a runtime Protocol check costs ~15 us, and passes may run
    # after every agent run (the gate simulator runs tens of thousands). The store's own
    # context manager is returned as is: no extra wrapper on that hot path.
    if hasattr(store, "exclusive"):
        return cast(SupportsExclusive, store).exclusive(name)
    return store.transaction()

"""``exclusive_pass``: run a maintenance pass as one exclusive unit of work on any store."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager
from typing import cast

from cycgraph_memory.contracts import MemoryStore, SupportsExclusive

__all__ = ["FACTS_LOCK", "PASS_LOCK_ORDER", "THEMES_LOCK", "exclusive_pass", "exclusive_passes"]

FACTS_LOCK = "facts"
"""Lock held by every pass that writes back existing facts it read.

Entity resolution, consolidation, conflict resolution, ``Memory.forget``, the retention
gate and purge read facts and write whole records back; holding this lock besides their
own, none of them commits between another one's read and its write (a lesson the gate
quarantines while consolidation runs is not un-quarantined by consolidation's write)."""

THEMES_LOCK = "themes"
"""Lock held by every writer of themes: ingest while it assigns and writes themes,
consolidation, purge, and the passes that repair the themes of the facts they invalidate
(the gate, conflict resolution, ``Memory.forget``). It comes last in
:data:`PASS_LOCK_ORDER`, so a pass holding others may take it late, only when it has a
theme to repair."""

PASS_LOCK_ORDER: tuple[str, ...] = (
    "purge",
    "consolidation",
    "entity-resolution",
    "conflict-resolution",
    "forget",
    "retention-gate",
    FACTS_LOCK,
    THEMES_LOCK,
)
"""The one order in which a pass takes several locks (:func:`exclusive_passes`): two
passes needing the same locks take them in the same order, so they never deadlock."""


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


@contextlib.asynccontextmanager
async def exclusive_passes(store: MemoryStore, *names: str) -> AsyncIterator[None]:
    """One unit of work holding the locks ``names``, taken in :data:`PASS_LOCK_ORDER`.

    For a pass that must not interleave with other passes (each named by its lock); names
    outside that order are taken after it, in the order given. A store without
    ``exclusive`` runs the block in one ``transaction()``.
    """
    rank = {name: i for i, name in enumerate(PASS_LOCK_ORDER)}
    ordered = sorted(dict.fromkeys(names), key=lambda n: rank.get(n, len(rank)))
    if not hasattr(store, "exclusive"):
        async with store.transaction():
            yield
        return
    async with contextlib.AsyncExitStack() as locks:
        for name in ordered:
            await locks.enter_async_context(cast(SupportsExclusive, store).exclusive(name))
        yield

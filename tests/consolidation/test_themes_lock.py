"""The consolidation pass holds the ingest's themes lock (found by the soak)."""

from __future__ import annotations

import asyncio

from cycgraph_memory.consolidation import MemoryConsolidator
from cycgraph_memory.hierarchy.pipeline import THEMES_LOCK
from cycgraph_memory.inmemory.store import InMemoryMemoryStore


async def _scenario() -> tuple[bool, bool]:
    store = InMemoryMemoryStore()
    release = asyncio.Event()
    held = asyncio.Event()

    async def ingest_like() -> None:
        async with store.exclusive(THEMES_LOCK):
            held.set()
            await release.wait()

    holder = asyncio.create_task(ingest_like())
    await held.wait()
    task = asyncio.create_task(MemoryConsolidator(store).consolidate())
    await asyncio.sleep(0.05)
    blocked = not task.done()
    release.set()
    await holder
    await task
    return blocked, task.done()


def test_consolidation_waits_for_the_themes_lock() -> None:
    blocked, finished = asyncio.run(_scenario())
    assert blocked
    assert finished

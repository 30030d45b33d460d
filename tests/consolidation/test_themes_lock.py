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


async def _forget_scenario(themed: bool) -> tuple[bool, bool]:
    """Forget a fact while an ingest-like task holds the themes lock."""
    from cycgraph_memory import Memory
    from cycgraph_memory.inmemory import InMemoryMemoryIndex
    from cycgraph_memory.records import Provenance, SemanticFact, Theme

    store = InMemoryMemoryStore()
    prov = Provenance(source="agent")
    theme = Theme(label="Deploys go out on Fridays", provenance=prov)
    fact = SemanticFact(content="Deploys go out on Fridays", provenance=prov,
                        theme_id=theme.id if themed else None)
    if themed:
        await store.put_theme(theme.model_copy(update={"fact_ids": [fact.id]}))
    await store.put_fact(fact)
    release = asyncio.Event()
    held = asyncio.Event()

    async def ingest_like() -> None:
        async with store.exclusive(THEMES_LOCK):
            held.set()
            await release.wait()

    holder = asyncio.create_task(ingest_like())
    await held.wait()
    task = asyncio.create_task(Memory(store, InMemoryMemoryIndex()).forget([fact.id]))
    await asyncio.sleep(0.05)
    blocked = not task.done()
    release.set()
    await holder
    await task
    return blocked, task.done()


def test_forget_repairs_themes_under_the_themes_lock() -> None:
    """Forgetting a fact of a theme waits for ingest's theme assignment; others do not."""
    assert asyncio.run(_forget_scenario(themed=True)) == (True, True)
    assert asyncio.run(_forget_scenario(themed=False)) == (False, True)

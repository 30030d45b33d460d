"""The consolidation pass holds the ingest's themes lock (found by the soak)."""

from __future__ import annotations

import asyncio
from typing import Any

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


async def _blocked_while_themes_locked(store: InMemoryMemoryStore, work: Any) -> tuple[bool, Any]:
    """Run ``work()`` while an ingest-like task holds the themes lock."""
    release = asyncio.Event()
    held = asyncio.Event()

    async def ingest_like() -> None:
        async with store.exclusive(THEMES_LOCK):
            held.set()
            await release.wait()

    holder = asyncio.create_task(ingest_like())
    await held.wait()
    task = asyncio.create_task(work())
    await asyncio.sleep(0.05)
    blocked = not task.done()
    release.set()
    await holder
    return blocked, await task


async def _gate_scenario() -> tuple[bool, Any, Any]:
    from cycgraph_memory.inmemory.ledger import InMemoryOutcomeLedger
    from cycgraph_memory.records import Provenance, RunOutcome, SemanticFact, Theme
    from cycgraph_memory.retention import evaluate_retention

    store = InMemoryMemoryStore()
    ledger = InMemoryOutcomeLedger()
    prov = Provenance(source="agent")
    theme = Theme(label="Skip the tests on Fridays", provenance=prov)
    bad = SemanticFact(content="Skip the tests on Fridays", provenance=prov,
                       tags=["lesson", "candidate"], theme_id=theme.id)
    other = SemanticFact(content="Run the tests before a deploy", provenance=prov,
                         theme_id=theme.id)
    await store.put_theme(theme.model_copy(update={"fact_ids": [bad.id, other.id]}))
    await store.put_facts([bad, other])
    for i, score in enumerate([0.1, 0.12, 0.08, 0.45, 0.5, 0.55, 0.5, 0.48, 0.52]):
        await ledger.record_outcome(
            RunOutcome(run_id=f"r{i}", score=score, fact_ids=[bad.id] if i < 3 else [])
        )
    blocked, report = await _blocked_while_themes_locked(
        store, lambda: evaluate_retention(store, ledger)
    )
    return blocked, report, await store.get_theme(theme.id)


def test_gate_evicts_under_the_themes_lock_and_relabels() -> None:
    """An eviction of a lesson in a theme waits for ingest's theme assignment."""
    blocked, report, theme = asyncio.run(_gate_scenario())
    assert blocked
    assert [e.reason for e in report.evicted] == ["eval-gate:harmful"]
    assert theme.label == "Run the tests before a deploy"

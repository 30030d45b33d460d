"""In-memory counterparts of ``tests/postgres/test_cross_operation_races_audit15.py``.

Two asyncio tasks run different operations on one ``InMemoryMemoryStore``; one of them
is paused inside its unit of work (a store subclass awaiting an ``asyncio.Event`` in the
named method) while the other runs. The in-memory backend serialises passes with its
``exclusive(name)`` locks (``asyncio.Lock``) and does not isolate a unit of work from
other tasks, so only the operations that take a pass lock can be made to queue here.
"""

from __future__ import annotations

import asyncio
import io
import json
import uuid
from typing import Any

from cycgraph_memory import InMemoryMemoryStore
from cycgraph_memory.consolidation import MemoryConsolidator
from cycgraph_memory.lifecycle import export, import_
from cycgraph_memory.records import Provenance, SemanticFact, Theme

from .factories import at

DIM = 4


class _Paused(InMemoryMemoryStore):
    """An in-memory store whose first ``method`` call waits for ``go`` (``reached`` set)."""

    def __init__(self, method: str) -> None:
        self._method = method
        self.reached = asyncio.Event()
        self.go = asyncio.Event()
        super().__init__()

    def __getattribute__(self, name: str) -> Any:
        attr = super().__getattribute__(name)
        if name != object.__getattribute__(self, "_method") or not callable(attr):
            return attr

        async def paused(*args: Any, **kw: Any) -> Any:
            if not self.go.is_set() and not self.reached.is_set():  # the first call only
                self.reached.set()
                await self.go.wait()
            return await attr(*args, **kw)

        return paused


def _fact(content: str, vec: list[float], theme_id: uuid.UUID, days: int = 0) -> SemanticFact:
    return SemanticFact(
        content=content,
        embedding=vec,
        theme_id=theme_id,
        provenance=Provenance(source="agent"),
        valid_from=at(days=days),
    )


async def test_import_waits_for_a_consolidation_rewriting_the_theme_it_brings_a_fact_into() -> None:
    """The import's unit holds the ``facts``/``themes`` locks: it lands after the pass.

    Before the fix the import wrote theme X (now also listing f3) while the paused pass
    held X as read, and the pass's write dropped f3 from it.
    """
    vec = [1.0, 0.0, 0.0, 0.0]
    theme_id = uuid.uuid4()
    f1 = _fact("Builds use Bazel.", vec, theme_id, days=1)
    f2 = _fact("Builds use Bazel!", vec, theme_id)
    f3 = _fact("Releases are tagged.", [0.0, 1.0, 0.0, 0.0], theme_id)
    x = Theme(
        id=theme_id,
        label="builds",
        provenance=Provenance(source="agent"),
        embedding=vec,
        fact_ids=[f1.id, f2.id],
    )
    store = _Paused("put_facts")
    store.go.set()  # no pause while seeding
    await store.put_themes([x])
    await store.put_facts([f1, f2])
    newer = InMemoryMemoryStore()
    await newer.put_themes([x.model_copy(update={"fact_ids": [f1.id, f2.id, f3.id]})])
    await newer.put_facts([f1, f2, f3])
    full = io.StringIO()
    await export(newer, full)
    lines = [json.loads(line) for line in full.getvalue().splitlines()]
    kept = [
        line for line in lines if line.get("type") != "fact" or line["record"]["id"] == str(f3.id)
    ]
    kept[-1]["counts"]["fact"] = 1
    dump = io.StringIO("".join(json.dumps(line) + "\n" for line in kept))

    store.go.clear()
    passing = asyncio.ensure_future(
        MemoryConsolidator(store, None, dedup_threshold=0.95).consolidate()
    )
    await asyncio.wait_for(store.reached.wait(), 5)
    importing = asyncio.ensure_future(import_(store, dump))
    await asyncio.wait({importing}, timeout=1.0)  # time enough to land, were it not queued
    landed_early = importing.done()
    store.go.set()
    report = await asyncio.wait_for(passing, 5)
    imported = await asyncio.wait_for(importing, 5)
    assert report.facts_deduped == 1 and imported.counts["fact"] == 1
    [theme] = await store.list_themes(include_invalidated=True)
    got = await store.get_facts([f1.id, f2.id, f3.id])
    assert theme.fact_ids == [f1.id, f2.id, f3.id]  # the import's X, written last
    assert got[f3.id].theme_id == theme_id
    for f in got.values():  # every live fact listed by its theme
        if f.invalidated_by is None:
            assert f.id in theme.fact_ids
    assert not landed_early  # it queued behind the pass's locks

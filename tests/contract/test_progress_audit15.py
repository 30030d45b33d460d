"""Progress callbacks (fifteenth audit pass), on both backends.

``docs/observability.md``: a callback that raises stops the operation like any other
error. Each writing operation's events are checked for order and totals, then the
operation is run again with a callback that raises on its k-th event, for every k: the
store and the index hold exactly what they held before (the unit of work rolled back).

Bug this module found (failed before its fix): ``MemoryPipeline.ingest`` (so
``Memory.add``) and ``MemoryConsolidator.consolidate`` sent their last event
(``stage="write"``) after their unit of work had committed. A callback raising on it
made the call raise although everything was written (a caller retrying a failed
``Memory.add`` of messages without ids stored them twice), and ``consolidate`` skipped
the sync of an in-memory index: searches served records the store had rewritten.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from cycgraph_memory import (
    EntityResolver,
    HashingEmbeddingProvider,
    MemoryConsolidator,
    MemoryPipeline,
    ProgressEvent,
)
from cycgraph_memory.lifecycle.export import export_lines

from .factories import EMBED_DIM, make_entity

MESSAGES = [
    {"role": "user", "content": "Nadia Cole owns the billing service."},
    {"role": "user", "content": "nadia cole owns the billing service nightly."},
    {"role": "user", "content": "Omar Reyes runs the deploy pipeline."},
]


class Stop(Exception):
    """Raised by the callback."""


async def snapshot(store: Any, index: Any) -> tuple[list[str], list[Any]]:
    """Every record of the store (export lines) and what a text search of the index finds."""
    lines = [line async for line in export_lines(store)]
    [query] = await HashingEmbeddingProvider(dimensions=EMBED_DIM).embed(["Nadia Cole billing"])
    facts = await index.search_facts(query, limit=50)
    entities = await index.search_entities(query, limit=50)
    return lines[1:], sorted(str(h.item.id) for h in [*facts, *entities])


def pipeline(store: Any, index: Any) -> MemoryPipeline:
    return MemoryPipeline(
        store, index=index, embedder=HashingEmbeddingProvider(dimensions=EMBED_DIM)
    )


async def seeded(store: Any, index: Any) -> None:
    """A tenant with a near-duplicate fact (consolidation work) and duplicate entities."""
    await pipeline(store, index).ingest(MESSAGES)
    await store.put_entities([make_entity(name="Nadia  Cole"), make_entity(name="nadia cole")])


Op = Callable[[Any, Any, Callable[[ProgressEvent], None]], Awaitable[object]]


async def _ingest(store: Any, index: Any, progress: Callable[[ProgressEvent], None]) -> object:
    return await pipeline(store, index).ingest(
        [{"role": "user", "content": "Paula Diaz owns the search cluster."}], progress=progress
    )


async def _consolidate(store: Any, index: Any, progress: Callable[[ProgressEvent], None]) -> object:
    return await MemoryConsolidator(store, index).consolidate(progress=progress)


async def _resolve(store: Any, index: Any, progress: Callable[[ProgressEvent], None]) -> object:
    return await EntityResolver(store, index=index).resolve(progress=progress)


OPERATIONS: dict[str, tuple[str, Op]] = {
    "ingest": ("ingest", _ingest),
    "consolidate": ("consolidate", _consolidate),
    "resolve": ("resolve-entities", _resolve),
}


@pytest.mark.parametrize("name", list(OPERATIONS))
async def test_events_are_ordered_and_a_raising_callback_changes_nothing(
    store: Any, index: Any, name: str
) -> None:
    operation, run = OPERATIONS[name]
    await seeded(store, index)
    before = await snapshot(store, index)

    # A dry look at the events: raise on an event past the last one never happens, so
    # record them on a throw-away run and roll it back by raising at the very end.
    events: list[ProgressEvent] = []

    def record_then_stop(event: ProgressEvent) -> None:
        events.append(event)
        if event.stage == "write" or (name == "resolve" and event.done == event.total):
            raise Stop

    with pytest.raises(Stop):
        await run(store, index, record_then_stop)
    assert await snapshot(store, index) == before, "raising on the last event wrote"
    assert events and {e.operation for e in events} == {operation}
    done = [e.done for e in events]
    assert done == sorted(done), done
    assert all(e.total is not None and 0 <= e.done <= e.total for e in events), events
    assert events[-1].done == events[-1].total and events[-1].fraction == 1.0
    if name == "consolidate":
        assert [(e.done, e.stage) for e in events] == [
            (0, "load"),
            (1, "dedup"),
            (2, "decay"),
            (3, "episodes"),
            (4, "themes"),
            (5, "planned"),
            (6, "write"),
        ]
    if name == "ingest":
        assert [(e.done, e.total, e.stage) for e in events] == [(1, 1, "extract"), (1, 1, "write")]

    for k in range(len(events)):
        seen = 0

        def stop_at_k(event: ProgressEvent, k: int = k) -> None:
            nonlocal seen
            seen += 1
            if seen == k + 1:
                raise Stop

        with pytest.raises(Stop):
            await run(store, index, stop_at_k)
        assert await snapshot(store, index) == before, (name, k)

    # And without a failing callback the operation writes (the runs above were not
    # no-ops by accident).
    await run(store, index, lambda event: None)
    assert await snapshot(store, index) != before

"""Audit 5: periods of a relation through chat ingest (both backends).

docs/extraction.md: "no longer works at" closes the open edge, and the relation said again
later "starts a new edge from that message: an edge repeats a stored one (and is not
written) only when their validity windows overlap". These tests say the three in one
ingest call, where the ending and the new period were lost.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from cycgraph_memory import (
    HashingEmbeddingProvider,
    InvalidInputError,
    MemoryPipeline,
    MemoryQuery,
    Message,
    RetrievalOptions,
    RuleBasedExtractor,
    retrieve_memory,
)
from cycgraph_memory.retrieval import extract_subgraph

from .factories import EMBED_DIM, make_entity, make_relationship

T0 = datetime(2026, 1, 1, tzinfo=UTC)
WORKS = "Helen Marsh works at Tidewater Software."
ENDED = "Helen Marsh no longer works at Tidewater Software."


def _pipeline(store: Any, index: Any) -> MemoryPipeline:
    return MemoryPipeline(store, index=index, extractor=RuleBasedExtractor(),
                          embedder=HashingEmbeddingProvider(dimensions=EMBED_DIM))


def _said(at: timedelta, text: str) -> Message:
    return Message(role="user", content=text, timestamp=T0 + at)


async def _work_windows(store: Any) -> list[tuple[timedelta, timedelta | None]]:
    """The ``work_at`` windows of Helen Marsh (live edges), relative to ``T0``."""
    helen = next(e for e in await store.find_entities() if e.name == "Helen Marsh")
    edges = await store.get_relationships_for_entity(helen.id)
    return sorted(
        (r.valid_from - T0, None if r.valid_until is None else r.valid_until - T0)
        for r in edges if r.relation_type == "work_at"
    )


async def _served_at(store: Any, index: Any, at: timedelta, native: bool) -> int:
    helen = next(e for e in await store.find_entities() if e.name == "Helen Marsh")
    result = await retrieve_memory(
        store, index, MemoryQuery(entity_ids=[helen.id], max_hops=1, valid_at=T0 + at),
        options=RetrievalOptions(native_paths=native),
    )
    return len([r for r in result.relationships if r.relation_type == "work_at"])


DAY = timedelta(days=1)


async def test_ended_then_said_again_in_one_ingest_after_a_stored_open_edge(
    store: Any, index: Any
) -> None:
    # The new edge was checked against the stored edge while still open (the marker
    # closes it only afterwards), so it "repeated" it and the second period was lost.
    pipeline = _pipeline(store, index)
    await pipeline.ingest([_said(0 * DAY, WORKS)])
    report = await pipeline.ingest([_said(30 * DAY, ENDED), _said(60 * DAY, WORKS),
                                    _said(90 * DAY, ENDED)])
    assert len(report.relationship_ids) == 2  # the stored edge closed, the new period
    assert await _work_windows(store) == [(0 * DAY, 30 * DAY), (60 * DAY, 90 * DAY)]
    for native in (True, False):
        served = [await _served_at(store, index, d * DAY, native) for d in (10, 45, 70, 95)]
        assert served == [1, 0, 1, 0]


async def test_said_again_after_an_edge_that_ended_in_an_earlier_episode_of_the_ingest(
    store: Any, index: Any
) -> None:
    # The first episode opens and closes the edge itself; the batch merge of entities
    # then took the later period for a repeat of the closed edge (same triple).
    await _pipeline(store, index).ingest([
        _said(timedelta(0), WORKS),
        _said(timedelta(seconds=30), ENDED),
        _said(60 * DAY, WORKS),
    ])
    assert await _work_windows(store) == [
        (timedelta(0), timedelta(seconds=30)), (60 * DAY, None)
    ]


async def test_said_again_after_it_ended_within_one_episode(store: Any, index: Any) -> None:
    # The extractor kept one relationship per triple and episode: the second period
    # (and its own ending) vanished.
    await _pipeline(store, index).ingest([
        _said(timedelta(seconds=0), WORKS),
        _said(timedelta(seconds=30), ENDED),
        _said(timedelta(seconds=60), WORKS),
        _said(timedelta(seconds=90), WORKS),  # repeats the open second period
        _said(timedelta(seconds=120), ENDED),
    ])
    s = timedelta(seconds=1)
    assert await _work_windows(store) == [(0 * s, 30 * s), (60 * s, 120 * s)]


@pytest.mark.parametrize(
    "valid_at",
    [
        datetime(1, 1, 1, tzinfo=timezone(timedelta(hours=5))),  # before year 1 in UTC
        datetime(9999, 12, 31, 23, tzinfo=timezone(timedelta(hours=-5))),  # after 9999
        datetime.max.replace(tzinfo=UTC),  # Postgres's "infinity": MemoryQuery refuses it
    ],
)
async def test_subgraph_valid_at_outside_the_utc_range_is_a_typed_error(
    store: Any, valid_at: datetime
) -> None:
    # A bare OverflowError escaped from the conversion to UTC; MemoryQuery raises a
    # ValidationError for the same instants.
    a, b = make_entity(name="A"), make_entity(name="B")
    await store.put_entities([a, b])
    await store.put_relationship(make_relationship(a.id, b.id))
    for native in (True, False):
        with pytest.raises(InvalidInputError, match="valid_at"):
            await extract_subgraph(store, [a.id], valid_at=valid_at, native=native)
    with pytest.raises(ValueError, match="valid_at"):
        MemoryQuery(entity_ids=[a.id], valid_at=valid_at)

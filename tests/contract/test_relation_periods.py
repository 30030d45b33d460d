"""Contract: a relation that ended and is said again starts a new period (both backends).

Ingest-time entity resolution skips an edge that repeats a stored one; it repeats one
only while their validity windows overlap, so "works at" said after a stored "no longer
works at" closed the first edge is written as a second edge.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from cycgraph_memory import (
    HashingEmbeddingProvider,
    MemoryPipeline,
    MemoryQuery,
    Message,
    RuleBasedExtractor,
    retrieve_memory,
)

from .factories import EMBED_DIM

T0 = datetime(2026, 1, 1, tzinfo=UTC)


async def test_a_relation_said_again_after_it_ended_is_a_new_edge(store: Any, index: Any) -> None:
    pipeline = MemoryPipeline(store, index=index, extractor=RuleBasedExtractor(),
                              embedder=HashingEmbeddingProvider(dimensions=EMBED_DIM))
    said = [(0, "Helen Marsh works at Tidewater Software."),
            (30, "Helen Marsh no longer works at Tidewater Software."),
            (60, "Helen Marsh works at Tidewater Software."),
            (61, "Helen Marsh works at Tidewater Software.")]  # repeats the open edge
    written = []
    for day, text in said:
        report = await pipeline.ingest(
            [Message(role="user", content=text, timestamp=T0 + timedelta(days=day))]
        )
        written.append(len(report.relationship_ids))
    assert written == [1, 1, 1, 0]
    helen = next(e for e in await store.find_entities() if e.name == "Helen Marsh")
    edges = await store.get_relationships_for_entity(helen.id)
    windows = sorted(
        ((r.valid_from - T0).days, r.valid_until and (r.valid_until - T0).days)
        for r in edges if r.relation_type == "work_at"
    )
    assert windows == [(0, 30), (60, None)]
    for day, expected in [(10, 1), (45, 0), (70, 1)]:
        result = await retrieve_memory(store, index, MemoryQuery(
            entity_ids=[helen.id], max_hops=1, valid_at=T0 + timedelta(days=day)))
        assert len([r for r in result.relationships if r.relation_type == "work_at"]) == expected

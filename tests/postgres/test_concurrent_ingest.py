"""Eight real concurrent ingesters into one tenant: themes stay consistent, messages unique.

Runs on the engine (real commits, own tenant, cleaned up), not on the rolled-back test
connection: the point is real interleavings of real transactions.
"""

from __future__ import annotations

import asyncio
import secrets
import uuid
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import text

from cycgraph_memory import Message
from cycgraph_memory.demo import load_sample_messages
from cycgraph_memory.embeddings.hashing import HashingEmbeddingProvider
from cycgraph_memory.hierarchy.pipeline import MemoryPipeline
from cycgraph_memory.retry import NO_RETRY

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

WORKERS = 8
ROUNDS = 5
BATCHES = 9  # distinct message batches; workers overlap on them
NS = uuid.UUID("6b2b0c1e-6f3e-4a8e-9d0e-13a1c0de0013")


def _batch(key: int) -> list[Message]:
    """The sample conversation with ids and times of its own (same key -> same ids)."""
    return [
        m.model_copy(
            update={
                "id": uuid.uuid5(NS, f"{key}:{i}"),
                "timestamp": m.timestamp + timedelta(days=key),
            }
        )
        for i, m in enumerate(load_sample_messages())
    ]


async def _ingester(engine: Any, tenant: str, worker: int) -> list[Any]:
    from cycgraph_memory.postgres import PostgresMemoryStore

    store = PostgresMemoryStore(engine, tenant_id=tenant)
    # NO_RETRY: a deadlock or serialization failure must not be hidden by a retry here.
    pipeline = MemoryPipeline(
        store, embedder=HashingEmbeddingProvider(dimensions=8), retry=NO_RETRY
    )
    reports = []
    for r in range(ROUNDS):
        key = (worker * 2 + r) % BATCHES
        reports.append(await pipeline.ingest(_batch(key)))
    return reports


async def test_eight_concurrent_ingesters_keep_themes_and_messages_consistent(
    pg_engine: Any,
) -> None:
    from cycgraph_memory.postgres import PostgresMemoryStore

    tenant = f"conc_{secrets.token_hex(5)}"
    store = PostgresMemoryStore(pg_engine, tenant_id=tenant)
    try:
        results = await asyncio.gather(
            *(_ingester(pg_engine, tenant, w) for w in range(WORKERS))
        )
        sent = {m.id for r in range(ROUNDS) for w in range(WORKERS)
                for m in _batch((w * 2 + r) % BATCHES)}
        ingested = sum(rep.messages_ingested for reps in results for rep in reps)
        assert ingested == len(sent)  # each message ingested by exactly one call

        async with pg_engine.connect() as conn:
            dupes = (await conn.execute(text(
                "SELECT id FROM episode_messages WHERE tenant_id = :t "
                "GROUP BY id HAVING count(*) > 1"), {"t": tenant})).all()
            stored = {r[0] for r in await conn.execute(text(
                "SELECT id FROM episode_messages WHERE tenant_id = :t"), {"t": tenant})}
        assert dupes == []
        assert stored == sent

        facts = await store.find_facts()  # live facts
        themes = await store.list_themes()  # live themes
        assert facts and themes
        by_id = {t.id: t for t in themes}
        claims: dict[uuid.UUID, list[uuid.UUID]] = {}
        for t in themes:
            for fid in t.fact_ids:
                claims.setdefault(fid, []).append(t.id)
        for f in facts:
            assert f.theme_id in by_id, f"fact {f.id} points at a dead theme"
            assert claims.get(f.id) == [f.theme_id], f"fact {f.id} claimed by {claims.get(f.id)}"
        live_ids = {f.id for f in facts}
        for t in themes:
            assert set(t.fact_ids) <= live_ids | {
                f.id for f in await store.find_facts(theme_id=t.id, include_invalidated=True)
            }
        # One fact per (episode, content): no fact was written twice for one message.
        seen = [(tuple(f.source_episode_ids), f.content) for f in facts]
        assert len(seen) == len(set(seen))
    finally:
        await store.clear()

"""Maintenance passes against ingest on one tenant: no pass's committed write is undone.

Runs on the engine (real commits, own tenant, cleaned up), not on the rolled-back test
connection: the point is real interleavings of real transactions, each client in a fresh
``contextvars`` context (a task copies its caller's context, open unit of work included).
"""

from __future__ import annotations

import asyncio
import contextvars
import secrets
import uuid
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime
from typing import Any

import pytest

from cycgraph_memory import Provenance, SemanticFact
from cycgraph_memory.demo import load_sample_messages
from cycgraph_memory.embeddings.hashing import HashingEmbeddingProvider
from cycgraph_memory.hierarchy.pipeline import MemoryPipeline
from cycgraph_memory.memory import FORGOTTEN_BY, Memory
from cycgraph_memory.records import Theme
from cycgraph_memory.retry import NO_RETRY

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

DIM = 8
T0 = datetime(2026, 1, 1, tzinfo=UTC)
VEC = [1.0, 0.5, 0.25, 0.0, 0.0, 0.0, 0.0, 0.1]


class _MergeIntoNewTheme:
    """A clusterer that merges every existing candidate theme into one new theme."""

    async def cluster(
        self, facts: Sequence[SemanticFact], existing_themes: Sequence[Theme] | None = None
    ) -> list[Theme]:
        existing = list(existing_themes or [])
        theme = Theme(
            label="merged",
            fact_ids=[*(i for t in existing for i in t.fact_ids), *(f.id for f in facts)],
            embedding=VEC,
            provenance=Provenance(source="system", created_at=T0),
        )
        for fact in facts:
            fact.theme_id = theme.id
        return [theme]


def _hooked_store_class() -> type:
    from cycgraph_memory.postgres import PostgresMemoryStore

    class HookedStore(PostgresMemoryStore):  # type: ignore[misc]
        """Runs ``hook`` (once) right after ingest reads a merged-away theme's facts."""

        hook: Callable[[], Awaitable[None]] | None = None

        async def find_facts(self, filter: Any = None, /, **options: Any) -> Any:
            out = await super().find_facts(filter, **options)
            if options.get("theme_id") is not None and self.hook is not None:
                hook, self.hook = self.hook, None
                await hook()
            return out

    return HookedStore


async def test_forget_committed_during_an_ingest_theme_merge_stays_forgotten(
    pg_dsn: str,
) -> None:
    """Ingest re-points the facts of a merged-away theme and writes them back whole
    (``_remap_merged`` then ``put_facts``) while holding only ``THEMES_LOCK``. ``forget``
    holds ``"forget"`` and ``FACTS_LOCK``; since it also repairs the themes of the facts
    it forgets (audit 9), it takes ``THEMES_LOCK`` before writing a fact that names a
    theme, so it waits for the ingest to commit, then reads the fact again: the fact is
    forgotten, keeps the theme the ingest moved it to, and that theme stops quoting it.
    """
    from cycgraph_memory.postgres import (
        PostgresMemoryIndex,
        PostgresMemoryStore,
        create_engine_from_dsn,
    )

    tenant = f"stress_{secrets.token_hex(5)}"
    ingest_engine = create_engine_from_dsn(pg_dsn, pool_size=2)
    forget_engine = create_engine_from_dsn(pg_dsn, pool_size=2)
    store = _hooked_store_class()(ingest_engine, tenant_id=tenant)
    other = PostgresMemoryStore(forget_engine, tenant_id=tenant)
    try:
        theme = Theme(
            label="old", embedding=VEC, provenance=Provenance(source="system", created_at=T0)
        )
        fact = SemanticFact(
            content="the deploy needs a cache flush",
            embedding=VEC,
            theme_id=theme.id,
            provenance=Provenance(source="system", created_at=T0),
            valid_from=T0,
        )
        theme.fact_ids = [fact.id]
        await other.put_themes([theme])
        await other.put_facts([fact])
        forgetter = Memory(
            other,
            PostgresMemoryIndex(forget_engine, tenant_id=tenant),
            embedder=HashingEmbeddingProvider(dimensions=DIM),
        )
        forgotten: list[Any] = []
        pending: list[asyncio.Task[Any]] = []
        waited: list[bool] = []

        async def forget_now() -> None:
            # Another client, its own engine and a fresh context: not the ingest's unit.
            task = asyncio.create_task(
                forgetter.forget([fact.id]), context=contextvars.Context()
            )
            await asyncio.sleep(0.5)
            waited.append(not task.done())  # blocked on the themes lock the ingest holds
            pending.append(task)

        store.hook = forget_now
        pipeline = MemoryPipeline(
            store,
            embedder=HashingEmbeddingProvider(dimensions=DIM),
            index=PostgresMemoryIndex(ingest_engine, tenant_id=tenant),
            clusterer=_MergeIntoNewTheme(),
            retry=NO_RETRY,
        )
        messages = [m.model_copy(update={"id": uuid.uuid4()}) for m in load_sample_messages()]
        await pipeline.ingest(messages[:4])

        assert store.hook is None, "the ingest did not merge the old theme away"
        forgotten.append(await asyncio.wait_for(pending[0], timeout=10))
        assert waited == [True], "forget wrote the fact while the ingest held THEMES_LOCK"
        assert forgotten and forgotten[0].forgotten == [fact.id], "forget did not run"
        after = await other.get_fact(fact.id)
        assert after is not None
        assert after.invalidated_by == FORGOTTEN_BY, (
            "a fact forgotten during an ingest's theme merge came back live: "
            f"invalidated_by={after.invalidated_by!r}, theme_id={after.theme_id}"
        )
        assert after.theme_id not in (None, theme.id), "forget undid the ingest's remap"
        merged = await other.get_theme(after.theme_id)
        assert merged is not None and merged.invalidated_at is None
        assert merged.label not in ("merged", "the deploy needs a cache flush")
    finally:
        await other.clear()
        await ingest_engine.dispose()
        await forget_engine.dispose()

"""Consolidation locks the facts it writes in ONE id order, the retrieval touch's order.

Sixteenth audit. ``touch_facts`` (every retrieval that serves facts) locks its rows in
ascending id order. A consolidation that locked its facts chunk by chunk (its dedup
chunks in keeper order, then its decayed batches in score order, then, in hard mode, the
rows the store updates when an episode is deleted) could hold a higher id while waiting
for a lower one that a touch held, the touch then waiting for the higher one: a deadlock,
which Postgres breaks by aborting one transaction (``ConcurrencyError``, SQLSTATE 40P01).

Each case, on real commits and two connections: a touch holds the lowest fact A in its
open transaction; the pass starts and waits for A; the touch then touches C, a fact the
pass writes too. Locking in one ascending order, the pass holds nothing of C while it
waits for A: the touch commits, the pass goes on and writes both touches. Every wait is
bounded (``TIMEOUT``), so a failing case fails instead of hanging.
"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import pytest

from cycgraph_memory.consolidation import MemoryConsolidator
from cycgraph_memory.consolidation.consolidator import DECAY_REASON
from cycgraph_memory.retry import NO_RETRY

from ._records import T0, episode, fact, unit

pytestmark = [pytest.mark.postgres]

TIMEOUT = 30


@dataclass
class _Case:
    """One consolidation whose old lock order was not ascending across its locks."""

    batch_size: int
    options: dict[str, Any] = field(default_factory=dict)
    duplicates: bool = True  # C and D are duplicates (a group locked before A's)
    ab_duplicates: bool = False  # A and B are duplicates too (a second group)
    old_ab: bool = False  # A and B older than C and D (they decay first)
    old_cd: bool = False  # C and D older than A and B
    episode_of_a: bool = False  # A cites an episode the pass deletes (hard mode)


CASES = {
    # Two duplicate groups, keeper order {C, D} then {A, B}, one group per chunk: the old
    # pass held C and D while it waited for A.
    "dedup chunks": _Case(batch_size=2, ab_duplicates=True),
    # Four facts decayed, lowest scores C and D first, two per batch: the old pass held
    # C and D (first batch) while it waited for A (second batch).
    "decayed batches": _Case(
        batch_size=2, options={"max_facts": 0}, duplicates=False, old_cd=True
    ),
    # One chunk each: the merge of {C, D}, then the decay of A (the oldest), locked after.
    "merge then decay": _Case(batch_size=1000, options={"max_facts": 2}, old_ab=True),
    # Hard mode: the merge of {C, D}; deleting the pruned episode makes the store update
    # A, which cites it, at the write, after C and D were locked.
    "hard merge then episode cascade": _Case(
        batch_size=1000,
        options={"delete_mode": "hard", "max_episodes": 0},
        episode_of_a=True,
    ),
}


def _tenant() -> str:
    return f"lock16-{uuid.uuid4().hex[:10]}"


@pytest.mark.parametrize("name", list(CASES))
async def test_consolidation_and_a_touch_of_its_facts_queue_instead_of_deadlocking(
    pg_engine: Any, name: str
) -> None:
    from cycgraph_memory.postgres import PostgresMemoryStore

    case = CASES[name]
    tenant = _tenant()
    seed = PostgresMemoryStore(pg_engine, tenant_id=tenant)
    a, b, c, d = sorted(uuid.uuid4() for _ in range(4))
    newer, older = T0, T0 - timedelta(days=100)
    ep = episode()
    vectors = {
        a: unit(0),
        b: unit(0) if case.ab_duplicates else unit(1),
        c: unit(2),
        d: unit(2) if case.duplicates else unit(3),
    }
    when = {
        a: older if case.old_ab else newer,
        b: older if case.old_ab else newer,
        c: older if case.old_cd else newer + timedelta(days=1),
        d: older if case.old_cd else newer + timedelta(days=1),
    }
    counts = {a: 1, b: 2, c: 3, d: 4}
    try:
        if case.episode_of_a:
            await seed.put_episodes([ep])
        await seed.put_facts(
            [
                fact(
                    id=i,
                    content=f"fact {n}",
                    embedding=vectors[i],
                    valid_from=when[i],
                    access_count=counts[i],
                    source_episode_ids=[ep.id] if case.episode_of_a and i == a else [],
                )
                # stored highest id first: no listing order happens to be the id order
                for n, i in enumerate((d, c, b, a))
            ]
        )
        toucher = PostgresMemoryStore(pg_engine, tenant_id=tenant, retry=NO_RETRY)
        passer = PostgresMemoryStore(pg_engine, tenant_id=tenant, retry=NO_RETRY)
        consolidator = MemoryConsolidator(
            passer, None, batch_size=case.batch_size, dedup_threshold=0.99,
            clock=lambda: T0 + timedelta(days=2), **case.options,
        )
        holding, release = asyncio.Event(), asyncio.Event()

        async def touch_a_then_c() -> None:
            async with toucher.transaction():
                await toucher.touch_facts([a])
                holding.set()
                await release.wait()
                await toucher.touch_facts([c])

        async def consolidate() -> Any:
            await holding.wait()
            return await consolidator.consolidate()

        touching = asyncio.ensure_future(touch_a_then_c())
        passing = asyncio.ensure_future(consolidate())
        try:
            await asyncio.wait_for(holding.wait(), TIMEOUT)
            await _until_a_session_waits_for_a_lock(pg_engine)
        finally:
            # Whatever happened, the touch goes on and both transactions end.
            release.set()
            _, pending = await asyncio.wait({touching, passing}, timeout=TIMEOUT)
            for task in pending:
                task.cancel()
        assert not pending, "a transaction never ended"
        # Without the one order: ConcurrencyError (deadlock detected) from one of the two.
        await touching
        report = await passing
        got = await seed.get_facts([a, b, c, d])
        if name == "dedup chunks":
            assert report.facts_deduped == 2
            # keepers A and C (smallest ids): both touches summed into them
            assert got[a].access_count == 1 + 1 + 2 and got[a].invalidated_by is None
            assert got[c].access_count == 3 + 1 + 4 and got[c].invalidated_by is None
            assert got[b].invalidated_by == str(a) and got[d].invalidated_by == str(c)
        elif name == "decayed batches":
            assert report.facts_decayed == 4
            assert {f.invalidated_by for f in got.values()} == {DECAY_REASON}
            assert [got[i].access_count for i in (a, b, c, d)] == [2, 2, 4, 4]
        elif name == "merge then decay":
            assert (report.facts_deduped, report.facts_decayed) == (1, 1)
            # A and B the oldest; A (fewer accesses as loaded) decayed, its touch kept
            assert got[a].invalidated_by == DECAY_REASON and got[a].access_count == 2
            assert got[b].invalidated_by is None and got[b].access_count == 2
            assert got[c].access_count == 3 + 1 + 4 and got[d].invalidated_by == str(c)
        else:
            assert (report.facts_deduped, report.episodes_pruned) == (1, 1)
            assert d not in got and await seed.get_episode(ep.id) is None
            assert got[a].source_episode_ids == [] and got[a].access_count == 2
            assert got[c].access_count == 3 + 1 + 4
    finally:
        await seed.clear()


async def _until_a_session_waits_for_a_lock(engine: Any) -> None:
    """Return once another session of the test database waits for a lock (the pass)."""
    from sqlalchemy import text

    async with engine.connect() as probe:
        for _ in range(int(TIMEOUT / 0.01)):
            waiting = (
                await probe.execute(
                    text(
                        "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = "
                        "'Lock' AND datname = current_database() AND pid <> pg_backend_pid()"
                    )
                )
            ).scalar_one()
            await probe.rollback()
            if waiting:
                return
            await asyncio.sleep(0.01)
    raise AssertionError("the pass never waited for the touch's row")

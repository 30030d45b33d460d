"""Postgres ledger: append-only audit log, real-commit gate passes, concurrency, tenancy."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import secrets
import uuid
from typing import Any

import pytest
from sqlalchemy import event, text

from cycgraph_memory.errors import AppendOnlyViolationError
from cycgraph_memory.records import GateAuditEntry, RunOutcome, SemanticFact
from cycgraph_memory.retention import evaluate_retention

from ._records import fact

pytestmark = pytest.mark.postgres


class Boom(Exception):
    pass


def _candidate() -> SemanticFact:
    return fact(tags=["lesson", "candidate"])


async def _evidence(ledger: Any, good: SemanticFact, bad: SemanticFact) -> None:
    runs = [([good.id], s) for s in (0.9, 0.92, 0.88)] + [([bad.id], s) for s in (0.1, 0.12)]
    runs += [([bad.id], 0.08)] + [([], s) for s in (0.45, 0.5, 0.55, 0.5, 0.48, 0.52)]
    for i, (ids, score) in enumerate(runs):
        await ledger.record_outcome(RunOutcome(run_id=f"r{i}", score=score, fact_ids=ids))


async def test_audit_log_refuses_update_delete_and_truncate(pg_sessionmaker: Any,
                                                            pg_tenant: str) -> None:
    from cycgraph_memory.postgres import PostgresOutcomeLedger

    ledger = PostgresOutcomeLedger(pg_sessionmaker, tenant_id=pg_tenant)
    await ledger.append_gate_audit(
        [GateAuditEntry(pass_id=uuid.uuid4(), fact_id=uuid.uuid4(), verdict="held")]
    )
    for sql in (
        "UPDATE gate_audit_log SET verdict = 'promoted' WHERE tenant_id = :t",
        "DELETE FROM gate_audit_log WHERE tenant_id = :t",
        "TRUNCATE gate_audit_log",
    ):
        with pytest.raises(AppendOnlyViolationError) as info:
            async with ledger.transaction(), ledger._session() as session:
                await session.execute(text(sql), {"t": pg_tenant} if ":t" in sql else {})
        assert info.value.sqlstate == "CG001"
    entries = await ledger.list_gate_audit()
    assert [e.verdict for e in entries] == ["held"]


async def test_ledger_is_tenant_scoped(pg_sessionmaker: Any) -> None:
    from cycgraph_memory.postgres import PostgresOutcomeLedger

    a = PostgresOutcomeLedger(pg_sessionmaker, tenant_id=f"a_{secrets.token_hex(4)}")
    b = PostgresOutcomeLedger(pg_sessionmaker, tenant_id=f"b_{secrets.token_hex(4)}")
    fid = uuid.uuid4()
    await a.record_outcome(RunOutcome(run_id="same", score=0.9, fact_ids=[fid]))
    await b.record_outcome(RunOutcome(run_id="same", score=0.1, fact_ids=[fid]))
    await b.append_gate_audit([GateAuditEntry(pass_id=uuid.uuid4(), fact_id=fid,
                                              verdict="held")])
    assert (await a.get_fact_stats(fid)).mean_score == pytest.approx(0.9)
    assert (await b.get_fact_stats(fid)).mean_score == pytest.approx(0.1)
    assert (await a.get_baseline()).runs == 1
    assert await a.list_gate_audit() == []
    await a.clear()
    assert (await b.get_baseline()).runs == 1


async def test_stats_batch_is_one_statement(pg_engine: Any) -> None:
    from cycgraph_memory.postgres import PostgresOutcomeLedger

    ledger = PostgresOutcomeLedger(pg_engine, tenant_id=f"q_{secrets.token_hex(4)}")
    ids = [uuid.uuid4() for _ in range(50)]
    try:
        for i, fid in enumerate(ids):
            await ledger.record_outcome(RunOutcome(run_id=f"r{i}", score=0.5, fact_ids=[fid]))
        statements: list[str] = []

        def count(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
            statements.append(statement)

        event.listen(pg_engine.sync_engine, "before_cursor_execute", count)
        try:
            stats = await ledger.get_fact_stats_batch(ids)
        finally:
            event.remove(pg_engine.sync_engine, "before_cursor_execute", count)
        assert len(stats) == 50
        assert len([s for s in statements if "outcome_run_facts" in s]) == 1
    finally:
        await ledger.clear()


async def _in_fresh_context(coro: Any) -> Any:
    return await asyncio.create_task(coro, context=contextvars.Context())


@pytest.mark.slow
async def test_failed_pass_leaves_no_fact_change_and_no_audit_row(pg_engine: Any) -> None:
    """Real commits: the pass fails AFTER writing its audit rows; nothing survives."""
    from cycgraph_memory.postgres import PostgresMemoryStore, PostgresOutcomeLedger

    tenant = f"gate_{secrets.token_hex(4)}"
    store = PostgresMemoryStore(pg_engine, tenant_id=tenant)

    class FailingAfterAudit(PostgresOutcomeLedger):
        async def append_gate_audit(self, entries: Any) -> None:
            await super().append_gate_audit(entries)
            raise Boom

    ledger = FailingAfterAudit(pg_engine, tenant_id=tenant)
    plain = PostgresOutcomeLedger(pg_engine, tenant_id=tenant)
    good, bad = _candidate(), _candidate()
    try:
        await store.put_facts([good, bad])
        await _evidence(plain, good, bad)
        with pytest.raises(Boom):
            await evaluate_retention(store, ledger)
        assert await _in_fresh_context(store.get_fact(good.id)) == good
        assert await _in_fresh_context(store.get_fact(bad.id)) == bad
        assert await _in_fresh_context(plain.list_gate_audit()) == []

        report = await evaluate_retention(store, plain)  # the same pass, committed
        assert [p.fact_id for p in report.promoted] == [good.id]
        assert [e.fact_id for e in report.evicted] == [bad.id]
        audit = await _in_fresh_context(plain.list_gate_audit())
        assert {(e.fact_id, e.verdict) for e in audit} == {
            (good.id, "promoted"), (bad.id, "evicted")
        }
    finally:
        await store.clear()
        await plain.clear()


@pytest.mark.slow
async def test_concurrent_passes_end_in_the_state_of_one(pg_engine: Any) -> None:
    from cycgraph_memory.postgres import PostgresMemoryStore, PostgresOutcomeLedger

    tenant = f"gate_{secrets.token_hex(4)}"
    store = PostgresMemoryStore(pg_engine, tenant_id=tenant)
    ledger = PostgresOutcomeLedger(pg_engine, tenant_id=tenant)
    good, bad = _candidate(), _candidate()
    try:
        await store.put_facts([good, bad])
        await _evidence(ledger, good, bad)
        reports = await asyncio.gather(
            *(_in_fresh_context(evaluate_retention(store, ledger)) for _ in range(3))
        )
        promoted = [p.fact_id for r in reports for p in r.promoted]
        evicted = [e.fact_id for r in reports for e in r.evicted]
        assert promoted == [good.id] and evicted == [bad.id]  # decided exactly once
        assert (await store.get_fact(good.id)).tags == ["lesson", "verified"]
        assert (await store.get_fact(bad.id)).invalidated_by == "eval-gate:harmful"
        audit = await ledger.list_gate_audit()
        assert sorted(e.verdict for e in audit) == ["evicted", "promoted"]
    finally:
        await store.clear()
        await ledger.clear()


async def test_gate_reads_stats_and_baseline_from_one_snapshot(pg_engine: Any) -> None:
    """A run recorded (and committed) while a pass reads its evidence counts in both the
    candidate's stats and the all-runs baseline, or in neither. Read in two statements
    under READ COMMITTED, the run counted in the baseline only, and the candidate's
    leave-one-out baseline held one of its own runs (5 runs instead of 4)."""
    from cycgraph_memory.postgres import PostgresMemoryStore, PostgresOutcomeLedger

    tenant = f"s_{secrets.token_hex(4)}"
    store = PostgresMemoryStore(pg_engine, tenant_id=tenant)
    ledger = PostgresOutcomeLedger(pg_engine, tenant_id=tenant)
    other = PostgresOutcomeLedger(pg_engine, tenant_id=tenant)  # another writer
    lesson = _candidate()
    await store.put_facts([lesson])
    scores = [([lesson.id], s) for s in (0.9, 0.92, 0.88)]
    scores += [([], s) for s in (0.45, 0.5, 0.55, 0.5)]
    for i, (ids, score) in enumerate(scores):
        await ledger.record_outcome(RunOutcome(run_id=f"r{i}", score=score, fact_ids=ids))

    original = ledger._session
    fired: list[bool] = []

    @contextlib.asynccontextmanager
    async def session_then_a_new_run(*args: Any, **kwargs: Any) -> Any:
        async with original(*args, **kwargs) as session:
            execute = session.execute

            async def execute_then_record(*a: Any, **kw: Any) -> Any:
                result = await execute(*a, **kw)
                if not fired:  # right after the pass's first ledger read
                    fired.append(True)
                    await other.record_outcome(
                        RunOutcome(run_id="late", score=0.95, fact_ids=[lesson.id])
                    )
                return result

            session.execute = execute_then_record  # type: ignore[method-assign]
            try:
                yield session
            finally:
                del session.execute

    ledger._session = session_then_a_new_run  # type: ignore[method-assign]
    report = await evaluate_retention(store, ledger, {"min_trials": 2})
    assert fired
    [entry] = [*report.promoted, *report.held, *report.evicted]
    assert entry.evidence is not None
    assert entry.evidence.baseline_runs == 4  # the runs without the lesson, nothing else

"""OutcomeLedger contract (both backends): recording, stats, leave-one-out baseline, audit."""

from __future__ import annotations

import math
import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from cycgraph_memory.errors import InvalidInputError
from cycgraph_memory.records import GateAuditEntry, RetentionEvidence, RunOutcome
from cycgraph_memory.statistics import summarize

from .factories import at


def _ids(n: int) -> list[uuid.UUID]:
    return sorted(uuid.uuid4() for _ in range(n))


def _var(xs: list[float]) -> float:
    m = sum(xs) / len(xs)
    return sum((x - m) ** 2 for x in xs) / (len(xs) - 1)


async def test_empty_ledger(ledger: Any) -> None:
    fid = uuid.uuid4()
    assert await ledger.get_fact_stats(fid) is None
    assert await ledger.get_fact_stats_batch([fid]) == {}
    assert await ledger.list_fact_stats() == []
    base = await ledger.get_baseline()
    assert (base.runs, base.mean_score, base.variance) == (0, 0.0, None)
    assert (await ledger.get_baseline(fid)).runs == 0


async def test_fact_stats_and_baselines_exact(ledger: Any) -> None:
    a, b = _ids(2)
    runs = [
        ("r1", 0.9, [a]), ("r2", 0.7, [a, b]), ("r3", 0.5, []), ("r4", 0.4, [b]),
        ("r5", 0.6, []),
    ]
    for run_id, score, facts in runs:
        await ledger.record_outcome(RunOutcome(run_id=run_id, score=score, fact_ids=facts))
    sa = await ledger.get_fact_stats(a)
    assert (sa.fact_id, sa.trials) == (a, 2)
    assert sa.mean_score == pytest.approx(0.8) and sa.variance == pytest.approx(_var([0.9, 0.7]))
    batch = await ledger.get_fact_stats_batch([b, a, uuid.uuid4()])
    assert set(batch) == {a, b}
    assert batch[b].trials == 2 and batch[b].mean_score == pytest.approx(0.55)
    listed = await ledger.list_fact_stats()
    assert [s.fact_id for s in listed] == [a, b]  # ordered by fact id

    everything = [0.9, 0.7, 0.5, 0.4, 0.6]
    base = await ledger.get_baseline()
    assert base.runs == 5 and base.mean_score == pytest.approx(0.62)
    assert base.variance == pytest.approx(_var(everything))
    loo = await ledger.get_baseline(a)  # runs without a: r3, r4, r5
    assert loo.runs == 3 and loo.mean_score == pytest.approx(0.5)
    assert loo.variance == pytest.approx(_var([0.5, 0.4, 0.6]))
    single = await ledger.get_baseline(exclude_fact_id=b)  # r1, r3, r5
    assert single.runs == 3 and single.mean_score == pytest.approx(2.0 / 3)


async def test_gate_inputs_are_the_batch_stats_and_the_baseline(ledger: Any) -> None:
    a, b, c = _ids(3)
    stats, base = await ledger.get_gate_inputs([a])
    assert stats == {} and (base.runs, base.mean_score, base.variance) == (0, 0.0, None)
    for run_id, score, facts in [("r1", 0.9, [a]), ("r2", 0.7, [a, b]), ("r3", 0.5, [])]:
        await ledger.record_outcome(RunOutcome(run_id=run_id, score=score, fact_ids=facts))
    stats, base = await ledger.get_gate_inputs([b, a, c])
    assert stats == await ledger.get_fact_stats_batch([a, b, c])
    assert base == await ledger.get_baseline()
    assert base.runs == 3 and base.mean_score == pytest.approx(0.7)
    stats, base = await ledger.get_gate_inputs([c])  # no stats, the baseline still read
    assert stats == {} and base.runs == 3
    stats, _ = await ledger.get_gate_inputs([])
    assert stats == {}


async def test_one_trial_has_no_variance(ledger: Any) -> None:
    fid = uuid.uuid4()
    await ledger.record_outcome({"run_id": "only", "score": 0.25, "fact_ids": [str(fid)]})
    stats = await ledger.get_fact_stats(fid)
    assert (stats.trials, stats.mean_score, stats.variance) == (1, 0.25, None)
    base = await ledger.get_baseline(fid)
    assert (base.runs, base.mean_score, base.variance) == (0, 0.0, None)


async def test_record_is_idempotent_on_run_id(ledger: Any) -> None:
    a, b = _ids(2)
    await ledger.record_outcome(RunOutcome(run_id="r", score=0.2, fact_ids=[a]))
    await ledger.record_outcome(RunOutcome(run_id="r", score=0.2, fact_ids=[a]))
    assert (await ledger.get_fact_stats(a)).trials == 1
    assert (await ledger.get_baseline()).runs == 1
    # Re-recording replaces the score and the injected facts.
    await ledger.record_outcome(RunOutcome(run_id="r", score=0.8, fact_ids=[b, b]))
    assert await ledger.get_fact_stats(a) is None
    sb = await ledger.get_fact_stats(b)
    assert sb.trials == 1 and sb.mean_score == pytest.approx(0.8)  # duplicates count once
    base = await ledger.get_baseline()
    assert base.runs == 1 and base.mean_score == pytest.approx(0.8)


async def test_bad_outcomes_are_rejected_and_change_nothing(ledger: Any) -> None:
    await ledger.record_outcome(RunOutcome(run_id="ok", score=0.5))
    for bad in (
        {"run_id": "x", "score": 1.5},
        {"run_id": "", "score": 0.5},
        {"run_id": "x", "score": 0.5, "fact_ids": ["not-a-uuid"]},
        {"run_id": "x", "score": 0.5, "unknown": 1},
    ):
        with pytest.raises(ValidationError):
            await ledger.record_outcome(bad)
    base = await ledger.get_baseline()
    assert base.runs == 1 and base.mean_score == 0.5


async def test_clear_removes_outcomes(ledger: Any) -> None:
    fid = uuid.uuid4()
    await ledger.record_outcome(RunOutcome(run_id="r", score=0.5, fact_ids=[fid]))
    await ledger.clear()
    assert await ledger.get_fact_stats(fid) is None
    assert (await ledger.get_baseline()).runs == 0
    await ledger.record_outcome(RunOutcome(run_id="r", score=0.7, fact_ids=[fid]))
    assert (await ledger.get_fact_stats(fid)).mean_score == pytest.approx(0.7)


@given(
    runs=st.lists(
        st.tuples(st.floats(0, 1), st.lists(st.integers(0, 3), max_size=3)),
        min_size=1,
        max_size=25,
    ),
    rerecord=st.lists(st.tuples(st.integers(0, 24), st.floats(0, 1)), max_size=4),
)
@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
async def test_stats_match_brute_force(
    ledger: Any, runs: list[tuple[float, list[int]]], rerecord: list[tuple[int, float]]
) -> None:
    await ledger.clear()
    facts = _ids(4)
    table: dict[str, tuple[float, set[int]]] = {}
    for i, (score, members) in enumerate(runs):
        table[f"run{i}"] = (score, set(members))
        await ledger.record_outcome(
            RunOutcome(run_id=f"run{i}", score=score, fact_ids=[facts[m] for m in members])
        )
    for i, score in rerecord:  # replace some runs (or add new ones)
        table[f"run{i}"] = (score, {i % 4})
        await ledger.record_outcome(RunOutcome(run_id=f"run{i}", score=score,
                                               fact_ids=[facts[i % 4]]))
    batch = await ledger.get_fact_stats_batch(facts)
    for k, fid in enumerate(facts):
        with_k = [s for s, members in table.values() if k in members]
        without = [s for s, members in table.values() if k not in members]
        if with_k:
            want = summarize(with_k)
            got = batch[fid]
            assert got.trials == want.n
            assert got.mean_score == pytest.approx(want.mean, abs=1e-9)
            assert (got.variance is None) == (want.variance is None)
            if want.variance is not None:
                assert got.variance == pytest.approx(want.variance, abs=1e-9)
        else:
            assert fid not in batch
        loo = await ledger.get_baseline(fid)
        want_loo = summarize(without)
        assert loo.runs == want_loo.n
        assert loo.mean_score == pytest.approx(want_loo.mean if without else 0.0, abs=1e-9)
        if want_loo.variance is None:
            assert loo.variance is None
        else:
            assert loo.variance == pytest.approx(want_loo.variance, abs=1e-9)


def _entry(pass_id: uuid.UUID, fact_id: uuid.UUID, verdict: str = "held", **kw: Any) -> Any:
    return GateAuditEntry(
        pass_id=pass_id, fact_id=fact_id, verdict=verdict, policy={"min_trials": 3},
        decided_at=at(0), **kw,
    )


async def test_gate_audit_log_appends_and_reads_in_order(ledger: Any) -> None:
    p1, p2 = uuid.uuid4(), uuid.uuid4()
    f1, f2 = _ids(2)
    evidence = RetentionEvidence(lift=0.2, se=0.05, df=math.inf, p_promote=0.99, p_evict=0.0,
                                 trials=3, baseline_runs=10, alpha_bracket=2.0)
    first = [
        _entry(p1, f1, "promoted", trials=3, evidence=evidence),
        _entry(p1, f2, "held", reason="no_verdict", trials=3),
    ]
    await ledger.append_gate_audit(first)
    await ledger.append_gate_audit([_entry(p2, f2, "evicted", reason="eval-gate:no_lift",
                                           trials=3)])
    await ledger.append_gate_audit([])
    everything = await ledger.list_gate_audit()
    assert [(e.pass_id, e.fact_id, e.verdict) for e in everything] == [
        (p1, f1, "promoted"), (p1, f2, "held"), (p2, f2, "evicted")
    ]
    assert everything[0] == first[0]  # evidence (df = inf) round-trips
    assert everything[0].evidence.df == math.inf
    assert [e.fact_id for e in await ledger.list_gate_audit(pass_id=p1)] == [f1, f2]
    assert [e.pass_id for e in await ledger.list_gate_audit(fact_id=f2)] == [p1, p2]
    assert len(await ledger.list_gate_audit(limit=1)) == 1
    # pages of the append order, with and without a filter
    assert [e.verdict for e in await ledger.list_gate_audit(offset=1)] == ["held", "evicted"]
    assert [e.verdict for e in await ledger.list_gate_audit(offset=1, limit=1)] == ["held"]
    assert await ledger.list_gate_audit(offset=3) == []
    assert [e.pass_id for e in await ledger.list_gate_audit(fact_id=f2, offset=1)] == [p2]
    for bad in (-1, 1.0, True, "1", 2**63):
        with pytest.raises(InvalidInputError):
            await ledger.list_gate_audit(offset=bad)
    await ledger.clear()  # clearing outcomes never touches the audit log
    assert len(await ledger.list_gate_audit()) == 3


async def test_gate_audit_rejects_bad_entries_atomically(ledger: Any) -> None:
    good = _entry(uuid.uuid4(), uuid.uuid4())
    with pytest.raises(ValidationError):
        await ledger.append_gate_audit([good, {"pass_id": "nope", "fact_id": str(uuid.uuid4()),
                                               "verdict": "held"}])
    with pytest.raises(TypeError):
        await ledger.append_gate_audit(good)
    assert await ledger.list_gate_audit() == []

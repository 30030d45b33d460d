"""Audit 12, the OutcomeLedger black-box against the spec, on both ledgers.

* ``recordOutcome({ run_id, score, fact_ids })`` takes the spec's plain object (ids as
  strings too), ``recorded_at`` defaulting to now; a refused outcome changes nothing;
* ``FactStats.trials`` is "Runs the fact was injected into": a fact listed twice in one
  run's ``fact_ids`` is one trial, and the leave-one-out baseline ("only runs without that
  fact count") leaves that run out once, in every read (single, batch, listing, the gate);
* the gate decides from those same numbers on both ledgers.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

import pytest
from pydantic import ValidationError

from cycgraph_memory.records import RunOutcome
from cycgraph_memory.retention import evaluate_retention

from .factories import make_fact


def test_recorded_at_defaults_to_now() -> None:
    before = datetime.now(UTC)
    outcome = RunOutcome(run_id="r", score=0.5)
    assert before <= outcome.recorded_at <= datetime.now(UTC)
    assert outcome.fact_ids == []


async def test_record_outcome_takes_the_spec_object(ledger: Any) -> None:
    fact = uuid.uuid4()
    await ledger.record_outcome({"run_id": "r1", "score": 1, "fact_ids": [str(fact)]})
    await ledger.record_outcome({"run_id": "r2", "score": 0, "fact_ids": []})
    stats = await ledger.get_fact_stats(str(fact))
    assert (stats.fact_id, stats.trials, stats.mean_score, stats.variance) == (fact, 1, 1.0, None)
    assert (await ledger.get_baseline(fact)).model_dump() == {
        "runs": 1,
        "mean_score": 0.0,
        "variance": None,
    }
    everything = await ledger.get_baseline()
    assert (everything.runs, everything.mean_score) == (2, 0.5)
    assert everything.variance == pytest.approx(0.5)
    for bad in (
        {"run_id": "r3", "score": 1.5},
        {"run_id": "", "score": 0.5},
        {"run_id": "r3", "score": float("nan")},
        {"run_id": "r3", "score": True},
        {"run_id": "r3", "score": 0.5, "fact_ids": ["not-a-uuid"]},
        {"run_id": "r3", "score": 0.5, "extra": 1},
        {"score": 0.5},
    ):
        with pytest.raises(ValidationError):
            await ledger.record_outcome(bad)
    assert (await ledger.get_baseline()).runs == 2
    assert [s.fact_id for s in await ledger.list_fact_stats()] == [fact]


async def test_a_fact_listed_twice_in_one_run_is_one_trial(ledger: Any) -> None:
    fact, other = sorted((uuid.uuid4(), uuid.uuid4()), key=str)
    await ledger.record_outcome(RunOutcome(run_id="a", score=0.2, fact_ids=[fact, fact, other]))
    await ledger.record_outcome(RunOutcome(run_id="b", score=0.6, fact_ids=[fact]))
    await ledger.record_outcome(RunOutcome(run_id="c", score=0.7, fact_ids=[other, other]))
    await ledger.record_outcome(RunOutcome(run_id="d", score=0.9, fact_ids=[]))
    stats = await ledger.get_fact_stats(fact)
    assert (stats.trials, stats.mean_score) == (2, pytest.approx(0.4))
    assert stats.variance == pytest.approx(0.08)
    batch = await ledger.get_fact_stats_batch([fact, other, fact])
    assert {k: v.trials for k, v in batch.items()} == {fact: 2, other: 2}
    assert [(s.fact_id, s.trials) for s in await ledger.list_fact_stats()] == [
        (fact, 2),
        (other, 2),
    ]
    rest = await ledger.get_baseline(fact)  # runs c and d
    assert (rest.runs, rest.mean_score) == (2, pytest.approx(0.8))
    assert rest.variance == pytest.approx(0.02)
    assert (await ledger.get_baseline()).runs == 4
    if hasattr(ledger, "get_gate_inputs"):
        found, baseline = await ledger.get_gate_inputs([fact, other])
        assert {k: v.trials for k, v in found.items()} == {fact: 2, other: 2}
        assert baseline.runs == 4
    # Re-recording run "a" with the fact once changes nothing.
    await ledger.record_outcome(RunOutcome(run_id="a", score=0.2, fact_ids=[fact, other]))
    assert (await ledger.get_fact_stats(fact)).trials == 2


async def test_the_gate_counts_a_repeated_injection_once(store: Any, ledger: Any) -> None:
    lesson = make_fact(content="pin versions", tags=["lesson", "candidate"])
    await store.put_fact(lesson)
    for i, score in enumerate([0.5, 0.52, 0.48, 0.5, 0.51, 0.49]):
        await ledger.record_outcome(RunOutcome(run_id=f"base{i}", score=score))
    for i, score in enumerate([0.9, 0.92, 0.88]):
        ids = [lesson.id, lesson.id]  # injected by two nodes of the same run
        await ledger.record_outcome(RunOutcome(run_id=f"with{i}", score=score, fact_ids=ids))
    report = await evaluate_retention(store, ledger, {"decision_rule": "margin"})
    assert [p.fact_id for p in report.promoted] == [lesson.id]
    promoted = await store.get_fact(lesson.id)
    assert promoted is not None and promoted.tags == ["lesson", "verified"]

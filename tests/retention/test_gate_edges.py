"""Gate edges an acceptance audit found: one-trial candidates, held reasons, typed errors."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from cycgraph_memory import (
    InMemoryMemoryStore,
    InMemoryOutcomeLedger,
    Provenance,
    RunOutcome,
    SemanticFact,
    evaluate_retention,
    gate_operating_characteristics,
    gaussian,
    normal_quantile,
    required_trials,
    retrieve_gated_lessons,
    simulate_gate,
    student_t_cdf,
    welch_lift,
)
from cycgraph_memory.errors import InvalidTypeError


def _lesson(content: str) -> SemanticFact:
    return SemanticFact(content=content, tags=["lesson", "candidate"],
                        provenance=Provenance(source="agent"))


async def test_a_one_trial_candidate_is_retired_by_the_stopping_rules() -> None:
    store, ledger = InMemoryMemoryStore(), InMemoryOutcomeLedger()
    fact = _lesson("retry once")
    await store.put_fact(fact)
    for i in range(10):
        await ledger.record_outcome(RunOutcome(run_id=f"b{i}", score=0.5 + 0.01 * i,
                                               fact_ids=[]))
    await ledger.record_outcome(RunOutcome(run_id="t", score=0.5, fact_ids=[fact.id]))
    held = await evaluate_retention(store, ledger, {"min_trials": 1})
    assert [h.reason for h in held.held] == ["insufficient_trials"]  # no test on one run
    report = await evaluate_retention(
        store, ledger, {"min_trials": 1, "max_trials": 1, "max_baseline_runs": 5}
    )
    assert [(e.fact_id, e.reason) for e in report.evicted] == [(fact.id, "eval-gate:no_lift")]
    result = await simulate_gate({
        "lessons": [{"id": "null", "true_effect": 0.0}], "runs": 300, "seed": 5,
        "policy": {"min_trials": 1, "max_baseline_runs": 64},
        "retrieval": {"rest_after_trials": 1},
    })
    assert result.lessons[0].outcome == "evicted"


async def test_held_lessons_carry_their_reason() -> None:
    store, ledger = InMemoryMemoryStore(), InMemoryOutcomeLedger()
    fact = _lesson("pin versions")
    await store.put_fact(fact)
    await ledger.record_outcome(RunOutcome(run_id="r", score=0.5, fact_ids=[fact.id]))
    report = await evaluate_retention(store, ledger)
    assert [(h.fact_id, h.trials, h.reason) for h in report.held] == [
        (fact.id, 1, "insufficient_trials")
    ]


async def test_simulation_inputs_are_checked() -> None:
    for bad in ([0, 20], [-5]):
        with pytest.raises(ValidationError):
            await gate_operating_characteristics({"effects": [0.0], "run_counts": bad})
    for seed in (True, "1"):
        with pytest.raises(ValidationError):
            await simulate_gate({"lessons": [{"id": "x", "true_effect": 0.1}], "runs": 5,
                                 "seed": seed})


async def test_statistics_helpers_refuse_wrong_types() -> None:
    for call in (
        lambda: required_trials("x", 0.1),  # type: ignore[arg-type]
        lambda: required_trials(None, 0.1),  # type: ignore[arg-type]
        lambda: welch_lift("ab", [0.1, 0.2]),  # type: ignore[arg-type]
        lambda: student_t_cdf("x", 3),  # type: ignore[arg-type]
        lambda: normal_quantile("x"),  # type: ignore[arg-type]
        lambda: gaussian(3),  # type: ignore[arg-type]
    ):
        with pytest.raises(InvalidTypeError):
            call()
    assert student_t_cdf(0, 3) == 0.5 and required_trials(0.2, 0.1) == 3
    with pytest.raises(InvalidTypeError):
        await retrieve_gated_lessons(InMemoryMemoryStore(), tags=["lesson"],
                                     ledger="x")  # type: ignore[arg-type]

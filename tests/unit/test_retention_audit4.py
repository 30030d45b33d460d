"""Retention gate and simulator audit (round 4).

Each test names the bug it pins down; each failed before the fix that came with it.
"""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from cycgraph_memory import InMemoryMemoryStore, InMemoryOutcomeLedger, InvalidTypeError
from cycgraph_memory.records import FactStats, OutcomeBaseline, Provenance, SemanticFact
from cycgraph_memory.retention import (
    GateSimulationConfig,
    OperatingCharacteristicsConfig,
    gate_operating_characteristics,
    plan_retention,
)
from cycgraph_memory.statistics import benjamini_hochberg

scipy_stats = pytest.importorskip("scipy.stats")


def test_benjamini_hochberg_rejects_a_p_value_exactly_on_its_threshold() -> None:
    """Bug: ``p_(k) <= k / m * q`` was computed as ``7 / 10 * 0.1 = 0.0699...9``, so the
    textbook p-value 0.07 at rank 7 of 10 (exactly on its threshold) was not rejected;
    scipy's ``false_discovery_control`` (and R's ``p.adjust``) reject it.
    """
    ps = [0.01, 0.02, 0.03, 0.04, 0.05, 0.06, 0.07, 0.5, 0.6, 0.9]
    expected = [bool(x) for x in scipy_stats.false_discovery_control(ps) <= 0.1]
    assert expected == [True] * 7 + [False] * 3
    assert benjamini_hochberg(ps, 0.1) == expected
    # Ties on the threshold: 0.075 is 3/8 * 0.2 and 0.225 is 6/8 * 0.3 (hand-computed).
    assert benjamini_hochberg([0.075, 0.075, 0.075, 0.9, 0.9, 0.9, 0.9, 0.9], 0.2) == [
        True, True, True, False, False, False, False, False
    ]
    ties = [0.1875, 0.1875, 0.075, 0.1125, 0.075, 0.225, 0.3, 0.678]
    assert benjamini_hochberg(ties, 0.3) == [True] * 6 + [False, False]
    # A single hypothesis is p <= q; just above it is not.
    assert benjamini_hochberg([0.05], 0.05) == [True]
    assert benjamini_hochberg([0.05 + 1e-9], 0.05) == [False]


@pytest.mark.parametrize(
    "bad",
    [
        {"effects": [0.0, 2.0]},
        {"effects": [0.0], "noise_sds": [0.1, -0.5]},
        {"effects": [0.0], "noise_sds": [0.1, 1.5]},
    ],
)
async def test_an_invalid_operating_characteristics_grid_is_refused_before_simulating(
    bad: dict[str, Any],
) -> None:
    """Bug: an effect outside [-1, 1] or a noise SD outside [0, 1] was accepted by
    ``OperatingCharacteristicsConfig`` and only refused when its cell came up, after the
    cells before it had been simulated on the caller's backend (which may be Postgres).
    """
    made: list[int] = []

    async def backend() -> tuple[Any, Any]:
        made.append(1)
        return InMemoryMemoryStore(), InMemoryOutcomeLedger()

    config = {"run_counts": [5], "replicates": 2, **bad}
    with pytest.raises(ValidationError):
        await gate_operating_characteristics(config, backend=backend)
    assert made == []


def test_plan_retention_refuses_bad_input_with_a_typed_error() -> None:
    """Bug: the public ``plan_retention`` answered a policy given as a dict (as
    ``evaluate_retention`` accepts), a baseline that is not an ``OutcomeBaseline`` or a
    candidate that is not a fact with ``AttributeError``.
    """
    lesson = SemanticFact(
        content="cite sources", provenance=Provenance(source="agent"), tags=["candidate"]
    )
    runs = [0.9, 0.88, 0.93]
    stats = {lesson.id: FactStats(fact_id=lesson.id, trials=3, mean_score=sum(runs) / 3,
                                  variance=0.000633333333333334)}
    baseline = OutcomeBaseline(runs=3, mean_score=sum(runs) / 3, variance=0.000633333333333334)
    # A dict policy is validated like evaluate_retention's (here: margin rule, 3 trials, no
    # baseline without the lesson: held for its baseline).
    decided = plan_retention([lesson], stats, baseline, {"decision_rule": "margin"})
    assert [(d.verdict, d.reason) for d in decided] == [("held", "insufficient_baseline")]
    with pytest.raises(ValidationError):
        plan_retention([lesson], stats, baseline, {"min_trials": 0})
    with pytest.raises(InvalidTypeError, match="baseline"):
        plan_retention([lesson], stats, 3, None)  # type: ignore[arg-type]
    with pytest.raises(InvalidTypeError, match="candidates"):
        plan_retention(["cite sources"], stats, baseline)  # type: ignore[list-item]
    with pytest.raises(InvalidTypeError, match="stats"):
        plan_retention([lesson], [stats[lesson.id]], baseline)  # type: ignore[arg-type]
    with pytest.raises(InvalidTypeError, match=r"policy|RetentionPolicy"):
        plan_retention([lesson], stats, baseline, "margin")  # type: ignore[arg-type]


def test_the_simulator_refuses_the_scope_tag_as_candidate_tag() -> None:
    """Bug: with ``policy.candidate_tag="lesson"`` (the simulator's retrieval scope tag) a
    promotion removed the lesson from the scope, so a promoted +0.3 lesson was never
    injected again and every later run scored as if it had been evicted (mean score after
    run 60: 0.59 instead of 0.88 with seed 7): the simulation silently measured another
    loop. The configs refuse it.
    """
    policy = {"candidate_tag": "lesson"}
    with pytest.raises(ValidationError, match="scope tag"):
        GateSimulationConfig.model_validate(
            {"lessons": [{"id": "good", "true_effect": 0.3}], "runs": 10, "seed": 7,
             "policy": policy}
        )
    with pytest.raises(ValidationError, match="scope tag"):
        OperatingCharacteristicsConfig.model_validate(
            {"effects": [0.0], "run_counts": [10], "policy": policy}
        )
    # The verified tag may be "lesson": a promoted lesson keeps it and stays in scope.
    GateSimulationConfig.model_validate(
        {"lessons": [], "runs": 1, "seed": 7, "policy": {"verified_tag": "lesson"}}
    )

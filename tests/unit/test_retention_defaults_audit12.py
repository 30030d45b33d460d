"""Audit 12: the retention gate's and the simulator's defaults are the spec's tables.

Spec "API > evaluateRetention / simulateGate / gateOperatingCharacteristics", each default
pinned by value and, where it is observable without a store, by behaviour. The one
documented departure is ``sequentialControl``: the spec's default is ``'doubling'``; this
library defaults to ``"always_valid"`` (docs/retention-gate.md, "The options": the only rule
whose error bound survives gating after every run) and keeps ``"doubling"`` and ``"none"``.
"""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from cycgraph_memory.retention import (
    DEFAULT_RETENTION_POLICY,
    GateSimulationConfig,
    OperatingCharacteristicsConfig,
    RetentionPolicy,
    SimulatedLesson,
    SimulationRetrieval,
    simulate_gate,
)


def test_retention_policy_defaults_are_the_spec_table() -> None:
    assert RetentionPolicy().model_dump() == {
        "min_trials": 3,
        "promote_margin": 0.05,
        "evict_margin": 0.05,
        "candidate_tag": "candidate",
        "verified_tag": "verified",
        "max_trials": None,
        "max_baseline_runs": None,
        "decision_rule": "inference",
        "promote_confidence": 0.9,
        "evict_confidence": 0.9,
        "noise_floor_sd": 0.1,
        "multiple_comparison": "bh",
        "sequential_control": "always_valid",  # documented departure (module docstring)
    }
    assert RetentionPolicy() == DEFAULT_RETENTION_POLICY
    # The spec's values are all accepted.
    for rule in ("doubling", "none"):
        assert RetentionPolicy(sequential_control=rule).sequential_control == rule
    assert RetentionPolicy(multiple_comparison="none").multiple_comparison == "none"
    assert RetentionPolicy(decision_rule="margin").decision_rule == "margin"


@pytest.mark.parametrize(
    "policy",
    [
        {"min_trials": 3, "max_trials": 2},  # "Must be >= minTrials, which the schema validates"
        {"min_trials": 5, "max_trials": 4},
        {"decision_rule": "bayes"},
        {"multiple_comparison": "holm"},
        {"sequential_control": "spending"},
        {"promote_confidence": 1.0},
        {"evict_confidence": 0.0},
        {"candidate_tag": "verified"},
    ],
)
def test_retention_policy_refuses_what_the_spec_rules_out(policy: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        RetentionPolicy.model_validate(policy)


def test_max_trials_equal_to_min_trials_is_allowed() -> None:
    assert RetentionPolicy(min_trials=4, max_trials=4).max_trials == 4


def test_simulation_defaults_are_the_spec_table() -> None:
    config = GateSimulationConfig.model_validate({"lessons": [], "runs": 1, "seed": 0})
    assert (config.base_score, config.noise_sd, config.gate_every) == (0.6, 0.1, 1)
    assert config.record_empty_runs is True
    assert config.retrieval is None and config.policy == RetentionPolicy()
    assert SimulatedLesson(id="x", true_effect=0.1).arrives_at_run == 0
    assert SimulationRetrieval().model_dump() == {
        "max_facts": 10,
        "candidate_slots": 2,
        "rest_after_trials": None,
    }
    for missing in ("lessons", "runs", "seed"):  # the three required fields
        given = {"lessons": [], "runs": 1, "seed": 0}
        del given[missing]
        with pytest.raises(ValidationError):
            GateSimulationConfig.model_validate(given)


def test_operating_characteristics_defaults_are_the_spec_table() -> None:
    config = OperatingCharacteristicsConfig.model_validate({"effects": [0.0], "run_counts": [10]})
    assert (config.noise_sds, config.replicates, config.seed) == ([0.1], 20, 1)
    assert (config.base_score, config.gate_every) == (0.6, 1)
    assert config.retrieval is None and config.policy == RetentionPolicy()
    for missing in ("effects", "run_counts"):
        given: dict[str, object] = {"effects": [0.0], "run_counts": [10]}
        del given[missing]
        with pytest.raises(ValidationError):
            OperatingCharacteristicsConfig.model_validate(given)


async def test_a_run_scores_the_default_base_plus_the_injected_effects() -> None:
    # score(run) = clamp01(base + sum of the injected lessons' true effects + noise): with
    # no noise, lesson-free runs score the default base 0.6; a lesson arriving at run 2
    # lifts the runs it is injected into; the sum is clamped to 1.
    empty = await simulate_gate({"lessons": [], "runs": 3, "seed": 1, "noise_sd": 0})
    assert empty.run_scores == [0.6, 0.6, 0.6]
    assert [g.after_run for g in empty.gate_reports] == [0, 1, 2]  # gate_every defaults to 1
    late = await simulate_gate(
        {
            "lessons": [{"id": "tip", "true_effect": 0.25, "arrives_at_run": 2}],
            "runs": 4,
            "seed": 1,
            "noise_sd": 0,
        }
    )
    assert late.run_scores == [0.6, 0.6, 0.85, 0.85]
    capped = await simulate_gate(
        {
            "lessons": [{"id": "big", "true_effect": 0.6}],
            "runs": 2,
            "seed": 1,
            "noise_sd": 0,
        }
    )
    assert capped.run_scores == [1.0, 1.0]

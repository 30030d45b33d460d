"""Eval-gated retention: the gate, its policy, and the gate simulator."""

from cycgraph_memory.retention.gate import (
    DEFAULT_RETENTION_POLICY,
    EVICT_HARMFUL,
    EVICT_NO_LIFT,
    GateDecision,
    RetentionPolicy,
    doubling_bracket,
    evaluate_retention,
    plan_retention,
)
from cycgraph_memory.retention.simulator import (
    GateReportEntry,
    GateSimulationConfig,
    GateSimulationResult,
    OperatingCharacteristicsConfig,
    OperatingCharacteristicsRow,
    SimulatedLesson,
    SimulatedLessonOutcome,
    SimulationBackend,
    SimulationRetrieval,
    gate_operating_characteristics,
    simulate_gate,
)

__all__ = [
    "DEFAULT_RETENTION_POLICY",
    "EVICT_HARMFUL",
    "EVICT_NO_LIFT",
    "GateDecision",
    "GateReportEntry",
    "GateSimulationConfig",
    "GateSimulationResult",
    "OperatingCharacteristicsConfig",
    "OperatingCharacteristicsRow",
    "RetentionPolicy",
    "SimulatedLesson",
    "SimulatedLessonOutcome",
    "SimulationBackend",
    "SimulationRetrieval",
    "doubling_bracket",
    "evaluate_retention",
    "gate_operating_characteristics",
    "plan_retention",
    "simulate_gate",
]

"""Spec conformance sweep, seventh round: the spec's names and one-object inputs.

* ``requiredTrials(input: RequiredTrialsInput)`` takes one object in the spec; the library
  took two positional numbers only (``required_trials({"effect": 0.2, "sd": 0.1})`` was a
  ``TypeError``).
* ``filterValid(records, opts?: TemporalFilterOptions)``: the options type did not exist.
* The spec's option and type names a caller imports: ``GatedLessonOptions``,
  ``SubgraphOptions``, ``TemporalFilterOptions``, ``RequiredTrialsInput``,
  ``ConflictResolutionPolicy`` and ``EvictionReason`` were not importable from the package
  root; ``DrizzleMemoryStore`` / ``DrizzleMemoryIndex`` / ``DrizzleOutcomeLedger`` (the
  spec's Postgres classes) had no alias in ``cycgraph_memory.postgres``.
"""

from __future__ import annotations

import math
import typing
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pydantic import ValidationError

import cycgraph_memory
from cycgraph_memory import (
    Provenance,
    Relationship,
    RequiredTrialsInput,
    TemporalFilterOptions,
    filter_valid,
    normal_quantile,
    required_trials,
)
from cycgraph_memory.errors import InvalidInputError, InvalidTypeError

T0 = datetime(2026, 1, 1, tzinfo=UTC)

SPEC_NAMES = [
    # API section and interfaces, in Python spelling.
    "retrieve_memory", "extract_subgraph", "retrieve_gated_lessons", "is_valid_at",
    "is_changed_since", "filter_valid", "InMemoryMemoryStore", "InMemoryMemoryIndex",
    "batch_get_fallback", "SimpleEpisodeSegmenter", "SimpleSemanticExtractor",
    "RuleBasedExtractor", "LLMExtractor", "SimpleThemeClusterer", "ConsolidatingThemeClusterer",
    "MemoryConsolidator", "ConflictDetector", "EntityResolver", "normalize_entity_name",
    "InMemoryOutcomeLedger", "evaluate_retention", "simulate_gate",
    "gate_operating_characteristics", "required_trials", "cosine_similarity", "QUARANTINE_TAG",
    "welch_lift", "benjamini_hochberg", "student_t_cdf", "normal_quantile", "mulberry32",
    "gaussian", "MemoryStore", "MemoryIndex", "EmbeddingProvider", "LLMProvider",
    "EpisodeSegmenter", "SemanticExtractor", "ExtractionResult", "ThemeClusterer",
    "Provenance", "Entity", "Relationship", "Message", "Episode", "SemanticFact", "Theme",
    "MemoryQuery", "MemoryResult", "OutcomeLedger", "RunOutcome", "FactStats",
    "OutcomeBaseline", "RetentionReport", "RetentionEvidence", "ConsolidationReport",
    "TemporalRecord", "EntityFilter", "FactFilter", "RelationshipFilter", "PaginationOptions",
    "SearchOptions", "ScoredResult", "SubgraphResult", "Conflict", "ConflictResolutionReport",
    "EntityResolutionReport", "RetentionPolicy", "GateSimulationConfig",
    "GateSimulationResult", "SimulatedLesson", "SimulatedLessonOutcome",
    "OperatingCharacteristicsConfig", "OperatingCharacteristicsRow",
    "EmbeddingDimensionMismatchError", "DEFAULT_MAX_SUBGRAPH_ENTITIES",
    "IN_MEMORY_INDEX_WARN_THRESHOLD",
    # Added by this round.
    "GatedLessonOptions", "SubgraphOptions", "TemporalFilterOptions", "RequiredTrialsInput",
    "ConflictResolutionPolicy", "EvictionReason",
]


@pytest.mark.parametrize("name", SPEC_NAMES)
def test_every_spec_name_is_exported_from_the_package_root(name: str) -> None:
    assert name in cycgraph_memory.__all__
    assert getattr(cycgraph_memory, name) is not None


def test_spec_constants_and_literal_types() -> None:
    assert cycgraph_memory.QUARANTINE_TAG == "quarantined"
    assert cycgraph_memory.DEFAULT_MAX_SUBGRAPH_ENTITIES == 500
    assert cycgraph_memory.IN_MEMORY_INDEX_WARN_THRESHOLD == 10_000
    assert set(typing.get_args(cycgraph_memory.ConflictResolutionPolicy)) == {
        "supersede-on-newer", "negation-invalidates-positive", "manual-review"
    }
    assert set(typing.get_args(cycgraph_memory.EvictionReason)) == {
        "eval-gate:harmful", "eval-gate:no_lift"
    }


@pytest.mark.parametrize(
    "given",
    [
        {"effect": 0.2, "sd": 0.1},
        RequiredTrialsInput(effect=0.2, sd=0.1),
    ],
    ids=["dict", "model"],
)
def test_required_trials_takes_the_spec_input_object(given: Any) -> None:
    z = normal_quantile(0.9) + normal_quantile(0.8)
    assert required_trials(given) == math.ceil(2 * (z * 0.1 / 0.2) ** 2) == 3
    assert required_trials(given) == required_trials(0.2, 0.1)


def test_required_trials_input_defaults_and_options() -> None:
    spec = RequiredTrialsInput(effect=0.05, sd=0.1)
    assert (spec.confidence, spec.power) == (0.9, 0.8)
    stricter = {"effect": 0.05, "sd": 0.1, "confidence": 0.95, "power": 0.9}
    assert required_trials(stricter) == required_trials(0.05, 0.1, confidence=0.95, power=0.9)
    # The sample-size wall: halving the SD cuts the runs by 4 (up to rounding).
    assert required_trials({"effect": 0.05, "sd": 0.2}) == required_trials(0.05, 0.2)


@pytest.mark.parametrize(
    ("call", "error"),
    [
        (lambda: required_trials({"effect": 0.2}), ValidationError),  # sd is required
        (lambda: required_trials({"effect": 0.2, "sd": 0.1, "alpha": 1}), ValidationError),
        (lambda: required_trials({"effect": "0.2", "sd": 0.1}), ValidationError),
        (lambda: required_trials({"effect": 0.2, "sd": 0.1}, 0.1), InvalidInputError),
        (lambda: required_trials({"effect": 0.2, "sd": 0.1}, power=0.5), InvalidInputError),
        (lambda: required_trials({"effect": 0.0, "sd": 0.1}), InvalidInputError),
        (lambda: required_trials(0.2), InvalidInputError),  # sd missing
        (lambda: required_trials("x", 0.1), InvalidTypeError),
    ],
)
def test_required_trials_input_errors_are_typed(call: Any, error: type[Exception]) -> None:
    with pytest.raises(error):
        call()


def _edge(start: datetime, end: datetime | None = None, **more: Any) -> Relationship:
    import uuid

    return Relationship(
        source_id=uuid.uuid4(), target_id=uuid.uuid4(), relation_type="knows",
        valid_from=start, valid_until=end, provenance=Provenance(source="agent"), **more
    )


def test_filter_valid_takes_a_temporal_filter_options_object() -> None:
    old = _edge(T0, T0 + timedelta(days=1))
    live = _edge(T0 + timedelta(days=2))
    dead = _edge(T0, invalidated_by="other")
    records = [old, live, dead]

    assert filter_valid(records, TemporalFilterOptions()) == [old, live]
    assert filter_valid(records, TemporalFilterOptions(include_invalidated=True)) == records
    assert filter_valid(records, TemporalFilterOptions(valid_at=T0 + timedelta(days=3))) == [live]
    opts = TemporalFilterOptions(changed_since=T0 + timedelta(hours=1))
    assert filter_valid(records, opts) == [old, live]  # old ended after the instant
    assert filter_valid(records, opts) == filter_valid(
        records, changed_since=T0 + timedelta(hours=1)
    )
    with pytest.raises(ValidationError):
        TemporalFilterOptions(validAt=T0)  # type: ignore[call-arg]
    with pytest.raises(ValidationError):
        TemporalFilterOptions(include_invalidated="yes")  # type: ignore[arg-type]


def test_postgres_spec_class_names_are_the_postgres_classes() -> None:
    postgres = pytest.importorskip("cycgraph_memory.postgres")
    assert postgres.DrizzleMemoryStore is postgres.PostgresMemoryStore
    assert postgres.DrizzleMemoryIndex is postgres.PostgresMemoryIndex
    assert postgres.DrizzleOutcomeLedger is postgres.PostgresOutcomeLedger
    for name in ("DrizzleMemoryStore", "DrizzleMemoryIndex", "DrizzleOutcomeLedger"):
        assert name in postgres.__all__

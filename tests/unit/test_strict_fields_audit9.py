"""Input models: bool fields take only bools, float fields refuse bools and text, ints bools.

pydantic's lax mode read ``"no"`` as False, ``"yes"`` / ``1`` as True, ``True`` as 1.0 and
``"0.5"`` as 0.5. The walk below visits every pydantic model of the package and every
field whose annotation holds ``bool``, ``float`` or ``int``: a new option that forgets the rule
(use ``Flag`` / ``Number`` / ``Count`` from ``cycgraph_memory.records``) fails here, unless
its model is one of the library's *results* listed in ``RESULTS`` (built by the library,
some read back from stored JSON where a non-finite float is the string ``"Infinity"``).
"""

from __future__ import annotations

import importlib
import pkgutil
import types
import typing
from typing import Annotated, Any

import numpy as np
import pytest
from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError
from pydantic.fields import FieldInfo

import cycgraph_memory
from cycgraph_memory.hierarchy.segmenters import SimpleEpisodeSegmenter
from cycgraph_memory.records import MemoryQuery, RetrievalOptions
from cycgraph_memory.retention import RetentionPolicy
from cycgraph_memory.retention.simulator import GateSimulationConfig
from cycgraph_memory.retry import RetryPolicy

RESULTS = {
    # Library output, never a caller's option (some re-read from JSON with "Infinity").
    "BulkImportReport", "ConflictResolutionReport", "ConsolidationReport",
    "EntityResolutionReport", "ExportReport", "FactScore", "FactStats", "GateAuditEntry",
    "GateReportEntry", "GateSimulationResult", "HeldLesson", "ImportReport", "IngestReport",
    "LedgerErasure", "MemoryStats", "OperatingCharacteristicsRow", "OutcomeBaseline",
    "PurgePlan", "PurgeReport", "RecordCounts", "ReembedProgress", "ReembedReport",
    "RetentionEvidence", "ScoredResult", "SimulatedLessonOutcome", "TenantCounts",
    "ThemeCalibration", "ThemeSize", "ThemeThresholds",
    # The LLM's JSON reply, parsed leniently on purpose (a model writes "0.8" for 0.8).
    "LLMRelationship",
}
EMBEDDINGS = {"embedding"}  # vectors: their own rule (finite, bounded norm), see limits.md


def _modules() -> None:
    for info in pkgutil.walk_packages(cycgraph_memory.__path__, "cycgraph_memory."):
        if not info.name.endswith("__main__"):
            importlib.import_module(info.name)


def _models() -> list[type[BaseModel]]:
    _modules()
    seen: dict[type[BaseModel], None] = {}
    todo: list[type[BaseModel]] = [BaseModel]
    while todo:
        for sub in todo.pop().__subclasses__():
            todo.append(sub)
            if sub.__module__.startswith("cycgraph_memory.") and "[" not in sub.__name__:
                seen.setdefault(sub, None)
    return list(seen)


def _scalars(annotation: Any) -> tuple[set[type], bool]:
    """The scalar types ``bool`` / ``float`` / ``int`` an annotation holds; in a list?"""
    found: set[type] = set()
    listed = False
    stack = [(annotation, False)]
    while stack:
        tp, in_list = stack.pop()
        origin = typing.get_origin(tp)
        if tp in (bool, float, int):
            found.add(tp)
            listed = listed or in_list
        elif origin is Annotated:
            stack.append((typing.get_args(tp)[0], in_list))
        elif origin in (typing.Union, types.UnionType):
            stack.extend((arg, in_list) for arg in typing.get_args(tp))
        elif origin is list:
            stack.extend((arg, True) for arg in typing.get_args(tp))
    return found, listed


def _fields() -> list[tuple[str, type[BaseModel], str, FieldInfo]]:
    out = []
    for model in _models():
        if model.__name__ in RESULTS:
            continue
        for name, field in model.model_fields.items():
            if name in EMBEDDINGS:
                continue
            found, _ = _scalars(field.annotation)
            if found:
                out.append((f"{model.__name__}.{name}", model, name, field))
    return sorted(out, key=lambda f: f[0])


FIELDS = _fields()


def _adapter(model: type[BaseModel], field: FieldInfo) -> TypeAdapter[Any]:
    meta = [m for m in field.metadata]
    tp = Annotated[(field.annotation, *meta)] if meta else field.annotation
    return TypeAdapter(tp, config=ConfigDict(strict=model.model_config.get("strict")))


def test_the_walk_finds_the_options() -> None:
    names = {f[0] for f in FIELDS}
    assert {
        "MemoryQuery.include_invalidated", "MemoryQuery.min_similarity",
        "RetrievalOptions.native_paths", "RetrievalOptions.graph_weight",
        "FactFilter.include_invalidated", "SearchOptions.min_similarity",
        "RetentionPolicy.promote_margin", "GateSimulationConfig.record_empty_runs",
        "OperatingCharacteristicsConfig.effects", "PurgeSelector.tenant",
        "SubgraphOptions.include_invalidated", "_SegmenterOptions.topic_shift_z",
        "Relationship.weight", "Provenance.confidence", "RetryPolicy.base_delay_s",
    } <= names


@pytest.mark.parametrize(("desc", "model", "name", "field"), FIELDS, ids=[f[0] for f in FIELDS])
def test_every_flag_and_number_field_is_strict(
    desc: str, model: type[BaseModel], name: str, field: FieldInfo
) -> None:
    found, listed = _scalars(field.annotation)
    adapter = _adapter(model, field)
    good: list[Any] = []
    if bool in found:
        bad: list[Any] = ["no", "yes", "true", 1, 0, np.True_]
        good = [True, False]
    elif float in found:
        bad = [True, False, "0.5", "1", np.True_]
    else:  # a count (int): not a bool (the Count rule)
        bad = [True, False]
    for value in bad:
        with pytest.raises(ValidationError):
            adapter.validate_python([value] if listed else value)
    for value in good:
        assert adapter.validate_python(value) is value
    default = None if field.is_required() else field.get_default(call_default_factory=True)
    if default is not None:
        adapter.validate_python(default)  # the default itself still validates


def test_numbers_take_ints_and_numpy_floats() -> None:
    q = MemoryQuery(text="x", min_similarity=np.float64(0.25))
    assert q.min_similarity == 0.25
    assert MemoryQuery(text="x", min_similarity=1).min_similarity == 1.0
    assert RetrievalOptions(graph_weight=np.float32(2.0), text_weight=0).graph_weight == 2.0
    assert RetentionPolicy(promote_margin=0, noise_floor_sd=np.float64(0.2)).promote_margin == 0
    assert RetryPolicy(base_delay_s=1, max_delay_s=np.float64(2.5)).max_delay_s == 2.5


@pytest.mark.parametrize(
    ("build", "field"),
    [
        (lambda: MemoryQuery(text="x", include_invalidated="no"), "include_invalidated"),
        (lambda: RetrievalOptions(native_paths=1), "native_paths"),
        (lambda: RetentionPolicy(min_trials=True), "min_trials"),
        (lambda: RetentionPolicy(evict_margin="0.1"), "evict_margin"),
        (lambda: RetryPolicy(max_attempts=True), "max_attempts"),
        (lambda: GateSimulationConfig(lessons=[], runs=True, seed=1), "runs"),
        (lambda: GateSimulationConfig(lessons=[], runs=5, seed=1, record_empty_runs="no"),
         "record_empty_runs"),
        (lambda: SimpleEpisodeSegmenter(deterministic_ids="no"), "deterministic_ids"),
    ],
)
def test_the_error_names_the_field(build: Any, field: str) -> None:
    with pytest.raises(ValidationError, match=field):
        build()

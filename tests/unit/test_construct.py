"""The private fast constructor builds the same records as validation does."""

from __future__ import annotations

import uuid

import pytest
from pydantic import ValidationError

from cycgraph_memory._construct import trusted
from cycgraph_memory.records import FactStats, RetentionEvidence, RetentionReport


def test_trusted_equals_validated() -> None:
    fid = uuid.uuid4()
    fast = trusted(FactStats, fact_id=fid, trials=3, mean_score=0.5, variance=None)
    slow = FactStats(fact_id=fid, trials=3, mean_score=0.5)
    assert fast == slow
    assert fast.model_dump() == slow.model_dump()
    assert fast.model_dump_json() == slow.model_dump_json()
    assert fast.model_fields_set == {"fact_id", "trials", "mean_score", "variance"}
    copy = fast.model_copy(update={"trials": 4})
    assert copy.trials == 4 and fast.trials == 3
    with pytest.raises(ValidationError):  # assignment is still validated
        fast.trials = -1


def test_trusted_nested_report_round_trips() -> None:
    ev = trusted(RetentionEvidence, lift=0.1, se=0.05, df=float("inf"), p_promote=0.9,
                 p_evict=0.0, trials=3, baseline_runs=8, alpha_bracket=2.0, noise_sd=0.1,
                 sequential_p_promote=0.05, sequential_p_evict=1.0)
    report = trusted(RetentionReport, promoted=[], evicted=[], held=[], pass_id=None)
    assert RetentionEvidence.model_validate(ev.model_dump()) == ev
    assert RetentionReport.model_validate_json(report.model_dump_json()) == report


def test_no_record_model_defines_new() -> None:
    # trusted() calls object.__new__ directly: it assumes no model in the chain defines
    # __new__ (true of pydantic's BaseModel and of every record).
    import inspect

    from pydantic import BaseModel

    from cycgraph_memory import records

    models = [m for _, m in inspect.getmembers(records, inspect.isclass)
              if issubclass(m, BaseModel)]
    assert models
    for model in models:
        assert model.__new__ is object.__new__, model

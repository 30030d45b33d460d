"""Statistics helpers (audit 3): wrong types are typed refusals, right values unchanged."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest

from cycgraph_memory.errors import InvalidTypeError
from cycgraph_memory.statistics import (
    SampleSummary,
    benjamini_hochberg,
    gaussian,
    mixture_p_value,
    pooled_variance,
    regularized_incomplete_beta,
    subtract_summary,
    summarize,
    welch_lift,
)

S = SampleSummary(3, 0.5, 0.01)


@pytest.mark.parametrize(
    "call",
    [
        # Before: TypeError "must be real number, not str" / AttributeError / a bool q
        # accepted as 1.0 - never the library's InvalidTypeError.
        lambda: mixture_p_value("2", 1.0, 0.5),
        lambda: mixture_p_value(None, 1.0, 0.5),
        lambda: mixture_p_value(2.0, "1", 0.5),
        lambda: mixture_p_value(2.0, 1.0, None),
        lambda: benjamini_hochberg(None, 0.1),
        lambda: benjamini_hochberg(["0.01"], 0.1),
        lambda: benjamini_hochberg([0.01, None], 0.1),
        lambda: benjamini_hochberg([0.01], "0.1"),
        lambda: benjamini_hochberg([0.01], True),
        lambda: pooled_variance(None, S),  # type: ignore[arg-type]
        lambda: pooled_variance(S, (3, 0.5, 0.01)),  # type: ignore[arg-type]
        lambda: subtract_summary("total", S),  # type: ignore[arg-type]
        lambda: subtract_summary(S, None),  # type: ignore[arg-type]
        lambda: summarize("0.5"),  # type: ignore[arg-type]
        lambda: summarize(None),  # type: ignore[arg-type]
        lambda: summarize([0.5, None]),  # type: ignore[list-item]
        lambda: regularized_incomplete_beta("0.5", 1.0, 1.0),
        lambda: regularized_incomplete_beta(0.5, None, 1.0),
        lambda: welch_lift([0.1, 0.2], [0.3, 0.4], threshold="0"),
        lambda: welch_lift([0.1, 0.2], [0.3, 0.4], sd_floor=None),
        lambda: gaussian(lambda: "0.5"),
    ],
)
def test_statistics_helpers_refuse_wrong_types(call: Callable[[], Any]) -> None:
    with pytest.raises(InvalidTypeError):
        call()


def test_valid_calls_are_unchanged() -> None:
    import numpy as np

    assert benjamini_hochberg((0.01, 0.07, 0.5), 0.1) == [True, False, False]
    assert benjamini_hochberg(np.array([0.01, 0.5]), 0.1) == [True, False]
    assert mixture_p_value(0.0, 1.0, 0.5) == 1.0
    assert mixture_p_value(3, 2, 0.5) == mixture_p_value(3.0, 2.0, 0.5) < 1.0
    assert summarize((0.25, 0.75)) == summarize([0.25, 0.75]) == SampleSummary(2, 0.5, 0.125)
    assert summarize(x for x in (0.25, 0.75)) == SampleSummary(2, 0.5, 0.125)
    assert summarize(np.array([0.25, 0.75])) == SampleSummary(2, 0.5, 0.125)
    assert regularized_incomplete_beta(0.5, 1, 1) == pytest.approx(0.5)
    assert pooled_variance(S, S) == pytest.approx((0.01, 4))
    assert subtract_summary(S, SampleSummary(0, 0.0, None)) == S
    assert math.isfinite(gaussian(iter([0.5, 0.25]).__next__))


async def test_operating_characteristics_are_reproducible_for_a_seed() -> None:
    from cycgraph_memory.retention import gate_operating_characteristics, simulate_gate

    config = {
        "effects": [0.0, 0.3],
        "run_counts": [12, 40],
        "replicates": 4,
        "seed": 77,
        "retrieval": {"rest_after_trials": 3},
        "policy": {"max_baseline_runs": 20},
    }
    first = await gate_operating_characteristics(config)
    assert await gate_operating_characteristics(config) == first
    other = await gate_operating_characteristics({**config, "seed": 78})
    assert other != first
    # The rates are decision counts over the replicates, as documented.
    for row in first:
        for rate in (row.promote_rate, row.harmful_evict_rate, row.no_lift_rate,
                     row.held_rate):
            assert (rate * 4).is_integer()
        assert row.false_promote_rate == (row.promote_rate if row.effect <= 0 else 0.0)
        assert row.false_evict_rate == (row.harmful_evict_rate if row.effect >= 0 else 0.0)
    sim = {"lessons": [{"id": "x", "true_effect": 0.3}], "runs": 40, "seed": 5,
           "retrieval": {"rest_after_trials": 3}}
    a, b = await simulate_gate(sim), await simulate_gate(sim)
    assert a.model_dump_json() == b.model_dump_json()  # byte-identical for a seed

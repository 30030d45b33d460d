"""Consolidation and retention-gate audit (round 4), on both backends.

Each test names the bug it pins down; each failed before the fix that came with it.
"""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from cycgraph_memory import ConflictDetector, InvalidInputError
from cycgraph_memory.records import Conflict, RunOutcome
from cycgraph_memory.retention import evaluate_retention

from .factories import make_fact, unit


async def test_a_conflict_of_a_fact_with_itself_is_refused_and_changes_nothing(
    store: Any,
) -> None:
    """Bug: ``resolve_conflict(Conflict(fact_a=f, fact_b=f), "keep_a")`` invalidated ``f``
    with ``invalidated_by`` = its own id (a live fact lost to itself).

    A conflict needs two different facts: building one from a single fact is a
    ``ValidationError``, and one built without validation is refused by every resolution
    entry point with ``InvalidInputError`` before anything is written.
    """
    fact = make_fact(content="the api is not rate limited", embedding=unit(0))
    await store.put_facts([fact])
    with pytest.raises(ValidationError, match="two different facts"):
        Conflict(fact_a=fact, fact_b=fact, type="negation", confidence=0.8)
    forged = Conflict.model_construct(
        fact_a=fact, fact_b=fact, type="negation", confidence=0.8
    )
    detector = ConflictDetector(store)
    with pytest.raises(InvalidInputError, match="two different facts"):
        await detector.resolve_conflict(forged, "keep_a")
    with pytest.raises(InvalidInputError, match="two different facts"):
        await detector.auto_resolve_all([forged], "supersede-on-newer")
    with pytest.raises(InvalidInputError, match="two different facts"):
        await detector.plan_resolution([forged], "supersede-on-newer")
    stored = await store.get_fact(fact.id)
    assert stored is not None and stored.invalidated_by is None


# ---------------------------------------------------------------- retention gate


async def _gate(
    store: Any, ledger: Any, mine: list[float], rest: list[float], policy: dict[str, Any]
) -> tuple[str, str | None]:
    lesson = make_fact(content="cite sources", tags=["lesson", "candidate"])
    await store.put_facts([lesson])
    for i, score in enumerate(mine + rest):
        ids = [lesson.id] if i < len(mine) else []
        await ledger.record_outcome(RunOutcome(run_id=f"a4-{i}", score=score, fact_ids=ids))
    report = await evaluate_retention(store, ledger, policy)
    if report.promoted:
        return "promoted", None
    if report.evicted:
        return "evicted", report.evicted[0].reason
    return "held", report.held[0].reason


@pytest.mark.parametrize(
    ("mine", "rest", "policy", "expected"),
    [
        # Margin rule, lift exactly the margin (0.15 - 0.10 = 0.05): "must exceed" -> held.
        # Postgres' avg rounded the lift above 0.05 and promoted; in memory it was held.
        ([0.15] * 3, [0.1] * 4, {"decision_rule": "margin"}, ("held", "no_verdict")),
        ([0.25] * 3, [0.3] * 5, {"decision_rule": "margin"}, ("held", "no_verdict")),
        # ... and a hair past it is decided.
        ([0.16] * 3, [0.1] * 4, {"decision_rule": "margin"}, ("promoted", None)),
        ([0.24] * 3, [0.3] * 5, {"decision_rule": "margin"}, ("evicted", "eval-gate:harmful")),
        # Inference without noise (floor 0, identical scores): the lift is exact, and
        # exactly on the margin it is no evidence (in memory 0.05000000000000001 > 0.05
        # promoted "with certainty").
        ([0.05] * 4, [0.0] * 3, {"noise_floor_sd": 0.0}, ("held", "no_verdict")),
        ([0.07] * 4, [0.02] * 3, {"noise_floor_sd": 0.0}, ("held", "no_verdict")),
    ],
)
async def test_a_lift_exactly_on_the_margin_is_decided_alike_on_both_backends(
    store: Any,
    ledger: Any,
    mine: list[float],
    rest: list[float],
    policy: dict[str, Any],
    expected: tuple[str, str | None],
) -> None:
    """Bug: the gate compared a point-estimate lift with the margins exactly, so the
    rounding of the ledger's aggregates (SQL ``avg`` vs running means) decided a lift that
    sits exactly on a margin: the backends disagreed (Postgres promoted, memory held).
    """
    assert await _gate(store, ledger, mine, rest, policy) == expected

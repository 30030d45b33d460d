"""ConflictDetector.plan_resolution on both backends: the plan is what resolving writes."""

from __future__ import annotations

from typing import Any

import pytest

from cycgraph_memory import ConflictDetector, InvalidInputError

from .test_conflicts import _people, facts, seeded  # noqa: F401  (fixtures reused)


async def test_plan_writes_nothing_and_matches_the_resolution(
    store: Any, index: Any, facts: Any  # noqa: F811
) -> None:
    await seeded(store, facts)
    detector = ConflictDetector(store, index)
    conflicts = await detector.detect_conflicts()
    before = await store.find_facts(include_invalidated=True)

    plan = await detector.plan_resolution(conflicts, "supersede-on-newer")
    assert await store.find_facts(include_invalidated=True) == before
    assert plan.report is not None and plan.report.resolved == len(plan.mutations) == 3
    planned = {m.id: m.record.invalidated_by for m in plan.mutations}  # type: ignore[union-attr]

    report = await detector.auto_resolve_all(conflicts, "supersede-on-newer")
    assert report.resolved == plan.report.resolved
    after = {f.id: f for f in await store.find_facts(include_invalidated=True)}
    assert {fid: after[fid].invalidated_by for fid in planned} == planned
    assert (await detector.plan_resolution(conflicts, "supersede-on-newer")).empty


async def test_manual_review_plans_nothing_and_bad_policy_is_refused(
    store: Any, index: Any, facts: Any  # noqa: F811
) -> None:
    await seeded(store, facts)
    detector = ConflictDetector(store, index)
    conflicts = await detector.detect_conflicts()
    plan = await detector.plan_resolution(conflicts, "manual-review")
    assert plan.empty and plan.report is not None and plan.report.skipped == len(conflicts)
    with pytest.raises(InvalidInputError):
        await detector.plan_resolution(conflicts, "coin-flip")  # type: ignore[arg-type]

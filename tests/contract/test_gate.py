"""evaluate_retention on both backends: every decision path, idempotency, audit, batching."""

from __future__ import annotations

import itertools
import math
import uuid
from collections.abc import Iterable, Sequence
from typing import Any

import pytest
from pydantic import ValidationError

from cycgraph_memory.inmemory.ledger import InMemoryOutcomeLedger
from cycgraph_memory.records import (
    QUARANTINE_TAG,
    FactStats,
    GateAuditEntry,
    OutcomeBaseline,
    RunOutcome,
    SemanticFact,
)
from cycgraph_memory.retention import (
    RetentionPolicy,
    doubling_bracket,
    evaluate_retention,
    plan_retention,
)
from cycgraph_memory.statistics import summarize, welch_lift

from .factories import at, make_fact

_run_ids = itertools.count()


@pytest.fixture
def ledger(backend: str, request: pytest.FixtureRequest) -> Any:
    if backend == "memory":
        return InMemoryOutcomeLedger()
    from cycgraph_memory.postgres import PostgresOutcomeLedger

    return PostgresOutcomeLedger(
        request.getfixturevalue("pg_sessionmaker"), tenant_id=request.getfixturevalue("pg_tenant")
    )


def candidate(*extra_tags: str, seconds: float = 0) -> SemanticFact:
    return make_fact(tags=["lesson", "candidate", *extra_tags], valid_from=at(seconds))


async def record(ledger: Any, scores: Iterable[float], facts: Sequence[uuid.UUID] = ()) -> None:
    for score in scores:
        await ledger.record_outcome(
            RunOutcome(run_id=f"run-{next(_run_ids)}", score=score, fact_ids=list(facts))
        )


BASELINE6 = [0.45, 0.5, 0.55, 0.5, 0.48, 0.52]


async def test_promotes_a_lesson_that_lifts_outcomes(store: Any, ledger: Any) -> None:
    good = candidate()
    await store.put_fact(good)
    await record(ledger, [0.9, 0.92, 0.88], [good.id])
    await record(ledger, BASELINE6)
    report = await evaluate_retention(store, ledger)
    assert [p.fact_id for p in report.promoted] == [good.id]
    assert report.evicted == [] and report.held == []
    stored = await store.get_fact(good.id)
    assert stored.tags == ["lesson", "verified"] and stored.invalidated_by is None

    ev = report.promoted[0].evidence
    want_up = welch_lift([0.9, 0.92, 0.88], BASELINE6, threshold=0.05, sd_floor=0.1)
    want_down = welch_lift([0.9, 0.92, 0.88], BASELINE6, threshold=-0.05, sd_floor=0.1)
    assert ev.lift == pytest.approx(0.9 - 0.5)
    assert ev.se == pytest.approx(want_up.se) and ev.df == want_up.df == math.inf
    assert ev.p_promote == pytest.approx(want_up.p_exceeds)
    assert ev.p_evict == pytest.approx(1 - want_down.p_exceeds)
    assert (ev.trials, ev.baseline_runs, ev.alpha_bracket) == (3, 6, 0.0)


async def test_evicts_a_harmful_lesson_as_a_soft_delete(store: Any, ledger: Any) -> None:
    bad = candidate()
    await store.put_fact(bad)
    await record(ledger, [0.1, 0.12, 0.08], [bad.id])
    await record(ledger, BASELINE6)
    report = await evaluate_retention(store, ledger)
    assert [(e.fact_id, e.reason) for e in report.evicted] == [(bad.id, "eval-gate:harmful")]
    assert report.evicted[0].evidence.lift == pytest.approx(0.1 - 0.5)
    assert await store.find_facts(tags=["lesson"]) == []
    kept = await store.find_facts(tags=["lesson"], include_invalidated=True)
    assert [f.invalidated_by for f in kept] == ["eval-gate:harmful"]


async def test_holds_until_min_trials_and_enough_baseline(store: Any, ledger: Any) -> None:
    fresh, few = candidate(seconds=1), candidate(seconds=2)
    await store.put_facts([fresh, few])
    await record(ledger, [0.95, 0.95], [few.id])
    report = await evaluate_retention(store, ledger)
    assert [(h.fact_id, h.trials) for h in report.held] == [(fresh.id, 0), (few.id, 2)]
    assert report.held[1].evidence is None  # no baseline runs yet
    # Enough trials but a baseline of one run: still held.
    await record(ledger, [0.95], [few.id])
    await record(ledger, [0.5])
    report = await evaluate_retention(store, ledger, {"min_trials": 3})
    assert [h.fact_id for h in report.held] == [fresh.id, few.id]
    assert report.promoted == []


async def test_max_trials_retires_a_verdictless_candidate(store: Any, ledger: Any) -> None:
    meh = candidate()
    await store.put_fact(meh)
    await record(ledger, [0.5, 0.52, 0.48, 0.5], [meh.id])
    await record(ledger, BASELINE6)
    held = await evaluate_retention(store, ledger, {"max_trials": 5})
    assert [h.fact_id for h in held.held] == [meh.id]
    await record(ledger, [0.5], [meh.id])
    report = await evaluate_retention(store, ledger, {"max_trials": 5})
    assert [(e.fact_id, e.reason) for e in report.evicted] == [(meh.id, "eval-gate:no_lift")]
    assert report.evicted[0].evidence is not None
    assert (await store.get_fact(meh.id)).invalidated_by == "eval-gate:no_lift"


async def test_max_baseline_runs_closes_the_window(store: Any, ledger: Any) -> None:
    meh, early = candidate(seconds=1), candidate(seconds=2)
    await store.put_facts([meh, early])
    await record(ledger, [0.5, 0.55, 0.45], [meh.id])
    await record(ledger, [0.5, 0.45], [early.id])  # fewer than min_trials: never retired
    await record(ledger, BASELINE6)  # meh's baseline: 6 + 2 = 8 runs
    policy = {"max_baseline_runs": 9}
    assert [h.fact_id for h in (await evaluate_retention(store, ledger, policy)).held] == [
        meh.id, early.id
    ]
    policy = {"max_baseline_runs": 8}
    report = await evaluate_retention(store, ledger, policy)
    assert [(e.fact_id, e.reason) for e in report.evicted] == [(meh.id, "eval-gate:no_lift")]
    assert [h.fact_id for h in report.held] == [early.id]


async def test_quarantined_candidates_are_never_promoted(store: Any, ledger: Any) -> None:
    tainted = candidate(QUARANTINE_TAG)
    await store.put_fact(tainted)
    await record(ledger, [0.99, 0.98, 0.97], [tainted.id])
    await record(ledger, BASELINE6)
    report = await evaluate_retention(store, ledger)
    assert (report.promoted, report.evicted, report.held) == ([], [], [])
    assert await store.get_fact(tainted.id) == tainted


async def test_the_pass_is_idempotent(store: Any, ledger: Any) -> None:
    good, bad, meh = candidate(seconds=1), candidate(seconds=2), candidate(seconds=3)
    await store.put_facts([good, bad, meh])
    await record(ledger, [0.9, 0.92, 0.88], [good.id])
    await record(ledger, [0.1, 0.12, 0.08], [bad.id])
    await record(ledger, [0.5, 0.55], [meh.id])
    await record(ledger, BASELINE6)
    first = await evaluate_retention(store, ledger)
    assert len(first.promoted) == 1 and len(first.evicted) == 1 and len(first.held) == 1
    after_first = await store.find_facts(include_invalidated=True)
    second = await evaluate_retention(store, ledger)
    assert second.promoted == [] and second.evicted == []
    assert [(h.fact_id, h.trials) for h in second.held] == [(meh.id, 2)]
    assert await store.find_facts(include_invalidated=True) == after_first


async def test_every_decision_is_audited_with_its_pass(store: Any, ledger: Any) -> None:
    good, meh = candidate(seconds=1), candidate(seconds=2)
    await store.put_facts([good, meh])
    await record(ledger, [0.9, 0.92, 0.88], [good.id])
    await record(ledger, BASELINE6)
    pass_id = uuid.uuid4()
    report = await evaluate_retention(store, ledger, {"min_trials": 3}, pass_id=pass_id,
                                      clock=lambda: at(60))
    assert report.pass_id == pass_id
    entries = await ledger.list_gate_audit(pass_id=pass_id)
    assert [(e.fact_id, e.verdict, e.reason, e.trials) for e in entries] == [
        (good.id, "promoted", None, 3), (meh.id, "held", "insufficient_trials", 0)
    ]
    assert entries[0].evidence == report.promoted[0].evidence
    assert entries[0].decided_at == at(60)
    assert entries[0].policy == RetentionPolicy().model_dump(mode="json")
    other = await evaluate_retention(store, ledger)
    assert [e.verdict for e in await ledger.list_gate_audit(pass_id=other.pass_id)] == ["held"]
    assert isinstance(entries[0], GateAuditEntry)


async def test_bad_policy_fails_before_anything_changes(store: Any, ledger: Any) -> None:
    good = candidate()
    await store.put_fact(good)
    await record(ledger, [0.9, 0.92, 0.88], [good.id])
    await record(ledger, BASELINE6)
    for bad in ({"min_trials": 5, "max_trials": 4}, {"promote_confidence": 1.5},
                {"decision_rule": "vibes"}, {"candidate_tag": "verified"}, {"nope": 1}):
        with pytest.raises(ValidationError):
            await evaluate_retention(store, ledger, bad)
    assert await store.get_fact(good.id) == good
    assert await ledger.list_gate_audit() == []


async def test_margin_rule(store: Any, ledger: Any) -> None:
    up, down, flat = candidate(seconds=1), candidate(seconds=2), candidate(seconds=3)
    await store.put_facts([up, down, flat])
    await record(ledger, [0.57, 0.57, 0.57], [up.id])   # +0.07 over the 0.5 baseline
    await record(ledger, [0.43, 0.43, 0.43], [down.id])  # -0.07
    await record(ledger, [0.52, 0.52, 0.52], [flat.id])  # +0.02
    await record(ledger, [0.5] * 4)
    report = await evaluate_retention(store, ledger, {"decision_rule": "margin"})
    assert [p.fact_id for p in report.promoted] == [up.id]
    assert [(e.fact_id, e.reason) for e in report.evicted] == [(down.id, "eval-gate:harmful")]
    assert [h.fact_id for h in report.held] == [flat.id]
    assert report.promoted[0].evidence is None  # evidence belongs to the inference rule


async def test_reads_stats_in_one_batched_call(store: Any, ledger: Any) -> None:
    facts = [candidate(seconds=i) for i in range(5)]
    await store.put_facts(facts)
    for f in facts:
        await record(ledger, [0.5, 0.6, 0.55], [f.id])
    await record(ledger, BASELINE6)

    calls: list[str] = []

    class Spy:
        async def record_outcome(self, outcome: Any) -> None:
            await ledger.record_outcome(outcome)

        async def get_fact_stats(self, fact_id: Any) -> Any:
            calls.append("get_fact_stats")
            return await ledger.get_fact_stats(fact_id)

        async def get_fact_stats_batch(self, ids: Any) -> Any:
            calls.append("get_fact_stats_batch")
            return await ledger.get_fact_stats_batch(ids)

        async def list_fact_stats(self) -> Any:
            calls.append("list_fact_stats")
            return await ledger.list_fact_stats()

        async def get_baseline(self, exclude_fact_id: Any = None) -> Any:
            calls.append("get_baseline")
            return await ledger.get_baseline(exclude_fact_id)

        async def clear(self) -> None:
            await ledger.clear()

    report = await evaluate_retention(store, Spy())
    assert len(report.held) == 5
    assert calls == ["get_fact_stats_batch", "get_baseline"]
    # The derived leave-one-out baselines equal the ledger's own.
    for held in report.held:
        loo = await ledger.get_baseline(held.fact_id)
        assert held.evidence.baseline_runs == loo.runs


# --------------------------------------------------------------------------- pure planning


def _stats(fid: uuid.UUID, scores: list[float]) -> FactStats:
    s = summarize(scores)
    return FactStats(fact_id=fid, trials=s.n, mean_score=s.mean, variance=s.variance)


def _baseline(scores: list[float]) -> OutcomeBaseline:
    s = summarize(scores)
    return OutcomeBaseline(runs=s.n, mean_score=s.mean, variance=s.variance)


def test_doubling_brackets() -> None:
    # start = 6 (= 2 * min_trials by default): bracket 0 below 12, then doublings.
    assert [doubling_bracket(n) for n in (2, 11, 12, 23, 24, 47, 48, 95, 96)] == [
        0, 0, 1, 1, 2, 2, 3, 3, 4
    ]
    assert [doubling_bracket(n, 2) for n in (2, 3, 4, 7, 8, 15, 16, 63, 64)] == [
        0, 0, 1, 1, 2, 2, 3, 4, 5
    ]
    # The budgets of all brackets sum to at most alpha.
    assert sum(0.1 / 2 ** (k + 1) for k in range(60)) <= 0.1


def test_benjamini_hochberg_across_the_pass() -> None:
    a, b = make_fact(tags=["candidate"]), make_fact(tags=["candidate"])
    with_a = [0.6, 0.64, 0.68]
    with_b = [0.5, 0.52, 0.48]
    rest = [0.5, 0.45, 0.55, 0.5, 0.48, 0.52, 0.5, 0.5, 0.47, 0.53]
    all_runs = with_a + with_b + rest
    loo_a = [*with_b, *rest]
    policy = RetentionPolicy(sequential_control="none", noise_floor_sd=0.1)
    p_a = 1 - welch_lift(with_a, loo_a, threshold=0.05, sd_floor=0.1).p_exceeds
    assert 0.05 < p_a <= 0.1  # significant alone at alpha = 0.1, not as rank 1 of 2
    stats = {a.id: _stats(a.id, with_a), b.id: _stats(b.id, with_b)}
    alone = plan_retention([a], {a.id: stats[a.id]}, _baseline(all_runs), policy)
    assert alone[0].verdict == "promoted"
    both = plan_retention([a, b], stats, _baseline(all_runs), policy)
    assert [d.verdict for d in both] == ["held", "held"]
    no_fdr = policy.model_copy(update={"multiple_comparison": "none"})
    assert [d.verdict for d in plan_retention([a, b], stats, _baseline(all_runs), no_fdr)] == [
        "promoted", "held"
    ]


def test_doubling_spends_less_alpha_in_later_brackets() -> None:
    a = make_fact(tags=["candidate"])
    with_a = [0.62, 0.66, 0.7]
    rest = [0.5, 0.45, 0.55, 0.5, 0.48, 0.52] * 5  # 30 runs: bracket 2 (24-47)
    p = 1 - welch_lift(with_a, rest, threshold=0.05, sd_floor=0.1).p_exceeds
    assert 0.1 / 8 < p <= 0.1  # passes alone, fails at alpha / 2^(2+1)
    stats = {a.id: _stats(a.id, with_a)}
    base = _baseline(with_a + rest)
    once = RetentionPolicy(sequential_control="none")
    assert plan_retention([a], stats, base, once)[0].verdict == "promoted"
    decision = plan_retention([a], stats, base, RetentionPolicy())[0]
    assert decision.verdict == "held" and decision.reason == "no_verdict"
    assert decision.evidence is not None and decision.evidence.alpha_bracket == 2.0
    assert plan_retention([a], stats, base, once)[0].evidence.alpha_bracket is None
    # A baseline of 10 runs is still in bracket 0 (alpha / 2).
    early = _baseline(with_a + rest[:10])
    assert plan_retention([a], stats, early, RetentionPolicy())[0].evidence.alpha_bracket == 0


def test_noise_floor_stops_tiny_samples_faking_certainty() -> None:
    a = make_fact(tags=["candidate"])
    with_a = [0.6, 0.6001, 0.6002]  # almost no spread
    rest = [0.5, 0.5001, 0.4999, 0.5, 0.5002, 0.4998]
    stats = {a.id: _stats(a.id, with_a)}
    base = _baseline(with_a + rest)
    unfloored = RetentionPolicy(noise_floor_sd=0.0)
    assert plan_retention([a], stats, base, unfloored)[0].verdict == "promoted"
    floored = plan_retention([a], stats, base, RetentionPolicy(noise_floor_sd=0.1))[0]
    assert floored.verdict == "held"

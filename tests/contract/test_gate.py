"""evaluate_retention on both backends: every decision path, idempotency, audit, batching."""

from __future__ import annotations

import itertools
import math
import uuid
from collections.abc import Iterable, Sequence
from typing import Any

import pytest
from pydantic import ValidationError

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
from cycgraph_memory.statistics import (
    mixture_p_value,
    normal_quantile,
    student_t_cdf,
    summarize,
    welch_lift,
)

from .factories import at, make_fact

_run_ids = itertools.count()


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
    assert (ev.trials, ev.baseline_runs, ev.alpha_bracket, ev.noise_sd) == (3, 6, None, 0.1)
    # The decision is the always-valid test: z read at the pooled df (3 + 6 - 2 = 7),
    # mixed over effective runs (0.1^2 / se^2) with precision min_trials / 6.
    z = (ev.lift - 0.05) / ev.se
    z_eq = -normal_quantile(student_t_cdf(-z, 7))
    want = mixture_p_value(z_eq, 0.01 / ev.se**2, 0.5)
    assert ev.sequential_p_promote == pytest.approx(want) and want <= 0.1
    assert ev.sequential_p_evict == 1.0


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
    policy = RetentionPolicy(sequential_control="none", noise_floor_sd=0.1, min_trials=3)
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
    doubling = RetentionPolicy(sequential_control="doubling")
    assert plan_retention([a], stats, base, once)[0].verdict == "promoted"
    decision = plan_retention([a], stats, base, doubling)[0]
    assert decision.verdict == "held" and decision.reason == "no_verdict"
    assert decision.evidence is not None and decision.evidence.alpha_bracket == 2.0
    assert plan_retention([a], stats, base, once)[0].evidence.alpha_bracket is None
    # A baseline of 10 runs is still in bracket 0 (alpha / 2).
    early = _baseline(with_a + rest[:10])
    assert plan_retention([a], stats, early, doubling)[0].evidence.alpha_bracket == 0


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


# --------------------------------------------------------------------------- robustness


class _OneMalformedRow:
    """A ledger whose statistics for one fact report trials but no variance (issue 22.6)."""

    def __init__(self, inner: Any, bad: uuid.UUID) -> None:
        self._inner, self._bad = inner, bad

    def _spoil(self, stats: FactStats) -> FactStats:
        return stats.model_copy(update={"trials": 5, "variance": None})

    async def record_outcome(self, outcome: Any) -> None:
        await self._inner.record_outcome(outcome)

    async def get_fact_stats(self, fact_id: Any) -> Any:
        stats = await self._inner.get_fact_stats(fact_id)
        return self._spoil(stats) if stats is not None and stats.fact_id == self._bad else stats

    async def get_fact_stats_batch(self, ids: Any) -> Any:
        found = await self._inner.get_fact_stats_batch(ids)
        return {k: self._spoil(v) if k == self._bad else v for k, v in found.items()}

    async def list_fact_stats(self) -> Any:
        return [self._spoil(s) if s.fact_id == self._bad else s
                for s in await self._inner.list_fact_stats()]

    async def get_baseline(self, exclude_fact_id: Any = None) -> Any:
        return await self._inner.get_baseline(exclude_fact_id)

    async def clear(self) -> None:
        await self._inner.clear()

    async def append_gate_audit(self, entries: Any) -> None:
        await self._inner.append_gate_audit(entries)

    async def list_gate_audit(self, **kw: Any) -> Any:
        return await self._inner.list_gate_audit(**kw)


async def test_a_malformed_ledger_row_holds_that_candidate_only(store: Any, ledger: Any) -> None:
    good, bad, broken = candidate(seconds=1), candidate(seconds=2), candidate(seconds=3)
    await store.put_facts([good, bad, broken])
    await record(ledger, [0.9, 0.92, 0.88], [good.id])
    await record(ledger, [0.1, 0.12, 0.08], [bad.id])
    await record(ledger, [0.5, 0.55, 0.45, 0.5, 0.52], [broken.id])
    await record(ledger, BASELINE6)
    spoiled = _OneMalformedRow(ledger, broken.id)
    assert (await spoiled.get_fact_stats(broken.id)).variance is None
    # Today's code aborted the whole pass: "welch_lift needs n >= 2 in group a, got 5".
    report = await evaluate_retention(store, spoiled)
    assert [p.fact_id for p in report.promoted] == [good.id]
    assert [(e.fact_id, e.reason) for e in report.evicted] == [(bad.id, "eval-gate:harmful")]
    assert [(h.fact_id, h.trials, h.evidence) for h in report.held] == [(broken.id, 5, None)]
    assert (await store.get_fact(broken.id)).tags == ["lesson", "candidate"]
    audit = await ledger.list_gate_audit(fact_id=broken.id)
    assert [(e.verdict, e.trials) for e in audit] == [("held", 5)]
    assert audit[0].reason == "malformed_stats: fact has 5 runs but no variance"
    # The broken row never retires the candidate, whatever the decision window.
    again = await evaluate_retention(store, spoiled, {"max_baseline_runs": 2, "max_trials": 3})
    assert [h.fact_id for h in again.held] == [broken.id]


@pytest.mark.parametrize(
    ("update", "why"),
    [
        ({"mean_score": math.nan}, "fact mean nan outside [0, 1]"),
        ({"mean_score": 1.5}, "fact mean 1.5 outside [0, 1]"),
        ({"variance": -0.01}, "fact variance -0.01 impossible for scores in [0, 1]"),
        ({"variance": math.inf}, "fact variance inf impossible for scores in [0, 1]"),
        ({"trials": 40}, "40 trials but 9 runs in the ledger"),
    ],
)
def test_every_kind_of_malformed_row_is_held_with_its_reason(
    update: dict[str, Any], why: str
) -> None:
    a, b = make_fact(tags=["candidate"]), make_fact(tags=["candidate"])
    with_a = [0.9, 0.92, 0.88]
    stats = {a.id: _stats(a.id, with_a).model_copy(update=update),
             b.id: _stats(b.id, with_a)}
    decisions = plan_retention([a, b], stats, _baseline(with_a + BASELINE6))
    assert (decisions[0].verdict, decisions[0].reason) == ("held", f"malformed_stats: {why}")
    assert decisions[1].verdict == "promoted"  # the sound candidate is still decided


def test_a_malformed_baseline_holds_every_candidate_with_a_reason() -> None:
    a = make_fact(tags=["candidate"])
    stats = {a.id: _stats(a.id, [0.9, 0.92, 0.88])}
    broken = OutcomeBaseline(runs=9, mean_score=0.6, variance=None)
    [decision] = plan_retention([a], stats, broken)
    assert decision.verdict == "held"
    assert decision.reason == "malformed_stats: all-runs baseline has 9 runs but no variance"


def test_the_observed_noise_is_used_when_it_exceeds_the_floor() -> None:
    a = make_fact(tags=["candidate"])
    with_a = [0.55, 0.95, 0.75]  # mean 0.75, SD 0.2
    rest = [0.3, 0.7, 0.5, 0.65, 0.35, 0.55, 0.45, 0.5]  # mean 0.5, SD ~0.13
    stats = {a.id: _stats(a.id, with_a)}
    base = _baseline(with_a + rest)
    [d] = plan_retention([a], stats, base, RetentionPolicy(noise_floor_sd=0.05))
    pooled = math.sqrt((0.04 * 2 + summarize(rest).variance * 7) / 9)
    assert d.evidence is not None and d.evidence.noise_sd == pytest.approx(pooled)
    assert d.evidence.se == pytest.approx(pooled * math.sqrt(1 / 3 + 1 / 8))
    assert d.evidence.df == 9  # one pooled variance: Student's t on both groups' df
    assert d.verdict == "held"
    # A floor above the observed noise wins, and counts as known (no df).
    [high] = plan_retention([a], stats, base, RetentionPolicy(noise_floor_sd=0.3))
    assert high.evidence is not None and high.evidence.noise_sd == 0.3
    assert high.evidence.df == math.inf
    assert high.evidence.se == pytest.approx(0.3 * math.sqrt(1 / 3 + 1 / 8))


def test_repeated_looks_do_not_add_up_under_the_always_valid_rule() -> None:
    """A per-look test promotes on a lucky streak the always-valid test does not trust."""
    a = make_fact(tags=["candidate"])
    with_a = [0.75, 0.72, 0.78]  # three lucky runs of a lesson
    rest = [0.5, 0.55, 0.45, 0.5]
    stats = {a.id: _stats(a.id, with_a)}
    base = _baseline(with_a + rest)
    per_look = plan_retention([a], stats, base, RetentionPolicy(sequential_control="none"))[0]
    assert per_look.verdict == "promoted"
    [d] = plan_retention([a], stats, base)
    assert d.verdict == "held" and d.reason == "no_verdict"
    assert d.evidence is not None and d.evidence.p_promote > 0.9
    assert d.evidence.sequential_p_promote > 0.1
    # With more evidence of the same lift the sequential test decides.
    stronger = {a.id: _stats(a.id, with_a * 3)}
    bigger = _baseline(with_a * 3 + rest * 5)
    assert plan_retention([a], stronger, bigger)[0].verdict == "promoted"


def test_no_decision_before_the_minimum_baseline() -> None:
    a = make_fact(tags=["candidate"])
    with_a = [0.95, 0.96, 0.94]
    stats = {a.id: _stats(a.id, with_a)}
    two = plan_retention([a], stats, _baseline([*with_a, 0.1, 0.12]))[0]
    assert (two.verdict, two.reason) == ("held", "insufficient_baseline")
    assert two.evidence is not None  # evidence is reported, the verdict waits
    three = plan_retention([a], stats, _baseline([*with_a, 0.1, 0.12, 0.11]))[0]
    assert three.verdict == "promoted"


@pytest.mark.postgres
async def test_a_nan_score_written_by_raw_sql_holds_the_pass_with_a_reason(
    pg_sessionmaker: Any, pg_tenant: str
) -> None:
    """A row no validated write can produce (score NaN, inserted by SQL) poisons every
    mean it enters; the pass holds the candidates with the reason instead of failing."""
    from sqlalchemy import text

    from cycgraph_memory.postgres import PostgresMemoryStore, PostgresOutcomeLedger

    store = PostgresMemoryStore(pg_sessionmaker, tenant_id=pg_tenant)
    ledger = PostgresOutcomeLedger(pg_sessionmaker, tenant_id=pg_tenant)
    good, other = candidate(seconds=1), candidate(seconds=2)
    await store.put_facts([good, other])
    await record(ledger, [0.9, 0.92, 0.88], [good.id])
    await record(ledger, BASELINE6)
    async with pg_sessionmaker() as session, session.begin():
        await session.execute(text("SELECT set_config('cycgraph.tenant_id', :t, true)"),
                              {"t": pg_tenant})
        await session.execute(
            text("INSERT INTO outcome_runs (tenant_id, run_id, score, recorded_at) "
                 "VALUES (:t, 'raw-nan', 'NaN'::float8, now())"),
            {"t": pg_tenant},
        )
        await session.execute(
            text("INSERT INTO outcome_run_facts (tenant_id, fact_id, run_id) "
                 "VALUES (:t, :f, 'raw-nan')"),
            {"t": pg_tenant, "f": other.id},
        )
    stats = await ledger.get_fact_stats(other.id)
    assert stats is not None and math.isnan(stats.mean_score)
    report = await evaluate_retention(store, ledger)
    assert report.promoted == [] and report.evicted == []
    audit = await ledger.list_gate_audit(pass_id=report.pass_id)
    assert [(e.fact_id, e.verdict) for e in audit] == [(good.id, "held"), (other.id, "held")]
    assert all(e.reason == "malformed_stats: all-runs baseline mean nan outside [0, 1]"
               for e in audit)
    assert (await store.get_fact(good.id)).tags == ["lesson", "candidate"]

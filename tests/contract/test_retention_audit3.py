"""Eval-gated retention, acceptance checks written from the spec (audit 3), both backends.

The statistics are checked against an independent computation (scipy and the formulas of
docs/retention-gate.md), not against the library's own helpers.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import itertools
import math
import uuid
from collections.abc import Iterable, Sequence
from typing import Any

import pytest

from cycgraph_memory.errors import InvalidTypeError
from cycgraph_memory.inmemory.ledger import InMemoryOutcomeLedger
from cycgraph_memory.records import QUARANTINE_TAG, MemoryQuery, RunOutcome, SemanticFact
from cycgraph_memory.retention import CHANGED_DURING_PASS, RetentionPolicy, evaluate_retention
from cycgraph_memory.retrieval import retrieve_gated_lessons, retrieve_memory

from .factories import at, make_fact

_run_ids = itertools.count()

BASELINE6 = [0.45, 0.5, 0.55, 0.5, 0.48, 0.52]


def candidate(*extra_tags: str, seconds: float = 0, fid: int | None = None) -> SemanticFact:
    extra = {"id": uuid.UUID(int=fid)} if fid is not None else {}
    return make_fact(tags=["lesson", "candidate", *extra_tags], valid_from=at(seconds), **extra)


async def record(ledger: Any, scores: Iterable[float], facts: Sequence[uuid.UUID] = ()) -> None:
    for score in scores:
        await ledger.record_outcome(
            RunOutcome(run_id=f"a3-{next(_run_ids)}", score=score, fact_ids=list(facts))
        )


def _mean(xs: Sequence[float]) -> float:
    return math.fsum(xs) / len(xs)


def _ss(xs: Sequence[float]) -> float:
    m = _mean(xs)
    return math.fsum((x - m) ** 2 for x in xs)


def expected_evidence(
    with_: Sequence[float],
    rest: Sequence[float],
    *,
    floor: float = 0.1,
    margin: float = 0.05,
    min_trials: int = 3,
) -> dict[str, float]:
    """The documented inference rule, computed independently with scipy.

    Noise: max(floor^2, pooled variance of both groups); the z statistics are read at the
    pooled df (a floor-set variance counts as known: df = inf), the always-valid p-value
    is min(1, 1/M) with Robbins' normal mixture M at n = noise^2 / se^2, rho = min_trials/6.
    """
    st = pytest.importorskip("scipy.stats")
    n1, n2 = len(with_), len(rest)
    data_df = n1 + n2 - 2
    pooled = (_ss(with_) + _ss(rest)) / data_df
    noise_var = max(floor * floor, pooled)
    df = math.inf if noise_var == floor * floor else float(data_df)
    se = math.sqrt(noise_var / n1 + noise_var / n2)
    lift = _mean(with_) - _mean(rest)
    z_up = (lift - margin) / se
    z_down = (-margin - lift) / se
    t = st.t(df) if math.isfinite(df) else st.norm

    def always_valid(z: float) -> float:
        if z <= 0:
            return 1.0
        z_eq = float(st.norm.isf(st.t.sf(z, data_df)))
        n = noise_var / se**2
        rho = min_trials / 6
        s = z_eq * math.sqrt(n)
        m = (2 * math.sqrt(rho / (n + rho)) * math.exp(s * s / (2 * (n + rho)))
             * float(st.norm.cdf(s / math.sqrt(n + rho))))
        return min(1.0, 1.0 / m)

    return {
        "lift": lift,
        "se": se,
        "df": df,
        "noise_sd": math.sqrt(noise_var),
        "p_promote": float(t.cdf(z_up)),
        "p_evict": float(t.cdf(z_down)),
        "sequential_p_promote": always_valid(z_up),
        "sequential_p_evict": always_valid(z_down),
    }


# --------------------------------------------------------------------------- typed refusals


@pytest.mark.parametrize("bad_ledger", [None, "ledger", object()])
async def test_the_gate_refuses_a_non_ledger_before_reading_anything(
    store: Any, ledger: Any, bad_ledger: Any
) -> None:
    good = candidate()
    await store.put_fact(good)
    await record(ledger, [0.9, 0.92, 0.88], [good.id])
    await record(ledger, BASELINE6)
    # Before the fix: AttributeError from inside the pass ('NoneType' object has no
    # attribute 'get_fact_stats'), and nothing at all when the store had no candidate.
    with pytest.raises(InvalidTypeError):
        await evaluate_retention(store, bad_ledger)
    with pytest.raises(InvalidTypeError):
        await evaluate_retention(object(), ledger)  # type: ignore[arg-type]
    with pytest.raises(InvalidTypeError):  # before: TypeError after the pass had decided
        await evaluate_retention(store, ledger, clock="now")  # type: ignore[arg-type]
    assert await store.get_fact(good.id) == good
    assert await ledger.list_gate_audit() == []


async def test_gated_retrieval_refuses_a_non_store() -> None:
    with pytest.raises(InvalidTypeError):
        await retrieve_gated_lessons(None, tags=["lesson"])  # type: ignore[arg-type]


# --------------------------------------------------------------------------- concurrent writers


class _WriterDuringPass:
    """A ledger that lets a writer change a fact while the gate pass is deciding.

    ``get_gate_inputs`` (or, for a ledger without it, ``get_baseline``) is called after
    the gate listed its candidates and before it writes.
    """

    def __init__(self, inner: Any, write: Any) -> None:
        self._inner, self._write = inner, write

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def get_baseline(self, exclude_fact_id: Any = None) -> Any:
        await self._write()
        return await self._inner.get_baseline(exclude_fact_id)

    async def get_gate_inputs(self, ids: Any) -> Any:
        await self._write()
        return await self._inner.get_gate_inputs(ids)


async def test_a_candidate_quarantined_during_the_pass_is_never_promoted(
    store: Any, ledger: Any
) -> None:
    good = candidate()
    await store.put_fact(good)
    await record(ledger, [0.9, 0.92, 0.88], [good.id])
    await record(ledger, BASELINE6)
    tainted = good.model_copy(update={"tags": [*good.tags, QUARANTINE_TAG]})

    async def quarantine() -> None:
        await store.put_fact(tainted)

    report = await evaluate_retention(store, _WriterDuringPass(ledger, quarantine))
    # Before the fix the gate wrote back its stale copy: tags ['lesson', 'verified'], the
    # quarantine tag lost and the lesson served as verified.
    assert report.promoted == [] and report.evicted == []
    assert [(h.fact_id, h.reason) for h in report.held] == [(good.id, CHANGED_DURING_PASS)]
    assert await store.get_fact(good.id) == tainted
    assert await retrieve_gated_lessons(store, tags=["lesson"], ledger=ledger) == []
    audit = await ledger.list_gate_audit(pass_id=report.pass_id)
    assert [(e.fact_id, e.verdict, e.reason) for e in audit] == [
        (good.id, "held", CHANGED_DURING_PASS)
    ]
    # The next pass skips the quarantined fact altogether.
    again = await evaluate_retention(store, ledger)
    assert (again.promoted, again.evicted, again.held) == ([], [], [])


async def test_an_eviction_does_not_overwrite_a_concurrent_invalidation(
    store: Any, ledger: Any
) -> None:
    bad = candidate()
    await store.put_fact(bad)
    await record(ledger, [0.1, 0.12, 0.08], [bad.id])
    await record(ledger, BASELINE6)
    retracted = bad.model_copy(update={"invalidated_by": "retracted-by-human"})

    async def retract() -> None:
        await store.put_fact(retracted)

    report = await evaluate_retention(store, _WriterDuringPass(ledger, retract))
    assert report.evicted == []
    assert [h.reason for h in report.held] == [CHANGED_DURING_PASS]
    assert (await store.get_fact(bad.id)).invalidated_by == "retracted-by-human"


async def test_a_verdict_is_applied_to_the_current_record(store: Any, ledger: Any) -> None:
    good = candidate()
    await store.put_fact(good)
    await record(ledger, [0.9, 0.92, 0.88], [good.id])
    await record(ledger, BASELINE6)
    edited = good.model_copy(update={"content": "cite the source of every number"})

    async def edit() -> None:
        await store.put_fact(edited)

    report = await evaluate_retention(store, _WriterDuringPass(ledger, edit))
    assert [p.fact_id for p in report.promoted] == [good.id]
    stored = await store.get_fact(good.id)
    # Before the fix the concurrent edit was lost (the stale content written back).
    assert stored.content == "cite the source of every number"
    assert stored.tags == ["lesson", "verified"]


# --------------------------------------------------------------------------- statistics by hand


async def test_evidence_matches_an_independent_computation(store: Any, ledger: Any) -> None:
    """Observed noise above the floor: pooled variance, Student's t at the pooled df."""
    lesson = candidate()
    await store.put_fact(lesson)
    with_ = [0.8, 0.95, 0.7, 0.9]
    rest = [0.3, 0.7, 0.5, 0.65, 0.35, 0.55, 0.45, 0.5]
    await record(ledger, with_, [lesson.id])
    await record(ledger, rest)
    policy = {"noise_floor_sd": 0.05}
    report = await evaluate_retention(store, ledger, policy)
    entries = report.promoted + report.held  # type: ignore[operator]
    [entry] = entries
    ev = entry.evidence
    want = expected_evidence(with_, rest, floor=0.05)
    assert want["df"] == 10.0 and want["noise_sd"] > 0.05
    for name, value in want.items():
        assert getattr(ev, name) == pytest.approx(value, rel=1e-9, abs=1e-12), name
    assert (ev.trials, ev.baseline_runs) == (4, 8)
    verdict = "promoted" if want["sequential_p_promote"] <= 0.1 else "held"
    assert (report.promoted != []) == (verdict == "promoted")


async def test_a_wide_lesson_group_uses_its_own_variance_welch(store: Any, ledger: Any) -> None:
    """docs/retention-gate.md: a group with 11 or more runs uses its own SD when that is
    larger than the pooled noise; the df is then Welch-Satterthwaite's."""
    st = pytest.importorskip("scipy.stats")
    lesson = candidate()
    await store.put_fact(lesson)
    with_ = [0.95, 0.45] * 6  # 12 trials, SD ~0.26
    rest = [0.48, 0.52] * 6  # 12 runs, SD ~0.02
    await record(ledger, with_, [lesson.id])
    await record(ledger, rest)
    report = await evaluate_retention(store, ledger, {"max_trials": 20})
    [held] = report.held
    ev = held.evidence
    pooled = (_ss(with_) + _ss(rest)) / 22
    own = _ss(with_) / 11
    assert own > pooled > 0.01
    wa, wb = own / 12, pooled / 12
    se = math.sqrt(wa + wb)
    df = (wa + wb) ** 2 / (wa * wa / 11 + wb * wb / 22)
    lift = _mean(with_) - _mean(rest)
    assert (ev.lift, ev.noise_sd) == (pytest.approx(lift), pytest.approx(math.sqrt(pooled)))
    assert ev.se == pytest.approx(se, rel=1e-9) and ev.df == pytest.approx(df, rel=1e-9)
    assert ev.p_promote == pytest.approx(float(st.t.cdf((lift - 0.05) / se, df)), rel=1e-9)
    assert ev.p_evict == pytest.approx(float(st.t.cdf((-0.05 - lift) / se, df)), rel=1e-9)


async def test_min_trials_sets_the_trials_the_baseline_and_the_mixture(
    store: Any, ledger: Any
) -> None:
    """min_trials=5: no test before 5 trials and 5 baseline runs; rho = 5/6."""
    lesson = candidate()
    await store.put_fact(lesson)
    with_ = [0.85, 0.9, 0.95, 0.9]
    await record(ledger, with_, [lesson.id])
    await record(ledger, [0.5, 0.45, 0.55, 0.5])
    policy = {"min_trials": 5}
    first = await evaluate_retention(store, ledger, policy)
    assert [(h.reason, h.trials) for h in first.held] == [("insufficient_trials", 4)]
    with_.append(0.9)
    await record(ledger, [0.9], [lesson.id])
    second = await evaluate_retention(store, ledger, policy)
    assert [(h.reason, h.trials) for h in second.held] == [("insufficient_baseline", 5)]
    rest = [0.5, 0.45, 0.55, 0.5, 0.5]
    await record(ledger, [0.5])
    third = await evaluate_retention(store, ledger, policy)
    want = expected_evidence(with_, rest, min_trials=5)
    [entry] = [*third.promoted, *third.held]
    got = entry.evidence.sequential_p_promote
    assert got == pytest.approx(want["sequential_p_promote"], rel=1e-9)
    assert (third.promoted != []) == (want["sequential_p_promote"] <= 0.1)
    # The same data with rho = 3/6 would give another p-value: rho follows min_trials.
    assert want["sequential_p_promote"] != pytest.approx(
        expected_evidence(with_, rest, min_trials=3)["sequential_p_promote"], rel=1e-6
    )


async def _bh_pass(store: Any, ledger: Any, b_level: float, c_level: float,
                   policy: dict[str, Any] | None = None) -> tuple[Any, dict[str, float]]:
    """Three candidates, each injected alone, over a 60-run lesson-free baseline."""
    facts = {k: candidate(seconds=i) for i, k in enumerate("ABC")}
    await store.put_facts(list(facts.values()))
    groups = {
        "A": [0.88, 0.9, 0.92],
        "B": [b_level - 0.04, b_level, b_level + 0.04],
        "C": [c_level - 0.04, c_level, c_level + 0.04],
    }
    base = BASELINE6 * 10
    for k, scores in groups.items():
        await record(ledger, scores, [facts[k].id])
    await record(ledger, base)
    report = await evaluate_retention(store, ledger, policy)
    p = {}
    for k, scores in groups.items():
        others = [x for kk, v in groups.items() if kk != k for x in v]
        p[k] = expected_evidence(scores, others + base)["sequential_p_promote"]
    promoted = {pl.fact_id for pl in report.promoted}
    reported = {e.fact_id: e.evidence for e in [*report.promoted, *report.held]}
    for k, f in facts.items():  # the gate's own p-values agree with the hand computation
        assert reported[f.id].sequential_p_promote == pytest.approx(p[k], rel=1e-9, abs=1e-12)
    return {k for k, f in facts.items() if f.id in promoted}, p


async def test_benjamini_hochberg_holds_back_a_lesson_significant_only_alone(
    store: Any, ledger: Any
) -> None:
    promoted, p = await _bh_pass(store, ledger, 0.725, 0.5)
    # Hand check: sorted p = (pA, pB, 1); BH at q = 0.1 with m = 3 needs p_(2) <= 2/3 q.
    assert p["A"] < 0.1 / 3
    assert 2 / 3 * 0.1 < p["B"] <= 0.1  # would pass alone at 0.1
    assert p["C"] == 1.0
    assert promoted == {"A"}


async def test_benjamini_hochberg_without_fdr_control_promotes_both(
    store: Any, ledger: Any
) -> None:
    promoted, p = await _bh_pass(store, ledger, 0.725, 0.5, {"multiple_comparison": "none"})
    assert 2 / 3 * 0.1 < p["B"] <= 0.1
    assert promoted == {"A", "B"}


async def test_benjamini_hochberg_is_step_up(store: Any, ledger: Any) -> None:
    promoted, p = await _bh_pass(store, ledger, 0.73, 0.73)
    # p_(2) > 2/3 q, but p_(3) <= q: the step-up procedure rejects all three (a step-down
    # procedure would stop at rank 2 and promote A only).
    assert p["A"] < 0.1 / 3
    assert 2 / 3 * 0.1 < p["B"] <= 0.1 and 2 / 3 * 0.1 < p["C"] <= 0.1
    assert promoted == {"A", "B", "C"}


async def test_doubling_control_weights_the_p_value_by_its_bracket(
    store: Any, ledger: Any
) -> None:
    """sequential_control="doubling": bracket k tests 1 - P(lift > margin) at alpha/2^(k+1)."""
    st = pytest.importorskip("scipy.stats")
    lesson = candidate()
    await store.put_fact(lesson)
    with_ = [0.62, 0.66, 0.7]
    rest = BASELINE6 * 5  # 30 runs: bracket 2 of start 6 (24-47)
    await record(ledger, with_, [lesson.id])
    await record(ledger, rest)
    report = await evaluate_retention(store, ledger, {"sequential_control": "doubling"})
    se = 0.1 * math.sqrt(1 / 3 + 1 / 30)  # the floor wins: a known variance, z test
    p_one_look = float(st.norm.sf((_mean(with_) - _mean(rest) - 0.05) / se))
    assert 0.1 / 8 < p_one_look <= 0.1  # passes one look, fails at alpha / 2^(2+1)
    [held] = report.held
    assert held.reason == "no_verdict" and held.evidence.alpha_bracket == 2.0
    assert 1 - held.evidence.p_promote == pytest.approx(p_one_look, rel=1e-9)
    once = await evaluate_retention(store, ledger, {"sequential_control": "none"})
    assert [p.fact_id for p in once.promoted] == [lesson.id]


# --------------------------------------------------------------------------- lifecycle


async def test_promoted_is_served_as_verified_evicted_never_again(
    store: Any, ledger: Any
) -> None:
    good, bad, legacy = candidate(seconds=1), candidate(seconds=2), make_fact(
        tags=["lesson"], valid_from=at(0)
    )
    await store.put_facts([good, bad, legacy])
    await record(ledger, [0.9, 0.92, 0.88], [good.id])
    await record(ledger, [0.1, 0.12, 0.08], [bad.id])
    await record(ledger, BASELINE6)
    report = await evaluate_retention(store, ledger)
    assert [p.fact_id for p in report.promoted] == [good.id]
    assert [e.fact_id for e in report.evicted] == [bad.id]
    for kw in ({}, {"ledger": ledger}, {"ledger": ledger, "rest_after_trials": 3}):
        served = await retrieve_gated_lessons(store, tags=["lesson"], candidate_slots=0, **kw)
        # Verified (newest first): the promoted lesson, then the legacy lesson without a
        # status tag (counts as verified). The evicted one never appears.
        assert [f.id for f in served] == [good.id, legacy.id]
    result = await retrieve_memory(store, None, MemoryQuery(tags=["lesson"]))
    assert bad.id not in {f.id for f in result.facts}
    assert good.id in {f.id for f in result.facts}
    assert bad.id not in {f.id for f in await store.find_facts(tags=["lesson"])}
    kept = await store.find_facts(tags=["lesson"], include_invalidated=True)
    assert bad.id in {f.id for f in kept}  # recoverable for audit


async def test_rerun_without_new_outcomes_changes_nothing_and_the_audit_only_grows(
    store: Any, ledger: Any
) -> None:
    good, bad, meh, fresh = (candidate(seconds=i) for i in range(4))
    await store.put_facts([good, bad, meh, fresh])
    await record(ledger, [0.9, 0.92, 0.88], [good.id])
    await record(ledger, [0.1, 0.12, 0.08], [bad.id])
    await record(ledger, [0.5, 0.55, 0.45], [meh.id])
    await record(ledger, BASELINE6)
    first = await evaluate_retention(store, ledger, {"max_trials": 4})
    after_first = await store.find_facts(include_invalidated=True)
    log_first = await ledger.list_gate_audit()
    assert [(e.fact_id, e.verdict, e.reason) for e in log_first] == [
        (good.id, "promoted", None),
        (bad.id, "evicted", "eval-gate:harmful"),
        (meh.id, "held", "no_verdict"),
        (fresh.id, "held", "insufficient_trials"),
    ]
    assert {e.pass_id for e in log_first} == {first.pass_id}
    for _ in range(2):
        again = await evaluate_retention(store, ledger, {"max_trials": 4})
        assert again.promoted == [] and again.evicted == []
        assert [(h.fact_id, h.reason, h.evidence) for h in again.held] == [
            (h.fact_id, h.reason, h.evidence) for h in first.held
        ]
        assert await store.find_facts(include_invalidated=True) == after_first
    log = await ledger.list_gate_audit()
    assert log[:4] == log_first  # earlier entries are never rewritten
    assert len(log) == 8 and [e.verdict for e in log[4:]] == ["held"] * 4


async def test_margin_rule_decisions_are_final_and_evidence_free(
    store: Any, ledger: Any
) -> None:
    up, down, flat = candidate(seconds=1), candidate(seconds=2), candidate(seconds=3)
    await store.put_facts([up, down, flat])
    await record(ledger, [0.6, 0.6], [up.id])
    await record(ledger, [0.4, 0.4, 0.4], [down.id])
    await record(ledger, [0.52, 0.5, 0.51], [flat.id])
    await record(ledger, [0.5])
    policy = {"decision_rule": "margin", "max_trials": 3}
    report = await evaluate_retention(store, ledger, policy)
    # up: 2 trials < min_trials (held); down: lift -0.1 (harmful); flat: within the
    # margins at max_trials (no_lift). A margin decision carries no evidence.
    assert [(h.fact_id, h.reason, h.evidence) for h in report.held] == [
        (up.id, "insufficient_trials", None)
    ]
    assert [(e.fact_id, e.reason, e.evidence) for e in report.evicted] == [
        (down.id, "eval-gate:harmful", None), (flat.id, "eval-gate:no_lift", None)
    ]
    await record(ledger, [0.6], [up.id])
    second = await evaluate_retention(store, ledger, policy)
    assert [p.fact_id for p in second.promoted] == [up.id]
    third = await evaluate_retention(store, ledger, policy)
    assert (third.promoted, third.evicted, third.held) == ([], [], [])


# --------------------------------------------------------------------------- gated retrieval


async def test_a_quarantine_scope_never_serves_quarantined_lessons(store: Any) -> None:
    tainted = make_fact(tags=["lesson", "verified", QUARANTINE_TAG], valid_from=at(1))
    tainted_cand = candidate(QUARANTINE_TAG, seconds=2)
    await store.put_facts([tainted, tainted_cand])
    for tags in (["lesson", QUARANTINE_TAG], [QUARANTINE_TAG]):
        assert await retrieve_gated_lessons(store, tags=tags) == []
        assert await retrieve_gated_lessons(
            store, tags=tags, ledger=InMemoryOutcomeLedger(), candidate_slots=10
        ) == []


async def test_in_progress_first_ties_on_trials_then_valid_from_then_id(
    store: Any, ledger: Any
) -> None:
    # Two with 2 trials (same valid_from: id decides), one with 2 trials but older, one with
    # 1 trial, and a fresh one; the newest-first order without a ledger is the reverse.
    old2 = candidate(seconds=0, fid=9)
    tie_b, tie_a = candidate(seconds=5, fid=7), candidate(seconds=5, fid=3)
    one = candidate(seconds=1, fid=1)
    fresh = candidate(seconds=-10, fid=2)
    await store.put_facts([old2, tie_b, tie_a, one, fresh])
    for f in (old2, tie_b, tie_a):
        await record(ledger, [0.5, 0.5], [f.id])
    await record(ledger, [0.5], [one.id])
    got = await retrieve_gated_lessons(store, tags=["lesson"], ledger=ledger,
                                       max_facts=5, candidate_slots=5)
    assert [f.id for f in got] == [old2.id, tie_a.id, tie_b.id, one.id, fresh.id]
    benched = await retrieve_gated_lessons(store, tags=["lesson"], ledger=ledger,
                                           rest_after_trials=2, max_facts=5, candidate_slots=5)
    assert [f.id for f in benched] == [one.id, fresh.id]
    newest = await retrieve_gated_lessons(store, tags=["lesson"], max_facts=5,
                                          candidate_slots=5)
    assert [f.id for f in newest] == [tie_a.id, tie_b.id, one.id, old2.id, fresh.id]


async def test_ledger_batch_accepts_string_and_repeated_ids(ledger: Any) -> None:
    a, b = uuid.uuid4(), uuid.uuid4()
    await ledger.record_outcome(RunOutcome(run_id="x1", score=0.25, fact_ids=[a, b]))
    await ledger.record_outcome(RunOutcome(run_id="x2", score=0.75, fact_ids=[a]))
    got = await ledger.get_fact_stats_batch([str(a), a, str(b), uuid.uuid4()])
    assert set(got) == {a, b}
    assert (got[a].trials, got[a].mean_score, got[a].variance) == (2, 0.5, 0.125)
    assert (got[b].trials, got[b].mean_score, got[b].variance) == (1, 0.25, None)
    loo = await ledger.get_baseline(str(b))
    assert (loo.runs, loo.mean_score, loo.variance) == (1, 0.75, None)


def test_a_policy_refuses_the_quarantine_tag_as_a_lifecycle_tag() -> None:
    from pydantic import ValidationError

    for bad in ({"candidate_tag": QUARANTINE_TAG}, {"verified_tag": QUARANTINE_TAG}):
        with pytest.raises(ValidationError):
            RetentionPolicy.model_validate(bad)


# --------------------------------------------------------------------------- row locks (Postgres)



@pytest.mark.postgres
async def test_a_writer_racing_the_gates_write_waits_for_its_commit(committing_dsn: str) -> None:
    """Between the gate's re-read and its write, another connection cannot commit.

    The writer quarantines the candidate right before the gate writes its promotion.
    With the re-read rows locked (``get_facts_for_update``) the writer waits for the
    gate's commit and its quarantine lands after it; without the lock the writer
    committed first and the gate's promotion erased the quarantine tag.
    """
    from cycgraph_memory.postgres import PostgresMemoryStore, create_engine_from_dsn

    engine = create_engine_from_dsn(committing_dsn)
    tenant = f"gate_race_{uuid.uuid4().hex[:10]}"
    gate_store = PostgresMemoryStore(engine, tenant_id=tenant)
    writer = PostgresMemoryStore(engine, tenant_id=tenant)
    ledger = InMemoryOutcomeLedger()
    try:
        good = candidate()
        await gate_store.put_fact(good)
        await record(ledger, [0.9, 0.92, 0.88], [good.id])
        await record(ledger, BASELINE6)
        tainted = good.model_copy(update={"tags": [*good.tags, QUARANTINE_TAG]})
        put_facts = gate_store.put_facts
        racing: list[asyncio.Task[None]] = []

        async def put_after_a_racing_write(facts: Any) -> None:
            # A fresh context: the writer is another client, not a part of the gate's unit
            # of work (a task copies the caller's context, open unit of work included).
            racing.append(asyncio.create_task(writer.put_fact(tainted),
                                              context=contextvars.Context()))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(racing[0]), 0.5)
            await put_facts(facts)

        gate_store.put_facts = put_after_a_racing_write  # type: ignore[method-assign]
        report = await evaluate_retention(gate_store, ledger)
        await racing[0]
        assert [p.fact_id for p in report.promoted] == [good.id]
        final = await writer.get_fact(good.id)
        assert final is not None and QUARANTINE_TAG in final.tags
        assert await retrieve_gated_lessons(writer, tags=["lesson"], ledger=ledger) == []
    finally:
        await writer.clear()
        await engine.dispose()

"""The retention gate: promote candidate lessons that lift outcomes, evict the others.

One pass (:func:`evaluate_retention`) runs as one exclusive unit of work on the store:

1. read the active candidates (one ``find_facts``), their ledger statistics (one
   ``get_fact_stats_batch``) and the all-runs baseline (one ``get_baseline``); each
   candidate's leave-one-out baseline is derived from those two without another scan;
2. plan: decide every candidate (:func:`plan_retention`, pure);
3. apply: promotions swap the candidate tag for the verified tag, evictions soft-delete
   with ``invalidated_by = "eval-gate:harmful"`` or ``"eval-gate:no_lift"`` (one
   ``put_facts``);
4. append one audit entry per decision when the ledger keeps a gate audit log.

Everything lands or nothing does, and two concurrent passes end in the state of one.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from typing import Any, Final, Literal, cast

from pydantic import BaseModel, ConfigDict, Field, model_validator

from cycgraph_memory._construct import trusted
from cycgraph_memory._exclusive import exclusive_pass
from cycgraph_memory.contracts import (
    MemoryStore,
    OutcomeLedger,
    SupportsFactStatsBatch,
    SupportsGateAudit,
)
from cycgraph_memory.errors import InvalidInputError
from cycgraph_memory.records import (
    QUARANTINE_TAG,
    EvictedLesson,
    FactFilter,
    FactStats,
    GateAuditEntry,
    GateVerdict,
    HeldLesson,
    OutcomeBaseline,
    PromotedLesson,
    RetentionEvidence,
    RetentionReport,
    SemanticFact,
    utc_now,
)
from cycgraph_memory.statistics import (
    SampleSummary,
    benjamini_hochberg,
    student_t_cdf,
    subtract_summary,
    welch_lift,
)

__all__ = [
    "DEFAULT_RETENTION_POLICY",
    "EVICT_HARMFUL",
    "EVICT_NO_LIFT",
    "GATE_PASS_NAME",
    "GateDecision",
    "RetentionPolicy",
    "doubling_bracket",
    "evaluate_retention",
    "plan_retention",
]

EVICT_HARMFUL: Final = "eval-gate:harmful"
"""``invalidated_by`` of a lesson evicted because it hurts outcomes."""

EVICT_NO_LIFT: Final = "eval-gate:no_lift"
"""``invalidated_by`` of a lesson retired without a verdict (``max_trials`` /
``max_baseline_runs``)."""

GATE_PASS_NAME = "retention-gate"
"""Name of the exclusive maintenance pass (one gate pass at a time per store/tenant)."""

EvictionReason = Literal["eval-gate:harmful", "eval-gate:no_lift"]
"""Why the gate evicted a lesson."""


class RetentionPolicy(BaseModel):
    """Options of :func:`evaluate_retention` (the spec's ``RetentionPolicy``).

    Attributes:
        min_trials: Runs a candidate must appear in before any decision.
        promote_margin: Practical-significance floor for promotion (lift must exceed it).
        evict_margin: Practical-significance floor for eviction (drop must exceed it).
        candidate_tag: Tag marking unproven lessons.
        verified_tag: Tag marking lessons that earned their place.
        max_trials: Evict a verdict-less candidate as ``no_lift`` after this many trials
            (``>= min_trials``). When retrieval benches candidates with
            ``rest_after_trials`` their trials freeze below it: pair it with
            ``max_baseline_runs``.
        max_baseline_runs: Retire a still-undecided candidate (one with at least
            ``min_trials`` trials) once its leave-one-out baseline has this many runs.
        decision_rule: ``"inference"`` (Welch test, FDR and sequential control) or
            ``"margin"`` (point estimate against the margins, no statistical guarantee).
        promote_confidence: Required P(lift > promote_margin) to promote (inference).
        evict_confidence: Required P(lift < -evict_margin) to evict (inference).
        noise_floor_sd: Per-group SD floor applied before the Welch test; set it to your
            judge's per-run SD.
        multiple_comparison: ``"bh"``: Benjamini-Hochberg across the candidates tested in
            one pass; ``"none"``.
        sequential_control: ``"doubling"``: alpha spending over doubling baseline-size
            brackets, so gating after every run does not inflate false positives;
            ``"none"`` is only sound if you gate once.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    min_trials: int = Field(default=3, ge=1)
    promote_margin: float = Field(default=0.05, ge=0.0, le=1.0)
    evict_margin: float = Field(default=0.05, ge=0.0, le=1.0)
    candidate_tag: str = Field(default="candidate", min_length=1)
    verified_tag: str = Field(default="verified", min_length=1)
    max_trials: int | None = Field(default=None, ge=1)
    max_baseline_runs: int | None = Field(default=None, ge=1)
    decision_rule: Literal["inference", "margin"] = "inference"
    promote_confidence: float = Field(default=0.9, gt=0.0, lt=1.0)
    evict_confidence: float = Field(default=0.9, gt=0.0, lt=1.0)
    noise_floor_sd: float = Field(default=0.1, ge=0.0, le=1.0)
    multiple_comparison: Literal["bh", "none"] = "bh"
    sequential_control: Literal["doubling", "none"] = "doubling"

    @model_validator(mode="after")
    def _consistent(self) -> RetentionPolicy:
        if self.max_trials is not None and self.max_trials < self.min_trials:
            raise ValueError(
                f"max_trials ({self.max_trials}) must be >= min_trials ({self.min_trials})"
            )
        if self.candidate_tag == self.verified_tag:
            raise ValueError("candidate_tag and verified_tag must differ")
        if QUARANTINE_TAG in (self.candidate_tag, self.verified_tag):
            raise ValueError(f"{QUARANTINE_TAG!r} cannot be a lifecycle tag")
        return self


DEFAULT_RETENTION_POLICY = RetentionPolicy()
"""The spec's defaults (never mutated; derive variants with ``model_copy(update=...)``)."""


@dataclass(frozen=True, slots=True)
class GateDecision:
    """One planned decision: the plan is data, applied afterwards in one unit of work.

    Attributes:
        fact: The candidate as read at the start of the pass.
        verdict: ``promoted``, ``evicted`` or ``held``.
        reason: Eviction reason, or why a candidate is held (``insufficient_trials``,
            ``insufficient_baseline``, ``no_verdict``); ``None`` for a promotion.
        trials: Runs containing the candidate.
        evidence: Statistical evidence (inference rule), when it could be computed.
    """

    fact: SemanticFact
    verdict: GateVerdict
    reason: str | None
    trials: int
    evidence: RetentionEvidence | None


def doubling_bracket(baseline_runs: int, start: int = 6) -> int:
    """Sequential-control bracket of a test run with ``baseline_runs`` leave-one-out runs.

    Bracket 0 holds every test until the baseline reaches ``2 * start`` runs; after that
    each bracket doubles: ``[start * 2^k, start * 2^(k+1))`` is bracket ``k``. Bracket ``k``
    may spend ``alpha / 2^(k+1)`` of the error budget, so the budgets of all brackets sum
    to at most ``alpha`` however often the gate runs. The gate uses
    ``start = 2 * min_trials``: with the default ``min_trials=3`` that is half the budget
    below 12 baseline runs, a quarter for 12-23, an eighth for 24-47, and so on. (The first
    bracket is wide because a test against a baseline smaller than a few times the lesson's
    own trials has little power; splitting the budget finely there only wastes it.)
    """
    k = 0
    while baseline_runs >= start << (k + 1):
        k += 1
    return k


def _summary_of_fact(stats: FactStats | None) -> SampleSummary:
    if stats is None:
        return SampleSummary(0, 0.0, None)
    return SampleSummary(stats.trials, stats.mean_score, stats.variance)


def _baseline_summary(baseline: OutcomeBaseline) -> SampleSummary:
    return SampleSummary(baseline.runs, baseline.mean_score, baseline.variance)


def plan_retention(
    candidates: Sequence[SemanticFact],
    stats: Mapping[uuid.UUID, FactStats],
    baseline: OutcomeBaseline,
    policy: RetentionPolicy = DEFAULT_RETENTION_POLICY,
) -> list[GateDecision]:
    """Decide every candidate (pure: no I/O). Quarantined candidates are skipped.

    Args:
        candidates: Active candidate lessons.
        stats: Ledger statistics by fact id (candidates without runs are absent).
        baseline: The all-runs baseline; each candidate's leave-one-out baseline is the
            runs without it, derived from this and its stats.
        policy: The retention policy.

    Returns:
        One decision per non-quarantined candidate, in the order given.
    """
    total = _baseline_summary(baseline)
    rows: list[tuple[SemanticFact, SampleSummary, SampleSummary]] = []
    for fact in candidates:
        if QUARANTINE_TAG in fact.tags:
            continue
        mine = _summary_of_fact(stats.get(fact.id))
        rows.append((fact, mine, subtract_summary(total, mine)))
    if policy.decision_rule == "margin":
        return [_margin_decision(fact, mine, rest, policy) for fact, mine, rest in rows]
    return _inference_decisions(rows, policy)


def _retire_or_hold(
    fact: SemanticFact,
    mine: SampleSummary,
    rest: SampleSummary,
    evidence: RetentionEvidence | None,
    policy: RetentionPolicy,
    hold_reason: str,
) -> GateDecision:
    if mine.n >= policy.min_trials and (
        (policy.max_trials is not None and mine.n >= policy.max_trials)
        or (policy.max_baseline_runs is not None and rest.n >= policy.max_baseline_runs)
    ):
        return GateDecision(fact, "evicted", EVICT_NO_LIFT, mine.n, evidence)
    return GateDecision(fact, "held", hold_reason, mine.n, evidence)


def _margin_decision(
    fact: SemanticFact, mine: SampleSummary, rest: SampleSummary, policy: RetentionPolicy
) -> GateDecision:
    if mine.n < policy.min_trials:
        return GateDecision(fact, "held", "insufficient_trials", mine.n, None)
    if rest.n < 1:
        return _retire_or_hold(fact, mine, rest, None, policy, "insufficient_baseline")
    lift = mine.mean - rest.mean
    if lift > policy.promote_margin:
        return GateDecision(fact, "promoted", None, mine.n, None)
    if lift < -policy.evict_margin:
        return GateDecision(fact, "evicted", EVICT_HARMFUL, mine.n, None)
    return _retire_or_hold(fact, mine, rest, None, policy, "no_verdict")


def _inference_decisions(
    rows: list[tuple[SemanticFact, SampleSummary, SampleSummary]], policy: RetentionPolicy
) -> list[GateDecision]:
    evidence: list[RetentionEvidence | None] = []
    tested: list[int] = []  # rows that enter the tests of this pass
    promote_p: list[float] = []
    evict_p: list[float] = []
    doubling = policy.sequential_control == "doubling"
    for i, (_, mine, rest) in enumerate(rows):
        if mine.n < 2 or rest.n < 2:
            evidence.append(None)
            continue
        up = welch_lift(mine, rest, threshold=policy.promote_margin,
                        sd_floor=policy.noise_floor_sd)
        # P(true lift < -evict_margin) from the same lift, se and df.
        if up.se > 0.0:
            p_evict = student_t_cdf((-policy.evict_margin - up.lift) / up.se, up.df)
        else:
            p_evict = 1.0 if up.lift < -policy.evict_margin else 0.0
        bracket = doubling_bracket(rest.n, 2 * policy.min_trials) if doubling else None
        evidence.append(
            trusted(
                RetentionEvidence,
                lift=up.lift,
                se=up.se,
                df=up.df,
                p_promote=up.p_exceeds,
                p_evict=p_evict,
                trials=mine.n,
                baseline_runs=rest.n,
                alpha_bracket=None if bracket is None else float(bracket),
            )
        )
        if mine.n >= policy.min_trials:
            # Alpha spending: bracket k tests at alpha / 2^(k+1), i.e. its p-values are
            # weighted by 2^(k+1) before the (possibly BH) comparison with alpha.
            weight = 2.0 ** (bracket + 1) if bracket is not None else 1.0
            tested.append(i)
            promote_p.append(min(1.0, (1.0 - up.p_exceeds) * weight))
            evict_p.append(min(1.0, (1.0 - p_evict) * weight))

    promote_ok = _rejections(promote_p, 1.0 - policy.promote_confidence, policy)
    evict_ok = _rejections(evict_p, 1.0 - policy.evict_confidence, policy)
    verdict_of: dict[int, GateVerdict] = {}
    for j, i in enumerate(tested):
        if promote_ok[j] and not evict_ok[j]:
            verdict_of[i] = "promoted"
        elif evict_ok[j] and not promote_ok[j]:
            verdict_of[i] = "evicted"

    decisions: list[GateDecision] = []
    for i, (fact, mine, rest) in enumerate(rows):
        ev = evidence[i]
        verdict = verdict_of.get(i)
        if verdict == "promoted":
            decisions.append(GateDecision(fact, "promoted", None, mine.n, ev))
        elif verdict == "evicted":
            decisions.append(GateDecision(fact, "evicted", EVICT_HARMFUL, mine.n, ev))
        elif mine.n < policy.min_trials or mine.n < 2:
            decisions.append(GateDecision(fact, "held", "insufficient_trials", mine.n, ev))
        elif rest.n < 2:
            decisions.append(
                _retire_or_hold(fact, mine, rest, ev, policy, "insufficient_baseline")
            )
        else:
            decisions.append(_retire_or_hold(fact, mine, rest, ev, policy, "no_verdict"))
    return decisions


def _rejections(p_values: list[float], alpha: float, policy: RetentionPolicy) -> list[bool]:
    if not p_values:
        return []
    if policy.multiple_comparison == "bh" and len(p_values) > 1:  # BH with m = 1 is p <= q
        return benjamini_hochberg(p_values, alpha)
    return [p <= alpha for p in p_values]


@lru_cache(maxsize=64)
def _candidate_filter(candidate_tag: str) -> FactFilter:
    return FactFilter(tags=[candidate_tag], exclude_tags=[QUARANTINE_TAG])


def _coerce_policy(policy: RetentionPolicy | Mapping[str, Any] | None) -> RetentionPolicy:
    if policy is None:
        return DEFAULT_RETENTION_POLICY
    if isinstance(policy, RetentionPolicy):
        return policy
    if isinstance(policy, Mapping):
        return RetentionPolicy.model_validate(dict(policy))
    raise TypeError(f"expected RetentionPolicy, a mapping or None, got {type(policy).__name__}")


async def _read_stats(
    ledger: OutcomeLedger, ids: list[uuid.UUID]
) -> dict[uuid.UUID, FactStats]:
    if not ids:
        return {}
    if hasattr(ledger, "get_fact_stats_batch"):  # cheaper than a runtime Protocol check
        return await cast(SupportsFactStatsBatch, ledger).get_fact_stats_batch(ids)
    found: dict[uuid.UUID, FactStats] = {}
    for fid in ids:  # ledgers without the batch capability: one call per candidate
        stats = await ledger.get_fact_stats(fid)
        if stats is not None:
            found[fid] = stats
    return found


def _applied(decision: GateDecision, policy: RetentionPolicy) -> SemanticFact | None:
    fact = decision.fact
    if decision.verdict == "promoted":
        tags = [t for t in fact.tags if t != policy.candidate_tag]
        if policy.verified_tag not in tags:
            tags.append(policy.verified_tag)
        return fact.model_copy(update={"tags": tags})
    if decision.verdict == "evicted":
        return fact.model_copy(update={"invalidated_by": decision.reason})
    return None


def _report(decisions: list[GateDecision], pass_id: uuid.UUID) -> RetentionReport:
    promoted: list[PromotedLesson] = []
    evicted: list[EvictedLesson] = []
    held: list[HeldLesson] = []
    for d in decisions:
        fid = d.fact.id
        if d.verdict == "promoted":
            promoted.append(trusted(PromotedLesson, fact_id=fid, evidence=d.evidence))
        elif d.verdict == "evicted":
            reason: EvictionReason = (
                EVICT_HARMFUL if d.reason == EVICT_HARMFUL else EVICT_NO_LIFT
            )
            evicted.append(
                trusted(EvictedLesson, fact_id=fid, reason=reason, evidence=d.evidence)
            )
        else:
            held.append(trusted(HeldLesson, fact_id=fid, trials=d.trials, evidence=d.evidence))
    return trusted(
        RetentionReport, promoted=promoted, evicted=evicted, held=held, pass_id=pass_id
    )


async def evaluate_retention(
    store: MemoryStore,
    ledger: OutcomeLedger,
    policy: RetentionPolicy | Mapping[str, Any] | None = None,
    *,
    pass_id: uuid.UUID | None = None,
    clock: Callable[[], datetime] | None = None,
) -> RetentionReport:
    """Run one retention-gate pass: assess every active candidate, apply the verdicts.

    Idempotent: promoted facts lose the candidate tag and evicted facts are invalidated,
    so a second pass over the same evidence changes nothing. The pass runs inside
    ``exclusive_pass(store, "retention-gate")``: reads, writes and audit rows commit
    together, and concurrent passes are serialised. On Postgres build the ledger on the
    store's engine or sessionmaker so its audit rows join that transaction.

    Args:
        store: Any ``MemoryStore``.
        ledger: Any ``OutcomeLedger``; when it also keeps a gate audit log
            (``SupportsGateAudit``) one entry per decision is appended, in the same unit of
            work.
        policy: A :class:`RetentionPolicy` or a dict of its fields (``None``: defaults).
        pass_id: Id of this pass (default: a random UUID); inject one for reproducible runs.
        clock: Returns the decision time for audit entries (default: now, UTC).

    Returns:
        The :class:`RetentionReport`; under the inference rule every entry whose evidence
        could be computed (at least two trials and two baseline runs) carries it.

    Raises:
        pydantic.ValidationError: An invalid policy (nothing is read or changed).
    """
    rules = _coerce_policy(policy)
    this_pass = pass_id if pass_id is not None else uuid.uuid4()
    if not isinstance(this_pass, uuid.UUID):
        raise InvalidInputError(f"pass_id must be a UUID, got {type(this_pass).__name__}")
    async with exclusive_pass(store, GATE_PASS_NAME):
        candidates = await store.find_facts(_candidate_filter(rules.candidate_tag))
        if not candidates:
            return trusted(
                RetentionReport, promoted=[], evicted=[], held=[], pass_id=this_pass
            )
        stats = await _read_stats(ledger, [f.id for f in candidates])
        baseline = await ledger.get_baseline()
        decisions = plan_retention(candidates, stats, baseline, rules)
        changed = [f for f in (_applied(d, rules) for d in decisions) if f is not None]
        if changed:
            await store.put_facts(changed)
        if decisions and hasattr(ledger, "append_gate_audit"):
            when = (clock or utc_now)()
            policy_json = rules.model_dump(mode="json")
            await cast(SupportsGateAudit, ledger).append_gate_audit(
                [
                    trusted(
                        GateAuditEntry,
                        pass_id=this_pass,
                        fact_id=d.fact.id,
                        verdict=d.verdict,
                        reason=d.reason,
                        trials=d.trials,
                        evidence=d.evidence,
                        policy=policy_json,
                        decided_at=when,
                    )
                    for d in decisions
                ]
            )
    return _report(decisions, this_pass)


"""The gate simulator: synthetic runs through the real store, ledger, retriever and gate.

``score(run) = clamp01(base_score + sum(true_effect of injected lessons) + N(0, noise_sd))``.
No LLM, no network; the noise comes from :func:`~cycgraph_memory.statistics.mulberry32`,
ids and timestamps are derived from the run index, so the same seed and config give an
identical result. :func:`gate_operating_characteristics` sweeps effect x run volume x noise
with seeded replicates and reports the realised decision rates: where to trust a policy.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt, field_validator, model_validator

from cycgraph_memory._construct import trusted
from cycgraph_memory._validate import check_text
from cycgraph_memory.contracts import MemoryStore, OutcomeLedger
from cycgraph_memory.errors import InvalidTypeError
from cycgraph_memory.progress import ProgressCallback, report_progress
from cycgraph_memory.records import (
    Count,
    Flag,
    Number,
    Provenance,
    RetentionReport,
    RunOutcome,
    SemanticFact,
)
from cycgraph_memory.retention.gate import (
    DEFAULT_RETENTION_POLICY,
    EVICT_HARMFUL,
    EVICT_NO_LIFT,
    EvictionReason,
    RetentionPolicy,
    evaluate_retention,
)
from cycgraph_memory.retrieval.lessons import retrieve_gated_lessons
from cycgraph_memory.statistics import gaussian, mulberry32

__all__ = [
    "GateReportEntry",
    "GateSimulationConfig",
    "GateSimulationResult",
    "OperatingCharacteristicsConfig",
    "OperatingCharacteristicsRow",
    "SimulatedLesson",
    "SimulatedLessonOutcome",
    "SimulationBackend",
    "SimulationRetrieval",
    "gate_operating_characteristics",
    "simulate_gate",
]

SimulationBackend = Callable[[], Awaitable[tuple[MemoryStore, OutcomeLedger]]]
"""Returns a fresh, empty (store, ledger) pair for one simulation."""

LESSON_TAG = "lesson"
_FACT_NAMESPACE = uuid.UUID("5d0c8f3e-2b1a-4c6e-9f7d-3a2b1c0d9e8f")
_EPOCH = datetime(2026, 1, 1, tzinfo=UTC)


class _Options(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


_LESSON_CONTENT = "simulated lesson "
"""Content of a simulated lesson's fact: this prefix, then the lesson's id."""


class SimulatedLesson(_Options):
    """One synthetic lesson: ``true_effect`` is added to every run it is injected into.

    The ``id`` becomes the content of the lesson's stored fact (``"simulated lesson
    <id>"``), so it must be text a fact can carry (no NUL, no lone surrogate, within
    ``MAX_TEXT_LENGTH`` with the prefix): checked with the config, before any run.
    """

    id: str = Field(min_length=1)
    true_effect: Number = Field(ge=-1.0, le=1.0)
    arrives_at_run: Count = Field(default=0, ge=0)

    @field_validator("id")
    @classmethod
    def _storable_id(cls, value: str) -> str:
        # Refused here, not when the lesson arrives: by then earlier runs are recorded in
        # the backend's ledger (a Postgres one keeps them).
        check_text(_LESSON_CONTENT + value, "a simulated lesson's fact content (from its id)")
        return value


class SimulationRetrieval(_Options):
    """Retrieval settings passed to ``retrieve_gated_lessons`` (spec defaults).

    ``candidate_slots`` above ``max_facts`` reserve the whole budget for candidates, as in
    ``retrieve_gated_lessons``.
    """

    max_facts: Count = Field(default=10, ge=1)
    candidate_slots: Count = Field(default=2, ge=0)
    rest_after_trials: Count | None = Field(default=None, ge=1)


class GateSimulationConfig(_Options):
    """Input of :func:`simulate_gate` (accepts a plain dict too).

    Lessons are stored with the tags ``lesson`` (the retrieval scope) and the policy's
    candidate tag, so ``policy.candidate_tag`` cannot be ``"lesson"``.
    """

    lessons: list[SimulatedLesson]
    runs: Count = Field(ge=1, le=10_000_000)
    base_score: Number = Field(default=0.6, ge=0.0, le=1.0)
    noise_sd: Number = Field(default=0.1, ge=0.0, le=1.0)
    seed: StrictInt
    retrieval: SimulationRetrieval | None = None
    policy: RetentionPolicy = DEFAULT_RETENTION_POLICY
    gate_every: Count = Field(default=1, ge=1)
    record_empty_runs: Flag = True

    @model_validator(mode="after")
    def _unique_ids(self) -> GateSimulationConfig:
        ids = [lesson.id for lesson in self.lessons]
        if len(set(ids)) != len(ids):
            raise ValueError("lesson ids must be unique")
        _check_scope_tag(self.policy)
        return self


def _check_scope_tag(policy: RetentionPolicy) -> None:
    # A promotion removes the candidate tag: were it the scope tag, a promoted lesson would
    # leave the retrieval scope and never be injected again.
    if policy.candidate_tag == LESSON_TAG:
        raise ValueError(
            f"policy.candidate_tag cannot be {LESSON_TAG!r}, the simulator's lesson scope tag"
        )


class SimulatedLessonOutcome(_Options):
    """What became of one lesson; ``decided_at_run`` is the 0-based run index."""

    id: str
    fact_id: uuid.UUID
    true_effect: float
    outcome: Literal["promoted", "evicted", "held"]
    reason: Literal["eval-gate:harmful", "eval-gate:no_lift"] | None = None
    decided_at_run: int | None = None


class GateReportEntry(_Options):
    """One gate pass of a simulation, run after run index ``after_run``."""

    after_run: int
    report: RetentionReport


class GateSimulationResult(_Options):
    """Output of :func:`simulate_gate`."""

    lessons: list[SimulatedLessonOutcome]
    run_scores: list[float]
    gate_reports: list[GateReportEntry]


class OperatingCharacteristicsConfig(_Options):
    """Input of :func:`gate_operating_characteristics` (accepts a plain dict too)."""

    # Bounded like SimulatedLesson.true_effect and GateSimulationConfig.noise_sd, so a bad
    # cell is refused before the first simulation, not after the cells before it ran.
    effects: list[Annotated[Number, Field(ge=-1.0, le=1.0)]] = Field(min_length=1)
    run_counts: list[Annotated[Count, Field(ge=1, le=10_000_000)]] = Field(min_length=1)
    noise_sds: list[Annotated[Number, Field(ge=0.0, le=1.0)]] = Field(
        default_factory=lambda: [0.1], min_length=1
    )
    replicates: Count = Field(default=20, ge=1)
    seed: StrictInt = 1
    base_score: Number = Field(default=0.6, ge=0.0, le=1.0)
    retrieval: SimulationRetrieval | None = None
    policy: RetentionPolicy = DEFAULT_RETENTION_POLICY
    gate_every: Count = Field(default=1, ge=1)

    @model_validator(mode="after")
    def _scope_tag(self) -> OperatingCharacteristicsConfig:
        _check_scope_tag(self.policy)
        return self


class OperatingCharacteristicsRow(_Options):
    """Decision rates of one (effect, runs, noise_sd) cell over its replicates.

    ``false_promote_rate`` counts promotions when ``effect <= 0`` and ``false_evict_rate``
    harmful evictions when ``effect >= 0`` (0 otherwise). ``mean_decision_run`` averages
    the run index of every decision (``None`` when nothing was decided).
    """

    effect: float
    runs: int
    noise_sd: float
    replicates: int
    promote_rate: float
    evict_rate: float
    harmful_evict_rate: float
    no_lift_rate: float
    held_rate: float
    false_promote_rate: float
    false_evict_rate: float
    mean_decision_run: float | None


Verdict = Literal["promoted", "evicted", "held"]
_UNDECIDED: tuple[Verdict, EvictionReason | None, int] = ("held", None, -1)


def _fixed_clock(at: datetime) -> Callable[[], datetime]:
    def clock() -> datetime:
        return at

    return clock


async def _in_memory_backend() -> tuple[MemoryStore, OutcomeLedger]:
    from cycgraph_memory.inmemory.ledger import InMemoryOutcomeLedger
    from cycgraph_memory.inmemory.store import InMemoryMemoryStore

    return InMemoryMemoryStore(), InMemoryOutcomeLedger()


def _coerce(model: type[Any], value: Any) -> Any:
    if isinstance(value, model):
        return value
    if isinstance(value, Mapping):
        return model.model_validate(dict(value))
    raise InvalidTypeError(f"expected {model.__name__} or a mapping, got {type(value).__name__}")


def _lesson_fact(lesson: SimulatedLesson, fact_id: uuid.UUID, at: datetime,
                 candidate_tag: str) -> SemanticFact:
    return SemanticFact(
        id=fact_id,
        content=_LESSON_CONTENT + lesson.id,
        provenance=Provenance(source="system", created_at=at),
        valid_from=at,
        tags=[LESSON_TAG, candidate_tag],
    )


async def simulate_gate(
    config: GateSimulationConfig | Mapping[str, Any],
    *,
    backend: SimulationBackend | None = None,
) -> GateSimulationResult:
    """Simulate scored runs through the real retrieval -> ledger -> gate loop.

    Each run: lessons arriving at that run are stored as candidates (tags ``lesson`` and
    the policy's candidate tag); ``retrieve_gated_lessons`` picks what to inject (with the
    ledger, in-progress-first); the run's score is drawn; the outcome is recorded (runs
    that injected nothing only when ``record_empty_runs``); every ``gate_every`` runs
    ``evaluate_retention`` runs with the policy.

    Args:
        config: A :class:`GateSimulationConfig` or a dict of its fields.
        backend: Returns a fresh, empty (store, ledger) pair; default in-memory. Pass
            Postgres objects on one engine/tenant to run the same loop on Postgres.

    Returns:
        Per-lesson outcomes, every run's score and every gate pass's report.

    Raises:
        pydantic.ValidationError: An invalid config (e.g. ``candidate_slots`` above
            ``max_facts``), before ``backend`` is called.
        InvalidTypeError: ``config`` is neither a config nor a mapping.
    """
    cfg: GateSimulationConfig = _coerce(GateSimulationConfig, config)
    return await _simulate(cfg, backend, settle=False)


async def _simulate(
    cfg: GateSimulationConfig, backend: SimulationBackend | None, *, settle: bool
) -> GateSimulationResult:
    """Run the simulation loop.

    With ``settle`` it stops once every lesson has arrived and been decided (nothing later
    can change a decided lesson's outcome) and keeps no gate reports: what
    :func:`gate_operating_characteristics` needs, and no more.
    """
    store, ledger = await (backend or _in_memory_backend)()
    policy = cfg.policy
    retrieval = cfg.retrieval or SimulationRetrieval()
    rng = mulberry32(cfg.seed)
    seed_bits = (cfg.seed & 0xFFFFFFFF) << 64

    fact_ids = {lesson.id: uuid.uuid5(_FACT_NAMESPACE, lesson.id) for lesson in cfg.lessons}
    effect_of = {fact_ids[lesson.id]: lesson.true_effect for lesson in cfg.lessons}
    lesson_of = {fact_ids[lesson.id]: lesson for lesson in cfg.lessons}
    arrivals: dict[int, list[SimulatedLesson]] = {}
    for lesson in cfg.lessons:
        arrivals.setdefault(lesson.arrives_at_run, []).append(lesson)
    decided: dict[uuid.UUID, tuple[Verdict, EvictionReason | None, int]] = {}
    run_scores: list[float] = []
    gate_reports: list[GateReportEntry] = []
    base, noise_sd = cfg.base_score, cfg.noise_sd
    last_arrival = max((lesson.arrives_at_run for lesson in cfg.lessons), default=0)

    for run in range(cfg.runs):
        now = _EPOCH + timedelta(minutes=run)
        arriving = arrivals.get(run)
        if arriving:
            await store.put_facts(
                [_lesson_fact(le, fact_ids[le.id], now, policy.candidate_tag) for le in arriving]
            )
        injected = await retrieve_gated_lessons(
            store,
            tags=[LESSON_TAG],
            candidate_tag=policy.candidate_tag,
            max_facts=retrieval.max_facts,
            candidate_slots=retrieval.candidate_slots,
            ledger=ledger,
            rest_after_trials=retrieval.rest_after_trials,
        )
        ids = [f.id for f in injected]
        score = base + sum(effect_of.get(fid, 0.0) for fid in ids) + noise_sd * gaussian(rng)
        score = 0.0 if score < 0.0 else 1.0 if score > 1.0 else score
        run_scores.append(score)
        if ids or cfg.record_empty_runs:
            # The values are valid by construction: skip per-run validation.
            await ledger.record_outcome(
                trusted(
                    RunOutcome, run_id=f"run-{run}", score=score, fact_ids=ids, recorded_at=now
                )
            )
        if (run + 1) % cfg.gate_every == 0:
            report = await evaluate_retention(
                store, ledger, policy,
                pass_id=uuid.UUID(int=seed_bits | run),
                clock=_fixed_clock(now),
            )
            if not settle:
                gate_reports.append(trusted(GateReportEntry, after_run=run, report=report))
            for p in report.promoted:
                decided.setdefault(p.fact_id, ("promoted", None, run))
            for e in report.evicted:
                decided.setdefault(e.fact_id, ("evicted", e.reason, run))
            if settle and run >= last_arrival and len(decided) == len(lesson_of):
                break

    outcomes = []
    for fid, lesson in lesson_of.items():
        outcome, reason, at = decided.get(fid, _UNDECIDED)
        outcomes.append(
            trusted(
                SimulatedLessonOutcome,
                id=lesson.id,
                fact_id=fid,
                true_effect=lesson.true_effect,
                outcome=outcome,
                reason=reason,
                decided_at_run=None if at < 0 else at,
            )
        )
    return trusted(
        GateSimulationResult, lessons=outcomes, run_scores=run_scores, gate_reports=gate_reports
    )


def _replicate_seed(seed: int, replicate: int) -> int:
    # Common random numbers: replicate r uses the same noise stream in every cell, so the
    # cells of a grid are paired comparisons.
    return (seed * 0x9E3779B1 + replicate * 0x85EBCA77 + 1) & 0xFFFFFFFF


async def gate_operating_characteristics(
    config: OperatingCharacteristicsConfig | Mapping[str, Any],
    *,
    backend: SimulationBackend | None = None,
    progress: ProgressCallback | None = None,
) -> list[OperatingCharacteristicsRow]:
    """Decision rates over a grid of (effect x run volume x noise) cells.

    Every replicate of a cell simulates one lesson with ``true_effect = effect`` arriving
    at run 0 (the :func:`simulate_gate` loop, seeded per replicate; the seed does not
    depend on the run count). The cells of one effect share their replicates: each is
    simulated once, up to the largest run count or until its lesson is decided, and a
    cell of ``R`` runs counts the decisions taken before run ``R`` - exactly what
    separate simulations of ``R`` runs would give, in a fraction of the time.

    Args:
        config: An :class:`OperatingCharacteristicsConfig` or a dict of its fields.
        backend: Passed to :func:`simulate_gate` (default in-memory).
        progress: Called with ``ProgressEvent("simulate", done, total)`` per simulation.

    Returns:
        One row per cell, ordered by noise, effect, then run count (as given).

    Raises:
        pydantic.ValidationError: An invalid config (e.g. an effect outside [-1, 1] or a
            noise SD outside [0, 1]), before anything is simulated.
        InvalidTypeError: ``config`` is neither a config nor a mapping.
    """
    cfg: OperatingCharacteristicsConfig = _coerce(OperatingCharacteristicsConfig, config)
    rows: list[OperatingCharacteristicsRow] = []
    horizon = max(cfg.run_counts)
    total = len(cfg.noise_sds) * len(cfg.effects) * cfg.replicates
    done = 0
    for noise_sd in cfg.noise_sds:
        for effect in cfg.effects:
            # A replicate's seed does not depend on the run count, so a simulation of R runs
            # is the first R runs of the longest one: simulate that once (until the lesson
            # is decided) and read every run count off its decision run.
            finals: list[tuple[str, int]] = []
            for replicate in range(cfg.replicates):
                sim = GateSimulationConfig(
                    lessons=[SimulatedLesson(id="lesson", true_effect=effect)],
                    runs=horizon,
                    base_score=cfg.base_score,
                    noise_sd=noise_sd,
                    seed=_replicate_seed(cfg.seed, replicate),
                    retrieval=cfg.retrieval,
                    policy=cfg.policy,
                    gate_every=cfg.gate_every,
                )
                lesson = (await _simulate(sim, backend, settle=True)).lessons[0]
                done += 1
                report_progress(progress, "simulate", done, total)
                key = lesson.reason if lesson.outcome == "evicted" else lesson.outcome
                at = -1 if lesson.decided_at_run is None else lesson.decided_at_run
                finals.append((key or "held", at))
            for runs in cfg.run_counts:
                rows.append(_cell_row(effect, runs, noise_sd, finals))
    return rows


def _cell_row(
    effect: float, runs: int, noise_sd: float, finals: list[tuple[str, int]]
) -> OperatingCharacteristicsRow:
    counts = {"promoted": 0, EVICT_HARMFUL: 0, EVICT_NO_LIFT: 0, "held": 0}
    decision_runs: list[int] = []
    for key, at in finals:
        if 0 <= at < runs:
            counts[key] += 1
            decision_runs.append(at)
        else:
            counts["held"] += 1
    n = len(finals)
    promote = counts["promoted"] / n
    harmful = counts[EVICT_HARMFUL] / n
    no_lift = counts[EVICT_NO_LIFT] / n
    return OperatingCharacteristicsRow(
        effect=effect,
        runs=runs,
        noise_sd=noise_sd,
        replicates=n,
        promote_rate=promote,
        evict_rate=harmful + no_lift,
        harmful_evict_rate=harmful,
        no_lift_rate=no_lift,
        held_rate=counts["held"] / n,
        false_promote_rate=promote if effect <= 0 else 0.0,
        false_evict_rate=harmful if effect >= 0 else 0.0,
        mean_decision_run=sum(decision_runs) / len(decision_runs) if decision_runs else None,
    )

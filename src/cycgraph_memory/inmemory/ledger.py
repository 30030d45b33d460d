"""In-process :class:`~cycgraph_memory.contracts.OutcomeLedger` with incremental statistics.

Every statistic is kept up to date as runs are recorded (Welford accumulators per fact and
for all runs), so ``get_fact_stats``, ``get_fact_stats_batch`` and ``get_baseline`` cost
O(1) per fact whatever the number of runs: the gate simulator records tens of thousands
of runs and gates after each one.
"""

from __future__ import annotations

import copy
import logging
import uuid
from collections.abc import Iterable, Mapping, Sequence

from cycgraph_memory._construct import trusted
from cycgraph_memory._ids import parse_id, parse_ids
from cycgraph_memory._validate import check_bool, check_page, string_list
from cycgraph_memory.errors import InvalidInputError, InvalidTypeError
from cycgraph_memory.inmemory._common import coerce_record, copy_record
from cycgraph_memory.lifecycle.models import (
    REDACTED_FACT_ID,
    ErasureEntry,
    LedgerErasure,
    erased_fact_digest,
)
from cycgraph_memory.observability import span
from cycgraph_memory.records import FactStats, GateAuditEntry, OutcomeBaseline, RunOutcome
from cycgraph_memory.statistics import SampleSummary, subtract_summary

__all__ = ["InMemoryOutcomeLedger"]

_log = logging.getLogger(__name__)


class _Accumulator:
    """Welford running mean / sum of squared deviations, with removal."""

    __slots__ = ("m2", "mean", "n")

    def __init__(self) -> None:
        self.n = 0
        self.mean = 0.0
        self.m2 = 0.0

    def add(self, x: float) -> None:
        self.n += 1
        delta = x - self.mean
        self.mean += delta / self.n
        self.m2 += delta * (x - self.mean)

    def remove(self, x: float) -> None:
        if self.n <= 1:
            self.n, self.mean, self.m2 = 0, 0.0, 0.0
            return
        old_mean = self.mean
        self.n -= 1
        self.mean = (old_mean * (self.n + 1) - x) / self.n
        self.m2 = max(self.m2 - (x - old_mean) * (x - self.mean), 0.0)

    def summary(self) -> SampleSummary:
        return SampleSummary(self.n, self.mean, self.m2 / (self.n - 1) if self.n > 1 else None)


def _fact_stats(fact_id: uuid.UUID, acc: _Accumulator) -> FactStats:
    # Values are already valid: skip pydantic validation on this hot path.
    return trusted(
        FactStats,
        fact_id=fact_id,
        trials=acc.n,
        mean_score=acc.mean,
        variance=acc.m2 / (acc.n - 1) if acc.n > 1 else None,
    )


_ATOMIC = (str, int, float, bool, type(None))


def _copy_entry(entry: GateAuditEntry) -> GateAuditEntry:
    """Copy an audit entry cheaply: its policy is flat JSON and its evidence holds numbers."""
    policy = entry.policy
    if all(isinstance(v, _ATOMIC) for v in policy.values()):
        policy = dict(policy)
    else:
        return copy_record(entry)
    new = copy.copy(entry)
    new.__dict__["policy"] = policy
    if entry.evidence is not None:
        new.__dict__["evidence"] = copy.copy(entry.evidence)
    return new


def _baseline(summary: SampleSummary) -> OutcomeBaseline:
    return trusted(
        OutcomeBaseline,
        runs=summary.n,
        mean_score=summary.mean if summary.n else 0.0,
        variance=summary.variance,
    )


class InMemoryOutcomeLedger:
    """Single-process outcome evidence, plus an in-memory twin of the gate audit log.

    Recording is idempotent on ``run_id``: re-recording a run replaces the earlier entry,
    so callers can retry safely. A run's ``fact_ids`` are de-duplicated, and a fact id a
    purge erased is never linked again. The audit log is append-only (``clear()`` removes
    outcomes, never audit entries, erasure entries or the erased ids). Swap this class for
    :class:`cycgraph_memory.postgres.PostgresOutcomeLedger` in production: same interface,
    durable evidence and a database-enforced append-only audit log.
    """

    def __init__(self) -> None:
        self._runs: dict[str, tuple[float, tuple[uuid.UUID, ...]]] = {}
        self._facts: dict[uuid.UUID, _Accumulator] = {}
        self._all = _Accumulator()
        self._audit: list[GateAuditEntry] = []
        self._erasures: list[ErasureEntry] = []
        # Digests of the erased fact ids (``erased_fact_digest``), never the ids.
        self._erased: set[str] = set()

    async def record_outcome(self, outcome: RunOutcome | Mapping[str, object]) -> None:
        """Record (or re-record) one scored run and the facts injected into it.

        A fact id an erasure (``erase_facts``, i.e. a purge) erased is not linked: the run
        and its score are recorded, the erased ids are left out (counted in the span's
        ``cycgraph.erased_fact_ids`` and logged at INFO, never raised).

        Raises:
            pydantic.ValidationError: A mapping that is not a valid ``RunOutcome``.
        """
        with span("cycgraph.record_outcome") as sp:
            run = coerce_record(RunOutcome, outcome)
            linked, dropped = self._record(run)
            sp.set(rows=1 + linked, erased_fact_ids=dropped)
        if dropped:
            _log.info("record_outcome: %d erased fact ids of a run not linked", dropped)

    def _record(self, run: RunOutcome) -> tuple[int, int]:
        """Keep the run and its links; the numbers of links kept and of erased ids."""
        fact_ids = tuple(dict.fromkeys(run.fact_ids))
        given = len(fact_ids)
        erased = self._erased
        if erased:
            fact_ids = tuple(f for f in fact_ids if erased_fact_digest(f) not in erased)
        previous = self._runs.get(run.run_id)
        if previous is not None:
            self._forget(previous)
        score = float(run.score)
        self._runs[run.run_id] = (score, fact_ids)
        self._all.add(score)
        facts = self._facts
        for fid in fact_ids:
            acc = facts.get(fid)
            if acc is None:
                acc = facts[fid] = _Accumulator()
            acc.add(score)
        return len(fact_ids), given - len(fact_ids)

    def _forget(self, run: tuple[float, tuple[uuid.UUID, ...]]) -> None:
        score, fact_ids = run
        self._all.remove(score)
        for fid in fact_ids:
            acc = self._facts[fid]
            acc.remove(score)
            if acc.n == 0:
                del self._facts[fid]

    async def get_fact_stats(self, fact_id: uuid.UUID | str) -> FactStats | None:
        """Stats of one fact, or ``None`` if it appeared in no recorded run."""
        fid = parse_id(fact_id)
        acc = self._facts.get(fid)
        return None if acc is None else _fact_stats(fid, acc)

    async def get_fact_stats_batch(
        self, ids: Iterable[uuid.UUID | str]
    ) -> dict[uuid.UUID, FactStats]:
        """Stats by fact id; facts that appeared in no run are absent."""
        facts = self._facts
        return {fid: _fact_stats(fid, facts[fid]) for fid in parse_ids(ids) if fid in facts}

    async def get_gate_inputs(
        self, ids: Iterable[uuid.UUID | str]
    ) -> tuple[dict[uuid.UUID, FactStats], OutcomeBaseline]:
        """Stats of ``ids`` and the all-runs baseline, read together (no run between)."""
        return await self.get_fact_stats_batch(ids), _baseline(self._all.summary())

    async def list_fact_stats(self) -> list[FactStats]:
        """Stats for every fact that appeared in at least one run, ordered by fact id."""
        return [_fact_stats(fid, self._facts[fid]) for fid in sorted(self._facts)]

    async def get_baseline(
        self, exclude_fact_id: uuid.UUID | str | None = None
    ) -> OutcomeBaseline:
        """Mean and sample variance over recorded runs.

        With ``exclude_fact_id`` only runs without that fact count (the leave-one-out
        baseline), derived in O(1) from the all-runs and the fact's accumulators.
        """
        total = self._all.summary()
        if exclude_fact_id is None:
            return _baseline(total)
        acc = self._facts.get(parse_id(exclude_fact_id))
        if acc is None:
            return _baseline(total)
        return _baseline(subtract_summary(total, acc.summary()))

    async def clear(self) -> None:
        """Remove all recorded outcomes.

        The audit log, the erasure log and the erased fact ids (never linked again) stay.
        """
        self._runs = {}
        self._facts = {}
        self._all = _Accumulator()

    @property
    def run_count(self) -> int:
        """Number of recorded runs."""
        return len(self._runs)

    # ------------------------------------------------------------------ audit log

    async def append_gate_audit(self, entries: Sequence[GateAuditEntry]) -> None:
        """Append gate decisions to the audit log (all are validated before any is kept)."""
        if isinstance(entries, GateAuditEntry | Mapping):
            raise InvalidTypeError("expected a sequence of GateAuditEntry, got a single value")
        if not isinstance(entries, Iterable):
            raise InvalidTypeError(
                f"expected a sequence of GateAuditEntry, got {type(entries).__name__}"
            )
        prepared = [_copy_entry(coerce_record(GateAuditEntry, e)) for e in entries]
        self._audit.extend(prepared)

    async def list_gate_audit(
        self,
        *,
        pass_id: uuid.UUID | str | None = None,
        fact_id: uuid.UUID | str | None = None,
        limit: int | None = None,
        offset: int = 0,
    ) -> list[GateAuditEntry]:
        """Audit entries in append order, optionally one pass's or one fact's only.

        ``offset`` entries of that order are skipped (pages of an audit log too long to
        read at once), then at most ``limit`` are returned.

        Raises:
            InvalidInputError: ``limit`` is not a positive int, or ``offset`` not an int
                in ``[0, 2**63 - 1]``.
        """
        check_page(limit, offset)
        pid = None if pass_id is None else parse_id(pass_id)
        fid = None if fact_id is None else parse_id(fact_id)
        out = [
            _copy_entry(e)
            for e in self._audit
            if (pid is None or e.pass_id == pid) and (fid is None or e.fact_id == fid)
        ]
        out = out[offset:]
        return out if limit is None else out[:limit]

    # ------------------------------------------------------------------ erasure (purge)

    async def erase_facts(
        self,
        fact_ids: Iterable[uuid.UUID | str],
        run_ids: Iterable[str] = (),
        *,
        tenant: bool = False,
        dry_run: bool = False,
        entry: ErasureEntry | None = None,
    ) -> LedgerErasure:
        """Forget purged facts: their run links, the named runs, their audit fact ids.

        The one path that changes gate-audit entries: an entry naming an erased fact keeps
        its decision but its ``fact_id`` becomes :data:`REDACTED_FACT_ID` (logged). The
        erased fact ids are remembered: ``record_outcome`` never links them again. With
        ``entry`` the erasure is recorded in the append-only erasure log. ``tenant=True``
        forgets every run. All or nothing; ``dry_run`` only counts.

        Raises:
            InvalidTypeError: ``run_ids`` is a lone string, or ``tenant`` / ``dry_run`` is
                not a real ``bool`` (``tenant="no"`` would forget every run); nothing
                changes.
        """
        tenant, dry_run = check_bool(tenant, "tenant"), check_bool(dry_run, "dry_run")
        gone = set(parse_ids(fact_ids))
        # A lone str would name its characters; items that are not run ids match no run.
        named = [r for r in string_list(run_ids, "run_ids") if isinstance(r, str)]
        runs = set(self._runs) if tenant else {r for r in named if r in self._runs}
        links = sum(
            len(ids) if r in runs else sum(1 for f in ids if f in gone)
            for r, (_, ids) in self._runs.items()
        )
        redact = [i for i, e in enumerate(self._audit) if e.fact_id in gone]
        counts = LedgerErasure(
            ledger_links=links, ledger_runs=len(runs), audit_entries_redacted=len(redact)
        )
        if dry_run:
            return counts
        if entry is not None:
            entry = coerce_record(ErasureEntry, entry)
        for run_id in runs:
            self._forget(self._runs.pop(run_id))
        for run_id, (score, ids) in list(self._runs.items()):
            if not gone.isdisjoint(ids):
                self._forget(self._runs.pop(run_id))
                kept = tuple(f for f in ids if f not in gone)
                self._runs[run_id] = (score, kept)
                self._all.add(score)
                for fid in kept:
                    self._facts.setdefault(fid, _Accumulator()).add(score)
        if redact:
            _log.warning(
                "erasure: redacting the fact id of %d gate-audit entries", len(redact)
            )
            for i in redact:
                self._audit[i] = self._audit[i].model_copy(update={"fact_id": REDACTED_FACT_ID})
        # Never linked again by ``record_outcome`` (the ids outlive ``clear()``).
        self._erased.update(erased_fact_digest(f) for f in gone)
        if entry is not None:
            self._erasures.append(entry)
        return counts

    async def list_erasures(self, *, limit: int | None = None) -> list[ErasureEntry]:
        """Erasure-log entries in append order."""
        if limit is not None and (
            isinstance(limit, bool) or not isinstance(limit, int) or limit < 1
        ):
            raise InvalidInputError(f"limit must be a positive int, got {limit!r}")
        out = [copy_record(e) for e in self._erasures]
        return out if limit is None else out[:limit]

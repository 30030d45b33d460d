"""PostgresOutcomeLedger: durable outcome evidence and the append-only gate audit log.

Statistics are SQL aggregates (``count``, ``avg``, ``var_samp``) computed in the database,
never by loading runs into Python; ``get_fact_stats_batch`` is one statement whatever the
number of facts. Like the store, the ledger is scoped to one tenant and joins the unit of
work open on the same bind: build the store and the ledger on the same engine (or
sessionmaker) so a gate pass changes facts and appends audit rows in one transaction.
"""

from __future__ import annotations

import logging
import math
import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from sqlalchemy import (
    Table,
    Text,
    Uuid,
    bindparam,
    column,
    delete,
    exists,
    func,
    insert,
    literal,
    select,
    true,
)
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.dialects.postgresql import insert as pg_insert

from cycgraph_memory._validate import check_page
from cycgraph_memory.errors import InvalidTypeError
from cycgraph_memory.lifecycle.models import ErasureEntry, LedgerErasure, erased_fact_digest
from cycgraph_memory.observability import span
from cycgraph_memory.postgres import lifecycle as _lifecycle
from cycgraph_memory.postgres._base import (
    DEFAULT_TENANT,
    Bind,
    PostgresBackend,
    parse_id,
    parse_ids,
)
from cycgraph_memory.postgres.schema import GateAuditRow, OutcomeRunFactRow, OutcomeRunRow
from cycgraph_memory.postgres.statements import in_ids
from cycgraph_memory.postgres.store import coerce_record
from cycgraph_memory.records import (
    MAX_OFFSET,
    FactStats,
    GateAuditEntry,
    OutcomeBaseline,
    RetentionEvidence,
    RunOutcome,
)

__all__ = ["PostgresOutcomeLedger"]

_log = logging.getLogger(__name__)

RUNS: Table = OutcomeRunRow.__table__  # type: ignore[assignment]
RUN_FACTS: Table = OutcomeRunFactRow.__table__  # type: ignore[assignment]
AUDIT: Table = GateAuditRow.__table__  # type: ignore[assignment]


def _evidence_json(evidence: RetentionEvidence | None) -> dict[str, Any] | None:
    if evidence is None:
        return None
    data = evidence.model_dump()
    # JSON has no infinity: a z-test's df = inf is stored as the string "Infinity".
    return {k: ("Infinity" if isinstance(v, float) and math.isinf(v) else v)
            for k, v in data.items()}


def _baseline(n: Any, mean: Any, var: Any) -> OutcomeBaseline:
    runs = int(n)
    return OutcomeBaseline(
        runs=runs,
        mean_score=float(mean) if runs else 0.0,
        variance=None if var is None else float(var),
    )


class PostgresOutcomeLedger(PostgresBackend):
    """``OutcomeLedger`` on Postgres, scoped to one tenant, with a gate audit log.

    Args:
        bind: An ``AsyncEngine`` or an injected ``async_sessionmaker``; use the store's, so
            a gate pass commits fact changes and audit rows together.
        tenant_id: Tenant whose runs this ledger reads and writes (default ``"default"``).

    Raises:
        InvalidTenantError: The tenant id is malformed.

    ``record_outcome`` is idempotent on ``run_id`` (re-recording replaces the run and its
    fact links) and never links a fact id a purge erased (``ledger_erased_facts``).
    ``clear()`` removes this tenant's outcomes; the audit log is append-only
    and a database trigger refuses UPDATE, DELETE and TRUNCATE on it
    (:class:`~cycgraph_memory.errors.AppendOnlyViolationError`).
    """

    def __init__(self, bind: Bind, tenant_id: str = DEFAULT_TENANT) -> None:
        super().__init__(bind, tenant_id=tenant_id)

    async def record_outcome(self, outcome: RunOutcome | Mapping[str, Any]) -> None:
        """Record (or re-record) one scored run and the facts injected into it.

        A fact id a purge erased (its digest is in ``ledger_erased_facts``, migration 0018)
        is not linked: the run and its score are recorded, the erased ids are left out
        (counted in the span's ``cycgraph.erased_fact_ids`` and logged at INFO, never
        raised). A purge committing concurrently is waited for (a per-tenant advisory
        lock, see ``postgres/lifecycle.py``), so no erased id is linked after it either.

        Raises:
            pydantic.ValidationError: A mapping that is not a valid ``RunOutcome``.
        """
        with span("cycgraph.record_outcome", tenant=self._tenant) as sp:
            run = coerce_record(RunOutcome, outcome)
            linked, dropped = await self._record(run)
            sp.set(rows=1 + linked, erased_fact_ids=dropped)
        if dropped:
            _log.info(
                "record_outcome: %d erased fact ids of a run not linked (tenant %s)",
                dropped,
                self._tenant,
            )

    async def _record(self, run: RunOutcome) -> tuple[int, int]:
        """Write the run and its links; the numbers of links written and of erased ids."""
        fact_ids = list(dict.fromkeys(run.fact_ids))
        linked: Sequence[Any] = []
        row = {
            "tenant_id": self._tenant,
            "run_id": run.run_id,
            "score": float(run.score),
            "recorded_at": run.recorded_at,
        }
        async with self._session() as session:
            if fact_ids:
                await _lifecycle.lock_ledger_erasure(session, self._tenant, shared=True)
            upsert = pg_insert(RUNS).values(row)
            upsert = upsert.on_conflict_do_update(
                index_elements=[RUNS.c.tenant_id, RUNS.c.run_id],
                set_={"score": upsert.excluded.score, "recorded_at": upsert.excluded.recorded_at},
            )
            await session.execute(upsert)
            await session.execute(
                delete(RUN_FACTS).where(
                    RUN_FACTS.c.tenant_id == self._tenant, RUN_FACTS.c.run_id == run.run_id
                )
            )
            if fact_ids:
                erased = _lifecycle.ERASED_FACTS
                given = (
                    func.unnest(
                        _lifecycle._ids(fact_ids),
                        bindparam(
                            None,
                            [erased_fact_digest(f) for f in fact_ids],
                            type_=ARRAY(Text()),
                        ),
                    )
                    .table_valued(
                        column("fact_id", Uuid(as_uuid=True)), column("digest", Text())
                    )
                    .render_derived(name="given")
                )
                keep = (
                    select(
                        literal(self._tenant, Text()), given.c.fact_id, literal(run.run_id, Text())
                    )
                    .select_from(given)
                    .where(
                        ~exists().where(
                            erased.c.tenant_id == self._tenant,
                            erased.c.fact_digest == given.c.digest,
                        )
                    )
                )
                linked = (
                    await session.execute(
                        insert(RUN_FACTS)
                        .from_select(["tenant_id", "fact_id", "run_id"], keep)
                        .returning(RUN_FACTS.c.fact_id)
                    )
                ).all()
        return len(linked), len(fact_ids) - len(linked)

    def _stats_query(self, ids: Sequence[uuid.UUID] | None) -> Any:
        link, runs = RUN_FACTS, RUNS
        stmt = (
            select(
                link.c.fact_id,
                func.count().label("n"),
                func.avg(runs.c.score).label("mean"),
                func.var_samp(runs.c.score).label("var"),
            )
            .join(runs, (runs.c.tenant_id == link.c.tenant_id) & (runs.c.run_id == link.c.run_id))
            .where(link.c.tenant_id == self._tenant)
            .group_by(link.c.fact_id)
            .order_by(link.c.fact_id)
        )
        if ids is not None:
            stmt = stmt.where(in_ids(link.c.fact_id, ids))
        return stmt

    @staticmethod
    def _fact_stats(row: Any) -> FactStats:
        return FactStats(
            fact_id=row.fact_id,
            trials=int(row.n),
            mean_score=float(row.mean),
            variance=None if row.var is None else float(row.var),
        )

    async def get_fact_stats(self, fact_id: uuid.UUID | str) -> FactStats | None:
        """Stats of one fact, or ``None`` if it appeared in no recorded run."""
        return (await self.get_fact_stats_batch([fact_id])).get(parse_id(fact_id))

    async def get_fact_stats_batch(
        self, ids: Iterable[uuid.UUID | str]
    ) -> dict[uuid.UUID, FactStats]:
        """Stats by fact id in one aggregate query; facts without runs are absent."""
        wanted = parse_ids(ids)
        if not wanted:
            return {}
        async with self._session() as session:
            rows = (await session.execute(self._stats_query(wanted))).all()
        return {row.fact_id: self._fact_stats(row) for row in rows}

    async def get_gate_inputs(
        self, ids: Iterable[uuid.UUID | str]
    ) -> tuple[dict[uuid.UUID, FactStats], OutcomeBaseline]:
        """Stats of ``ids`` and the all-runs baseline in one statement (one snapshot).

        Under ``READ COMMITTED`` two statements may see different runs: a run recorded
        between a stats read and a baseline read would count in the baseline only, and
        the gate would derive a leave-one-out baseline holding a run of the candidate.
        One row per fact with runs, each carrying the baseline (one row of NULL stats
        when none of ``ids`` has runs).
        """
        wanted = parse_ids(ids)
        runs = RUNS
        total = (
            select(
                func.count().label("b_n"),
                func.avg(runs.c.score).label("b_mean"),
                func.var_samp(runs.c.score).label("b_var"),
            )
            .where(runs.c.tenant_id == self._tenant)
            .cte("total")
        )
        stats = self._stats_query(wanted).order_by(None).cte("stats")
        stmt = (
            select(total, stats)
            .select_from(total.outerjoin(stats, true()))
            .order_by(stats.c.fact_id)
        )
        async with self._session() as session:
            rows = (await session.execute(stmt)).all()
        first = rows[0]
        baseline = _baseline(first.b_n, first.b_mean, first.b_var)
        found = {r.fact_id: self._fact_stats(r) for r in rows if r.fact_id is not None}
        return found, baseline

    async def list_fact_stats(self) -> list[FactStats]:
        """Stats for every fact that appeared in at least one run, ordered by fact id."""
        async with self._session() as session:
            rows = (await session.execute(self._stats_query(None))).all()
        return [self._fact_stats(row) for row in rows]

    async def get_baseline(
        self, exclude_fact_id: uuid.UUID | str | None = None
    ) -> OutcomeBaseline:
        """Mean and sample variance over recorded runs, in one aggregate query.

        With ``exclude_fact_id`` only runs without that fact count (leave-one-out).
        """
        runs = RUNS
        stmt = select(
            func.count().label("n"),
            func.avg(runs.c.score).label("mean"),
            func.var_samp(runs.c.score).label("var"),
        ).where(runs.c.tenant_id == self._tenant)
        if exclude_fact_id is not None:
            fid = parse_id(exclude_fact_id)
            link = RUN_FACTS
            stmt = stmt.where(
                ~exists().where(
                    link.c.tenant_id == runs.c.tenant_id,
                    link.c.run_id == runs.c.run_id,
                    link.c.fact_id == fid,
                )
            )
        async with self._session() as session:
            row = (await session.execute(stmt)).one()
        return _baseline(row.n, row.mean, row.var)

    async def clear(self) -> None:
        """Remove this tenant's recorded outcomes.

        The audit log, the erasure log and the erased fact ids (append-only) stay.
        """
        async with self._session() as session:
            await session.execute(delete(RUNS).where(RUNS.c.tenant_id == self._tenant))

    # ------------------------------------------------------------------ audit log

    async def append_gate_audit(self, entries: Sequence[GateAuditEntry]) -> None:
        """Append gate decisions to ``gate_audit_log`` in one statement (kept in order)."""
        if isinstance(entries, GateAuditEntry | Mapping):
            raise InvalidTypeError("expected a sequence of GateAuditEntry, got a single value")
        if not isinstance(entries, Iterable):
            raise InvalidTypeError(
                f"expected a sequence of GateAuditEntry, got {type(entries).__name__}"
            )
        records = [coerce_record(GateAuditEntry, e) for e in entries]
        if not records:
            return
        rows = [
            {
                "tenant_id": self._tenant,
                "pass_id": e.pass_id,
                "fact_id": e.fact_id,
                "verdict": e.verdict,
                "reason": e.reason,
                "trials": e.trials,
                "evidence": _evidence_json(e.evidence),
                "policy": e.policy,
                "decided_at": e.decided_at,
            }
            for e in records
        ]
        async with self._session() as session:
            # One multi-row INSERT: identity values follow the VALUES order.
            await session.execute(insert(AUDIT).values(rows))

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
        a = AUDIT
        stmt = select(a).where(a.c.tenant_id == self._tenant)
        if pass_id is not None:
            stmt = stmt.where(a.c.pass_id == parse_id(pass_id))
        if fact_id is not None:
            stmt = stmt.where(a.c.fact_id == parse_id(fact_id))
        stmt = stmt.order_by(a.c.id)
        if offset:
            stmt = stmt.offset(offset)
        if limit is not None:
            # SQL LIMIT is 64-bit; a larger limit means "all of them", as in memory.
            stmt = stmt.limit(min(limit, MAX_OFFSET))
        async with self._session() as session:
            rows = (await session.execute(stmt)).mappings().all()
        return [
            GateAuditEntry(
                pass_id=r["pass_id"],
                fact_id=r["fact_id"],
                verdict=r["verdict"],
                reason=r["reason"],
                trials=r["trials"],
                evidence=None
                if r["evidence"] is None
                else RetentionEvidence.model_validate(r["evidence"]),
                policy=r["policy"],
                decided_at=r["decided_at"],
            )
            for r in rows
        ]

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
        """Forget purged facts: run links, the named runs, audit fact ids (redacted).

        The one path that changes gate-audit rows (see ``postgres/lifecycle.py``); ``entry``
        is appended to the append-only ``erasure_log``. ``dry_run`` only counts.

        Raises:
            InvalidTypeError: ``run_ids`` is a lone string, or ``tenant`` / ``dry_run`` is
                not a real ``bool``; nothing changes.
        """
        return await _lifecycle.erase_ledger(
            self, fact_ids, run_ids, tenant=tenant, dry_run=dry_run, entry=entry
        )

    async def list_erasures(self, *, limit: int | None = None) -> list[ErasureEntry]:
        """Erasure-log rows of this tenant, in append order."""
        return await _lifecycle.list_erasures(self, limit=limit)

"""Postgres side of the lifecycle operations: purge candidates, purge apply, erasure log.

``PostgresMemoryStore.purge_candidates`` / ``apply_purge`` and
``PostgresOutcomeLedger.erase_facts`` / ``list_erasures`` delegate here. Every statement
runs in the caller's open unit of work (``purge`` holds ``exclusive("purge")``), so the
whole purge commits or rolls back as one transaction.

The gate audit log is append-only (a trigger refuses UPDATE/DELETE/TRUNCATE). Migration
0009 lets exactly one UPDATE through: with the transaction-local setting
``cycgraph.audit_redaction = 'on'``, a row whose only change is its ``fact_id`` becoming
the nil UUID. :func:`erase_ledger` turns the setting on for that one statement only, and
logs it.

Migration 0018's ``ledger_erased_facts`` lists the digest of every fact id a purge erased
(:func:`~cycgraph_memory.lifecycle.models.erased_fact_digest`, never the id), so that
``record_outcome`` never links one again. The two are serialised per tenant by the
advisory lock :data:`LEDGER_ERASURE_LOCK`: :func:`erase_ledger` takes it exclusively
before it reads and deletes links, ``record_outcome`` shared (runs recording concurrently
do not wait for each other) before it writes links. An outcome committed before the
erasure took the lock has its links deleted by it; one recording while the erasure holds
the lock waits for its commit, then finds the erased ids.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from sqlalchemy import (
    ColumnElement,
    String,
    Table,
    Uuid,
    and_,
    any_,
    bindparam,
    delete,
    false,
    func,
    insert,
    literal,
    or_,
    select,
    text,
    true,
    update,
)
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.dialects.postgresql import insert as pg_insert

from cycgraph_memory._ids import parse_ids
from cycgraph_memory._validate import check_bool, check_text, string_list, validate_record
from cycgraph_memory.errors import (
    InvalidInputError,
)
from cycgraph_memory.lifecycle.models import (
    REDACTED_FACT_ID,
    ErasureEntry,
    LedgerErasure,
    PurgeCandidates,
    PurgePlan,
    PurgeSelector,
    erased_fact_digest,
)
from cycgraph_memory.postgres import convert
from cycgraph_memory.postgres._base import advisory_lock_key
from cycgraph_memory.postgres.bm25 import CORPORA as TEXT_CORPORA
from cycgraph_memory.postgres.bm25 import TERMS as TEXT_TERMS
from cycgraph_memory.postgres.ingest_lookups import SETTINGS
from cycgraph_memory.postgres.reembedding import (
    NEXT_COLUMN,
    STAGING_TABLE,
    abort_width_change,
    begin_width_change,
    finish_width_change,
    recompute_theme_centroids,
    write_embeddings,
)
from cycgraph_memory.postgres.retrieval import WRITER_KEYS
from cycgraph_memory.postgres.schema import (
    ErasureLogRow,
    GateAuditRow,
    LedgerErasedFactRow,
    OutcomeRunFactRow,
    OutcomeRunRow,
)
from cycgraph_memory.postgres.statements import (
    ENTITIES,
    EPISODES,
    FACTS,
    MESSAGES,
    RELATIONSHIPS,
    THEMES,
)
from cycgraph_memory.records import MAX_OFFSET, MAX_RUN_ID_LENGTH

if TYPE_CHECKING:
    from cycgraph_memory.postgres.ledger import PostgresOutcomeLedger
    from cycgraph_memory.postgres.store import PostgresMemoryStore

__all__ = [
    "AUDIT_REDACTION_SETTING",
    "ERASED_FACTS",
    "LEDGER_ERASURE_LOCK",
    "NEXT_COLUMN",
    "STAGING_TABLE",
    "abort_width_change",
    "apply_purge",
    "begin_width_change",
    "erase_ledger",
    "finish_width_change",
    "list_erasures",
    "lock_ledger_erasure",
    "purge_candidates",
    "recompute_theme_centroids",
    "write_embeddings",
]

_log = logging.getLogger(__name__)

AUDIT_REDACTION_SETTING = "cycgraph.audit_redaction"
"""Transaction-local setting that lets the redaction UPDATE through the audit trigger."""

RUNS: Table = OutcomeRunRow.__table__  # type: ignore[assignment]
RUN_FACTS: Table = OutcomeRunFactRow.__table__  # type: ignore[assignment]
AUDIT: Table = GateAuditRow.__table__  # type: ignore[assignment]
ERASURES: Table = ErasureLogRow.__table__  # type: ignore[assignment]
ERASED_FACTS: Table = LedgerErasedFactRow.__table__  # type: ignore[assignment]

LEDGER_ERASURE_LOCK = "ledger-erasure"
"""Name of the per-tenant advisory lock serialising erasures and ``record_outcome``."""

_LOCK_EXCLUSIVE = text("SELECT pg_advisory_xact_lock(hashtextextended(:key, 0))")
_LOCK_SHARED = text("SELECT pg_advisory_xact_lock_shared(hashtextextended(:key, 0))")


async def lock_ledger_erasure(session: Any, tenant_id: str, *, shared: bool) -> None:
    """Take the tenant's :data:`LEDGER_ERASURE_LOCK` until the transaction ends.

    Its own statement: the next statement of the transaction reads (``READ COMMITTED``)
    what an erasure that held the lock committed.
    """
    key = advisory_lock_key(tenant_id, LEDGER_ERASURE_LOCK)
    await session.execute(_LOCK_SHARED if shared else _LOCK_EXCLUSIVE, {"key": key})

_UUIDS = ARRAY(Uuid(as_uuid=True))


def _ids(values: Iterable[uuid.UUID]) -> Any:
    return bindparam(None, list(values), type_=_UUIDS)


def _in(column: ColumnElement[Any], values: Iterable[uuid.UUID]) -> ColumnElement[bool]:
    return column == any_(_ids(values))


def _prov(table: Table, sel: PurgeSelector) -> ColumnElement[bool]:
    if sel.tenant:
        return true()
    if not sel.has_provenance:
        return false()
    p = table.c.provenance
    conds = []
    if sel.run_id is not None:
        conds.append(p["run_id"].astext == sel.run_id)
    if sel.agent_id is not None:
        conds.append(p["agent_id"].astext == sel.agent_id)
    if sel.source is not None:
        conds.append(p["source"].astext == sel.source)
    return and_(*conds)


async def purge_candidates(store: PostgresMemoryStore, sel: PurgeSelector) -> PurgeCandidates:
    """Every row the selector might touch, found with set-based statements."""
    tenant = store.tenant_id

    def mine(t: Table) -> ColumnElement[bool]:
        return t.c.tenant_id == tenant

    async with store._session() as session:

        async def ids(stmt: Any) -> set[uuid.UUID]:
            return {convert._uuid(i) for i in (await session.execute(stmt)).scalars()}

        e, m, ep, f, th = ENTITIES, MESSAGES, EPISODES, FACTS, THEMES
        linked = select(e.c.id, e.c.superseded_by, e.c.invalidated_at)
        found = (
            await session.execute(
                linked.where(mine(e), or_(_in(e.c.id, sel.entity_ids), _prov(e, sel)))
            )
        ).all()
        entity_ids = {convert._uuid(row[0]) for row in found}
        # A stale id (a duplicate entity resolution merged away: soft-deleted, with
        # ``superseded_by``) names the entity it was merged into, as in retrieval.
        named = set(sel.entity_ids)
        step: Sequence[Any] = [row for row in found if row[0] in named]
        while step:
            targets = {row[1] for row in step if row[1] is not None and row[2] is not None}
            targets -= entity_ids
            step = (
                (await session.execute(linked.where(mine(e), _in(e.c.id, targets)))).all()
                if targets
                else []
            )
            entity_ids |= {convert._uuid(row[0]) for row in step}
        # Entities pointing at a candidate through ``superseded_by``: a live one loses the
        # pointer; a duplicate entity resolution merged into it (soft-deleted) is the same
        # subject, erased with it by ``plan_purge``, and so on through chains of merges.
        sup_rows: list[Any] = []
        frontier = set(entity_ids)
        while frontier:
            rows = (
                (await session.execute(select(e).where(mine(e), _in(e.c.superseded_by, frontier))))
                .mappings()
                .all()
            )
            sup_rows += rows
            frontier = {
                convert._uuid(row["id"]) for row in rows if row["invalidated_at"] is not None
            } - entity_ids
            entity_ids |= frontier
        episode_ids = await ids(
            select(m.c.episode_id).where(mine(m), _in(m.c.id, sel.message_ids))
        )
        episode_ids |= await ids(select(ep.c.id).where(mine(ep), _prov(ep, sel)))
        message_ids = set(sel.message_ids) | await ids(
            select(m.c.id).where(mine(m), _in(m.c.episode_id, episode_ids))
        )
        fact_ids = await ids(
            select(f.c.id).where(
                mine(f),
                or_(
                    _prov(f, sel),
                    f.c.entity_ids.overlap(_ids(entity_ids)),
                    f.c.source_message_ids.overlap(_ids(message_ids)),
                    f.c.source_episode_ids.overlap(_ids(episode_ids)),
                ),
            )
        )
        theme_rows = (
            (
                await session.execute(
                    select(th).where(
                        mine(th), or_(_prov(th, sel), th.c.fact_ids.overlap(_ids(fact_ids)))
                    )
                )
            )
            .mappings()
            .all()
        )
        themes = [convert.theme_from_row(r) for r in theme_rows]
        for t in themes:
            fact_ids.update(t.fact_ids)
        episode_ids |= await ids(
            select(ep.c.id).where(mine(ep), ep.c.fact_ids.overlap(_ids(fact_ids)))
        )
        r = RELATIONSHIPS
        rel_rows = (
            (
                await session.execute(
                    select(r).where(
                        mine(r),
                        or_(
                            _in(r.c.source_id, entity_ids),
                            _in(r.c.target_id, entity_ids),
                            _prov(r, sel),
                            # Extracted from an erased message (its evidence quotes it).
                            r.c.attributes.op("->>")("message_id")
                            == any_(bindparam(None, sorted(str(i) for i in message_ids),
                                              type_=ARRAY(String()))),
                        ),
                    )
                )
            )
            .mappings()
            .all()
        )
        # Soft-deleted in favour of a candidate (a merge keeper, a conflict winner): their
        # ``invalidated_by`` must not keep an erased id.
        edge_keys = sorted({str(row["id"]) for row in rel_rows})
        listed = {row["id"] for row in rel_rows}
        if edge_keys:
            rel_rows = [*rel_rows, *(
                row
                for row in (
                    await session.execute(
                        select(r).where(
                            mine(r),
                            r.c.invalidated_by
                            == any_(bindparam(None, edge_keys, type_=ARRAY(String()))),
                        )
                    )
                ).mappings().all()
                if row["id"] not in listed
            )]
        if fact_ids:
            fact_ids |= await ids(
                select(f.c.id).where(
                    mine(f),
                    f.c.invalidated_by
                    == any_(bindparam(None, sorted(str(i) for i in fact_ids),
                                      type_=ARRAY(String()))),
                )
            )
        k = WRITER_KEYS
        key_rows = (
            await session.execute(
                select(k.c.idempotency_key, k.c.fact_ids).where(
                    mine(k), k.c.fact_ids.overlap(_ids(fact_ids))
                )
            )
        ).all()
        vectors = await ids(
            select(m.c.id).where(mine(m), _in(m.c.id, message_ids), m.c.embedding.is_not(None))
        )
        setting_keys: list[str] = []
        if sel.tenant:
            st = SETTINGS
            setting_keys = [
                str(k) for k in (await session.execute(select(st.c.key).where(mine(st)))).scalars()
            ]
    entities = await store.get_entities(entity_ids)
    episodes = await store.get_episodes(episode_ids)
    facts = await store.get_facts(fact_ids)
    return PurgeCandidates(
        entities=[entities[i] for i in sorted(entities)],
        relationships=[convert.relationship_from_row(row) for row in rel_rows],
        episodes=[episodes[i] for i in sorted(episodes)],
        facts=[facts[i] for i in sorted(facts)],
        themes=themes,
        superseding=[convert.entity_from_row(row) for row in sup_rows],
        writer_keys={str(key): convert._uuids(fids) for key, fids in key_rows},
        message_vectors=vectors,
        setting_keys=setting_keys,
    )


async def apply_purge(store: PostgresMemoryStore, plan: PurgePlan) -> None:
    """Delete and rewrite per the plan, in the caller's unit of work.

    Deletes run before rewrites; an episode that only lost messages or fact ids is
    updated in place (its remaining messages keep their rows and vectors).
    """
    tenant = store.tenant_id
    async with store._session() as session:
        for table, values in (
            (RELATIONSHIPS, plan.delete_relationship_ids),
            (ENTITIES, plan.delete_entity_ids),
            (FACTS, plan.delete_fact_ids),
            (THEMES, plan.delete_theme_ids),
            (MESSAGES, plan.delete_message_ids),
            (EPISODES, plan.delete_episode_ids),
        ):
            if values:
                await session.execute(
                    delete(table).where(table.c.tenant_id == tenant, _in(table.c.id, values))
                )
        if plan.delete_theme_ids:
            # As ``delete_theme``: every fact citing a deleted theme loses it, also one its
            # theme does not list in ``fact_ids`` (the plan rewrites only the listed ones).
            f = FACTS
            await session.execute(
                update(f)
                .where(f.c.tenant_id == tenant, _in(f.c.theme_id, plan.delete_theme_ids))
                .values(theme_id=None)
            )
        if plan.delete_writer_keys:
            k = WRITER_KEYS
            await session.execute(
                delete(k).where(
                    k.c.tenant_id == tenant,
                    k.c.idempotency_key
                    == any_(bindparam(None, plan.delete_writer_keys, type_=ARRAY(String()))),
                )
            )
        if plan.selector.tenant:
            # Nothing of the tenant is left: its text statistics rows (kept by triggers,
            # at zero counts once its rows are gone) go too.
            for stats in (TEXT_TERMS, TEXT_CORPORA):
                await session.execute(delete(stats).where(stats.c.tenant_id == tenant))
        if plan.delete_setting_keys:
            st = SETTINGS
            await session.execute(
                delete(st).where(
                    st.c.tenant_id == tenant,
                    st.c.key
                    == any_(bindparam(None, plan.delete_setting_keys, type_=ARRAY(String()))),
                )
            )
        ep = EPISODES
        for episode in plan.put_episodes:
            await session.execute(
                update(ep)
                .where(ep.c.tenant_id == tenant, ep.c.id == episode.id)
                # The BM25 tokens cover the episode's topic and messages: recomputed
                # without the erased ones, so no search path can find their words; the
                # topic and vector as the plan left them (free of the erased text).
                .values(
                    fact_ids=list(episode.fact_ids),
                    topic=episode.topic,
                    embedding=episode.embedding,
                    search_terms=convert.episode_terms(episode),
                )
            )
    if plan.put_facts:
        await store.put_facts(plan.put_facts)
    if plan.put_themes:
        await store.put_themes(plan.put_themes)
    if plan.put_entities:
        await store.put_entities(plan.put_entities)
    if plan.put_relationships:
        await store.put_relationships(plan.put_relationships)


def _storable(run_id: object) -> bool:
    """Whether ``run_id`` could be a stored run id (a ``RunOutcome.run_id``)."""
    if not isinstance(run_id, str) or not 1 <= len(run_id) <= MAX_RUN_ID_LENGTH:
        return False
    try:
        check_text(run_id, "run_id")
    except ValueError:
        return False
    return True


async def erase_ledger(
    ledger: PostgresOutcomeLedger,
    fact_ids: Iterable[uuid.UUID | str],
    run_ids: Iterable[str],
    *,
    tenant: bool,
    dry_run: bool,
    entry: ErasureEntry | None,
) -> LedgerErasure:
    """Forget erased facts in the ledger, redact audit rows naming them, log the erasure."""
    tenant, dry_run = check_bool(tenant, "tenant"), check_bool(dry_run, "dry_run")
    gone = parse_ids(fact_ids)
    # Items that cannot be run ids match no run (as in memory); one with a NUL or a lone
    # surrogate would otherwise fail the whole statement in the driver or the server.
    runs = [r for r in string_list(run_ids, "run_ids") if _storable(r)]
    me = ledger.tenant_id
    if entry is not None:
        entry = validate_record(ErasureEntry, entry)
    lf, ru, au = RUN_FACTS, RUNS, AUDIT
    run_list = bindparam(None, runs, type_=ARRAY(String()))
    run_cond = true() if tenant else ru.c.run_id == any_(run_list)
    async with ledger._session() as session:
        if not dry_run:
            # Before the links are read: a concurrent ``record_outcome`` either committed
            # (its links are deleted below) or waits and then finds the ids erased.
            await lock_ledger_erasure(session, me, shared=False)
        n_runs = (
            await session.execute(select(func.count()).where(ru.c.tenant_id == me, run_cond))
        ).scalar_one()
        link_cond = or_(
            _in(lf.c.fact_id, gone),
            true() if tenant else lf.c.run_id == any_(run_list),
        )
        n_links = (
            await session.execute(select(func.count()).where(lf.c.tenant_id == me, link_cond))
        ).scalar_one()
        n_audit = (
            await session.execute(
                select(func.count()).where(au.c.tenant_id == me, _in(au.c.fact_id, gone))
            )
        ).scalar_one()
        counts = LedgerErasure(
            ledger_links=int(n_links), ledger_runs=int(n_runs), audit_entries_redacted=int(n_audit)
        )
        if dry_run:
            return counts
        await session.execute(delete(lf).where(lf.c.tenant_id == me, link_cond))
        if gone:
            # Never linked again by ``record_outcome`` (kept when the same id is erased twice).
            await session.execute(
                pg_insert(ERASED_FACTS)
                .from_select(
                    ["tenant_id", "fact_digest", "erased_at"],
                    select(
                        literal(me, String()),
                        func.unnest(
                            bindparam(
                                None,
                                sorted({erased_fact_digest(f) for f in gone}),
                                type_=ARRAY(String()),
                            )
                        ),
                        func.now(),
                    ),
                )
                .on_conflict_do_nothing()
            )
        await session.execute(delete(ru).where(ru.c.tenant_id == me, run_cond))
        if n_audit:
            _log.warning("erasure: redacting the fact id of %d gate-audit rows", n_audit)
            await session.execute(
                text(f"SELECT set_config('{AUDIT_REDACTION_SETTING}', 'on', true)")
            )
            await session.execute(
                update(au)
                .where(au.c.tenant_id == me, _in(au.c.fact_id, gone))
                .values(fact_id=REDACTED_FACT_ID)
            )
            # Off again for the rest of the transaction. Not in a ``finally``: after a
            # failed UPDATE the transaction is aborted (and rolled back, which also ends
            # the transaction-local setting); a statement there would replace the real
            # error (a lock timeout, a deadlock, a refused grant) with SQLSTATE 25P02.
            await session.execute(
                text(f"SELECT set_config('{AUDIT_REDACTION_SETTING}', 'off', true)")
            )
        if entry is not None:
            await session.execute(
                insert(ERASURES).values(
                    tenant_id=me,
                    erasure_id=entry.erasure_id,
                    kind=entry.kind,
                    selector_kinds=list(entry.selector_kinds),
                    selector_digests=list(entry.selector_digests),
                    counts=dict(entry.counts),
                    erased_at=entry.erased_at,
                )
            )
    return counts


async def list_erasures(
    ledger: PostgresOutcomeLedger, *, limit: int | None = None
) -> list[ErasureEntry]:
    """Erasure-log rows of the ledger's tenant, in append order."""
    if limit is not None and (
        isinstance(limit, bool) or not isinstance(limit, int) or limit < 1
    ):
        raise InvalidInputError(f"limit must be a positive int, got {limit!r}")
    x = ERASURES
    stmt = select(x).where(x.c.tenant_id == ledger.tenant_id).order_by(x.c.id)
    if limit is not None:
        # SQL LIMIT is 64-bit; a larger limit means "all of them", as in memory.
        stmt = stmt.limit(min(limit, MAX_OFFSET))
    async with ledger._session() as session:
        rows = (await session.execute(stmt)).mappings().all()
    return [
        ErasureEntry(
            erasure_id=r["erasure_id"],
            kind=r["kind"],
            selector_kinds=list(r["selector_kinds"]),
            selector_digests=list(r["selector_digests"]),
            counts=dict(r["counts"]),
            erased_at=r["erased_at"],
        )
        for r in rows
    ]

"""Erased fact ids stay out of the Postgres ledger: durably, under races, across 0018.

Sixteenth audit pass. The contract module (``tests/contract/test_ledger_erasure_audit16``)
covers the behaviour on both backends; here, on real commits:

* durability: the erased ids are read from ``ledger_erased_facts``, so a new ledger
  object on a new engine (a restarted service) still refuses to link them, and no row
  holds the erased id itself;
* races (a paused transaction, as in ``test_cross_operation_races_audit15``): an outcome
  recorded while a purge's transaction is open after its ledger erasure, and a purge
  running while an outcome's transaction is open, both leave no link to the erased fact;
* migration 0018 on a populated 0017 database: upgrade keeps the ledger, the guard works,
  downgrade drops only the new table, re-upgrade works again.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from sqlalchemy import text

from cycgraph_memory.lifecycle import purge
from cycgraph_memory.records import GateAuditEntry, RunOutcome

from ._records import DIM, entity, fact, unit

pytestmark = [pytest.mark.postgres]

TIMEOUT = 30


def _tenant() -> str:
    return f"erased16-{uuid.uuid4().hex[:10]}"


async def _seed(engine: Any, tenant: str) -> dict[str, Any]:
    from cycgraph_memory.postgres import PostgresMemoryStore

    store = PostgresMemoryStore(engine, tenant_id=tenant)
    alice = entity(name="Alice Quux", entity_type="person")
    f1 = fact(content="Alice Quux lives in Paris", entity_ids=[alice.id], embedding=unit(0))
    f2 = fact(content="Water is wet", embedding=unit(1))
    await store.put_entities([alice])
    await store.put_facts([f1, f2])
    return {"store": store, "alice": alice, "f1": f1.id, "f2": f2.id}


async def _links(engine: Any, tenant: str, fact_id: uuid.UUID) -> int:
    async with engine.begin() as conn:
        await conn.execute(text("SELECT set_config('cycgraph.tenant_id', :t, true)"), {"t": tenant})
        return int(
            (
                await conn.execute(
                    text("SELECT count(*) FROM outcome_run_facts WHERE fact_id = :f"),
                    {"f": fact_id},
                )
            ).scalar_one()
        )


async def test_erased_ids_survive_a_new_ledger_and_engine(pg_dsn: str) -> None:
    from cycgraph_memory.errors import AppendOnlyViolationError
    from cycgraph_memory.lifecycle.models import erased_fact_digest
    from cycgraph_memory.postgres import PostgresOutcomeLedger, create_engine_from_dsn

    tenant = _tenant()
    first = create_engine_from_dsn(pg_dsn)
    try:
        w = await _seed(first, tenant)
        ledger = PostgresOutcomeLedger(first, tenant_id=tenant)
        await ledger.record_outcome(RunOutcome(run_id="r1", score=0.9, fact_ids=[w["f1"]]))
        await ledger.append_gate_audit(
            [GateAuditEntry(pass_id=uuid.uuid4(), fact_id=w["f1"], verdict="held", trials=1)]
        )
        await purge(w["store"], entity_ids=[w["alice"].id], ledger=ledger)
    finally:
        await first.dispose()

    second = create_engine_from_dsn(pg_dsn)  # a restarted service
    try:
        ledger = PostgresOutcomeLedger(second, tenant_id=tenant)
        await ledger.record_outcome(
            RunOutcome(run_id="late", score=0.1, fact_ids=[w["f1"], w["f2"]])
        )
        assert await ledger.get_fact_stats(w["f1"]) is None
        assert await _links(second, tenant, w["f1"]) == 0
        assert await _links(second, tenant, w["f2"]) == 1
        assert (await ledger.get_baseline()).runs == 2
        # Another tenant's ledger links the same id: the erasure is per tenant.
        other = PostgresOutcomeLedger(second, tenant_id=_tenant())
        await other.record_outcome(RunOutcome(run_id="x", score=0.5, fact_ids=[w["f1"]]))
        stats = await other.get_fact_stats(w["f1"])
        assert stats is not None and stats.trials == 1
        # The table holds the digest, never the erased id; and it is append-only.
        async with second.begin() as conn:
            await conn.execute(
                text("SELECT set_config('cycgraph.tenant_id', :t, true)"), {"t": tenant}
            )
            rows = (
                # The test server's user bypasses row-level security: filter the tenant,
                # or other modules' erasures (same session database) show up too.
                await conn.execute(
                    text("SELECT to_jsonb(t)::text FROM ledger_erased_facts t "
                         "WHERE tenant_id = :t"),
                    {"t": tenant},
                )
            ).scalars().all()
        assert len(rows) == 1 and str(w["f1"]) not in rows[0]
        assert erased_fact_digest(w["f1"]) in rows[0]
        with pytest.raises(AppendOnlyViolationError):
            async with ledger.transaction(), ledger._session() as session:
                await session.execute(text("DELETE FROM ledger_erased_facts"))
        assert await ledger.get_fact_stats(w["f1"]) is None
    finally:
        await second.dispose()


class _PausedAfterErasure:
    """Wraps a ledger: ``erase_facts`` (not a dry run) erases, then waits for ``go``.

    The purge's transaction is then open with the ledger's links deleted and the erased
    ids written, not yet committed.
    """

    def __init__(self, ledger: Any) -> None:
        self._ledger = ledger
        self.tenant_id = ledger.tenant_id
        self.reached = asyncio.Event()
        self.go = asyncio.Event()

    async def erase_facts(self, *args: Any, **kw: Any) -> Any:
        out = await self._ledger.erase_facts(*args, **kw)
        if not kw.get("dry_run"):
            self.reached.set()
            await self.go.wait()
        return out


async def test_an_outcome_recorded_while_the_purge_commits_links_nothing(
    pg_engine: Any,
) -> None:
    """The purge has erased the ledger's links, its transaction is still open; a late
    outcome of a run that used the fact is recorded meanwhile (another connection).
    Without the lock it read no erased id (not committed yet) and linked the fact after
    the purge; now it waits for the purge's commit and then leaves the id out."""
    from cycgraph_memory.postgres import PostgresOutcomeLedger

    tenant = _tenant()
    w = await _seed(pg_engine, tenant)
    ledger = PostgresOutcomeLedger(pg_engine, tenant_id=tenant)
    await ledger.record_outcome(RunOutcome(run_id="r1", score=0.9, fact_ids=[w["f1"]]))
    paused = _PausedAfterErasure(ledger)
    erasing = asyncio.ensure_future(purge(w["store"], entity_ids=[w["alice"].id], ledger=paused))
    try:
        await asyncio.wait_for(paused.reached.wait(), TIMEOUT)
        late = PostgresOutcomeLedger(pg_engine, tenant_id=tenant)
        recording = asyncio.ensure_future(
            late.record_outcome(RunOutcome(run_id="late", score=0.2, fact_ids=[w["f1"], w["f2"]]))
        )
        await asyncio.sleep(0.5)
        assert not recording.done()  # it waits for the purge (the erasure lock)
    finally:
        paused.go.set()
    await asyncio.wait_for(erasing, TIMEOUT)
    await asyncio.wait_for(recording, TIMEOUT)
    assert await _links(pg_engine, tenant, w["f1"]) == 0
    assert await ledger.get_fact_stats(w["f1"]) is None
    stats = await ledger.get_fact_stats(w["f2"])
    assert stats is not None and stats.trials == 1
    assert (await ledger.get_baseline()).runs == 2


async def test_a_purge_during_an_open_outcome_transaction_leaves_no_link(
    pg_engine: Any,
) -> None:
    """An outcome's transaction has linked the fact and is not committed when the purge
    erases the ledger. Without the lock the purge's DELETE did not see the uncommitted
    link, which committed after the purge; now the purge waits for it and deletes it."""
    from cycgraph_memory.postgres import PostgresOutcomeLedger

    tenant = _tenant()
    w = await _seed(pg_engine, tenant)
    ledger = PostgresOutcomeLedger(pg_engine, tenant_id=tenant)
    reached, go = asyncio.Event(), asyncio.Event()

    async def record_and_hold() -> None:
        async with ledger.transaction():
            await ledger.record_outcome(RunOutcome(run_id="r1", score=0.7, fact_ids=[w["f1"]]))
            reached.set()
            await go.wait()

    recording = asyncio.ensure_future(record_and_hold())
    try:
        await asyncio.wait_for(reached.wait(), TIMEOUT)
        eraser = PostgresOutcomeLedger(pg_engine, tenant_id=tenant)
        erasing = asyncio.ensure_future(
            purge(w["store"], entity_ids=[w["alice"].id], ledger=eraser)
        )
        await asyncio.sleep(0.5)
        assert not erasing.done()  # the erasure waits for the open outcome
    finally:
        go.set()
    await asyncio.wait_for(recording, TIMEOUT)
    report = await asyncio.wait_for(erasing, TIMEOUT)
    assert report.facts == 1
    assert await _links(pg_engine, tenant, w["f1"]) == 0
    assert await ledger.get_fact_stats(w["f1"]) is None
    assert (await ledger.get_baseline()).runs == 1


async def test_outcomes_recording_together_do_not_wait_for_each_other(pg_engine: Any) -> None:
    """The lock ``record_outcome`` takes is shared: two open outcome transactions of one
    tenant both proceed (only an erasure waits for them)."""
    from cycgraph_memory.postgres import PostgresOutcomeLedger

    tenant = _tenant()
    ledger = PostgresOutcomeLedger(pg_engine, tenant_id=tenant)
    fid = uuid.uuid4()
    reached, go = asyncio.Event(), asyncio.Event()

    async def hold() -> None:
        async with ledger.transaction():
            await ledger.record_outcome(RunOutcome(run_id="a", score=0.7, fact_ids=[fid]))
            reached.set()
            await go.wait()

    holding = asyncio.ensure_future(hold())
    try:
        await asyncio.wait_for(reached.wait(), TIMEOUT)
        await asyncio.wait_for(
            ledger.record_outcome(RunOutcome(run_id="b", score=0.3, fact_ids=[fid])), 5
        )
    finally:
        go.set()
    await holding
    stats = await ledger.get_fact_stats(fid)
    assert stats is not None and stats.trials == 2


async def test_migration_0018_on_a_populated_ledger(pg_databases: Any) -> None:
    """A 0017 database holding outcomes, links, audit rows and an erasure record: the
    upgrade keeps them all, the guard works at once, the downgrade drops only
    ``ledger_erased_facts`` (the ledger as before), and the re-upgrade guards again."""
    from cycgraph_memory.postgres import (
        PostgresMemoryStore,
        PostgresOutcomeLedger,
        create_engine_from_dsn,
        current_revision,
        downgrade,
        upgrade,
    )

    engine = create_engine_from_dsn(await pg_databases.create("erased16_mig"))
    tenants = ("acme", "globex")
    pass_id = uuid.uuid4()
    ids = {t: [uuid.uuid5(uuid.NAMESPACE_URL, f"erased16/{t}/{i}") for i in range(3)]
           for t in tenants}

    async def ledger_rows() -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        async with engine.connect() as conn:
            for table in ("outcome_runs", "outcome_run_facts", "gate_audit_log", "erasure_log"):
                rows = (
                    await conn.execute(text(f"SELECT to_jsonb(t)::text FROM {table} t"))
                ).scalars()
                out[table] = sorted(rows)
        return out

    async def tables() -> set[str]:
        async with engine.connect() as conn:
            rows = await conn.execute(
                text("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
            )
            return {r[0] for r in rows}

    try:
        await upgrade(engine, embedding_dim=DIM, revision="0017")
        async with engine.begin() as conn:
            for t in tenants:
                await conn.execute(
                    text("SELECT set_config('cycgraph.tenant_id', :t, true)"), {"t": t}
                )
                for i, run in enumerate(("r1", "r2")):
                    await conn.execute(
                        text(
                            "INSERT INTO outcome_runs (tenant_id, run_id, score, recorded_at) "
                            "VALUES (:t, :r, :s, now())"
                        ),
                        {"t": t, "r": run, "s": 0.25 + i / 2},
                    )
                    for fid in ids[t][: 2 + i]:
                        await conn.execute(
                            text(
                                "INSERT INTO outcome_run_facts (tenant_id, fact_id, run_id) "
                                "VALUES (:t, :f, :r)"
                            ),
                            {"t": t, "f": fid, "r": run},
                        )
                await conn.execute(
                    text(
                        "INSERT INTO gate_audit_log (tenant_id, pass_id, fact_id, verdict, "
                        "trials, policy, decided_at) VALUES (:t, :p, :f, 'held', 2, '{}', now())"
                    ),
                    {"t": t, "p": pass_id, "f": ids[t][0]},
                )
                await conn.execute(
                    text(
                        "INSERT INTO erasure_log (tenant_id, erasure_id, kind, selector_kinds, "
                        "selector_digests, counts, erased_at) VALUES (:t, :e, 'purge', "
                        "'{entity_ids}', '{abc}', '{\"facts\": 1}', now())"
                    ),
                    {"t": t, "e": uuid.uuid4()},
                )
        before = await ledger_rows()

        await upgrade(engine)
        assert await current_revision(engine) == "0018"
        assert await ledger_rows() == before
        async with engine.connect() as conn:
            assert (
                await conn.execute(text("SELECT count(*) FROM ledger_erased_facts"))
            ).scalar_one() == 0
        acme = PostgresOutcomeLedger(engine, tenant_id="acme")
        stats = await acme.get_fact_stats(ids["acme"][0])
        assert stats is not None and stats.trials == 2  # nothing was erased yet

        # A purge on the upgraded database, then a late outcome: not linked.
        store = PostgresMemoryStore(engine, tenant_id="acme")
        alice = entity(name="Alice Quux", entity_type="person")
        f = fact(content="Alice Quux lives in Paris", entity_ids=[alice.id], embedding=unit(0))
        await store.put_entities([alice])
        await store.put_facts([f])
        await acme.record_outcome(RunOutcome(run_id="r3", score=1.0, fact_ids=[f.id]))
        await purge(store, entity_ids=[alice.id], ledger=acme)
        await acme.record_outcome(RunOutcome(run_id="r4", score=0.0, fact_ids=[f.id]))
        assert await acme.get_fact_stats(f.id) is None
        at_head = await ledger_rows()

        await downgrade(engine, "0017")
        assert await current_revision(engine) == "0017"
        assert "ledger_erased_facts" not in await tables()
        assert await ledger_rows() == at_head  # the ledger itself is untouched

        await upgrade(engine)
        assert await ledger_rows() == at_head
        # The re-upgraded table is empty (documented): the id erased before is linked by
        # an outcome recorded now; a purge after the re-upgrade guards its ids again.
        await acme.record_outcome(RunOutcome(run_id="r5", score=0.5, fact_ids=[f.id]))
        stats = await acme.get_fact_stats(f.id)
        assert stats is not None and stats.trials == 1
        await acme.erase_facts([f.id])
        await acme.record_outcome(RunOutcome(run_id="r6", score=0.5, fact_ids=[f.id]))
        assert await acme.get_fact_stats(f.id) is None
        globex = PostgresOutcomeLedger(engine, tenant_id="globex")
        stats = await globex.get_fact_stats(ids["globex"][0])
        assert stats is not None and stats.trials == 2
    finally:
        await engine.dispose()


async def test_migration_0018_grants_the_roles_that_record_outcomes(pg_databases: Any) -> None:
    """An application role granted table privileges one by one (no default privileges)
    keeps recording outcomes after the upgrade: 0018 grants it SELECT, INSERT on the new
    table, as it may insert into ``outcome_run_facts``."""
    from sqlalchemy.engine import make_url

    from cycgraph_memory.postgres import (
        PostgresOutcomeLedger,
        create_engine_from_dsn,
        upgrade,
    )

    dsn = await pg_databases.create("erased16_grant")
    owner = create_engine_from_dsn(dsn)
    role = f"erased16_app_{uuid.uuid4().hex[:8]}"
    try:
        await upgrade(owner, embedding_dim=DIM, revision="0017")
        async with owner.begin() as conn:
            for sql in (
                f"CREATE ROLE {role} LOGIN NOSUPERUSER NOBYPASSRLS",
                f'GRANT CONNECT ON DATABASE "{make_url(dsn).database}" TO {role}',
                f"GRANT USAGE ON SCHEMA public TO {role}",
                f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO {role}",
            ):
                await conn.execute(text(sql))
        await upgrade(owner)
        app = create_engine_from_dsn(make_url(dsn).set(username=role, password=None))
        try:
            ledger = PostgresOutcomeLedger(app, tenant_id="acme")
            fid = uuid.uuid4()
            await ledger.record_outcome(RunOutcome(run_id="a", score=1.0, fact_ids=[fid]))
            await ledger.erase_facts([fid])
            await ledger.record_outcome(RunOutcome(run_id="a", score=1.0, fact_ids=[fid]))
            assert await ledger.get_fact_stats(fid) is None
        finally:
            await app.dispose()
    finally:
        async with owner.begin() as conn:
            await conn.execute(text(f"DROP OWNED BY {role}"))
            await conn.execute(text(f"DROP ROLE IF EXISTS {role}"))
        await owner.dispose()

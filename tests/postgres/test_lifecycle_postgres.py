"""Postgres-only erasure guarantees: the audit trigger refuses everything but redaction."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from sqlalchemy import text

from cycgraph_memory.errors import AppendOnlyViolationError
from cycgraph_memory.lifecycle import REDACTED_FACT_ID, ErasureEntry
from cycgraph_memory.records import GateAuditEntry

pytestmark = pytest.mark.postgres


async def test_only_the_redaction_update_passes_the_audit_trigger(
    pg_sessionmaker: Any, pg_tenant: str
) -> None:
    from cycgraph_memory.postgres import PostgresOutcomeLedger

    ledger = PostgresOutcomeLedger(pg_sessionmaker, tenant_id=pg_tenant)
    fid = uuid.uuid4()
    await ledger.append_gate_audit(
        [GateAuditEntry(pass_id=uuid.uuid4(), fact_id=fid, verdict="held")]
    )
    await ledger.erase_facts([], entry=ErasureEntry(selector_kinds=["tenant"],
                                                    selector_digests=[], counts={}))
    on = "SELECT set_config('cycgraph.audit_redaction', 'on', true)"
    refused = [
        # the redaction shape, but without the setting
        ([], "UPDATE gate_audit_log SET fact_id = '00000000-0000-0000-0000-000000000000' "
             "WHERE tenant_id = :t"),
        # with the setting, any other change
        ([on], "UPDATE gate_audit_log SET verdict = 'promoted' WHERE tenant_id = :t"),
        ([on], "UPDATE gate_audit_log SET fact_id = gen_random_uuid() WHERE tenant_id = :t"),
        ([on], "UPDATE gate_audit_log SET fact_id = '00000000-0000-0000-0000-000000000000', "
               "trials = 9 WHERE tenant_id = :t"),
        ([on], "DELETE FROM gate_audit_log WHERE tenant_id = :t"),
        ([on], "UPDATE erasure_log SET kind = 'x' WHERE tenant_id = :t"),
        ([on], "DELETE FROM erasure_log WHERE tenant_id = :t"),
        ([], "TRUNCATE erasure_log"),
    ]
    for setup, sql in refused:
        with pytest.raises(AppendOnlyViolationError):
            async with ledger.transaction(), ledger._session() as session:
                for s in setup:
                    await session.execute(text(s))
                await session.execute(text(sql), {"t": pg_tenant} if ":t" in sql else {})
    assert [e.fact_id for e in await ledger.list_gate_audit()] == [fid]
    assert len(await ledger.list_erasures()) == 1
    counts = await ledger.erase_facts([fid])
    assert counts.audit_entries_redacted == 1
    assert [e.fact_id for e in await ledger.list_gate_audit()] == [REDACTED_FACT_ID]
    # the redaction switch is off again after the erasure
    with pytest.raises(AppendOnlyViolationError):
        async with ledger.transaction(), ledger._session() as session:
            await ledger.erase_facts([])
            await session.execute(
                text("UPDATE gate_audit_log SET verdict = 'x' WHERE tenant_id = :t"),
                {"t": pg_tenant},
            )


async def test_width_change_backfills_then_swaps(pg_databases: Any) -> None:
    from cycgraph_memory.embeddings import HashingEmbeddingProvider
    from cycgraph_memory.errors import EmbeddingDimensionMismatchError, InvalidInputError
    from cycgraph_memory.lifecycle import reembed
    from cycgraph_memory.postgres import (
        PostgresMemoryIndex,
        PostgresMemoryStore,
        begin_width_change,
        create_engine_from_dsn,
        finish_width_change,
        upgrade,
    )

    from ._records import entity, episode, fact, theme, unit

    dsn = await pg_databases.create("cycgraph_width")
    engine = create_engine_from_dsn(dsn)
    try:
        await upgrade(engine, embedding_dim=8)
        stores = {t: PostgresMemoryStore(engine, tenant_id=t) for t in ("ta", "tb")}
        for store in stores.values():
            facts = [fact(content=f"fact {i}", embedding=unit(i)) for i in range(4)]
            await store.put_facts(facts)
            await store.put_entities([entity(name="Ada")])
            await store.put_episodes([episode()])
            await store.put_themes([theme(fact_ids=[f.id for f in facts])])
        calibration = {"assignment_threshold": 0.9, "merge_threshold": 0.95, "facts": 4,
                       "fitted_at": 4, "sample": 4, "dimensions": 8}
        await stores["ta"].put_tenant_setting("theme_calibration", calibration)
        new = HashingEmbeddingProvider(dimensions=16, seed=1)
        await begin_width_change(engine, 16)
        index = PostgresMemoryIndex(engine, tenant_id="ta")
        hits = await index.search_facts(unit(1))  # reads still use the 8-d vectors
        assert hits[0].item.content == "fact 1"
        await reembed(stores["ta"], new, target="next", batch_size=3)
        with pytest.raises(InvalidInputError, match="tb"):
            await finish_width_change(engine, ["ta", "tb"])
        assert (await index.search_facts(unit(2)))[0].item.content == "fact 2"
        await reembed(stores["tb"], new, target="next")
        assert await finish_width_change(engine, ["ta", "tb"]) == 16
        async with engine.connect() as conn:
            dim = (await conn.execute(text(
                "SELECT value FROM schema_metadata WHERE key = 'embedding_dim'"))).scalar_one()
            idx = (await conn.execute(text(
                "SELECT indexdef FROM pg_indexes WHERE indexname = 'ix_facts_embedding_hnsw'"
            ))).scalar_one()
        assert dim == "16" and "hnsw" in idx
        store = PostgresMemoryStore(engine, tenant_id="ta")
        index = PostgresMemoryIndex(engine, tenant_id="ta")
        [q] = await new.embed(["fact 3"])
        assert (await index.search_facts(q))[0].item.content == "fact 3"
        (t,) = await store.list_themes()
        assert t.embedding is not None and len(t.embedding) == 16
        (ep,) = await store.list_episodes()
        msgs = await store.get_messages([m.id for m in ep.messages])
        assert all(len(m.embedding or []) == 16 for m in msgs.values())
        with pytest.raises(EmbeddingDimensionMismatchError):
            await store.put_fact(fact(embedding=unit(0)))
        refit = await store.get_tenant_setting("theme_calibration")
        assert refit is not None and refit["dimensions"] == 16  # refitted at the swap
        async with engine.connect() as conn:
            left = (await conn.execute(text(
                "SELECT count(*) FROM pg_tables WHERE tablename = 'embedding_staging'"
            ))).scalar_one()
        assert left == 0
    finally:
        await engine.dispose()


async def test_a_tenant_purge_leaves_no_text_statistics(
    pg_make_store: Any, pg_tenant: str, pg_sessionmaker: Any
) -> None:
    from cycgraph_memory.lifecycle import purge

    from ._records import entity, episode, fact

    store = pg_make_store(pg_tenant)
    await store.put_entities([entity()])
    await store.put_episodes([episode()])
    await store.put_facts([fact(content="zymurgy in Ulaanbaatar")])

    async def rows() -> int:
        async with pg_sessionmaker() as s:
            found = 0
            for table in ("text_search_corpora", "text_search_terms"):
                found += int((await s.execute(
                    text(f"SELECT count(*) FROM {table} WHERE tenant_id = :t"),
                    {"t": pg_tenant},
                )).scalar_one())
            return found

    assert await rows() > 0
    await purge(store, tenant=True)
    assert await rows() == 0


async def test_a_failed_audit_redaction_surfaces_its_own_error(
    pg_dsn: str, pg_tenant: str
) -> None:
    # A lock held on the audit row: the purge's redaction waits past lock_timeout. The
    # caller must see that (StatementTimeoutError, 55P03), not the "transaction is
    # aborted" (25P02) of a statement run after it.
    import asyncpg
    from sqlalchemy.engine import make_url

    from cycgraph_memory import HashingEmbeddingProvider, Memory, RunOutcome, evaluate_retention
    from cycgraph_memory.errors import StatementTimeoutError
    from cycgraph_memory.postgres import (
        PostgresMemoryIndex,
        PostgresMemoryStore,
        PostgresOutcomeLedger,
        create_engine_from_dsn,
    )

    engine = create_engine_from_dsn(pg_dsn, lock_timeout_ms=300)
    memory = Memory(
        PostgresMemoryStore(engine, tenant_id=pg_tenant),
        PostgresMemoryIndex(engine, tenant_id=pg_tenant),
        embedder=HashingEmbeddingProvider(dimensions=8),
        ledger=PostgresOutcomeLedger(engine, tenant_id=pg_tenant),
        tenant=pg_tenant,
    )
    url = make_url(pg_dsn)
    other = await asyncpg.connect(
        user=url.username, password=url.password or None, database=url.database,
        host=url.query.get("host") or url.host, port=url.port,
    )
    try:
        fid = await memory.remember("retry flaky deploys once", run_id="run-9")
        assert memory.ledger is not None
        for r in range(3):
            await memory.ledger.record_outcome(
                RunOutcome(run_id=f"r{r}", score=0.5, fact_ids=[fid])
            )
        await evaluate_retention(memory.store, memory.ledger, {"min_trials": 2})
        tx = other.transaction()
        await tx.start()
        await other.execute(
            "SELECT 1 FROM gate_audit_log WHERE tenant_id = $1 FOR UPDATE", pg_tenant
        )
        with pytest.raises(StatementTimeoutError) as caught:
            await memory.erase(run_id="run-9")
        assert caught.value.sqlstate == "55P03"
        await tx.rollback()
        assert await memory.store.get_fact(fid) is not None  # nothing erased
    finally:
        await other.close()
        await engine.dispose()


async def test_migration_0014_downgrades_to_what_0013_had(pg_databases: Any) -> None:
    from cycgraph_memory.postgres import create_engine_from_dsn, downgrade, upgrade

    dsn = str(await pg_databases.create("m0014"))
    engine = create_engine_from_dsn(dsn)
    try:
        async def fillfactor() -> Any:
            async with engine.connect() as conn:
                return (await conn.execute(text(
                    "SELECT reloptions FROM pg_class WHERE relname = 'facts'"
                ))).scalar_one()

        await upgrade(engine, embedding_dim=8, revision="0013")
        before = await fillfactor()
        await upgrade(engine, revision="0014")
        assert await fillfactor() != before
        await downgrade(engine, "0013")
        assert await fillfactor() == before == ["fillfactor=80"]
    finally:
        await engine.dispose()


async def test_an_embedding_width_out_of_range_is_a_typed_error(pg_databases: Any) -> None:
    from cycgraph_memory.errors import InvalidInputError
    from cycgraph_memory.postgres import current_revision, upgrade

    dsn = str(await pg_databases.create("wide"))
    for width in (0, 16_001):
        with pytest.raises(InvalidInputError, match=r"embedding_dim must be in 1\.\.16000"):
            await upgrade(dsn, embedding_dim=width)
    assert await current_revision(dsn) is None

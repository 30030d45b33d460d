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

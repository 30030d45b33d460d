"""A fact write holds its cited rows FOR KEY SHARE: a concurrent delete waits, then cleans up.

Real commits on the engine (not the rolled-back per-test connection): a unique tenant,
cleared at the end.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest

from ._records import entity, fact

pytestmark = pytest.mark.postgres


async def test_delete_waits_for_the_fact_citing_it_and_leaves_nothing_dangling(
    pg_engine: Any,
) -> None:
    from cycgraph_memory.postgres import PostgresMemoryStore

    tenant = f"refs-{uuid.uuid4().hex[:12]}"
    writer = PostgresMemoryStore(pg_engine, tenant_id=tenant)
    deleter = PostgresMemoryStore(pg_engine, tenant_id=tenant)
    cited = entity()
    await writer.put_entity(cited)
    written = asyncio.Event()
    events: list[str] = []
    f = fact(entity_ids=[cited.id])

    async def write() -> None:
        async with writer.transaction():
            await writer.put_fact(f)  # locks the entity row FOR KEY SHARE
            written.set()
            await asyncio.sleep(0.5)  # the delete is waiting meanwhile
            events.append("fact committed")

    async def delete() -> None:
        await written.wait()
        assert await deleter.delete_entity(cited.id)
        events.append("entity deleted")

    try:
        await asyncio.wait_for(asyncio.gather(write(), delete()), timeout=30)
        assert events == ["fact committed", "entity deleted"]
        got = await writer.get_fact(f.id)
        assert got is not None and got.entity_ids == []  # the delete saw the committed fact
    finally:
        await writer.clear()

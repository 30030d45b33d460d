"""memory_writer idempotency under real concurrency: two connections, real commits."""

from __future__ import annotations

import asyncio
import secrets
from typing import Any

import pytest

from cycgraph_memory import memory_writer

from ._records import fact

pytestmark = pytest.mark.postgres


async def test_concurrent_writers_with_one_key_store_the_facts_once(pg_engine: Any) -> None:
    from cycgraph_memory.postgres import PostgresMemoryStore

    tenant = f"writer_{secrets.token_hex(4)}"
    first = PostgresMemoryStore(pg_engine, tenant_id=tenant)
    second = PostgresMemoryStore(pg_engine, tenant_id=tenant)
    key = "run-1:reflect:0"
    try:
        mine, theirs = [fact(), fact()], [fact(), fact()]
        async with first.transaction():
            ids, wrote = await first.put_facts_once(key, mine)
            assert wrote
            # The second writer runs on its own connection and blocks on the key row
            # until the first transaction commits.
            racing = asyncio.create_task(second.put_facts_once(key, theirs))
            await asyncio.sleep(0.2)
        ids2, wrote2 = await racing
        assert (ids2, wrote2) == (ids, False)
        stored = await second.find_facts()
        assert sorted(f.id for f in stored) == sorted(f.id for f in mine)

        # Many writers at once through the adapter: exactly one write lands.
        key2 = "run-2:reflect:0"
        writers = [memory_writer(PostgresMemoryStore(pg_engine, tenant_id=tenant))
                   for _ in range(4)]
        results = await asyncio.gather(*(
            w([{"content": f"lesson {n}", "tags": ["lesson"]}], {"idempotency_key": key2})
            for n, w in enumerate(writers)
        ))
        assert len({tuple(r["fact_ids"]) for r in results}) == 1
        assert len(await first.find_facts(tags=["lesson"])) == 1
    finally:
        await first.clear()
    assert await first.find_facts(include_invalidated=True) == []
    _ids3, wrote3 = await first.put_facts_once(key, [fact()])
    assert wrote3
    await first.clear()

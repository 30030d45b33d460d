"""The touch of served facts is a HOT update (revision 0014: ``facts`` fillfactor 90).

A bulk load fills every page; without free room on the page, the new row version of a
touched fact goes to another page and every index of ``facts`` (GIN, HNSW, btrees) gets an
entry for it. With a tenth of each page free the touch changes no index. Counted with
``pg_stat_xact_user_tables`` (this transaction's updates), not timed.
"""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import text

from ._records import fact

pytestmark = pytest.mark.postgres

_COUNTS = (
    "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_xact_user_tables WHERE relname = 'facts'"
)


async def test_touching_freshly_loaded_facts_changes_no_index(
    pg_store: Any, pg_sessionmaker: Any, pg_engine: Any, pg_tenant: str
) -> None:
    # Every test of the session writes facts in a transaction it rolls back: pages fill
    # with aborted rows whose line pointers only VACUUM frees (pruning leaves them dead),
    # and a page out of line pointers has no room for any new row version, whatever its
    # fill factor. Start from a vacuumed table so the test sees the fill factor alone.
    async with pg_engine.connect() as conn:
        conn = await conn.execution_options(isolation_level="AUTOCOMMIT")
        await conn.execute(text("VACUUM facts"))
    facts = [fact(content=f"fact number {i} about water and weather") for i in range(400)]
    await pg_store.put_facts(facts)
    async with pg_sessionmaker() as session:
        conn = await session.connection()
        before = (await conn.execute(text(_COUNTS))).one()
        # One touched fact per heap page: the fill factor leaves room for one new row
        # version on a page (rows are stored in id order, so touching every fortieth fact
        # of the list put two on one page now and then, and the second found no room).
        pages = (await conn.execute(
            text("SELECT id, (ctid::text::point)[0] FROM facts WHERE tenant_id = :t"),
            {"t": pg_tenant},
        )).all()
    first_of_page: dict[float, Any] = {}
    for fact_id, page in sorted(pages, key=lambda r: (r[1], str(r[0]))):
        first_of_page.setdefault(page, fact_id)
    by_id = {f.id: f for f in facts}
    touched = [by_id[i] for i in list(first_of_page.values())[:10]]
    assert len(touched) == 10
    await pg_store.touch_facts([f.id for f in touched])
    async with pg_sessionmaker() as session:
        conn = await session.connection()
        after = (await conn.execute(text(_COUNTS))).one()
        fillfactor = (await conn.execute(text(
            "SELECT reloptions FROM pg_class WHERE relname = 'facts'"
        ))).scalar_one()
    assert fillfactor == ["fillfactor=90"]
    updates, hot = after[0] - before[0], after[1] - before[1]
    assert updates == len(touched)
    assert hot == updates

"""A touch of served facts writes no fact row (revision 0016: counters in ``fact_access``).

Before 0016 each touch wrote a new version of every touched fact row; it had to fit on the
row's page (a HOT update) or every index of ``facts`` (GIN, HNSW, btrees) got an entry for
it, which is why fact vectors were kept out of the row. Now the touch upserts one small
``fact_access`` row per fact, and a second touch of the same facts updates those rows in
place (HOT: ``fact_access`` has no index but its primary key, which the touch does not
change). Counted with ``pg_stat_xact_user_tables`` (this transaction's writes), not timed.
"""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import text

from ._records import fact

pytestmark = pytest.mark.postgres

_COUNTS = (
    "SELECT relname, n_tup_ins, n_tup_upd, n_tup_hot_upd FROM pg_stat_xact_user_tables "
    "WHERE relname IN ('facts', 'fact_access')"
)


async def _counts(pg_sessionmaker: Any) -> dict[str, tuple[int, int, int]]:
    async with pg_sessionmaker() as session:
        conn = await session.connection()
        rows = (await conn.execute(text(_COUNTS))).all()
    return {r[0]: (int(r[1]), int(r[2]), int(r[3])) for r in rows}


def _delta(after: dict[str, Any], before: dict[str, Any], table: str) -> tuple[int, ...]:
    zero = (0, 0, 0)
    return tuple(a - b for a, b in zip(after.get(table, zero), before.get(table, zero),
                                       strict=True))


async def test_a_touch_writes_no_fact_row(pg_store: Any, pg_sessionmaker: Any) -> None:
    facts = [fact(content=f"fact number {i} about water and weather") for i in range(400)]
    await pg_store.put_facts(facts)
    touched = facts[::40]
    before = await _counts(pg_sessionmaker)
    await pg_store.touch_facts([f.id for f in touched])
    first = await _counts(pg_sessionmaker)
    assert _delta(first, before, "facts") == (0, 0, 0)
    assert _delta(first, before, "fact_access") == (len(touched), 0, 0)

    await pg_store.touch_facts([f.id for f in touched])
    second = await _counts(pg_sessionmaker)
    assert _delta(second, first, "facts") == (0, 0, 0)
    inserted, updated, hot = _delta(second, first, "fact_access")
    assert (inserted, updated) == (0, len(touched))
    assert hot == updated
    got = await pg_store.get_facts([f.id for f in touched])
    assert {f.access_count for f in got.values()} == {2}

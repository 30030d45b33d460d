"""Cached statements run as their compiled text give exactly what ``session.execute`` gives."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import (
    Integer,
    Text,
    TypeDecorator,
    bindparam,
    event,
    func,
    literal,
    select,
    text,
    type_coerce,
)
from sqlalchemy.exc import StatementError
from sqlalchemy.types import NullType

from cycgraph_memory.postgres import driver_sql
from cycgraph_memory.postgres.statements import FACTS, MESSAGES, query_distance

from ._records import fact

pytestmark = pytest.mark.postgres

DIM = 8


def _vector(i: int) -> list[float]:
    v = [0.0] * DIM
    v[i % DIM] = 1.0
    v[(i + 1) % DIM] = 0.5
    return v


def _ranked() -> Any:
    """Facts of a tenant by distance to ``:q``: a typed vector bind, a literal LIMIT, a
    bind with a value of its own and columns without result processors (the distance
    typed ``NullType``: a float column's processor depends on the driver's type)."""
    f = FACTS
    distance = type_coerce(query_distance(f, DIM), NullType()).label("distance")
    return (
        select(f.c.id, f.c.content, distance, literal(7, Integer()).label("seven"))
        .where(f.c.tenant_id == bindparam("tenant", type_=Text()),
               f.c.content != bindparam("skip", "never this", type_=Text()))
        .order_by(query_distance(f, DIM), f.c.id)
        .limit(bindparam("fetch", type_=Integer(), literal_execute=True))
    )


async def _facts(store: Any, n: int) -> list[Any]:
    facts = [fact(content=f"fact {i}", embedding=_vector(i), tags=[f"t{i % 2}"]) for i in range(n)]
    await store.put_facts(facts)
    return facts


async def test_rows_equal_those_of_execute(
    pg_store: Any, pg_sessionmaker: Any, pg_tenant: str
) -> None:
    await _facts(pg_store, 6)
    stmt = _ranked()
    async with pg_sessionmaker() as session:
        # An exact scan: the HNSW index filtered to this tenant (a few rows of a shared
        # test table) may return fewer than the limit, which is not what is tested here.
        await session.execute(text("SET LOCAL enable_indexscan = off"))
        conn = await session.connection()
        compiled = driver_sql.compile_for_driver(stmt, conn.dialect)
        assert compiled is not None and compiled.literals == ("fetch",)
        for fetch in (2, 5, 2):
            params = {"tenant": pg_tenant, "q": _vector(3), "fetch": fetch}
            fast = (await driver_sql.execute(session, stmt, params)).all()
            slow = (await session.execute(stmt, params)).all()
            assert [tuple(r) for r in fast] == [tuple(r) for r in slow]
            assert len(fast) == fetch
            assert list(fast[0]._mapping) == ["id", "content", "distance", "seven"]
        assert set(compiled.variants) == {(2,), (5,)}  # one text per literal value


class _Shout(TypeDecorator[str]):
    """A type whose result processor changes the driver's value."""

    impl = Text
    cache_ok = True

    def process_result_value(self, value: Any, dialect: Any) -> Any:
        return None if value is None else value.upper()


async def test_a_column_with_a_result_processor_runs_through_execute(
    pg_store: Any, pg_sessionmaker: Any, pg_tenant: str
) -> None:
    await _facts(pg_store, 3)
    stmt = select(FACTS.c.id, type_coerce(FACTS.c.content, _Shout()).label("content")).where(
        FACTS.c.tenant_id == bindparam("tenant", type_=Text())
    ).order_by(FACTS.c.id)
    async with pg_sessionmaker() as session:
        conn = await session.connection()
        assert driver_sql.compile_for_driver(stmt, conn.dialect) is None
        rows = (await driver_sql.execute(session, stmt, {"tenant": pg_tenant})).all()
    assert sorted(r.content for r in rows) == ["FACT 0", "FACT 1", "FACT 2"]  # processed


async def test_the_embedding_column_runs_as_text_with_the_same_values(
    pg_store: Any, pg_sessionmaker: Any, pg_tenant: str
) -> None:
    # Its processor passes asyncpg's real[] list through (DRIVER_VALUE_FINAL).
    facts = await _facts(pg_store, 3)
    stmt = select(FACTS.c.id, FACTS.c.embedding).where(
        FACTS.c.tenant_id == bindparam("tenant", type_=Text())
    ).order_by(FACTS.c.id)
    async with pg_sessionmaker() as session:
        conn = await session.connection()
        assert driver_sql.compile_for_driver(stmt, conn.dialect) is not None
        fast = (await driver_sql.execute(session, stmt, {"tenant": pg_tenant})).all()
        slow = (await session.execute(stmt, {"tenant": pg_tenant})).all()
    assert [tuple(r) for r in fast] == [tuple(r) for r in slow]
    assert {r.id: r.embedding for r in fast} == {f.id: f.embedding for f in facts}
    assert all(type(r.embedding) is list for r in fast)


async def test_a_text_statement_runs_as_its_text(
    pg_engine: Any, pg_sessionmaker: Any
) -> None:
    stmt = text("SELECT set_config('cycgraph.probe', :v0, true), :n + 1 AS m").bindparams(
        bindparam("v0", type_=Text()), bindparam("n", type_=Integer())
    )
    seen: list[str] = []

    def before(_c: Any, _cur: Any, statement: str, *_: Any) -> None:
        seen.append(statement)

    event.listen(pg_engine.sync_engine, "before_cursor_execute", before)
    try:
        async with pg_sessionmaker() as session, session.begin():
            conn = await session.connection()
            assert driver_sql.compile_for_driver(stmt, conn.dialect) is not None
            row = (await driver_sql.execute(session, stmt, {"v0": "on", "n": 2})).one()
            probe = text("SELECT current_setting('cycgraph.probe')")
            again = (await session.execute(probe)).scalar()
    finally:
        event.remove(pg_engine.sync_engine, "before_cursor_execute", before)
    assert tuple(row) == ("on", 3) and again == "on"
    assert any("$1" in s and "set_config" in s for s in seen)


async def test_a_missing_value_raises_as_execute_does(
    pg_sessionmaker: Any, pg_tenant: str
) -> None:
    stmt = _ranked()
    async with pg_sessionmaker() as session:
        with pytest.raises(StatementError, match="'q'"):
            await driver_sql.execute(session, stmt, {"tenant": pg_tenant, "fetch": 3})


async def test_a_non_integer_literal_runs_through_execute(
    pg_sessionmaker: Any, pg_tenant: str
) -> None:
    m = MESSAGES
    stmt = select(func.count()).select_from(m).where(
        m.c.tenant_id == bindparam("tenant", type_=Text()),
        m.c.content == bindparam("word", type_=Text(), literal_execute=True),
    )
    async with pg_sessionmaker() as session:
        conn = await session.connection()
        compiled = driver_sql.compile_for_driver(stmt, conn.dialect)
        assert compiled is not None and compiled.sql({"word": "it's"}) is None
        found = await driver_sql.execute(session, stmt, {"tenant": pg_tenant, "word": "it's"})
        assert found.scalar() == 0


async def test_the_engine_events_see_the_statement(
    pg_store: Any, pg_engine: Any, pg_sessionmaker: Any, pg_tenant: str
) -> None:
    await _facts(pg_store, 2)
    seen: list[str] = []

    def before(_c: Any, _cur: Any, statement: str, *_: Any) -> None:
        seen.append(statement)

    event.listen(pg_engine.sync_engine, "before_cursor_execute", before)
    try:
        async with pg_sessionmaker() as session:
            await driver_sql.execute(
                session, _ranked(), {"tenant": pg_tenant, "q": _vector(0), "fetch": 1}
            )
    finally:
        event.remove(pg_engine.sync_engine, "before_cursor_execute", before)
    assert any("LIMIT 1" in s and "<=>" in s for s in seen)


async def test_constants_are_written_into_the_text_with_the_same_values(
    pg_store: Any, pg_sessionmaker: Any, pg_tenant: str
) -> None:
    # Anonymous binds (constants of the expression) carry the same value on every call:
    # they are written into the SQL under their cast, and only the named binds travel.
    f = FACTS
    constants = (
        literal(7, Integer()).label("seven"),
        literal(2**40).label("big"),
        literal(0.1).label("tenth"),
        literal(1e-300).label("tiny"),
        literal(float("nan")).label("nan"),
        literal(float("-inf")).label("minus_inf"),
        literal("it's $1 __x").label("quoted"),
    )
    stmt = (
        select(f.c.content, *(type_coerce(c, NullType()).label(c.name) for c in constants))
        .where(f.c.tenant_id == bindparam("tenant", type_=Text()))
        .order_by(f.c.content)
    )
    await _facts(pg_store, 2)
    async with pg_sessionmaker() as session:
        conn = await session.connection()
        compiled = driver_sql.compile_for_driver(stmt, conn.dialect)
        assert compiled is not None
        assert compiled.names == ("tenant",)  # the only value sent per call
        assert "$1" in compiled.text and "$2" not in compiled.text
        fast = (await driver_sql.execute(session, stmt, {"tenant": pg_tenant})).all()
        slow = (await session.execute(stmt, {"tenant": pg_tenant})).all()
    assert len(fast) == 2
    for a, b in zip(fast, slow, strict=True):
        assert a.content == b.content
        assert (a.seven, a.big, a.tenth, a.tiny) == (7, 2**40, 0.1, 1e-300)
        assert (a.seven, a.big, a.tenth, a.tiny) == (b.seven, b.big, b.tenth, b.tiny)
        assert a.nan != a.nan and b.nan != b.nan
        assert a.minus_inf == b.minus_inf == float("-inf")
        assert a.quoted == b.quoted == "it's $1 __x"


async def test_a_named_bind_with_a_value_stays_a_parameter(
    pg_store: Any, pg_sessionmaker: Any, pg_tenant: str
) -> None:
    # ``skip`` has a value of its own but a name a caller can give: it is not inlined.
    stmt = _ranked()
    async with pg_sessionmaker() as session:
        conn = await session.connection()
        compiled = driver_sql.compile_for_driver(stmt, conn.dialect)
    assert compiled is not None
    assert set(compiled.names) == {"tenant", "skip", "q"}
    assert "'7'::INTEGER" in compiled.text and "never this" not in compiled.text


async def test_a_constant_with_a_bind_processor_stays_a_parameter(
    pg_sessionmaker: Any,
) -> None:
    # A Boolean bind has a processor (it checks the value): sent as a parameter as before.
    stmt = select(literal(True).label("yes"))
    async with pg_sessionmaker() as session:
        conn = await session.connection()
        compiled = driver_sql.compile_for_driver(stmt, conn.dialect)
        assert compiled is not None and len(compiled.names) == 1
        row = (await driver_sql.execute(session, stmt, {})).one()
    assert row.yes is True


async def test_a_string_constant_with_a_backslash_stays_a_parameter(
    pg_sessionmaker: Any,
) -> None:
    # Written into the text it would depend on standard_conforming_strings: sent instead.
    stmt = select(type_coerce(literal("C:\\dir\\x"), NullType()).label("path"))
    async with pg_sessionmaker() as session:
        conn = await session.connection()
        compiled = driver_sql.compile_for_driver(stmt, conn.dialect)
        assert compiled is not None and len(compiled.names) == 1
        row = (await driver_sql.execute(session, stmt, {})).one()
    assert row.path == "C:\\dir\\x"

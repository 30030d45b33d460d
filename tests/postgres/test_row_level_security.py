"""Row-level security (migration 0006), exercised as a non-owner application role.

The test server's own user is a superuser, which Postgres exempts from RLS; these tests
create an ordinary role with the grants the README documents, connect as it and check that
the database itself keeps every transaction on the tenant named by ``cycgraph.tenant_id``.
"""

from __future__ import annotations

import math
import secrets
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from cycgraph_memory.errors import StorageError

from ._records import entity, episode, fact, relationship, theme

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

TENANT_TABLES = ["entities", "episode_messages", "episodes", "facts", "relationships",
                 "themes"]

_INSERT_ENTITY = text(
    "INSERT INTO entities (tenant_id, id, name, entity_type, attributes, provenance, "
    "created_at, updated_at) VALUES (:tenant, :id, 'x', 'thing', '{}', '{}', now(), now())"
)


def _set(tenant: str) -> Any:
    return text("SELECT set_config('cycgraph.tenant_id', :t, true)").bindparams(t=tenant)


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def app_engine(pg_engine: Any, pg_dsn: str) -> AsyncIterator[Any]:
    """An engine connected as a fresh non-superuser, non-owner role (README grants)."""
    from sqlalchemy.engine import make_url

    from cycgraph_memory.postgres import create_engine_from_dsn

    role = f"cycgraph_app_{secrets.token_hex(4)}"
    database = make_url(pg_dsn).database
    async with pg_engine.begin() as conn:
        for sql in (
            f"CREATE ROLE {role} LOGIN NOSUPERUSER NOBYPASSRLS",
            f'GRANT CONNECT ON DATABASE "{database}" TO {role}',
            f"GRANT USAGE ON SCHEMA public TO {role}",
            f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO {role}",
            f"GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA public TO {role}",
        ):
            await conn.execute(text(sql))
    engine = create_engine_from_dsn(make_url(pg_dsn).set(username=role, password=None))
    try:
        yield engine
    finally:
        await engine.dispose()
        async with pg_engine.begin() as conn:
            await conn.execute(text(f"DROP OWNED BY {role}"))
            await conn.execute(text(f"DROP ROLE {role}"))


@pytest_asyncio.fixture(loop_scope="session")
async def two_tenants(pg_engine: Any) -> AsyncIterator[tuple[str, str]]:
    """Two tenants with one row in every table, committed by the owner; removed after."""
    from cycgraph_memory.postgres import PostgresMemoryStore

    tenants = (f"rls_a_{secrets.token_hex(3)}", f"rls_b_{secrets.token_hex(3)}")
    stores = [PostgresMemoryStore(pg_engine, tenant_id=t) for t in tenants]
    for store in stores:
        e1, e2 = entity(), entity()
        await store.put_entities([e1, e2])
        await store.put_relationship(relationship(e1.id, e2.id))
        await store.put_fact(fact())
        await store.put_episode(episode())
        await store.put_theme(theme())
    try:
        yield tenants
    finally:
        for store in stores:
            await store.clear()


async def test_raw_sql_sees_only_the_current_tenant(
    app_engine: Any, two_tenants: tuple[str, str]
) -> None:
    a, _ = two_tenants
    async with app_engine.begin() as conn:
        await conn.execute(_set(a))
        for table in TENANT_TABLES:
            rows = (await conn.execute(text(
                f"SELECT DISTINCT tenant_id FROM {table}"))).scalars().all()
            assert rows == [a], table


async def test_no_tenant_reads_nothing_and_cannot_write(
    app_engine: Any, two_tenants: tuple[str, str]
) -> None:
    a, _ = two_tenants
    async with app_engine.connect() as conn:
        for table in TENANT_TABLES:
            count = (await conn.execute(text(f"SELECT count(*) FROM {table}"))).scalar_one()
            assert count == 0, table
        await conn.rollback()
        with pytest.raises(DBAPIError) as info:
            await conn.execute(_INSERT_ENTITY, {"tenant": a, "id": uuid.uuid4()})
        assert info.value.orig.sqlstate == "42501"  # type: ignore[union-attr]
        await conn.rollback()


async def test_other_tenants_rows_cannot_be_written(
    app_engine: Any, pg_engine: Any, two_tenants: tuple[str, str]
) -> None:
    a, b = two_tenants
    async with app_engine.connect() as conn:
        await conn.execute(_set(a))
        with pytest.raises(DBAPIError) as info:
            await conn.execute(_INSERT_ENTITY, {"tenant": b, "id": uuid.uuid4()})
        assert info.value.orig.sqlstate == "42501"  # type: ignore[union-attr]
        await conn.rollback()

        await conn.execute(_set(a))
        updated = await conn.execute(text(
            "UPDATE facts SET content = 'stolen' WHERE tenant_id = :b"), {"b": b})
        deleted = await conn.execute(text("DELETE FROM themes WHERE tenant_id = :b"), {"b": b})
        assert updated.rowcount == 0 and deleted.rowcount == 0
        # Moving one's own row into another tenant is refused too (WITH CHECK).
        with pytest.raises(DBAPIError) as info:
            await conn.execute(text("UPDATE facts SET tenant_id = :b"), {"b": b})
        assert info.value.orig.sqlstate == "42501"  # type: ignore[union-attr]
        await conn.rollback()
    async with pg_engine.connect() as owner:
        content = (await owner.execute(text(
            "SELECT content FROM facts WHERE tenant_id = :b"), {"b": b})).scalar_one()
        themes = (await owner.execute(text(
            "SELECT count(*) FROM themes WHERE tenant_id = :b"), {"b": b})).scalar_one()
    assert content != "stolen" and themes == 1


async def test_tables_without_tenant_stay_readable(app_engine: Any) -> None:
    async with app_engine.connect() as conn:
        dim = (await conn.execute(text(
            "SELECT value FROM schema_metadata WHERE key = 'embedding_dim'"))).scalar_one()
        version = (await conn.execute(text("SELECT version_num FROM alembic_version"))).all()
    assert dim == "8" and len(version) == 1


async def test_backends_set_the_tenant_per_transaction(
    app_engine: Any, two_tenants: tuple[str, str]
) -> None:
    from cycgraph_memory.postgres import PostgresMemoryIndex, PostgresMemoryStore

    a, b = two_tenants
    store_a = PostgresMemoryStore(app_engine, tenant_id=a)
    store_b = PostgresMemoryStore(app_engine, tenant_id=b)
    facts_a = await store_a.find_facts()
    assert len(facts_a) == 1 and len(await store_a.list_themes()) == 1
    assert await store_b.get_fact(facts_a[0].id) is None
    hits = await PostgresMemoryIndex(app_engine, tenant_id=a).search_facts(
        facts_a[0].embedding, limit=5)
    assert [h.item.id for h in hits] == [facts_a[0].id]

    # One unit of work spanning two tenants' stores on one bind: each statement runs as
    # its own store's tenant (the setting follows the store, also after a savepoint rollback).
    fa, fb = fact(), fact()
    async with store_a.transaction():
        await store_a.put_fact(fa)
        with pytest.raises(ZeroDivisionError):
            async with store_b.transaction():
                await store_b.put_fact(fact())
                raise ZeroDivisionError
        await store_b.put_fact(fb)
        await store_a.touch_facts([fa.id])
    assert (await store_a.get_fact(fa.id)).access_count == 1  # type: ignore[union-attr]
    assert await store_b.get_fact(fb.id) == fb
    assert await store_a.get_fact(fb.id) is None
    assert len(await store_b.find_facts()) == 2

    # A raw write of another tenant's row through a store's session is a typed error.
    with pytest.raises(StorageError) as info:
        async with store_a._session() as session:
            await session.execute(_INSERT_ENTITY, {"tenant": b, "id": uuid.uuid4()})
    assert info.value.sqlstate == "42501"


async def test_ef_search_scaled_by_the_tenants_share_under_rls(
    app_engine: Any, pg_engine: Any, two_tenants: tuple[str, str]
) -> None:
    # The search settings read the tenant's document count (text_search_corpora, under
    # row-level security) in the statement that sets the tenant: as the application role,
    # in a fresh transaction, the count must be visible.
    from cycgraph_memory.postgres import PostgresMemoryIndex, PostgresMemoryStore

    a, _ = two_tenants
    await PostgresMemoryStore(pg_engine, tenant_id=a).put_facts([fact() for _ in range(3)])
    async with pg_engine.connect() as conn:
        await conn.execute(text("ANALYZE facts"))
        await conn.commit()
        reltuples = (await conn.execute(text(
            "SELECT reltuples FROM pg_class WHERE oid = 'facts'::regclass"))).scalar_one()
    found = {}
    for role, engine in (("app", app_engine), ("owner", pg_engine)):
        index = PostgresMemoryIndex(engine, tenant_id=a, ef_search=100)
        async with index._read(index._search_settings(100, "facts")) as session:
            ef = (await session.execute(text("SELECT current_setting('hnsw.ef_search')"))
                  ).scalar()
            mode = (await session.execute(text("SELECT current_setting('plan_cache_mode')"))
                    ).scalar()
        found[role] = (int(ef), mode, index._generic_estimates["facts"][0])
    # The planner's guess for an unknown tenant is asked of the planner, so the
    # application role gets the owner's (pg_stats would hide it from a role under
    # row-level security); it fits this small tenant: a generic plan for both.
    assert found["app"] == found["owner"]
    assert found["app"][1] == "force_generic_plan" and found["app"][2] is not None
    ef = found["app"][0]
    assert reltuples >= 5
    # the tenant holds 4 facts
    assert int(ef) == min(1000, math.ceil(100 * math.sqrt(reltuples / 4)))

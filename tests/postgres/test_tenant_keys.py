"""Every key leads with ``tenant_id``: what Citus needs to distribute tables by tenant.

A distributed table's primary key and unique constraints must contain the distribution
column, and foreign keys between distributed tables must include it (docs/scaling.md).
This pins, on the migrated schema itself, that every primary key, unique constraint or
unique index and foreign key of every table with a ``tenant_id`` column starts with
``tenant_id``, that the tables without one are the few reference tables the docs name, and
that the per-tenant advisory lock key starts with the tenant.
"""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import text

pytestmark = pytest.mark.postgres

# Tables without a tenant column: reference tables on Citus (a copy on every node).
REFERENCE_TABLES = {"alembic_version", "schema_metadata"}

_KEYS = text(
    """
    SELECT c.relname AS table_name, con.conname AS name, con.contype::text AS kind,
           array(SELECT a.attname FROM unnest(con.conkey) WITH ORDINALITY k(n, i)
                 JOIN pg_attribute a ON a.attrelid = con.conrelid AND a.attnum = k.n
                 ORDER BY k.i) AS columns,
           array(SELECT a.attname FROM unnest(con.confkey) WITH ORDINALITY k(n, i)
                 JOIN pg_attribute a ON a.attrelid = con.confrelid AND a.attnum = k.n
                 ORDER BY k.i) AS referenced
    FROM pg_constraint con
    JOIN pg_class c ON c.oid = con.conrelid
    JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE n.nspname = current_schema() AND con.contype::text IN ('p', 'u', 'f')
    """
)
_UNIQUE_INDEXES = text(
    """
    SELECT c.relname AS table_name, i.relname AS name,
           array(SELECT a.attname FROM unnest(x.indkey::int2[]) WITH ORDINALITY k(n, o)
                 JOIN pg_attribute a ON a.attrelid = x.indrelid AND a.attnum = k.n
                 ORDER BY k.o) AS columns
    FROM pg_index x
    JOIN pg_class c ON c.oid = x.indrelid
    JOIN pg_class i ON i.oid = x.indexrelid
    JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE n.nspname = current_schema() AND x.indisunique
    """
)
_TABLES = text(
    """
    SELECT c.relname, bool_or(a.attname = 'tenant_id') AS has_tenant
    FROM pg_class c
    JOIN pg_namespace n ON n.oid = c.relnamespace
    JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
    WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'p')
    GROUP BY c.relname
    """
)


async def test_every_key_of_a_tenant_table_leads_with_tenant_id(pg_engine: Any) -> None:
    async with pg_engine.connect() as conn:
        tables = {r[0]: r[1] for r in await conn.execute(_TABLES)}
        keys = (await conn.execute(_KEYS)).mappings().all()
        unique_indexes = (await conn.execute(_UNIQUE_INDEXES)).mappings().all()
    tenant_tables = {t for t, has in tables.items() if has}
    assert {t for t, has in tables.items() if not has} == REFERENCE_TABLES
    assert {"facts", "entities", "relationships", "episodes", "episode_messages",
            "themes"} <= tenant_tables
    checked = 0
    for key in keys:
        if key["table_name"] not in tenant_tables:
            continue
        checked += 1
        assert key["columns"][0] == "tenant_id", dict(key)
        if key["kind"] == "f":
            assert key["referenced"][0] == "tenant_id", dict(key)
    for index in unique_indexes:
        if index["table_name"] in tenant_tables:
            checked += 1
            assert index["columns"][0] == "tenant_id", dict(index)
    # Every tenant table has a primary key, and the foreign keys exist (not vacuous).
    primary = {k["table_name"] for k in keys if k["kind"] == "p"}
    assert tenant_tables <= primary
    assert any(k["kind"] == "f" and k["table_name"] in tenant_tables for k in keys)
    assert checked >= len(tenant_tables)


async def test_the_citus_steps_distribute_every_tenant_table(pg_engine: Any) -> None:
    """docs/scaling.md lists one ``create_distributed_table`` per tenant table."""
    import re
    from pathlib import Path

    doc = (Path(__file__).parents[2] / "docs" / "scaling.md").read_text(encoding="utf-8")
    distributed = set(re.findall(r"create_distributed_table\('(\w+)', 'tenant_id'", doc))
    referenced = set(re.findall(r"create_reference_table\('(\w+)'\)", doc))
    async with pg_engine.connect() as conn:
        tables = {r[0]: r[1] for r in await conn.execute(_TABLES)}
    assert distributed == {t for t, has in tables.items() if has}
    assert referenced == REFERENCE_TABLES - {"alembic_version"}


def test_advisory_lock_key_leads_with_the_tenant() -> None:
    from cycgraph_memory.postgres._base import advisory_lock_key

    assert advisory_lock_key("acme", "consolidation").startswith("cycgraph:acme:")
    assert advisory_lock_key("a", "x") != advisory_lock_key("b", "x")

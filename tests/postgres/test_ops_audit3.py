"""Operator's view of the migrations: exact round trips, offline mode, an outdated schema.

* Every revision, upgraded and downgraded one step at a time, leaves the catalog exactly as
  it found it (tables, columns, indexes, constraints, triggers, function bodies and ACLs,
  policies, row-level security flags, extensions, schema metadata); upgrading twice changes
  nothing; ``downgrade base`` leaves only Alembic's empty ``alembic_version``.
* ``alembic upgrade head --sql`` is refused with one error line and prints no partial
  script (the revisions query the database they migrate).
* A database the service was not migrated for (a column the library names is missing)
  raises ``SchemaNotReadyError``, like a missing table, not a bare ``StorageError``.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from cycgraph_memory.errors import SchemaNotReadyError, StorageError

from ._records import fact

pytestmark = pytest.mark.postgres

REPO = Path(__file__).resolve().parents[2]

_CATALOG: dict[str, str] = {
    "relations": (
        "SELECT c.relname, c.relkind::text, c.relrowsecurity, c.relforcerowsecurity, "
        "c.reloptions::text, c.relacl::text FROM pg_class c "
        "WHERE c.relnamespace = 'public'::regnamespace "
        "AND c.relkind IN ('r', 'p', 'v', 'm', 'S', 'f')"
    ),
    "columns": (
        "SELECT c.relname, a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull, "
        "pg_get_expr(d.adbin, d.adrelid), a.attstorage::text, a.attidentity::text "
        "FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid "
        "LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum "
        "WHERE c.relnamespace = 'public'::regnamespace AND a.attnum > 0 "
        "AND NOT a.attisdropped AND c.relkind IN ('r', 'p', 'v', 'm')"
    ),
    "indexes": (
        "SELECT indexrelid::regclass::text, pg_get_indexdef(indexrelid) FROM pg_index i "
        "JOIN pg_class c ON c.oid = i.indrelid WHERE c.relnamespace = 'public'::regnamespace"
    ),
    "constraints": (
        "SELECT conrelid::regclass::text, conname, pg_get_constraintdef(oid) "
        "FROM pg_constraint WHERE connamespace = 'public'::regnamespace"
    ),
    "triggers": (
        "SELECT tgrelid::regclass::text, tgname, pg_get_triggerdef(oid) FROM pg_trigger "
        "WHERE NOT tgisinternal"
    ),
    "functions": (
        "SELECT p.oid::regprocedure::text, pg_get_functiondef(p.oid), p.prosecdef, "
        "p.proconfig::text, p.proacl::text FROM pg_proc p "
        "WHERE p.pronamespace = 'public'::regnamespace AND p.prokind IN ('f', 'p') "
        "AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.objid = p.oid "
        "AND d.deptype = 'e')"
    ),
    "policies": (
        "SELECT tablename, policyname, permissive, roles::text, cmd, qual, with_check "
        "FROM pg_policies"
    ),
    "extensions": "SELECT extname, extversion FROM pg_extension",
}


async def _catalog(engine: Any) -> dict[str, set[tuple[Any, ...]]]:
    out: dict[str, set[tuple[Any, ...]]] = {}
    async with engine.connect() as conn:
        for key, sql in _CATALOG.items():
            rows = await conn.execute(text(sql))
            # Alembic's own version table appears with the first upgrade and stays.
            out[key] = {tuple(r) for r in rows if not str(r[0]).startswith("alembic_version")}
        if (await conn.execute(text("SELECT to_regclass('schema_metadata')"))).scalar():
            rows = await conn.execute(text("SELECT key, value FROM schema_metadata"))
            out["metadata"] = {tuple(r) for r in rows}
        else:
            out["metadata"] = set()
    return out


def _differences(
    before: dict[str, set[tuple[Any, ...]]], after: dict[str, set[tuple[Any, ...]]]
) -> dict[str, tuple[list[str], list[str]]]:
    return {
        key: (
            sorted(map(str, before[key] - after[key])),
            sorted(map(str, after[key] - before[key])),
        )
        for key in before
        if before[key] != after[key]
    }


def _revisions() -> list[str]:
    from alembic.script import ScriptDirectory

    from cycgraph_memory.postgres.migrate import alembic_config

    script = ScriptDirectory.from_config(alembic_config())
    return [rev.revision for rev in reversed(list(script.walk_revisions()))]


async def test_every_revision_round_trips_the_whole_catalog(pg_databases: Any) -> None:
    from cycgraph_memory.postgres import create_engine_from_dsn, downgrade, upgrade

    engine = create_engine_from_dsn(await pg_databases.create("cycgraph_ops_steps"))
    try:
        empty = await _catalog(engine)
        previous, seen = "base", empty
        for revision in _revisions():
            await upgrade(engine, embedding_dim=16, revision=revision)
            at_revision = await _catalog(engine)
            await downgrade(engine, previous)
            assert _differences(seen, await _catalog(engine)) == {}, (
                f"downgrade {revision} -> {previous}"
            )
            await upgrade(engine, embedding_dim=16, revision=revision)
            assert _differences(at_revision, await _catalog(engine)) == {}, (
                f"re-upgrade to {revision}"
            )
            previous, seen = revision, at_revision
        await upgrade(engine, embedding_dim=16)  # at head already: nothing changes
        await upgrade(engine)
        assert _differences(seen, await _catalog(engine)) == {}

        await downgrade(engine)
        # Nothing left but Alembic's own (empty) version table; extensions as before.
        assert _differences(empty, await _catalog(engine)) == {}
        async with engine.connect() as conn:
            assert (await conn.execute(text("SELECT count(*) FROM alembic_version"))).scalar() == 0
    finally:
        await engine.dispose()


def test_offline_sql_mode_is_refused_before_printing(pg_server_dsn: str, tmp_path: Path) -> None:
    from sqlalchemy.engine import make_url

    from cycgraph_memory.postgres import create_engine_from_dsn

    async def admin(sql: str) -> None:
        engine = create_engine_from_dsn(pg_server_dsn, isolation_level="AUTOCOMMIT")
        async with engine.connect() as conn:
            await conn.execute(text(sql))
        await engine.dispose()

    name = f"cycgraph_ops_offline_{os.getpid()}"
    asyncio.run(admin(f'CREATE DATABASE "{name}"'))
    try:
        dsn = make_url(pg_server_dsn).set(database=name).render_as_string(hide_password=False)
        env = {**os.environ, "CYCGRAPH_MEMORY_DSN": dsn}
        cmd = [sys.executable, "-m", "alembic", "-c", str(REPO / "alembic.ini"),
               "upgrade", "head", "--sql"]
        done = subprocess.run(cmd, env=env, cwd=tmp_path, capture_output=True, text=True,
                              check=False)
        assert done.returncode != 0
        assert "Traceback" not in done.stderr, done.stderr
        # One line (alembic's "ERROR [alembic.util.messaging] ..." / "FAILED: ...").
        assert "offline mode (--sql) is not supported" in done.stderr, done.stderr
        # No partial script an operator could pipe into psql.
        assert "CREATE" not in done.stdout, done.stdout[:500]
    finally:
        asyncio.run(admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


@pytest.mark.parametrize("revision", ["0001", "0005"])
async def test_a_schema_behind_the_library_is_not_ready(
    pg_databases: Any, revision: str
) -> None:
    from cycgraph_memory.postgres import PostgresMemoryStore, create_engine_from_dsn, upgrade

    engine = create_engine_from_dsn(await pg_databases.create("cycgraph_ops_behind"))
    try:
        await upgrade(engine, embedding_dim=8, revision=revision)
        store = PostgresMemoryStore(engine, tenant_id="behind")
        # 0001 lacks facts.source_message_ids, 0005 facts.search_terms (0007, 0008).
        with pytest.raises(SchemaNotReadyError) as info:
            await store.put_fact(fact())
        assert info.value.sqlstate == "42703"
        assert "alembic upgrade head" in str(info.value)
        assert isinstance(info.value, StorageError)  # still a StorageError for callers
        await upgrade(engine)
        f = fact()
        await store.put_fact(f)
        assert await store.get_fact(f.id) == f
    finally:
        await engine.dispose()


async def test_a_schema_migrated_by_a_newer_release_is_refused_clearly(
    pg_databases: Any,
) -> None:
    """A revision this release does not ship: neither "upgrade" advice nor migrate=True."""
    from cycgraph_memory import Memory
    from cycgraph_memory.postgres import create_engine_from_dsn, upgrade

    dsn = await pg_databases.create("cycgraph_ops_newer")
    engine = create_engine_from_dsn(dsn)
    try:
        await upgrade(engine, embedding_dim=8)
        async with engine.begin() as conn:
            await conn.execute(text("UPDATE alembic_version SET version_num = '0999'"))
    finally:
        await engine.dispose()
    for migrate in (False, True):
        with pytest.raises(SchemaNotReadyError, match="newer release") as info:
            await Memory.open(dsn, tenant="t", migrate=migrate)
        assert "db upgrade" not in str(info.value)

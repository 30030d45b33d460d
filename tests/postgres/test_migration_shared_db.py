"""Downgrades in a database shared with an application: drop only what we created, atomically."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from sqlalchemy import text

from cycgraph_memory.errors import StorageError

from .test_migrations import TABLES, _tables

pytestmark = pytest.mark.postgres


async def _scalar(engine: Any, sql: str) -> Any:
    async with engine.connect() as conn:
        return (await conn.execute(text(sql))).scalar_one()


async def test_downgrade_leaves_a_shared_vector_extension_in_place(pg_databases: Any) -> None:
    """An application table using ``vector`` keeps the extension; our tables all go."""
    from cycgraph_memory.postgres import (
        create_engine_from_dsn,
        current_revision,
        downgrade,
        upgrade,
    )

    dsn = await pg_databases.create("cycgraph_shared")
    engine = create_engine_from_dsn(dsn)
    try:
        await upgrade(engine, embedding_dim=8)
        async with engine.begin() as conn:
            await conn.execute(text("CREATE TABLE app_items (id int PRIMARY KEY, v vector(3))"))
            await conn.execute(text("INSERT INTO app_items VALUES (1, '[1,2,3]')"))
        await downgrade(engine)
        assert await current_revision(engine) is None
        assert await _tables(engine) == {"app_items"}
        assert await _scalar(engine, "SELECT count(*) FROM pg_extension "
                                     "WHERE extname = 'vector'") == 1
        assert await _scalar(engine, "SELECT v::text FROM app_items") == "[1,2,3]"
        # And the schema comes back on top of the extension that stayed.
        await upgrade(engine, embedding_dim=8)
        assert await _tables(engine) == TABLES | {"app_items"}
    finally:
        await engine.dispose()


async def test_downgrade_keeps_an_extension_it_did_not_create(pg_databases: Any) -> None:
    """``vector`` installed before our first migration survives ``downgrade base``."""
    from cycgraph_memory.postgres import create_engine_from_dsn, downgrade, upgrade

    dsn = await pg_databases.create("cycgraph_preext")
    engine = create_engine_from_dsn(dsn)
    try:
        async with engine.begin() as conn:
            await conn.execute(text("CREATE EXTENSION vector"))
            await conn.execute(text("CREATE EXTENSION btree_gin"))
        await upgrade(engine, embedding_dim=8)
        await downgrade(engine)
        assert await _tables(engine) == set()
        assert await _scalar(engine, "SELECT count(*) FROM pg_extension "
                                     "WHERE extname IN ('vector', 'btree_gin')") == 2
    finally:
        await engine.dispose()


async def test_a_failing_downgrade_changes_nothing(pg_databases: Any) -> None:
    """All or nothing: a downgrade that cannot finish leaves every table and the revision."""
    from cycgraph_memory.postgres import (
        create_engine_from_dsn,
        current_revision,
        downgrade,
        upgrade,
    )

    dsn = await pg_databases.create("cycgraph_atomic")
    engine = create_engine_from_dsn(dsn)
    try:
        await upgrade(engine, embedding_dim=8)
        head = await current_revision(engine)
        async with engine.begin() as conn:
            # An application view on one of our tables: DROP TABLE entities must fail.
            await conn.execute(text("CREATE VIEW app_entities AS SELECT id FROM entities"))
        with pytest.raises(StorageError):
            await downgrade(engine)
        assert await current_revision(engine) == head
        assert await _tables(engine) == TABLES
    finally:
        await engine.dispose()


async def test_0007_widens_counters_and_removes_dangling_references(pg_databases: Any) -> None:
    """Facts written before 0007 may cite ids that do not exist: 0007 removes those once."""
    from cycgraph_memory.postgres import (
        PostgresMemoryStore,
        create_engine_from_dsn,
        downgrade,
        upgrade,
    )

    dsn = await pg_databases.create("cycgraph_0007")
    engine = create_engine_from_dsn(dsn)
    try:
        await upgrade(engine, embedding_dim=8, revision="0006")
        ent, ghost_ent, ep, ghost_ep, th, ghost_th = (str(uuid.uuid4()) for _ in range(6))
        f_ok, f_bad, f_other = (str(uuid.uuid4()) for _ in range(3))
        async with engine.begin() as conn:  # the test role bypasses row-level security
            for table, rid in (("entities", ent), ("episodes", ep), ("themes", th)):
                await conn.execute(text(_ROW[table]), {"t": "a", "id": rid, "prov": _PROV})
            for fid, tenant, entities, episodes, theme in (
                (f_ok, "a", [ent], [ep], th),
                (f_bad, "a", [ghost_ent, ent], [ghost_ep, ep], ghost_th),
                (f_other, "b", [ent], [ep], th),  # tenant a's ids, cited from tenant b
            ):
                await conn.execute(text(_FACT), {
                    "t": tenant, "id": fid, "e": entities, "p": episodes, "th": theme,
                    "n": 2**31 - 1, "prov": _PROV,
                })
        await upgrade(engine)
        a = PostgresMemoryStore(engine, tenant_id="a")
        b = PostgresMemoryStore(engine, tenant_id="b")
        ok, bad = (await a.get_fact(f_ok)), (await a.get_fact(f_bad))
        other = await b.get_fact(f_other)
        assert ok is not None and bad is not None and other is not None
        assert key(ok) == ([ent], [ep], th)
        assert key(bad) == ([ent], [ep], None)
        assert key(other) == ([], [], None)
        await a.touch_facts([f_ok])
        assert (await a.get_fact(f_ok)).access_count == 2**31  # bigint now
        await a.put_fact(bad)  # what is left is writable
        await downgrade(engine, "0006")  # clamps counters back into 32 bits
        assert await _scalar(engine, "SELECT max(access_count) FROM facts") == 2**31 - 1
    finally:
        await engine.dispose()


def key(f: Any) -> tuple[list[str], list[str], str | None]:
    theme = None if f.theme_id is None else str(f.theme_id)
    return [str(i) for i in f.entity_ids], [str(i) for i in f.source_episode_ids], theme


_PROV = '{"source": "agent", "created_at": "2026-01-01T00:00:00+00:00"}'
_ROW = {
    "entities": "INSERT INTO entities (tenant_id, id, name, entity_type, attributes, provenance,"
                " created_at, updated_at) VALUES (:t, CAST(:id AS uuid), 'n', 'person', '{}',"
                " CAST(:prov AS jsonb), now(), now())",
    "episodes": "INSERT INTO episodes (tenant_id, id, topic, started_at, ended_at, fact_ids,"
                " provenance) VALUES (:t, CAST(:id AS uuid), 'topic', now(), now(), '{}',"
                " CAST(:prov AS jsonb))",
    "themes": "INSERT INTO themes (tenant_id, id, label, description, fact_ids, provenance,"
              " created_at) VALUES (:t, CAST(:id AS uuid), 'l', '', '{}',"
              " CAST(:prov AS jsonb), now())",
}
_FACT = (
    "INSERT INTO facts (tenant_id, id, content, source_episode_ids, entity_ids, theme_id,"
    " provenance, valid_from, access_count, tags, source_message_ids) VALUES (:t,"
    " CAST(:id AS uuid), 'c', CAST(:p AS uuid[]), CAST(:e AS uuid[]), CAST(:th AS uuid),"
    " CAST(:prov AS jsonb), now(), :n, '{}', '{}')"
)

"""Downgrades in a database shared with an application: drop only what we created, atomically."""

from __future__ import annotations

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
        await upgrade(engine, embedding_dim=8)
        await downgrade(engine)
        assert await _tables(engine) == set()
        assert await _scalar(engine, "SELECT count(*) FROM pg_extension "
                                     "WHERE extname = 'vector'") == 1
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

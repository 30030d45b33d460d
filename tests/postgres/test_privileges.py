"""The README's "Database privileges" statements work: an owner migrates, an app role runs.

The two ```sql blocks of that README section are executed as written (with the role and
database names made unique for this run), then the owner role migrates and the application
role uses the store, the index and the entity-delete cascade, and is refused DDL.
"""

from __future__ import annotations

import re
import secrets
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from cycgraph_memory.errors import StorageError

from ._records import entity, fact, relationship, unit

pytestmark = pytest.mark.postgres

PAGE = Path(__file__).resolve().parents[2] / "docs" / "backends.md"


def _sql_blocks() -> list[str]:
    section = PAGE.read_text(encoding="utf-8").split("### Database privileges", 1)[1]
    section = re.split(r"^#{2,3} ", section, maxsplit=1, flags=re.M)[0]
    return re.findall(r"^```sql\n(.*?)^```", section, re.S | re.M)


def _statements(block: str) -> list[str]:
    lines = [ln for ln in block.splitlines() if not ln.strip().startswith("--")]
    return [s.strip() for s in "\n".join(lines).split(";") if s.strip()]


async def _execute(dsn: str, statements: list[str]) -> None:
    from cycgraph_memory.postgres import create_engine_from_dsn

    engine = create_engine_from_dsn(dsn, isolation_level="AUTOCOMMIT")
    try:
        async with engine.connect() as conn:
            for statement in statements:
                await conn.execute(text(statement))
    finally:
        await engine.dispose()


async def test_readme_privileges_owner_migrates_app_reads_and_writes(pg_server_dsn: str) -> None:
    from sqlalchemy.engine import make_url

    from cycgraph_memory.postgres import (
        PostgresMemoryIndex,
        PostgresMemoryStore,
        create_engine_from_dsn,
        upgrade,
    )

    blocks = _sql_blocks()
    assert len(blocks) == 2
    suffix = secrets.token_hex(4)
    names = {
        "cycgraph_owner": f"cycgraph_owner_{suffix}",
        "cycgraph_app": f"cycgraph_app_{suffix}",
    }

    def rename(block: str) -> str:
        for old, new in names.items():
            block = block.replace(old, new)
        # the database name last: it is a prefix of the role names
        return re.sub(r"\bcycgraph\b", f"cycgraph_priv_{suffix}", block)

    database = f"cycgraph_priv_{suffix}"
    url = make_url(pg_server_dsn)

    def dsn(user: str | None, password: str | None, db: str) -> str:
        u = url.set(database=db)
        if user is not None:
            u = u.set(username=user, password=password)
        return u.render_as_string(hide_password=False)

    try:
        await _execute(pg_server_dsn, _statements(rename(blocks[0])))
        await _execute(dsn(None, None, database), _statements(rename(blocks[1])))

        owner = create_engine_from_dsn(dsn(names["cycgraph_owner"], "change-me-owner", database))
        try:
            await upgrade(owner, embedding_dim=8)
        finally:
            await owner.dispose()

        app = create_engine_from_dsn(dsn(names["cycgraph_app"], "change-me-app", database))
        try:
            store = PostgresMemoryStore(app, tenant_id="svc")
            index = PostgresMemoryIndex(app, tenant_id="svc")
            a, b = entity(name="A"), entity(name="B")
            edge = relationship(a.id, b.id)
            f = fact(embedding=unit(1), tags=["lesson"])
            async with store.transaction():
                await store.put_entities([a, b])
                await store.put_relationship(edge)
                await store.put_fact(f)
            await store.touch_facts([f.id])
            hits = await index.search_facts(unit(1), limit=3)
            assert [h.item.id for h in hits] == [f.id]
            # Under row-level security, with the owner exempt and EXECUTE granted by
            # default: the GIN lookups go through migration 0016's functions.
            async with index._read() as session:
                assert await index._definer(session) is True
            found = await index.text_search_facts(f.content, limit=3)
            assert [h.item.id for h in found] == [f.id]
            assert await store.delete_entity(a.id) is True
            assert await store.get_relationship(edge.id) is None
            await store.clear()
            with pytest.raises(StorageError) as info:
                async with app.connect() as conn:
                    from cycgraph_memory.postgres._errors import translate_errors

                    with translate_errors():
                        await conn.execute(text("CREATE TABLE intruder (i int)"))
            assert info.value.sqlstate == "42501"  # insufficient privilege
        finally:
            await app.dispose()
    finally:
        cleanup: list[str] = [f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)']
        cleanup += [f'DROP ROLE IF EXISTS "{role}"' for role in names.values()]
        await _execute(pg_server_dsn, cleanup)


def test_readme_sql_blocks_are_found() -> None:
    blocks: list[Any] = _sql_blocks()
    assert len(blocks) == 2
    assert "CREATE EXTENSION IF NOT EXISTS vector" in blocks[1]

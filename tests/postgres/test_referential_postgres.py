"""Postgres specifics of relationship integrity: tenant-scoped foreign keys, revision 0002."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from sqlalchemy import text

from cycgraph_memory.errors import DanglingReferenceError

from ._records import entity, relationship

pytestmark = pytest.mark.postgres


async def test_edge_to_an_entity_of_another_tenant_is_refused(pg_make_store: Any) -> None:
    a, b = pg_make_store("tenant-a"), pg_make_store("tenant-b")
    mine, theirs = entity(name="mine"), entity(name="theirs")
    await a.put_entity(mine)
    await b.put_entity(theirs)
    edge = relationship(mine.id, theirs.id)
    with pytest.raises(DanglingReferenceError) as info:
        await a.put_relationship(edge)
    assert info.value.missing_ids == [theirs.id]
    assert await a.get_relationship(edge.id) is None


async def test_foreign_keys_back_the_check(pg_sessionmaker: Any, pg_tenant: str) -> None:
    """A row that skips the library's check is refused by the database (23503, translated)."""
    from cycgraph_memory.postgres._errors import translate_errors

    async with pg_sessionmaker() as session:
        with pytest.raises(DanglingReferenceError) as info, translate_errors():
            await session.execute(text(
                "INSERT INTO relationships (tenant_id, id, source_id, target_id, relation_type,"
                " weight, attributes, valid_from, provenance) VALUES (:t, :id, :s, :d, 'r', 1,"
                " '{}', now(), '{}')"
            ), {"t": pg_tenant, "id": uuid.uuid4(), "s": uuid.uuid4(), "d": uuid.uuid4()})
    assert info.value.sqlstate == "23503"


async def test_revision_0002_drops_dangling_edges_then_adds_the_keys(pg_databases: Any) -> None:
    from cycgraph_memory.postgres import create_engine_from_dsn, downgrade, upgrade

    dsn = await pg_databases.create("cycgraph_fk")
    engine = create_engine_from_dsn(dsn)
    e1, e2, ghost = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    insert_edge = text(
        "INSERT INTO relationships (tenant_id, id, source_id, target_id, relation_type, weight,"
        " attributes, valid_from, provenance) VALUES ('t', :id, :s, :d, 'r', 1, '{}', now(),"
        " '{}')"
    )
    kept, dangling = uuid.uuid4(), uuid.uuid4()
    try:
        await upgrade(engine, embedding_dim=4, revision="0001")
        async with engine.begin() as conn:
            for eid in (e1, e2):
                await conn.execute(text(
                    "INSERT INTO entities (tenant_id, id, name, entity_type, attributes,"
                    " provenance, created_at, updated_at) VALUES ('t', :id, 'n', 'x', '{}',"
                    " '{}', now(), now())"), {"id": eid})
            await conn.execute(insert_edge, {"id": kept, "s": e1, "d": e2})
            await conn.execute(insert_edge, {"id": dangling, "s": e1, "d": ghost})
        await upgrade(engine, revision="0002")
        async with engine.connect() as conn:
            ids = {r[0] for r in await conn.execute(text("SELECT id FROM relationships"))}
            fks = {r[0] for r in await conn.execute(text(
                "SELECT conname FROM pg_constraint WHERE contype = 'f'"
                " AND conrelid = 'relationships'::regclass"))}
        assert ids == {kept}
        assert fks == {"fk_relationships_tenant_id_source_id_entities",
                       "fk_relationships_tenant_id_target_id_entities"}
        async with engine.begin() as conn:
            await conn.execute(text("DELETE FROM entities WHERE id = :id"), {"id": e2})
            left = (await conn.execute(text("SELECT count(*) FROM relationships"))).scalar()
        assert left == 0  # ON DELETE CASCADE

        await downgrade(engine, revision="0001")
        async with engine.connect() as conn:
            fks = (await conn.execute(text(
                "SELECT count(*) FROM pg_constraint WHERE contype = 'f'"
                " AND conrelid = 'relationships'::regclass"))).scalar()
        assert fks == 0
    finally:
        await engine.dispose()

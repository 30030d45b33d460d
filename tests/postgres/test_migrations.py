"""Alembic migrations: upgrade/downgrade/re-upgrade, models agree, 3072-d halfvec schema."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from typing import Any

import pytest
from sqlalchemy import text

from cycgraph_memory.errors import (
    EmbeddingDimensionMismatchError,
    InvalidInputError,
    SchemaNotReadyError,
)

from ._records import fact

pytestmark = pytest.mark.postgres


TABLES = {"entities", "relationships", "episodes", "episode_messages", "facts", "themes",
          "schema_metadata", "outcome_runs", "outcome_run_facts", "gate_audit_log",
          "writer_keys", "text_search_corpora", "text_search_terms", "erasure_log",
          "ledger_erased_facts",
          "tenant_settings"}


def _head() -> str:
    from alembic.script import ScriptDirectory

    from cycgraph_memory.postgres.migrate import alembic_config

    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert head is not None
    return head


async def _tables(engine: Any) -> set[str]:
    async with engine.connect() as conn:
        rows = await conn.execute(text(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'public'"))
        return {r[0] for r in rows} - {"alembic_version"}


async def _meta(engine: Any) -> dict[str, str]:
    async with engine.connect() as conn:
        rows = await conn.execute(text("SELECT key, value FROM schema_metadata"))
        return {k: v for k, v in rows}


async def test_upgrade_downgrade_reupgrade(pg_databases: Any) -> None:
    from cycgraph_memory.postgres import (
        create_engine_from_dsn,
        current_revision,
        downgrade,
        upgrade,
    )

    dsn = await pg_databases.create("cycgraph_mig")
    engine = create_engine_from_dsn(dsn)
    try:
        assert await current_revision(engine) is None
        await upgrade(engine, embedding_dim=16)
        assert await current_revision(engine) == _head()
        assert await _tables(engine) == TABLES
        assert (await _meta(engine))["embedding_dim"] == "16"
        async with engine.connect() as conn:
            ext = (await conn.execute(text(
                "SELECT count(*) FROM pg_extension WHERE extname = 'vector'"))).scalar_one()
            idx = {r[0] for r in await conn.execute(text(
                "SELECT indexname FROM pg_indexes WHERE schemaname = 'public'"))}
        assert ext == 1
        assert {"ix_facts_embedding_hnsw", "ix_entities_embedding_hnsw",
                "ix_episodes_embedding_hnsw", "ix_themes_embedding_hnsw",
                "ix_facts_tenant_id_tags_gin", "ix_facts_tenant_id_entity_ids_gin",
                "ix_facts_tenant_id_search_terms_gin",
                "ix_episodes_tenant_id_search_terms_gin",
                "ix_episode_messages_tenant_id_search_terms_gin"} <= idx
        assert not {"ix_facts_tags_gin", "ix_facts_search_terms_gin"} & idx

        await downgrade(engine)
        assert await current_revision(engine) is None
        assert await _tables(engine) == set()
        async with engine.connect() as conn:
            ext = (await conn.execute(text(
                "SELECT count(*) FROM pg_extension WHERE extname IN ('vector', 'btree_gin')"
            ))).scalar_one()
        assert ext == 0  # both were installed by the migrations: both removed

        await upgrade(dsn)  # default dimension, DSN form
        assert (await _meta(engine))["embedding_dim"] == "384"
        assert await _tables(engine) == TABLES
    finally:
        await engine.dispose()


async def test_models_and_migrations_agree(pg_engine: Any) -> None:
    """The ``alembic check`` equivalent on the session database (migrated to head)."""
    from alembic import command

    from cycgraph_memory.postgres.migrate import alembic_config

    def check(sync_conn: Any) -> None:
        command.check(alembic_config(connection=sync_conn))

    async with pg_engine.connect() as conn:
        await conn.run_sync(check)


async def test_unmigrated_database_raises_schema_not_ready(pg_databases: Any) -> None:
    from cycgraph_memory.postgres import (
        PostgresMemoryIndex,
        PostgresMemoryStore,
        create_engine_from_dsn,
    )

    dsn = await pg_databases.create("cycgraph_empty")
    engine = create_engine_from_dsn(dsn)
    try:
        store = PostgresMemoryStore(engine)
        with pytest.raises(SchemaNotReadyError) as info:
            await store.find_facts()
        assert info.value.sqlstate == "42P01"
        assert "alembic upgrade head" in str(info.value)
        with pytest.raises(SchemaNotReadyError):
            await store.put_fact(fact())
        with pytest.raises(SchemaNotReadyError):
            await PostgresMemoryIndex(engine).search_facts([0.0] * 8)
    finally:
        await engine.dispose()


async def test_wide_schema_uses_halfvec_hnsw(pg_databases: Any) -> None:
    from cycgraph_memory.postgres import (
        PostgresMemoryIndex,
        PostgresMemoryStore,
        create_engine_from_dsn,
        upgrade,
    )
    from cycgraph_memory.postgres.index import distance_expr
    from cycgraph_memory.postgres.store import FACTS

    dim = 3072
    dsn = await pg_databases.create("cycgraph_3072")
    engine = create_engine_from_dsn(dsn)
    try:
        await upgrade(engine, embedding_dim=dim)
        async with engine.connect() as conn:
            defs = {r[0]: r[1] for r in await conn.execute(text(
                "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'facts'"))}
        assert "ix_facts_embedding_hnsw" not in defs
        halfvec = defs["ix_facts_embedding_hnsw_halfvec"]
        assert "hnsw" in halfvec and "halfvec(3072)" in halfvec
        assert "halfvec_cosine_ops" in halfvec

        store = PostgresMemoryStore(engine, tenant_id="wide")
        index = PostgresMemoryIndex(engine, tenant_id="wide")
        facts = []
        for i in range(20):
            v = [0.0] * dim
            v[i] = 1.0
            v[(i + 1) % dim] = 0.5
            facts.append(fact(embedding=v))
        await store.put_facts(facts)
        q = [0.0] * dim
        q[3] = 1.0
        res = await index.search_facts(q, limit=3)
        assert res[0].item.id == facts[3].id
        with pytest.raises(EmbeddingDimensionMismatchError):
            await index.search_facts([1.0] * 8)

        # The query expression the index builds must match the expression index.
        from sqlalchemy import select
        from sqlalchemy.dialects import postgresql

        stmt = select(FACTS.c.id).order_by(distance_expr(FACTS, q, dim)).limit(5)
        sql = str(stmt.compile(dialect=postgresql.dialect(),
                               compile_kwargs={"literal_binds": True}))
        async with engine.connect() as conn:
            await conn.execute(text("SET enable_seqscan = off"))
            plan = "\n".join((await conn.execute(text("EXPLAIN " + sql))).scalars().all())
        assert "ix_facts_embedding_hnsw_halfvec" in plan, plan
    finally:
        await engine.dispose()


def test_alembic_cli_uses_env_dsn(pg_server_dsn: str, tmp_path: Any) -> None:
    """``alembic -x embedding_dim=N upgrade head`` with the DSN from -x dsn / the env var."""
    import asyncio

    from sqlalchemy.engine import make_url

    from cycgraph_memory.postgres import create_engine_from_dsn

    async def admin(sql: str) -> None:
        engine = create_engine_from_dsn(pg_server_dsn, isolation_level="AUTOCOMMIT")
        async with engine.connect() as conn:
            await conn.execute(text(sql))
        await engine.dispose()

    name = f"cycgraph_cli_{os.getpid()}"
    asyncio.run(admin(f'CREATE DATABASE "{name}"'))
    try:
        dsn = make_url(pg_server_dsn).set(database=name).render_as_string(hide_password=False)
        repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        alembic = [sys.executable, "-m", "alembic", "-c", os.path.join(repo, "alembic.ini")]
        env = {**os.environ, "CYCGRAPH_MEMORY_DSN": dsn}
        subprocess.run([*alembic, "-x", "embedding_dim=32", "upgrade", "head"],
                       check=True, env=env, capture_output=True, cwd=tmp_path)
        out = subprocess.run([*alembic, "-x", f"dsn={dsn}", "current"], check=True,
                             capture_output=True, text=True, env=os.environ, cwd=tmp_path)
        assert _head() in out.stdout
        subprocess.run([*alembic, "-x", f"dsn={dsn}", "check"], check=True,
                       capture_output=True, cwd=tmp_path)
        subprocess.run([*alembic, "downgrade", "base"], check=True, env=env,
                       capture_output=True, cwd=tmp_path)
    finally:
        asyncio.run(admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


def test_migrations_dir_found() -> None:
    from cycgraph_memory.postgres import migrations_dir

    d = migrations_dir()
    assert (d / "env.py").is_file() and (d / "versions" / "0001_initial.py").is_file()


async def test_hnsw_build_parameters_are_a_migration_option(pg_databases: Any) -> None:
    from cycgraph_memory.postgres import create_engine_from_dsn, current_revision, upgrade

    dsn = await pg_databases.create("cycgraph_hnsw")
    engine = create_engine_from_dsn(dsn)
    try:
        with pytest.raises(InvalidInputError, match="hnsw_ef_construction"):
            await upgrade(engine, embedding_dim=8, hnsw_m=16, hnsw_ef_construction=20)
        assert await current_revision(engine) is None  # nothing half-created
        assert await _tables(engine) == set()

        await upgrade(engine, embedding_dim=8, hnsw_m=12, hnsw_ef_construction=40)
        meta = await _meta(engine)
        assert (meta["hnsw_m"], meta["hnsw_ef_construction"]) == ("12", "40")
        async with engine.connect() as conn:
            defs = [r[0] for r in await conn.execute(text(
                "SELECT indexdef FROM pg_indexes WHERE indexname LIKE '%embedding_hnsw%'"))]
        assert len(defs) == 5  # entities, episodes, facts, themes, episode_messages
        assert all("m='12'" in d and "ef_construction='40'" in d for d in defs), defs
    finally:
        await engine.dispose()


_STORAGE = """
SELECT c.relname, a.attstorage::text FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
WHERE a.attname = 'embedding' AND c.relkind = 'r'
  AND c.relnamespace = 'public'::regnamespace
"""


async def test_vectors_are_stored_inline_and_the_downgrade_restores_external(
    pg_databases: Any,
) -> None:
    """Revision 0014: theme, entity, episode and message vectors ``MAIN`` (in the row),
    facts ``EXTERNAL`` (room for HOT touches); ``EXTERNAL`` everywhere below it. A theme
    of 384 dimensions listing 40 facts then keeps its vector out of the TOAST table."""
    from cycgraph_memory.postgres import (
        PostgresMemoryStore,
        create_engine_from_dsn,
        downgrade,
        upgrade,
    )
    from cycgraph_memory.records import Provenance, Theme

    inline = {"themes", "entities", "episodes", "episode_messages"}
    dsn = await pg_databases.create("cycgraph_mig")
    engine = create_engine_from_dsn(dsn)
    try:
        await upgrade(engine, embedding_dim=384)
        async with engine.connect() as conn:
            storage = dict((await conn.execute(text(_STORAGE))).all())
        assert storage == {**dict.fromkeys(inline, "m"), "facts": "e"}

        store = PostgresMemoryStore(engine, tenant_id="t")

        def theme() -> Theme:
            return Theme(label="a theme", fact_ids=[uuid.uuid4() for _ in range(40)],
                         embedding=[0.05] * 384, provenance=Provenance(source="agent"))

        first = theme()
        await store.put_themes([first])
        query = text(
            "SELECT pg_column_toast_chunk_id(embedding) IS NULL FROM themes WHERE id = :i"
        )
        async with engine.connect() as conn:
            assert (await conn.execute(query, {"i": first.id})).scalar_one()

        await downgrade(engine, "0013")
        async with engine.connect() as conn:
            storage = dict((await conn.execute(text(_STORAGE))).all())
        assert storage == dict.fromkeys({*inline, "facts"}, "e")
        # Below 0014 the same row's vector goes to the TOAST table (the row is long enough).
        second = theme()
        await store.put_themes([second])
        async with engine.connect() as conn:
            assert not (await conn.execute(query, {"i": second.id})).scalar_one()
    finally:
        await engine.dispose()


async def test_name_key_column_is_filled_from_existing_entities(pg_databases: Any) -> None:
    """Revision 0017 writes ``normalize_entity_name(name)`` of the entities already stored
    (every tenant, row-level security forced on the table), and its downgrade restores
    revision 0016's expression index. Below 0017 'Straße' was not found by its key."""
    from cycgraph_memory.normalize import normalize_entity_name
    from cycgraph_memory.postgres import (
        PostgresMemoryStore,
        create_engine_from_dsn,
        downgrade,
        upgrade,
    )
    from cycgraph_memory.records import Entity, Provenance

    dsn = await pg_databases.create("cycgraph_mig")
    engine = create_engine_from_dsn(dsn)
    names = ["Straße", "The Acme, Corp.", "Ⅻ Club", "ΣΊΣΥΦΟΣ"]
    try:
        await upgrade(engine, embedding_dim=8)
        await downgrade(engine, "0016")
        stored: dict[str, list[Entity]] = {}
        for tenant in ("t1", "t2"):
            stored[tenant] = [
                Entity(name=n, entity_type="organization", provenance=Provenance(source="agent"))
                for n in names
            ]
            async with engine.begin() as conn:  # below 0017 the store cannot write them
                await conn.execute(text("SELECT set_config('cycgraph.tenant_id', :t, true)"),
                                   {"t": tenant})
                for e in stored[tenant]:
                    await conn.execute(text(
                        "INSERT INTO entities (tenant_id, id, name, entity_type, attributes, "
                        "provenance, created_at, updated_at) VALUES (:t, :i, :n, "
                        "'organization', '{}', CAST(:p AS jsonb), now(), now())"
                    ), {"t": tenant, "i": e.id, "n": e.name,
                        "p": e.provenance.model_dump_json()})
        await upgrade(engine)
        async with engine.connect() as conn:
            forced = (await conn.execute(text(
                "SELECT relforcerowsecurity FROM pg_class WHERE oid = 'entities'::regclass"
            ))).scalar_one()
            keys = sorted((await conn.execute(text(
                "SELECT tenant_id, name, name_key FROM entities"))).all())
        assert forced
        assert keys == sorted(
            (t, n, normalize_entity_name(n)) for t in ("t1", "t2") for n in names
        )
        for tenant in ("t1", "t2"):
            store = PostgresMemoryStore(engine, tenant_id=tenant)
            found = await store.find_entities_by_name_keys(
                [("strasse", "organization"), ("acme corp", "organization")]
            )
            assert {e.id for e in found} == {stored[tenant][0].id, stored[tenant][1].id}

        await downgrade(engine, "0016")
        async with engine.connect() as conn:
            definition = (await conn.execute(text(
                "SELECT indexdef FROM pg_indexes "
                "WHERE indexname = 'ix_entities_tenant_id_entity_type_name_key'"
            ))).scalar_one()
            columns = {r[0] for r in await conn.execute(text(
                "SELECT column_name FROM information_schema.columns "
                "WHERE table_name = 'entities'"))}
        assert "regexp_replace" in definition
        assert "name_key" not in columns
    finally:
        await engine.dispose()

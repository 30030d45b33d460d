"""``alembic upgrade head`` says what it does, and refuses to change the embedding width."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from cycgraph_memory.errors import EmbeddingDimensionMismatchError

pytestmark = pytest.mark.postgres

REPO = Path(__file__).resolve().parents[2]


async def _meta(engine: Any) -> dict[str, str]:
    async with engine.connect() as conn:
        return {k: v for k, v in await conn.execute(text("SELECT key, value FROM schema_metadata"))}


async def test_upgrade_refuses_another_dimension(pg_databases: Any) -> None:
    from cycgraph_memory.postgres import create_engine_from_dsn, current_revision, upgrade

    dsn = await pg_databases.create("cycgraph_dim")
    engine = create_engine_from_dsn(dsn)
    try:
        await upgrade(engine, embedding_dim=16)
        head = await current_revision(engine)
        with pytest.raises(EmbeddingDimensionMismatchError) as info:
            await upgrade(engine, embedding_dim=32)
        err = info.value
        assert (err.expected, err.actual) == (16, 32)
        message = str(err)
        assert "created with 16" in message
        assert "alembic downgrade base" in message
        assert "-x embedding_dim=32 upgrade head" in message
        assert (await _meta(engine))["embedding_dim"] == "16"
        assert await current_revision(engine) == head
        # The recorded dimension (or no dimension at all) is accepted.
        await upgrade(engine, embedding_dim=16)
        await upgrade(engine)
        assert (await _meta(engine))["embedding_dim"] == "16"
    finally:
        await engine.dispose()


def _alembic(*args: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "alembic", "-c", str(REPO / "alembic.ini"), *args]
    return subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, check=False)


def test_cli_logs_and_refuses_another_dimension(pg_server_dsn: str, tmp_path: Path) -> None:
    from sqlalchemy.engine import make_url

    from cycgraph_memory.postgres import create_engine_from_dsn

    async def admin(sql: str) -> None:
        engine = create_engine_from_dsn(pg_server_dsn, isolation_level="AUTOCOMMIT")
        async with engine.connect() as conn:
            await conn.execute(text(sql))
        await engine.dispose()

    name = f"cycgraph_cli_dim_{os.getpid()}"
    asyncio.run(admin(f'CREATE DATABASE "{name}"'))
    try:
        dsn = make_url(pg_server_dsn).set(database=name).render_as_string(hide_password=False)
        env = {**os.environ, "CYCGRAPH_MEMORY_DSN": dsn}
        first = _alembic("-x", "embedding_dim=24", "upgrade", "head", env=env, cwd=tmp_path)
        assert first.returncode == 0, first.stderr
        # env.py configures logging from alembic.ini: every revision applied is printed.
        assert "Running upgrade  -> 0001" in first.stderr, first.stderr
        assert "Running upgrade 0001 -> 0002" in first.stderr, first.stderr

        again = _alembic("-x", "embedding_dim=48", "upgrade", "head", env=env, cwd=tmp_path)
        assert again.returncode != 0
        # One clear line (alembic's "ERROR ..."/"FAILED: ..."), not a traceback.
        assert "Traceback" not in again.stderr, again.stderr
        assert "embedding dimension mismatch" in again.stderr
        assert "created with 24" in again.stderr
        assert "alembic downgrade base" in again.stderr

        same = _alembic("upgrade", "head", env=env, cwd=tmp_path)
        assert same.returncode == 0, same.stderr
    finally:
        asyncio.run(admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))

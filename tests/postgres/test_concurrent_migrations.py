"""Migrations under concurrent deploys: N replicas migrating one fresh database together."""

from __future__ import annotations

import asyncio
import os
import sys
from typing import Any

import pytest
from sqlalchemy import text

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

_UPGRADE = (
    "import asyncio, sys\n"
    "from cycgraph_memory.postgres import upgrade\n"
    "asyncio.run(upgrade(sys.argv[1], embedding_dim=16))\n"
)


def _head() -> str:
    from alembic.script import ScriptDirectory

    from cycgraph_memory.postgres.migrate import alembic_config

    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert head is not None
    return head


async def _schema_state(dsn: str) -> tuple[list[str], int, str]:
    from cycgraph_memory.postgres import create_engine_from_dsn

    engine = create_engine_from_dsn(dsn)
    try:
        async with engine.connect() as conn:
            versions = [r[0] for r in await conn.execute(text(
                "SELECT version_num FROM alembic_version"))]
            policies = (await conn.execute(text(
                "SELECT count(*) FROM pg_policies WHERE policyname = "
                "'cycgraph_tenant_isolation'"))).scalar_one()
            dim = (await conn.execute(text(
                "SELECT value FROM schema_metadata WHERE key = 'embedding_dim'"))).scalar_one()
        return versions, int(policies), str(dim)
    finally:
        await engine.dispose()


async def test_four_processes_migrate_one_fresh_database(
    pg_databases: Any, tmp_path: Any
) -> None:
    dsn = await pg_databases.create("cycgraph_deploy")
    alembic = [sys.executable, "-m", "alembic", "-c", os.path.join(REPO, "alembic.ini"),
               "-x", f"dsn={dsn}", "-x", "embedding_dim=16", "upgrade", "head"]
    commands = [
        [sys.executable, "-c", _UPGRADE, dsn],
        alembic,
        [sys.executable, "-c", _UPGRADE, dsn],
        alembic,
    ]
    procs = [
        await asyncio.create_subprocess_exec(
            *cmd, cwd=str(tmp_path), stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        for cmd in commands
    ]
    outputs = await asyncio.gather(*(p.communicate() for p in procs))
    for proc, (_, err) in zip(procs, outputs, strict=True):
        assert proc.returncode == 0, err.decode()[-2000:]
    versions, policies, dim = await _schema_state(dsn)
    assert versions == [_head()]
    assert policies >= 6  # one policy per tenant table, created once
    assert dim == "16"


async def test_two_upgrades_in_one_process(pg_databases: Any) -> None:
    from cycgraph_memory.postgres import create_engine_from_dsn, current_revision, upgrade

    dsn = await pg_databases.create("cycgraph_deploy")
    engine = create_engine_from_dsn(dsn)
    try:
        await asyncio.wait_for(
            asyncio.gather(upgrade(engine, embedding_dim=16), upgrade(dsn, embedding_dim=16)),
            timeout=120,
        )
        assert await current_revision(engine) == _head()
    finally:
        await engine.dispose()
    versions, _, _ = await _schema_state(dsn)
    assert versions == [_head()]

"""Engine helpers, import hygiene and SQLSTATE translation."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest
from sqlalchemy import text

from cycgraph_memory.errors import (
    ConcurrencyError,
    ConnectionLostError,
    DanglingReferenceError,
    DuplicateRecordError,
    IntegrityViolationError,
    InvalidInputError,
    SchemaNotReadyError,
    StatementTimeoutError,
    StorageError,
)


def test_root_import_does_not_pull_sqlalchemy() -> None:
    code = (
        "import sys, cycgraph_memory\n"
        "bad = [m for m in ('sqlalchemy', 'asyncpg', 'pgvector', 'alembic') if m in sys.modules]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_asyncpg_url_forms() -> None:
    from cycgraph_memory.postgres import asyncpg_url

    u = asyncpg_url("postgresql://postgres:@/postgres?host=/tmp/pg sock")
    assert u.drivername == "postgresql+asyncpg" and u.query["host"] == "/tmp/pg sock"
    assert asyncpg_url("postgres://u:p@h:5433/db").port == 5433
    assert asyncpg_url("postgresql+asyncpg://u@h/db").database == "db"
    with pytest.raises(InvalidInputError):
        asyncpg_url("mysql://u@h/db")
    with pytest.raises(InvalidInputError):
        asyncpg_url("::::not a url")


def test_dsn_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    from cycgraph_memory.postgres import DSN_ENV_VAR, dsn_from_env

    assert DSN_ENV_VAR == "CYCGRAPH_MEMORY_DSN"
    monkeypatch.delenv(DSN_ENV_VAR, raising=False)
    with pytest.raises(InvalidInputError):
        dsn_from_env()
    monkeypatch.setenv(DSN_ENV_VAR, "postgresql://u@h/db")
    assert dsn_from_env() == "postgresql://u@h/db"


@pytest.mark.postgres
async def test_server_dsn_connects_over_unix_socket(pg_server_dsn: str) -> None:
    from cycgraph_memory.postgres import create_engine_from_dsn

    engine = create_engine_from_dsn(pg_server_dsn)
    try:
        async with engine.connect() as conn:
            assert (await conn.execute(text("SELECT 1"))).scalar_one() == 1
    finally:
        await engine.dispose()


class _Orig(Exception):
    def __init__(self, sqlstate: str) -> None:
        super().__init__(f"boom {sqlstate}")
        self.sqlstate = sqlstate


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        ("23505", DuplicateRecordError),
        ("23503", DanglingReferenceError),
        ("23502", IntegrityViolationError),
        ("40001", ConcurrencyError),
        ("40P01", ConcurrencyError),
        ("42P01", SchemaNotReadyError),
        ("57014", StatementTimeoutError),
        ("55P03", StatementTimeoutError),
        ("08006", ConnectionLostError),
        ("57P01", ConnectionLostError),
        ("42501", StorageError),
    ],
)
def test_sqlstate_translation(code: str, expected: type[Exception]) -> None:
    from sqlalchemy.exc import DBAPIError

    from cycgraph_memory.postgres._errors import translate_errors

    with pytest.raises(expected) as info, translate_errors():
        raise DBAPIError("SELECT 1", {}, _Orig(code))
    assert type(info.value) is expected
    assert info.value.sqlstate == code  # type: ignore[attr-defined]


def test_non_db_errors_pass_through() -> None:
    from cycgraph_memory.postgres._errors import translate_errors

    with pytest.raises(KeyError), translate_errors():
        raise KeyError("x")


@pytest.mark.postgres
async def test_real_integrity_error_is_translated(pg_sessionmaker: Any) -> None:
    """A NOT NULL violation raised by the server reaches callers as a library error."""
    from cycgraph_memory.postgres._errors import translate_errors

    with pytest.raises(IntegrityViolationError) as info, translate_errors():
        async with pg_sessionmaker() as s, s.begin():
            await s.execute(text("INSERT INTO schema_metadata (key, value) VALUES ('k', NULL)"))
    assert info.value.sqlstate == "23502"

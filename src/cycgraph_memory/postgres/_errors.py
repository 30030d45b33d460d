"""Translate driver and SQLAlchemy errors into the library's error tree, by SQLSTATE.

Nothing above :mod:`cycgraph_memory.postgres` sees a SQLAlchemy or asyncpg exception:

* ``23505`` -> :class:`~cycgraph_memory.errors.DuplicateRecordError`
* ``23503`` -> :class:`~cycgraph_memory.errors.DanglingReferenceError`
* other ``23xxx`` -> :class:`~cycgraph_memory.errors.IntegrityViolationError`
* ``40001`` / ``40P01`` -> :class:`~cycgraph_memory.errors.ConcurrencyError`
* ``CG001`` (append-only table changed) -> :class:`~cycgraph_memory.errors.AppendOnlyViolationError`
* class ``08``, ``57P01``-``57P03`` and socket-level failures ->
  :class:`~cycgraph_memory.errors.ConnectionLostError`
* ``57014`` / ``55P03`` (statement or lock timeout) ->
  :class:`~cycgraph_memory.errors.StatementTimeoutError`
* ``42P01`` (undefined table) and ``42703`` (undefined column: a schema older than the
  library, e.g. the service upgraded without ``alembic upgrade head``) ->
  :class:`~cycgraph_memory.errors.SchemaNotReadyError`
* anything else database-related -> :class:`~cycgraph_memory.errors.StorageError`
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy.exc import DBAPIError, SQLAlchemyError

from cycgraph_memory.errors import (
    AppendOnlyViolationError,
    ConcurrencyError,
    ConnectionLostError,
    CycgraphMemoryError,
    DanglingReferenceError,
    DuplicateRecordError,
    IntegrityViolationError,
    SchemaNotReadyError,
    StatementTimeoutError,
    StorageError,
)

__all__ = ["APPEND_ONLY_SQLSTATE", "sqlstate_of", "translate_errors", "translated"]

APPEND_ONLY_SQLSTATE = "CG001"
"""SQLSTATE raised by the trigger that keeps the gate audit log append-only."""

_SCHEMA_HINT = "run alembic upgrade head (or cycgraph_memory.postgres.upgrade)"

# undefined_table, undefined_column: a table or column the library's statements name is
# missing, i.e. the database was not migrated to the library's revision.
_SCHEMA_BEHIND = frozenset({"42P01", "42703"})


def sqlstate_of(exc: BaseException) -> str | None:
    """Return the SQLSTATE carried by ``exc`` or its driver-level cause, if any."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        code = getattr(current, "sqlstate", None)
        if isinstance(code, str) and code:
            return code
        if isinstance(current, DBAPIError) and current.orig is not None:
            current = current.orig
            continue
        current = current.__cause__
    return None


def translated(exc: BaseException) -> CycgraphMemoryError:
    """Map a database exception to the matching :class:`CycgraphMemoryError`."""
    code = sqlstate_of(exc)
    detail = str(exc.orig if isinstance(exc, DBAPIError) and exc.orig is not None else exc)
    detail = detail.splitlines()[0] if detail else type(exc).__name__
    if code == "23505":
        return DuplicateRecordError(detail, sqlstate=code)
    if code == "23503":
        return DanglingReferenceError(detail, sqlstate=code)
    if code is not None and code.startswith("23"):
        return IntegrityViolationError(detail, sqlstate=code)
    if code == APPEND_ONLY_SQLSTATE:
        return AppendOnlyViolationError(detail, sqlstate=code)
    if code in ("40001", "40P01"):
        return ConcurrencyError(detail, sqlstate=code)
    if code in ("57014", "55P03"):
        return StatementTimeoutError(detail, sqlstate=code)
    if (code is not None and (code.startswith("08") or code in _SERVER_GONE)) or (
        code is None and _is_connection_loss(exc)
    ):
        return ConnectionLostError(detail, sqlstate=code)
    if code in _SCHEMA_BEHIND:
        return SchemaNotReadyError(f"schema not ready ({detail}): {_SCHEMA_HINT}", sqlstate=code)
    return StorageError(detail, sqlstate=code)


def _is_connection_loss(exc: BaseException) -> bool:
    """True when ``exc`` (or a cause) is a socket-level failure or a dropped connection."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, OSError | ConnectionError):
            return True
        if type(current).__name__ in _CONNECTION_ERROR_NAMES:
            return True
        if isinstance(current, DBAPIError) and current.connection_invalidated:
            return True
        nxt = current.orig if isinstance(current, DBAPIError) else None
        current = nxt if nxt is not None else current.__cause__
    return False


# admin_shutdown, crash_shutdown, cannot_connect_now: the server went away or is restarting.
_SERVER_GONE = frozenset({"57P01", "57P02", "57P03"})

# asyncpg's names for a connection that is gone (matched by class, not by message text).
_CONNECTION_ERROR_NAMES = frozenset({"ConnectionDoesNotExistError", "ConnectionFailureError"})


@contextmanager
def translate_errors() -> Iterator[None]:
    """Re-raise database errors raised inside the block as library errors."""
    try:
        yield
    except CycgraphMemoryError:
        raise
    except (SQLAlchemyError, OSError) as exc:
        raise translated(exc) from exc
    except Exception as exc:
        if type(exc).__module__.startswith("asyncpg"):
            raise translated(exc) from exc
        raise

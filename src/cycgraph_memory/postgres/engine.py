"""Engine helpers: build an ``AsyncEngine`` from a DSN; read the DSN from the environment.

The library never reads the environment at import time; :func:`dsn_from_env` exists for
applications, the CLI, the demo and test fixtures to call explicitly.
"""

from __future__ import annotations

import json
import json.scanner
import os
from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import DisconnectionError
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from cycgraph_memory.errors import InvalidInputError

__all__ = ["DSN_ENV_VAR", "asyncpg_url", "create_engine_from_dsn", "dsn_from_env"]

DSN_ENV_VAR = "CYCGRAPH_MEMORY_DSN"
"""Environment variable holding the Postgres DSN for applications and the CLI."""

_ACCEPTED_DRIVERS = {"postgresql", "postgres", "postgresql+asyncpg"}

# libpq's ``sslmode`` values; asyncpg's ``ssl`` takes the same words.
_SSL_MODES = frozenset({"disable", "allow", "prefer", "require", "verify-ca", "verify-full"})

# libpq connection parameters asyncpg has no keyword for: SQLAlchemy would hand them to
# ``asyncpg.connect`` as keywords, which fails with a bare TypeError at the first connect.
_UNSUPPORTED_LIBPQ_PARAMS = frozenset({
    "options", "sslcert", "sslkey", "sslrootcert", "sslcrl", "sslcrldir", "sslpassword",
    "sslcompression", "sslsni", "ssl_min_protocol_version", "ssl_max_protocol_version",
    "sslnegotiation", "channel_binding", "requirepeer", "gssencmode", "gssdelegation",
    "keepalives", "keepalives_idle", "keepalives_interval", "keepalives_count",
    "tcp_user_timeout", "fallback_application_name", "replication", "client_encoding",
    "hostaddr", "require_auth", "load_balance_hosts",
})


def asyncpg_url(dsn: str | URL) -> URL:
    """Return ``dsn`` as a ``postgresql+asyncpg`` SQLAlchemy URL.

    Accepts ``postgresql://``, ``postgres://`` and ``postgresql+asyncpg://`` URLs, including
    the unix-socket form the embedded server reports
    (``postgresql://postgres:@/postgres?host=/path/to/dir``): SQLAlchemy's asyncpg dialect
    passes the ``host`` query parameter through, and asyncpg treats a host starting with
    ``/`` as a socket directory.

    libpq's ``sslmode=MODE`` becomes asyncpg's ``ssl=MODE`` (same six modes). Two more
    libpq parameters, ``connect_timeout`` and ``application_name``, are applied by
    :func:`create_engine_from_dsn` (asyncpg takes them as connect arguments).

    Raises:
        InvalidInputError: The DSN cannot be parsed, names another database driver, has
            an ``sslmode`` that is not a libpq mode (or contradicts its ``ssl``), a
            libpq parameter asyncpg cannot take (``sslrootcert``, ``options``, ...: pass
            ``connect_args`` such as ``{"ssl": ssl_context}`` instead), or any other
            query parameter ``asyncpg.connect`` cannot take as text (numbers and flags
            such as ``timeout`` go in ``connect_args``).
    """
    try:
        url = make_url(dsn) if isinstance(dsn, str) else dsn
    except Exception as exc:
        raise InvalidInputError(f"cannot parse Postgres DSN: {exc}") from None
    if url.drivername not in _ACCEPTED_DRIVERS:
        raise InvalidInputError(
            f"unsupported DSN driver {url.drivername!r}; use postgresql:// or "
            "postgresql+asyncpg://"
        )
    unsupported = sorted(_UNSUPPORTED_LIBPQ_PARAMS.intersection(url.query))
    if unsupported:
        raise InvalidInputError(
            f"DSN parameter(s) {', '.join(unsupported)} are not supported by the asyncpg "
            "driver; pass the equivalent through connect_args (e.g. "
            '{"ssl": ssl.SSLContext} for certificates, {"server_settings": {...}} for '
            "options)"
        )
    if "sslmode" in url.query:
        mode = url.query["sslmode"]
        if not isinstance(mode, str) or mode not in _SSL_MODES:
            raise InvalidInputError(
                f"sslmode must be one of {', '.join(sorted(_SSL_MODES))}, got {mode!r}"
            )
        if "ssl" in url.query and url.query["ssl"] != mode:
            raise InvalidInputError(
                f"DSN sets sslmode={mode!r} and ssl={url.query['ssl']!r}; keep one"
            )
        url = url.difference_update_query(["sslmode"]).update_query_dict({"ssl": mode})
    # libpq's connect_timeout / application_name: applied by create_engine_from_dsn.
    accepted = _connect_parameters() | {"connect_timeout", "application_name"}
    for name in url.query:
        if name not in accepted:
            raise InvalidInputError(
                f"unsupported DSN parameter {name!r}; a DSN may carry "
                f"{', '.join(sorted(accepted))} (others go in connect_args)"
            )
    return url.set(drivername="postgresql+asyncpg")


def _connect_parameters() -> frozenset[str]:
    """The DSN query parameters that reach ``asyncpg.connect`` as usable keyword arguments.

    SQLAlchemy's asyncpg dialect passes every query parameter on as a keyword argument,
    as text (it converts ``port`` and ``prepared_statement_cache_size`` only): one that
    ``asyncpg.connect`` does not take or wants as a number or a flag (``timeout``,
    ``direct_tls``) would fail at the first connection with a ``TypeError``, or be
    misread. Those go in ``connect_args`` of :func:`create_engine_from_dsn` (libpq's
    ``sslmode``, ``connect_timeout`` and ``application_name`` are translated first).
    """
    import inspect

    import asyncpg

    taken = set(inspect.signature(asyncpg.connect).parameters)
    return frozenset((taken & _TEXT_PARAMETERS) | {"prepared_statement_cache_size"})


_TEXT_PARAMETERS = frozenset(
    {"host", "port", "user", "password", "database", "passfile", "service", "servicefile",
     "ssl", "target_session_attrs", "krbsrvname", "gsslib", "command_timeout"}
)


def create_engine_from_dsn(
    dsn: str | URL,
    *,
    statement_timeout_ms: int | None = None,
    lock_timeout_ms: int | None = None,
    **engine_kwargs: Any,
) -> AsyncEngine:
    """Create an asyncpg-backed :class:`~sqlalchemy.ext.asyncio.AsyncEngine` for ``dsn``.

    Args:
        dsn: A ``postgresql://`` or ``postgresql+asyncpg://`` URL (see :func:`asyncpg_url`).
        statement_timeout_ms: Server-side ``statement_timeout`` of every connection
            (``None``: the server's default, usually none). A statement running longer is
            cancelled and raises :class:`~cycgraph_memory.errors.StatementTimeoutError`.
        lock_timeout_ms: Server-side ``lock_timeout`` (``None``: server default): the
            longest a statement waits for a row or advisory lock.
        **engine_kwargs: Passed to :func:`sqlalchemy.ext.asyncio.create_async_engine`
            (e.g. ``pool_size``). Without ``pool_pre_ping``, a pooled connection the
            server closed (restart, ``pg_terminate_backend``, idle timeout) is replaced
            at checkout, detected without a round trip (asyncpg's ``is_closed()``);
            ``pool_pre_ping=True`` also tests every checkout on the wire (three round
            trips with SQLAlchemy's asyncpg adapter: ``BEGIN``, ``;``, ``ROLLBACK``),
            which catches a connection lost silently (a network partition) at that cost.

    Returns:
        A new engine; the caller owns it and should ``await engine.dispose()``.

    Raises:
        InvalidInputError: A timeout that is not a positive int, or a DSN
            :func:`asyncpg_url` refuses (its ``connect_timeout`` must be a positive
            number of seconds).
    """
    url = asyncpg_url(dsn)
    connect_args = dict(engine_kwargs.pop("connect_args", {}))
    settings: dict[str, str] = {}
    for name, value in (
        ("statement_timeout", statement_timeout_ms),
        ("lock_timeout", lock_timeout_ms),
    ):
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InvalidInputError(f"{name}_ms must be a positive int, got {value!r}")
        settings[name] = str(value)
    # libpq parameters asyncpg takes as connect arguments, not URL keywords.
    from_dsn: dict[str, str] = {}
    if "application_name" in url.query:
        from_dsn["application_name"] = str(url.query["application_name"])
    if "connect_timeout" in url.query:
        raw = url.query["connect_timeout"]
        try:
            seconds = float(str(raw))
        except ValueError:
            seconds = 0.0
        if not 0 < seconds < float("inf"):
            raise InvalidInputError(
                f"connect_timeout must be a positive number of seconds, got {raw!r}"
            )
        connect_args.setdefault("timeout", seconds)
    url = url.difference_update_query(["application_name", "connect_timeout"])
    if settings or from_dsn:
        connect_args["server_settings"] = {
            **from_dsn, **connect_args.get("server_settings", {}), **settings
        }
    if connect_args:
        engine_kwargs["connect_args"] = connect_args
    engine_kwargs.setdefault("json_deserializer", _loads_json)
    engine = create_async_engine(url, **engine_kwargs)
    if not engine_kwargs.get("pool_pre_ping"):
        event.listen(engine.sync_engine.pool, "checkout", _replace_closed)
    return engine


def _json_int(literal: str) -> int | float:
    """An integer literal of a ``jsonb`` document (``parse_int`` of the decoder).

    ``jsonb`` keeps numbers as ``numeric`` and prints a whole-valued float without a
    fraction (``1e20`` comes back as ``100000000000000000000``). Integers outside 64 bits
    are refused when written, so a literal outside that range was a float: it is read back
    as one (the record then validates again; as an int it would not).
    """
    value = int(literal)
    if -(2**63) <= value < 2**63:
        return value
    return float(literal)


_scan_json: Any = json.scanner.make_scanner(
    json.JSONDecoder(parse_int=_json_int)  # type: ignore[arg-type]
)


def _loads_json(text: str) -> Any:
    """``json.loads`` for the documents Postgres sends (the engine's ``json_deserializer``).

    Every ``jsonb`` value read is decoded by this function (provenance, attributes and
    aggregated rows: hundreds per retrieval). The C scanner is called directly, without
    ``json.loads``'s Python layers (a third of the cost); a document it does not read
    whole (leading or trailing whitespace of a ``json`` value, an invalid one) goes
    through ``json.loads``, which gives the same value or raises its usual error.
    """
    try:
        value, end = _scan_json(text, 0)
    except (StopIteration, ValueError):
        return json.loads(text, parse_int=_json_int)
    if end != len(text):
        return json.loads(text, parse_int=_json_int)
    return value


def _replace_closed(dbapi_connection: Any, record: Any, proxy: Any) -> None:
    """Pool ``checkout`` hook: a connection the server closed is replaced, no round trip.

    SQLAlchemy's answer to ``DisconnectionError`` at checkout is a fresh connection.
    """
    driver = getattr(dbapi_connection, "driver_connection", None)
    if driver is not None and driver.is_closed():
        raise DisconnectionError("connection closed by the server")


def dsn_from_env(var: str = DSN_ENV_VAR) -> str:
    """Return the DSN stored in the environment variable ``var``.

    Raises:
        InvalidInputError: The variable is unset or empty.
    """
    value = os.environ.get(var, "").strip()
    if not value:
        raise InvalidInputError(f"set {var} to a Postgres DSN (postgresql://...)")
    return value

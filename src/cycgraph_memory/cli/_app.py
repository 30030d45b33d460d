"""The Typer application behind :func:`cycgraph_memory.cli.main`.

Importing this module needs the ``cli`` extra (Typer); :mod:`cycgraph_memory.cli` imports
it only when a command runs, so a missing extra is reported as one error line.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence
from pathlib import Path

try:
    import typer
except ImportError as _exc:  # pragma: no cover - depends on the environment
    from cycgraph_memory.errors import MissingExtraError

    raise MissingExtraError("cli", _exc.name or "typer") from None

from cycgraph_memory.cli import DSN_ENV_VAR, TENANT_ENV_VAR
from cycgraph_memory.cli._common import Settings
from cycgraph_memory.cli._data import register as _register_data
from cycgraph_memory.cli._db import db_app
from cycgraph_memory.cli._gate import gate_app
from cycgraph_memory.cli._maintenance import register as _register_maintenance

__all__ = ["app", "run"]

app = typer.Typer(
    name="cycgraph-memory",
    help="Look at and maintain cycgraph-memory tenants.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


@app.callback()
def _root(
    ctx: typer.Context,
    dsn: str | None = typer.Option(
        None,
        "--dsn",
        envvar=DSN_ENV_VAR,
        help="Database URL (postgresql://...); default: the running embedded server.",
        show_envvar=True,
    ),
    tenant: str = typer.Option(
        "default", "--tenant", "-t", envvar=TENANT_ENV_VAR, help="Tenant to work on."
    ),
    json_output: bool = typer.Option(False, "--json", help="Machine-readable JSON output."),
    data_dir: Path = typer.Option(
        Path(".cycgraph-memory") / "pgdata",
        "--data-dir",
        help="Data directory of the embedded server.",
    ),
    verbose: int = typer.Option(
        0, "--verbose", "-v", count=True, help="Library logs on stderr (-v info, -vv debug)."
    ),
) -> None:
    """Look at and maintain cycgraph-memory tenants."""
    _configure_logging(verbose)
    ctx.call_on_close(lambda: _configure_logging(0))
    ctx.obj = Settings(dsn=dsn or None, tenant=tenant, json=json_output, data_dir=data_dir)


_LOG_HANDLER_NAME = "cycgraph-memory-cli"


def _configure_logging(verbose: int) -> None:
    """Send the library's log records to stderr at the level ``-v`` asks for."""
    root = logging.getLogger("cycgraph_memory")
    for handler in [h for h in root.handlers if h.get_name() == _LOG_HANDLER_NAME]:
        root.removeHandler(handler)
    if verbose <= 0:
        root.setLevel(logging.NOTSET)
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.set_name(_LOG_HANDLER_NAME)
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    root.addHandler(handler)
    root.setLevel(logging.INFO if verbose == 1 else logging.DEBUG)


app.add_typer(db_app, name="db")
app.add_typer(gate_app, name="gate")
_register_data(app)
_register_maintenance(app)


def run(argv: Sequence[str] | None = None) -> int:
    """Run the command line with ``argv`` (default ``sys.argv[1:]``); return the exit code."""
    try:
        result = app(
            args=None if argv is None else list(argv),
            prog_name="cycgraph-memory",
            standalone_mode=False,
        )
    except typer.Exit as exc:
        return int(exc.exit_code)
    except typer.Abort:
        return 1
    except typer.TyperException as exc:  # Click's usage errors (vendored by Typer)
        show = getattr(exc, "show", None)
        if show is not None:
            show()
        return int(getattr(exc, "exit_code", 2))
    except UnicodeEncodeError as exc:  # a table with text stdout's encoding cannot hold
        encoding = getattr(sys.stdout, "encoding", None) or exc.encoding
        sys.stderr.write(
            f"error: the output holds characters {encoding} cannot encode; use --json, or "
            "set PYTHONIOENCODING=utf-8\n"
        )
        return 1
    return int(result) if isinstance(result, int) else 0

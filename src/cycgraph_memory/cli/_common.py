"""Plumbing shared by the commands: settings, opening memory, output, errors, progress."""

from __future__ import annotations

import asyncio
import json
import math
import sys
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import typer
from rich.console import Console
from rich.table import Table

from cycgraph_memory.progress import ProgressCallback, ProgressEvent

if TYPE_CHECKING:
    from cycgraph_memory.memory import Memory

T = TypeVar("T")

EXIT_OK = 0
EXIT_ERROR = 1
"""A user error: bad input, an unknown record, a refused operation."""
EXIT_USAGE = 2
"""Bad command-line usage (Click's own code)."""
EXIT_SCHEMA = 3
"""The database schema is missing or behind: run ``cycgraph-memory db upgrade``."""
EXIT_DATABASE = 4
"""The database could not be reached or failed."""


@dataclass
class Settings:
    """What the global options chose; one per invocation (``ctx.obj``)."""

    dsn: str | None = None
    tenant: str = "default"
    json: bool = False
    data_dir: Path = Path(".cycgraph-memory") / "pgdata"
    console: Console = field(default_factory=lambda: Console(highlight=False, soft_wrap=True))
    err: Console = field(default_factory=lambda: Console(stderr=True, highlight=False))


JSON_OPTION: Any = typer.Option(False, "--json", help="Machine-readable JSON output.")
"""``--json`` accepted after the command too (``cycgraph-memory stats --json``)."""


def settings(ctx: typer.Context, json_output: bool = False) -> Settings:
    """The invocation's :class:`Settings` (created by the root callback).

    ``json_output`` is the command's own ``--json`` flag; either place turns JSON on.
    """
    obj = ctx.find_root().obj
    if not isinstance(obj, Settings):  # pragma: no cover - the root callback always sets it
        obj = Settings()
        ctx.find_root().obj = obj
    obj.json = obj.json or json_output
    return obj


def fail(message: str, code: int = EXIT_ERROR) -> NoReturn:
    """Print one line on stderr and exit with ``code``."""
    sys.stderr.write(f"error: {message}\n")  # one line, never wrapped
    raise typer.Exit(code)


def _exit_code(exc: BaseException) -> int:
    from cycgraph_memory.errors import (
        DuplicateRecordError,
        IntegrityViolationError,
        SchemaNotReadyError,
        StorageError,
    )

    if isinstance(exc, SchemaNotReadyError):
        return EXIT_SCHEMA
    if isinstance(exc, DuplicateRecordError | IntegrityViolationError):
        return EXIT_ERROR  # refused by the stored data (a constraint), not unreachable
    if isinstance(exc, StorageError | ConnectionError):
        return EXIT_DATABASE
    return EXIT_ERROR


def _where(loc: Sequence[Any], flags: Mapping[str, str]) -> str:
    """A validation error's location, named by the command-line flag that set it."""
    if loc and isinstance(loc[0], str) and loc[0] in flags:
        rest = list(loc[1:])
        item = f" (value {rest.pop(0) + 1})" if rest and isinstance(rest[0], int) else ""
        return ".".join([flags[loc[0]], *(str(p) for p in rest)]) + item
    return ".".join(str(p) for p in loc) or "input"


def _one_line(exc: BaseException, flags: Mapping[str, str] | None = None) -> str:
    """``exc`` as one line; a parameter the library names is named by its flag.

    ``flags`` maps the library's parameter names to the command's options
    (``{"max_hops": "--hops"}``): the error of ``--hops 9`` says ``--hops``, not a
    keyword argument the user never typed.
    """
    from pydantic import ValidationError

    flags = flags or {}
    if isinstance(exc, ValidationError):
        first = exc.errors()[0]
        where = _where(first.get("loc", ()), flags)
        more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
        return f"invalid {where}: {first.get('msg', 'invalid value')}{more}"
    text = " ".join(str(exc).split()) or type(exc).__name__
    for name, flag in flags.items():  # "max_facts must be ..." -> "--max-facts must be ..."
        if text.startswith(name + " "):
            return flag + text[len(name) :]
    return text


def run(work: Callable[[], Awaitable[T]], flags: Mapping[str, str] | None = None) -> T:
    """Run a coroutine; library and database errors become one line and an exit code.

    ``flags`` names the library's parameters by the options that set them (see
    :func:`_one_line`).
    """
    from pydantic import ValidationError

    from cycgraph_memory.errors import CycgraphMemoryError

    try:
        return asyncio.run(work())  # type: ignore[arg-type]
    except (CycgraphMemoryError, ValidationError, OSError, json.JSONDecodeError) as exc:
        fail(_one_line(exc, flags), _exit_code(exc))


def resolve_dsn(state: Settings) -> str:
    """The DSN to use: ``--dsn`` / ``CYCGRAPH_MEMORY_DSN``, else a running embedded server."""
    if state.dsn:
        return state.dsn
    from cycgraph_memory.errors import MissingExtraError

    where = f"data dir {state.data_dir}"
    try:
        from cycgraph_memory.postgres.embedded import embedded_server_dsn

        found = embedded_server_dsn(state.data_dir)
    except MissingExtraError as exc:
        # Without the extra no embedded server can be running: still "no database".
        found, where = None, f"{where}; it needs the {exc.extra} extra: {_install_hint(exc)}"
    if found is None:
        fail(
            "no database: set CYCGRAPH_MEMORY_DSN, pass --dsn, or start one with "
            f"`cycgraph-memory db embedded start` ({where})",
            EXIT_DATABASE,
        )
    return found


def _install_hint(exc: BaseException) -> str:
    """The ``pip install ...`` part of a :class:`MissingExtraError`'s message."""
    text = str(exc)
    return text[text.index("pip install") :] if "pip install" in text else text


async def open_memory(state: Settings) -> Memory:
    """Open the tenant's memory on the configured database (the schema must be current)."""
    from cycgraph_memory.memory import Memory

    return await Memory.open(resolve_dsn(state), tenant=state.tenant)


def _finite(value: Any) -> Any:
    """``value`` with every non-finite float as a string (``"Infinity"``, ``"NaN"``).

    JSON has no infinity: ``json.dumps`` would write a bare ``Infinity`` (a z-test's
    ``df``), which strict parsers (``jq``, JavaScript) refuse. The string is what the
    Postgres ledger stores, and the library's models read it back as the float.
    """
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def emit_json(state: Settings, payload: Any) -> None:
    """Write ``payload`` as JSON on stdout (ids, dates and models as strings/objects).

    Always strict JSON: a non-finite float is written as a string (see :func:`_finite`).
    """

    def default(value: Any) -> Any:
        dump = getattr(value, "model_dump", None)
        if dump is not None:
            return _finite(dump(mode="json"))
        return str(value)

    def dumps(ensure_ascii: bool) -> str:
        return (
            json.dumps(
                _finite(payload),
                default=default,
                indent=2,
                ensure_ascii=ensure_ascii,
                allow_nan=False,
            )
            + "\n"
        )

    try:
        sys.stdout.write(dumps(ensure_ascii=False))
    except UnicodeEncodeError:
        # stdout's encoding (a pipe on Windows: the ANSI code page) cannot hold a
        # character: \uXXXX escapes are the same JSON, in ASCII.
        sys.stdout.write(dumps(ensure_ascii=True))


def write_text(text: str) -> None:
    """Write ``text`` on stdout; as UTF-8 bytes when stdout's encoding cannot hold it.

    For documents that are UTF-8 by definition (GraphML declares it, JSON and Mermaid
    files are): a pipe whose encoding is the ANSI code page would raise
    ``UnicodeEncodeError`` on the first character outside it.
    """
    try:
        sys.stdout.write(text)
    except UnicodeEncodeError:
        raw = getattr(sys.stdout, "buffer", None)
        if raw is None:
            raise
        sys.stdout.flush()
        raw.write(text.encode("utf-8"))
        raw.flush()


def table(title: str | None, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> Table:
    """A Rich table with ``columns`` and the rows' values as text.

    Values are plain :class:`~rich.text.Text`, never Rich markup: a fact, a name or a tag
    holding ``[bold]`` or ``[/x]`` is shown as written (markup would restyle it, or raise
    ``MarkupError`` with a traceback).
    """
    from rich.text import Text

    out = Table(
        title=None if title is None else Text(title), title_justify="left", show_lines=False
    )
    for name in columns:
        out.add_column(Text(name), overflow="fold")
    for row in rows:
        out.add_row(*(Text("" if v is None else str(v)) for v in row))
    return out


@contextmanager
def progress_bar(state: Settings, description: str) -> Iterator[ProgressCallback | None]:
    """A progress callback drawing a bar on a terminal; ``None`` when piped or with --json."""
    if state.json or not state.err.is_terminal:
        yield None
        return
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )

    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=state.err,
        transient=True,
    ) as bar:
        task = bar.add_task(description, total=None)

        def update(event: ProgressEvent) -> None:
            label = f"{description} {event.stage}".strip()
            bar.update(task, completed=event.done, total=event.total, description=label)

        yield update

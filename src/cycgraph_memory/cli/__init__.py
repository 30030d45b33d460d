"""The ``cycgraph-memory`` command: look at and maintain a tenant's memory from a shell.

Configured by ``CYCGRAPH_MEMORY_DSN`` (or ``--dsn``), ``--tenant`` and flags; without a
DSN the commands use the embedded server started by ``cycgraph-memory db embedded start``.
Every command calls the same public functions a Python user would (``Memory``,
``MemoryPipeline``, ``retrieve_memory``, ``EntityResolver``, ``MemoryConsolidator``,
``ConflictDetector``, ``evaluate_retention``, ``gate_operating_characteristics``, the
Alembic helpers of :mod:`cycgraph_memory.postgres.migrate`); it adds no behaviour.

Output is a table by default and JSON with ``--json``. Errors print one line on stderr and
exit non-zero: 1 for a user error, 2 for bad usage, 3 when the schema needs ``db upgrade``,
4 when the database cannot be reached. Only this package reads the environment. Install
with ``pip install 'cycgraph-memory[cli]'``.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

from cycgraph_memory.errors import MissingExtraError

__all__ = ["DSN_ENV_VAR", "TENANT_ENV_VAR", "app", "main"]

DSN_ENV_VAR = "CYCGRAPH_MEMORY_DSN"
"""Environment variable holding the database URL."""

TENANT_ENV_VAR = "CYCGRAPH_MEMORY_TENANT"
"""Environment variable holding the default tenant."""


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line with ``argv`` (default ``sys.argv[1:]``); return the exit code.

    Without the ``cli`` extra it prints one error line naming the ``pip install`` to run
    and returns 1, as every other command-line error does (no ``ImportError`` traceback,
    whether it runs as the ``cycgraph-memory`` script or as ``python -m
    cycgraph_memory.cli``).
    """
    try:
        from cycgraph_memory.cli._app import run
    except MissingExtraError as exc:
        sys.stderr.write(f"error: {exc}\n")
        return 1
    return run(argv)


def __getattr__(name: str) -> Any:
    """``app``, the Typer application (imported on first use; needs the ``cli`` extra).

    Raises:
        MissingExtraError: When the ``cli`` extra is not installed.
        AttributeError: For any other name.
    """
    if name == "app":
        from cycgraph_memory.cli._app import app

        return app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

"""The ``cycgraph-memory`` console script.

It runs :func:`cycgraph_memory.cli.main`; when the ``cli`` extra (Typer, Rich) is not
installed it prints the one error line naming the ``pip install`` to run and exits 1,
as every other command-line error does, instead of an ``ImportError`` traceback (the
script is installed with the package, extras or not).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from cycgraph_memory.errors import MissingExtraError

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line with ``argv`` (default ``sys.argv[1:]``); return the exit code."""
    try:
        from cycgraph_memory.cli import main as run_cli
    except MissingExtraError as exc:
        sys.stderr.write(f"error: {exc}\n")
        return 1
    return run_cli(argv)

"""The ``cycgraph-memory`` console script.

It runs :func:`cycgraph_memory.cli.main`; when the ``cli`` extra (Typer, Rich) is not
installed it prints the one error line naming the ``pip install`` to run and exits 1,
as every other command-line error does, instead of an ``ImportError`` traceback (the
script is installed with the package, extras or not).
"""

from __future__ import annotations

from collections.abc import Sequence

from cycgraph_memory.cli import main as _run

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line with ``argv`` (default ``sys.argv[1:]``); return the exit code."""
    return _run(argv)

"""The CLI's progress bar: drawn on a terminal, silent when piped or with --json."""

from __future__ import annotations

import io

from rich.console import Console

from cycgraph_memory.cli._common import Settings, progress_bar
from cycgraph_memory.progress import ProgressEvent


def test_bar_on_a_terminal() -> None:
    err = io.StringIO()
    state = Settings(err=Console(file=err, force_terminal=True, width=80))
    with progress_bar(state, "ingesting") as progress:
        assert progress is not None
        progress(ProgressEvent("ingest", 1, 2, "extract"))
        progress(ProgressEvent("ingest", 2, 2, "write"))
    assert "ingesting" in err.getvalue()


def test_silent_when_piped_or_json() -> None:
    piped = Settings(err=Console(file=io.StringIO(), force_terminal=False))
    with progress_bar(piped, "ingesting") as progress:
        assert progress is None
    terminal_json = Settings(json=True, err=Console(file=io.StringIO(), force_terminal=True))
    with progress_bar(terminal_json, "ingesting") as progress:
        assert progress is None

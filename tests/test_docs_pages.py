"""The facade, CLI and observability pages run as written.

Every ```python block of docs/facade.md, docs/cli.md and docs/observability.md runs on its
own in a fresh interpreter, as a reader would run it (a block may set process-wide state
such as OpenTelemetry's tracer provider). A block reading ``CYCGRAPH_MEMORY_DSN`` gets a
fresh, empty database on the test server. Every
``cycgraph-memory ...`` line of a ```bash block runs through ``main(argv)`` against a fresh
database from the repository root and must exit 0.
"""

from __future__ import annotations

import asyncio
import os
import re
import secrets
import shlex
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = ["docs/facade.md", "docs/cli.md", "docs/observability.md"]
_FENCE = re.compile(r"^([ \t]*)```(python|bash)[ \t]*\n(.*?)^\1```[ \t]*$", re.S | re.M)


def _blocks(kind: str) -> list[Any]:
    params = []
    for page in PAGES:
        text = (ROOT / page).read_text(encoding="utf-8")
        for m in _FENCE.finditer(text):
            if m.group(2) == kind:
                line = text.count("\n", 0, m.start()) + 1
                params.append(pytest.param(page, line, textwrap.dedent(m.group(3)),
                                           id=f"{page}:{line}"))
    return params


def _in_thread(fn: Any, timeout: float = 300.0) -> None:
    errors: list[BaseException] = []

    def run() -> None:
        try:
            fn()
        except BaseException as exc:  # re-raised below
            errors.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(timeout)
    assert not thread.is_alive(), "block timed out"
    if errors:
        raise errors[0]


def test_every_page_has_runnable_blocks() -> None:
    assert len(_blocks("python")) >= 8
    assert len(_blocks("bash")) == 1


@pytest.mark.parametrize(("page", "line", "code"), _blocks("python"))
def test_python_block_runs(
    page: str, line: int, code: str, request: pytest.FixtureRequest
) -> None:
    env = dict(os.environ)
    env.pop("CYCGRAPH_MEMORY_DSN", None)
    if "CYCGRAPH_MEMORY_DSN" in code:
        factory = request.getfixturevalue("pg_databases")
        env["CYCGRAPH_MEMORY_DSN"] = asyncio.run(factory.create("w20_docs"))
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300,
        cwd=ROOT, check=False,
    )
    assert out.returncode == 0, f"{page}:{line}\n{out.stderr}"
    assert out.stdout.strip() or "print(" not in code


@pytest.mark.postgres
@pytest.mark.parametrize(("page", "line", "code"), _blocks("bash"))
def test_cli_session_runs(
    page: str, line: int, code: str, pg_databases: Any, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    _run_session(code, 10, pg_databases, monkeypatch, capsys)


def _readme_sessions() -> list[Any]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    return [
        pytest.param(m.group(3), id=f"README.md:{text.count(chr(10), 0, m.start()) + 1}")
        for m in _FENCE.finditer(text)
        if m.group(2) == "bash" and "\ncycgraph-memory " in "\n" + m.group(3)
    ]


def test_the_readme_shows_a_cli_session() -> None:
    assert len(_readme_sessions()) == 1


@pytest.mark.postgres
@pytest.mark.parametrize("code", _readme_sessions())
def test_readme_cli_session_runs(
    code: str, pg_databases: Any, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    _run_session(code, 5, pg_databases, monkeypatch, capsys)


def _run_session(
    code: str, at_least: int, pg_databases: Any, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from cycgraph_memory.cli import main

    dsn = asyncio.run(pg_databases.create("w20_docs_cli"))
    monkeypatch.setenv("CYCGRAPH_MEMORY_DSN", dsn)
    monkeypatch.setenv("CYCGRAPH_MEMORY_TENANT", f"docs_{secrets.token_hex(4)}")
    monkeypatch.chdir(ROOT)
    commands = [
        shlex.split(c, comments=True) for c in code.splitlines()
        if c.startswith("cycgraph-memory ")
    ]
    assert len(commands) >= at_least
    for argv in commands:
        codes: list[int] = []
        _in_thread(lambda argv=argv, codes=codes: codes.append(main(argv[1:])))
        captured = capsys.readouterr()
        assert codes == [0], f"{' '.join(argv)}: {captured.err}"
        assert captured.out.strip(), f"{' '.join(argv)} printed nothing"

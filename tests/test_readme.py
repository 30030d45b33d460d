"""Every ```python block of README.md runs as written (no drift).

Each block is executed on its own, in a fresh namespace, in a thread with its own event loop
(blocks call ``asyncio.run``). A block that uses ``cycgraph_memory.postgres`` gets a fresh,
empty database on the test server through ``CYCGRAPH_MEMORY_DSN``, which the README's
Postgres examples read (falling back to an embedded server for a reader who has no DSN).
The docs site's blocks run in fresh interpreters in tests/test_docs_pages.py; the quick
start's exact output is checked here.
"""

from __future__ import annotations

import asyncio
import re
import textwrap
import threading
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
PAGES = [README]
# Also blocks indented inside list items ("  ```python"), which are dedented before running.
_FENCE = re.compile(r"^([ \t]*)```(?:python|py)[ \t]*\n(.*?)^\1```[ \t]*$", re.S | re.M)


def _blocks(page: Path = README) -> list[tuple[int, str]]:
    text = page.read_text(encoding="utf-8")
    return [
        (text.count("\n", 0, m.start()) + 1, textwrap.dedent(m.group(2)))
        for m in _FENCE.finditer(text)
    ]


def _where(page: Path, line: int) -> str:
    return f"{page.relative_to(ROOT)}:{line}"


def _needs_postgres(code: str) -> bool:
    return "cycgraph_memory.postgres" in code or "CYCGRAPH_MEMORY_DSN" in code


def _params(postgres: bool) -> list[Any]:
    return [
        pytest.param(_where(page, line), code, id=_where(page, line))
        for page in PAGES
        for line, code in _blocks(page)
        if _needs_postgres(code) == postgres
    ]


def _run_block(line: int | str, code: str, timeout: float = 300.0) -> list[str]:
    out: list[str] = []
    errors: list[BaseException] = []

    def run() -> None:  # asyncio.run needs a thread without a running loop
        try:
            namespace: dict[str, Any] = {
                "__name__": "__readme__",
                "print": lambda *a, **_: out.append(" ".join(map(str, a))),
            }
            exec(compile(code, str(line), "exec"), namespace)
        except BaseException as exc:  # reported below
            errors.append(exc)

    thread = threading.Thread(target=run, name=f"readme-{line}")
    thread.start()
    thread.join(timeout=timeout)
    assert not thread.is_alive(), f"{line} did not finish in {timeout:.0f} s"
    if errors:
        raise errors[0]
    return out


def test_readme_has_python_blocks() -> None:
    assert len(_blocks()) >= 1
    blocks = [b for page in PAGES for b in _blocks(page)]
    assert len(blocks) >= 2
    assert any(_needs_postgres(code) for _, code in blocks)


@pytest.mark.parametrize(("line", "code"), _params(postgres=False))
def test_readme_block_runs(line: str, code: str) -> None:
    _run_block(line, code)


@pytest.mark.postgres
@pytest.mark.parametrize(("line", "code"), _params(postgres=True))
async def test_readme_postgres_block_runs(
    line: str, code: str, pg_databases: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CYCGRAPH_MEMORY_DSN", await pg_databases.create("cycgraph_readme"))
    await asyncio.to_thread(_run_block, line, code)


def test_readme_quick_start_output() -> None:
    text = (ROOT / "docs" / "getting-started.md").read_text(encoding="utf-8")
    section = text.split("## Quick start (in-memory)", 1)[1]
    first = _FENCE.search(section)
    assert first is not None
    assert _run_block(0, first.group(2)) == ["Alice works at Acme Corp work_at 0.994"]


@pytest.mark.postgres
async def test_readme_postgres_quick_start_output(
    pg_databases: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = (ROOT / "docs" / "getting-started.md").read_text(encoding="utf-8")
    section = text.split("## Quick start (Postgres)", 1)[1]
    first = _FENCE.search(section)
    assert first is not None
    monkeypatch.setenv("CYCGRAPH_MEMORY_DSN", await pg_databases.create("cycgraph_readme"))
    out = await asyncio.to_thread(_run_block, 0, first.group(2))
    assert out == ["Alice works at Acme Corp work_at 0.994"]

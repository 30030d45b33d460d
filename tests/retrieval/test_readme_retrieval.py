"""The Retrieval page's first section: every python block runs as written."""

from __future__ import annotations

import re
import threading
from pathlib import Path

import pytest

PAGE = Path(__file__).resolve().parents[2] / "docs" / "retrieval.md"


def _blocks() -> list[str]:
    text = PAGE.read_text(encoding="utf-8")
    section = text.split("\n## Grounded memory and hybrid retrieval\n", 1)[0]
    return re.findall(r"```python\n(.*?)```", section, re.S)


def _run(code: str) -> list[str]:
    out: list[str] = []
    errors: list[BaseException] = []

    def run() -> None:  # asyncio.run needs a thread without a running loop
        try:
            sink = {"print": lambda *a: out.append(" ".join(map(str, a)))}
            exec(compile(code, "docs/retrieval.md", "exec"), sink)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(timeout=60)
    assert not errors, errors
    return out


def test_the_section_has_examples() -> None:
    assert len(_blocks()) == 2


@pytest.mark.parametrize("n", [0, 1])
def test_readme_retrieval_block_runs(n: int) -> None:
    out = _run(_blocks()[n])
    if n == 0:
        assert out == [
            "['check the cache first', 'ask for the request id'] ['debugging']",
            "2 ['Alice', 'Acme'] ['works_at']",
        ]
    else:
        assert out[0].startswith("## Relevant Memory")
        assert "Check the cache layer before reading logs." in out[0]

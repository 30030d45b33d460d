"""docs/retention-gate.md: its example runs as written and prints what the page says."""

from __future__ import annotations

import re
import threading
from pathlib import Path

PAGE = Path(__file__).resolve().parents[2] / "docs" / "retention-gate.md"


def _run(code: str) -> list[str]:
    out: list[str] = []
    errors: list[BaseException] = []

    def run() -> None:  # asyncio.run needs a thread without a running loop
        try:
            sink = {"print": lambda *a: out.append(" ".join(map(str, a)))}
            exec(compile(code, str(PAGE), "exec"), sink)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(timeout=120)
    assert not errors, errors
    return out


def test_the_example_prints_what_the_page_says() -> None:
    text = PAGE.read_text(encoding="utf-8")
    [code] = re.findall(r"```python\n(.*?)```", text, re.S)
    printed = text.split("prints\n\n```\n", 1)[1].split("```", 1)[0].strip().splitlines()
    assert _run(code) == printed
    assert printed[-1] == "['malformed_stats: fact has 5 runs but no variance']"

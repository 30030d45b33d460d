"""The README's quick-start example runs as written."""

from __future__ import annotations

import re
import threading
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def _quick_start_block() -> str:
    text = README.read_text(encoding="utf-8")
    section = text.split("## Quick start", 1)[1]
    match = re.search(r"```python\n(.*?)```", section, re.S)
    assert match is not None
    return match.group(1)


def test_readme_quick_start_runs() -> None:
    code = _quick_start_block()
    out: list[str] = []
    errors: list[BaseException] = []

    def run() -> None:  # asyncio.run needs a thread without a running loop
        try:
            sink = {"print": lambda *a: out.append(" ".join(map(str, a)))}
            exec(compile(code, "README.md", "exec"), sink)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(timeout=30)
    assert not errors, errors
    assert out == ["Alice works at Acme Corp work_at 0.994"]

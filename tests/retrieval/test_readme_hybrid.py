"""The Retrieval page's "Grounded memory and hybrid retrieval" section: its python block runs."""

from __future__ import annotations

import re
import threading
from pathlib import Path

PAGE = Path(__file__).resolve().parents[2] / "docs" / "retrieval.md"


def _blocks() -> list[str]:
    text = PAGE.read_text(encoding="utf-8")
    section = text.split("\n## Grounded memory and hybrid retrieval\n", 1)[1]
    section = section.split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", section, re.S)


def test_readme_hybrid_block_runs() -> None:
    [code] = _blocks()
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
    assert out == [
        "we adopted a retired greyhound from the rescue. her name is biscuit",
        "Maya on 2024-01-08: also Maya's unit switched Maya to night shifts, 7pm to 7am"
        " | 1 2 0.0245",
        "Maya on 2024-01-08: we adopted a retired greyhound from the rescue. | 2 1 0.0243",
    ]

"""The "Eval-gated retention" page's examples run as written and print what it says."""

from __future__ import annotations

import re
import threading
from pathlib import Path

import pytest

PAGE = Path(__file__).resolve().parents[2] / "docs" / "retention.md"


def _blocks() -> list[str]:
    text = PAGE.read_text(encoding="utf-8")
    return re.findall(r"```python\n(.*?)```", text, re.S)


def _run(code: str) -> list[str]:
    out: list[str] = []
    errors: list[BaseException] = []

    def run() -> None:  # asyncio.run needs a thread without a running loop
        try:
            sink = {"print": lambda *a: out.append(" ".join(map(str, a)))}
            exec(compile(code, "docs/retention.md", "exec"), sink)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(timeout=120)
    assert not errors, errors
    return out


def test_there_are_three_examples() -> None:
    assert len(_blocks()) == 3


def test_loop_example() -> None:
    assert _run(_blocks()[0]) == [
        "lift +0.40, P(lift > margin) 1.0000", "['lesson', 'verified']"
    ]


@pytest.mark.postgres
@pytest.mark.slow
def test_postgres_audit_example() -> None:
    assert _run(_blocks()[1]) == ["['eval-gate:harmful']", "[('evicted', 'eval-gate:harmful')]"]


def test_validation_example() -> None:
    out = _run(_blocks()[2])
    assert out[-1] == "3 37"
    assert len(out) == 4

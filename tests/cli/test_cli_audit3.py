"""``cycgraph-memory ingest`` reads JSON Lines as JSON Lines (in-memory backend, no server).

``str.splitlines()`` also breaks a line at U+2028, U+2029 and U+0085, which a JSON
encoder writes raw inside strings (``ensure_ascii=False``, as this command's own ``--json``
output does): a valid file was refused with "not JSON".
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cycgraph_memory.cli import app

MESSAGES = [
    {"role": "user", "content": "Alice Smith\u2028maintains the billing service."},
    {"role": "user", "content": "Bob Jones\u2029owns the search cluster.\u0085"},
]


@pytest.mark.parametrize("newline", ["\n", "\r\n"])
def test_ingest_keeps_line_separators_inside_json_strings(tmp_path: Path, newline: str) -> None:
    path = tmp_path / "messages.jsonl"
    body = newline.join(json.dumps(m, ensure_ascii=False) for m in MESSAGES) + newline
    path.write_bytes(body.encode("utf-8"))
    result = CliRunner().invoke(app, ["--dsn", "memory://", "ingest", str(path), "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["messages_ingested"] == 2


def test_ingest_from_stdin_keeps_line_separators(tmp_path: Path) -> None:
    body = "\n".join(json.dumps(m, ensure_ascii=False) for m in MESSAGES) + "\n"
    result = CliRunner().invoke(app, ["--dsn", "memory://", "ingest", "-", "--json"], input=body)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["messages_ingested"] == 2


def test_a_bad_line_is_still_named_by_its_number(tmp_path: Path) -> None:
    path = tmp_path / "messages.jsonl"
    lines = [json.dumps(MESSAGES[0], ensure_ascii=False), "{not json"]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    result = CliRunner().invoke(app, ["--dsn", "memory://", "ingest", str(path)])
    assert result.exit_code == 1
    assert "line 2: not JSON" in result.stderr


def test_every_downgrade_needs_yes() -> None:
    """A downgrade to any revision drops data: refused without --yes, before connecting."""
    result = CliRunner().invoke(app, ["--dsn", "postgresql://nobody@127.0.0.1:1/none",
                                      "db", "downgrade", "0001"])
    assert result.exit_code == 1
    assert "--yes" in result.output and "0001" in result.output

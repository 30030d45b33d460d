"""``make demo`` end to end (``cycgraph_memory.demo.run_demo``) on a fresh database."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from cycgraph_memory.demo import run_demo

pytestmark = pytest.mark.postgres


async def test_demo_runs_the_pipeline_end_to_end(
    pg_databases: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dsn = await pg_databases.create("cycgraph_demo")
    for _ in range(2):  # a second run starts from a clean tenant
        await run_demo(dsn, tmp_path)
        out = capsys.readouterr().out
        assert "messages ingested   26" in out
        assert "re-ingest           26 messages skipped, 0 facts added" in out
        hybrid = out.split("[hybrid, the default]")[1].split("==")[0]
        assert "Bob Jones reports to Alice Smith and maintains" in hybrid.splitlines()[1]
        assert "edge  Alice Smith -[work_at]-> Acme Corp  (valid 2026-11-30 .. open)" in out
        before, after = out.split("valid_at=2026-12-01:")[1].split("valid_at=2026-12-20:")
        ended = "Alice Smith -[work_at]-> Acme Corp  (valid 2026-11-30 .. 2026-12-15)"
        assert ended in before and ended not in after
        assert "Alice Smith -[join]-> Globex Inc" in after.split("==")[0]
        assert "gate  promoted after 5 trials" in out
        assert "lesson (verified): user on 2026-11-30: Always check the Redis" in out

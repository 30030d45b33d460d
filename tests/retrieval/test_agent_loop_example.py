"""examples/agent_loop.py runs and shows lessons flowing from one run to the next."""

from __future__ import annotations

import importlib.util
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "agent_loop.py"


async def test_agent_loop_example(capsys: object) -> None:
    spec = importlib.util.spec_from_file_location("agent_loop_example", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    prompts = await module.main()
    assert "(no memory yet)" in prompts[0]
    assert "## Relevant Memory" in prompts[1]
    assert prompts[1].count("\n- ") == 1
    assert prompts[2].count("\n- ") == 2  # run 1's retried write stored one lesson
    assert "stored lessons: 3" in capsys.readouterr().out  # type: ignore[attr-defined]

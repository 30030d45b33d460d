"""Spans with OpenTelemetry installed and a silent no-op without it; progress events; no prints."""

from __future__ import annotations

import ast
import secrets
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from cycgraph_memory import (
    ConflictDetector,
    EntityResolver,
    InMemoryMemoryStore,
    Memory,
    MemoryConsolidator,
    ProgressEvent,
    gate_operating_characteristics,
)
from cycgraph_memory.observability import otel_available, span

SRC = Path(__file__).resolve().parents[2] / "src" / "cycgraph_memory"


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def otel_dsn(pg_databases: Any) -> str:
    """A database of this module's own (these tests commit; others count session rows)."""
    from cycgraph_memory.postgres import upgrade

    dsn = str(await pg_databases.create("w20_otel_dsn"))
    await upgrade(dsn, embedding_dim=8)
    return dsn


@pytest.fixture(scope="module")
def exporter() -> Any:
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = TracerProvider()
        trace.set_tracer_provider(provider)
    provider = trace.get_tracer_provider()
    assert isinstance(provider, TracerProvider)
    memory_exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(memory_exporter))
    return memory_exporter


def _spans(exporter: Any, name: str) -> list[Any]:
    return [s for s in exporter.get_finished_spans() if s.name == name]


async def test_memory_calls_open_spans_with_operator_attributes(exporter: Any) -> None:
    assert otel_available()
    exporter.clear()
    async with await Memory.open("memory://", tenant="acme") as memory:
        await memory.add([{"role": "user", "content": "Hana Kim owns the payments API."}])
        await memory.search("payments", mode="text")
    [add] = _spans(exporter, "cycgraph.memory.add")
    assert add.attributes["cycgraph.tenant"] == "acme"
    assert add.attributes["cycgraph.rows"] >= 1 and add.attributes["cycgraph.messages"] == 1
    [ingest] = _spans(exporter, "cycgraph.ingest")
    assert ingest.parent is not None and ingest.parent.span_id == add.context.span_id
    [search] = _spans(exporter, "cycgraph.memory.search")
    assert search.attributes["cycgraph.mode"] == "text"
    [retrieve] = _spans(exporter, "cycgraph.retrieve")
    assert retrieve.attributes["cycgraph.mode"] == "text"
    assert retrieve.attributes["cycgraph.rows"] >= 1


async def test_span_records_errors(exporter: Any) -> None:
    exporter.clear()
    with pytest.raises(ValueError), span("cycgraph.test", tenant="t"):
        raise ValueError("boom")
    [failed] = _spans(exporter, "cycgraph.test")
    assert not failed.status.is_ok and failed.attributes["cycgraph.tenant"] == "t"


@pytest.mark.postgres
async def test_postgres_spans_count_statements(exporter: Any, otel_dsn: str) -> None:
    tenant = f"t_{secrets.token_hex(5)}"
    exporter.clear()
    async with await Memory.open(otel_dsn, tenant=tenant) as memory:
        await memory.add([{"role": "user", "content": "Ivan Petrov owns the ledger."}])
        await memory.search("ledger", mode="text")
        await memory.store.clear()
    [add] = _spans(exporter, "cycgraph.memory.add")
    [ingest] = _spans(exporter, "cycgraph.ingest")
    assert ingest.attributes["cycgraph.tenant"] == tenant
    assert add.attributes["cycgraph.statement_count"] >= ingest.attributes[
        "cycgraph.statement_count"
    ] > 0
    [retrieve] = _spans(exporter, "cycgraph.retrieve")
    assert retrieve.attributes["cycgraph.statement_count"] >= 1


def test_without_opentelemetry_spans_are_silent_no_ops() -> None:
    code = textwrap.dedent(
        """
        import asyncio, sys
        class Block:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] == "opentelemetry":
                    raise ImportError("blocked: " + name)
                return None
        sys.meta_path.insert(0, Block())
        from cycgraph_memory import Memory
        from cycgraph_memory.observability import otel_available, span
        assert not otel_available()
        with span("x", tenant="t") as handle:
            handle.set(rows=3)
            assert not handle.recording
        async def main():
            async with await Memory.open("memory://", tenant="acme") as memory:
                await memory.add([{"role": "user", "content": "Jo Park owns the payments API."}])
                found = await memory.search("payments", mode="text")
                assert found.result.facts
        asyncio.run(main())
        assert not [m for m in sys.modules if m.startswith("opentelemetry")]
        print("ok")
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_the_library_never_prints() -> None:
    offenders = []
    for path in SRC.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id == "print"
            ):
                offenders.append(f"{path.relative_to(SRC)}:{node.lineno}")
    assert offenders == []


def test_every_module_logs_under_its_own_name() -> None:
    missing = []
    for path in SRC.rglob("*.py"):
        if path.parent.name == "cli":
            continue  # the command configures the package's logger for -v; it logs nothing
        text = path.read_text(encoding="utf-8")
        if "logging.getLogger(" in text:
            assert "getLogger(__name__)" in text, path
        elif "_log." in text or "logger." in text:
            missing.append(str(path.relative_to(SRC)))
    assert missing == []


# ----------------------------------------------------------------------------- progress


async def test_long_operations_report_progress() -> None:
    events: list[ProgressEvent] = []
    async with await Memory.open("memory://", tenant="acme", embedding_dim=16) as memory:
        await memory.add(
            [
                {"role": "user", "content": "Kim Lee runs the backup job."},
                {"role": "user", "content": "kim lee runs the backup job nightly."},
            ],
            progress=events.append,
        )
        store = memory.store
        await EntityResolver(store).resolve(progress=events.append)
        await MemoryConsolidator(store, memory.index).consolidate(progress=events.append)
        await ConflictDetector(store).detect_conflicts(progress=events.append)
        await memory.stats(progress=events.append)
    await gate_operating_characteristics(
        {"effects": [0.1], "run_counts": [5], "replicates": 2}, progress=events.append
    )
    seen = {e.operation for e in events}
    assert {"ingest", "resolve-entities", "consolidate", "detect-conflicts", "simulate",
            "stats"} <= seen
    for operation in ("ingest", "consolidate", "simulate", "resolve-entities"):
        last = [e for e in events if e.operation == operation][-1]
        assert last.total is not None and last.done == last.total and last.fraction == 1.0
    assert [e.done for e in events if e.operation == "simulate"] == [1, 2]


async def test_a_failing_callback_stops_the_operation() -> None:
    def boom(event: ProgressEvent) -> None:
        raise RuntimeError("stop")

    store = InMemoryMemoryStore()
    memory = Memory(store, __import__("cycgraph_memory").InMemoryMemoryIndex())
    with pytest.raises(RuntimeError):
        await memory.add([{"role": "user", "content": "Lee owns it."}], progress=boom)
    assert await store.find_facts() == []

"""Spans and logs as an operator integrating the library sees them (fifteenth audit pass).

Every public entry point runs under a recording tracer provider: its span, its parent,
its attributes, its status when it raises or is cancelled, and that it ends exactly once;
no attribute, event or log record carries the text of a message, a fact or a query; a
healthy run logs nothing at WARNING or above and the library adds no log handler.

Bugs this module found (each failed before its fix):

* ``Memory.remember``, ``Memory.forget`` and ``Memory.search`` refused bad arguments
  (a blank fact, an id that is not a UUID, ``erase=True``, an unknown mode) before opening
  their span: those failed calls left no span at all, so an error rate computed from
  ``cycgraph.memory.*`` spans missed them ("every Memory call opens a span");
* the maintenance passes outside the table (the retention gate pass, purge, re-embedding,
  export and import, conflict resolution) opened no span, although the page promised
  spans for "the maintenance passes".
"""

from __future__ import annotations

import asyncio
import io
import logging
import secrets
from collections.abc import Iterator
from typing import Any

import pytest
import pytest_asyncio

from cycgraph_memory import (
    ConflictDetector,
    HashingEmbeddingProvider,
    InMemoryOutcomeLedger,
    Memory,
    ProgressEvent,
    evaluate_retention,
    export,
    import_,
    purge,
    reembed,
)
from cycgraph_memory.errors import InvalidInputError

SECRETS = ("Xanthippe", "quokka-ledger", "zirconium")
SECRET_TEXT = f"{SECRETS[0]} Moravec owns the {SECRETS[1]} for {SECRETS[2]} billing."


@pytest.fixture(scope="module")
def spans() -> Iterator[Any]:
    """Finished spans (an in-memory exporter) and the ids of spans started but not ended."""
    from opentelemetry import trace
    from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        trace.set_tracer_provider(TracerProvider())
        provider = trace.get_tracer_provider()
    assert isinstance(provider, TracerProvider)

    class Ends(SpanProcessor):
        def __init__(self) -> None:
            self.open: dict[int, str] = {}
            self.ended: dict[int, int] = {}

        def on_start(self, span: Any, parent_context: Any = None) -> None:
            self.open[span.context.span_id] = span.name

        def on_end(self, span: Any) -> None:
            sid = span.context.span_id
            self.ended[sid] = self.ended.get(sid, 0) + 1
            self.open.pop(sid, None)

    exporter = InMemorySpanExporter()
    ends = Ends()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    provider.add_span_processor(ends)
    exporter.ends = ends  # type: ignore[attr-defined]
    yield exporter
    exporter.shutdown()


def finished(exporter: Any, name: str | None = None) -> list[Any]:
    found = exporter.get_finished_spans()
    return [s for s in found if name is None or s.name == name]


def errored(span: Any, exc_type: str) -> bool:
    events = [(e.name, dict(e.attributes or {})) for e in span.events]
    return (
        not span.status.is_ok
        and span.status.description == exc_type.rsplit(".", 1)[-1]
        and events == [("exception", {"exception.type": exc_type})]
    )


def no_content(exporter: Any) -> list[str]:
    """Attribute and event values of the finished spans quoting a secret word."""
    leaks = []
    for span in finished(exporter):
        values = [*dict(span.attributes or {}).values()]
        values += [v for e in span.events for v in dict(e.attributes or {}).values()]
        values += [span.status.description or ""]
        leaks += [f"{span.name}: {v}" for v in values if any(w in str(v) for w in SECRETS)]
    return leaks


@pytest_asyncio.fixture
async def memory() -> Any:
    async with await Memory.open("memory://", tenant="acme", embedding_dim=16) as opened:
        opened.ledger = opened.ledger or InMemoryOutcomeLedger()
        yield opened


async def test_bug_every_memory_call_that_raises_has_an_error_span(spans: Any, memory: Any) -> None:
    spans.clear()
    refused = [
        ("cycgraph.memory.remember", lambda: memory.remember("   "), "InvalidInputError"),
        ("cycgraph.memory.forget", lambda: memory.forget(["not-a-uuid"]), "InvalidInputError"),
        (
            "cycgraph.memory.forget",
            lambda: memory.forget([secrets.token_hex(16)], erase=True),
            "ErasureNotAvailableError",
        ),
        (
            "cycgraph.memory.search",
            lambda: memory.search(SECRET_TEXT, mode=SECRETS[1]),
            "InvalidInputError",
        ),
    ]
    for name, call, error in refused:
        spans.clear()
        with pytest.raises(Exception) as caught:
            await call()
        assert type(caught.value).__name__ == error
        [span] = finished(spans, name)
        assert errored(span, f"cycgraph_memory.errors.{error}"), (name, span.status)
        assert span.attributes["cycgraph.tenant"] == "acme"
        assert "cycgraph.mode" not in span.attributes  # never the text passed as a mode
        assert no_content(spans) == []


async def test_bug_maintenance_passes_open_spans_with_counts(spans: Any, memory: Any) -> None:
    report = await memory.add(
        [
            {"role": "user", "content": SECRET_TEXT},
            {"role": "user", "content": "Ravi Shah runs the payroll batch."},
        ]
    )
    store, index = memory.store, memory.index
    spans.clear()

    buffer = io.StringIO()
    exported = await export(store, buffer)
    [span] = finished(spans, "cycgraph.export")
    assert span.attributes["cycgraph.rows"] == sum(exported.counts.values()) > 0

    buffer.seek(0)
    async with await Memory.open("memory://", tenant="copy", embedding_dim=16) as other:
        imported = await import_(other.store, buffer)
    [span] = finished(spans, "cycgraph.import")
    assert span.attributes["cycgraph.rows"] == sum(imported.counts.values())
    assert imported.counts == exported.counts

    reembedded = await reembed(
        store, HashingEmbeddingProvider(dimensions=16), record_types=["fact"], index=index
    )
    [span] = finished(spans, "cycgraph.reembed")
    assert span.attributes["cycgraph.rows"] == reembedded.counts["fact"] == len(report.fact_ids)

    gate = await evaluate_retention(store, memory.ledger)
    [span] = finished(spans, "cycgraph.retention_gate")
    assert span.attributes["cycgraph.rows"] == len(gate.promoted) + len(gate.evicted) == 0

    resolved = await ConflictDetector(store, index).auto_resolve_all([])
    [span] = finished(spans, "cycgraph.resolve_conflicts")
    assert span.attributes["cycgraph.rows"] == resolved.resolved == 0

    dry = await purge(store, run_id="nope", dry_run=True)
    [span] = finished(spans, "cycgraph.purge")
    assert span.attributes["cycgraph.dry_run"] is True
    assert span.attributes["cycgraph.rows"] == sum(dry.counts().values()) == 0

    spans.clear()
    erased = await memory.erase(run_id="the-run-of-nobody")
    [outer] = finished(spans, "cycgraph.memory.erase")
    [inner] = finished(spans, "cycgraph.purge")
    assert inner.parent is not None and inner.parent.span_id == outer.context.span_id
    assert inner.attributes["cycgraph.rows"] == sum(erased.counts().values())
    assert no_content(spans) == []


async def test_failed_and_cancelled_calls_end_their_spans_once_with_an_error(
    spans: Any, memory: Any
) -> None:
    spans.clear()
    ends = spans.ends
    started = dict(ends.open)
    with pytest.raises(InvalidInputError):
        await import_(memory.store, io.StringIO(f'{{"not": "{SECRETS[0]}"}}\n'))
    [span] = finished(spans, "cycgraph.import")
    assert errored(span, "cycgraph_memory.errors.InvalidInputError")

    spans.clear()
    task = asyncio.create_task(
        memory.add([{"role": "user", "content": f"{SECRETS[0]} {i} runs cron."} for i in range(40)])
    )
    await asyncio.sleep(0.005)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    [add] = finished(spans, "cycgraph.memory.add")
    assert errored(add, "asyncio.exceptions.CancelledError")
    for span in finished(spans):
        assert ends.ended[span.context.span_id] == 1
    assert ends.open == started, "a span was left open"
    assert no_content(spans) == []


async def test_concurrent_tasks_parent_their_spans_to_their_own_caller(
    spans: Any, memory: Any
) -> None:
    from opentelemetry import trace

    await memory.add([{"role": "user", "content": SECRET_TEXT}])
    tracer = trace.get_tracer("audit15")
    spans.clear()

    async def under(name: str) -> int:
        with tracer.start_as_current_span(name) as parent:
            await asyncio.sleep(0)
            await memory.search(SECRET_TEXT, mode="text")
            await asyncio.sleep(0)
            await memory.search(SECRETS[1], mode="hybrid")
            return int(parent.get_span_context().span_id)

    ids = dict(zip("ABCD", await asyncio.gather(*(under(n) for n in "ABCD")), strict=True))
    searches = finished(spans, "cycgraph.memory.search")
    assert len(searches) == 8
    by_parent = {}
    for span in searches:
        by_parent.setdefault(span.parent.span_id, []).append(span.attributes["cycgraph.mode"])
    assert by_parent == {i: ["text", "hybrid"] for i in ids.values()}
    search_ids = {s.context.span_id for s in searches}
    for retrieve in finished(spans, "cycgraph.retrieve"):
        assert retrieve.parent.span_id in search_ids
    assert no_content(spans) == []


async def test_a_healthy_run_logs_nothing_at_warning_and_no_content(
    memory: Any, caplog: pytest.LogCaptureFixture
) -> None:
    package = logging.getLogger("cycgraph_memory")
    handlers = (list(package.handlers), list(logging.getLogger().handlers))
    caplog.set_level(logging.DEBUG, logger="cycgraph_memory")
    report = await memory.add([{"role": "user", "content": SECRET_TEXT}])
    await memory.search(SECRET_TEXT)
    fid = await memory.remember(f"Never page {SECRETS[0]} at night")
    await memory.forget([fid])
    await memory.stats()
    buffer = io.StringIO()
    await export(memory.store, buffer)
    await reembed(memory.store, HashingEmbeddingProvider(dimensions=16), index=memory.index)
    await evaluate_retention(memory.store, memory.ledger)
    await memory.erase(run_id="nobody", dry_run=True)
    await memory.erase(run_id="nobody")
    assert report.fact_ids
    records = [r for r in caplog.records if r.name.startswith("cycgraph_memory")]
    assert records, "the passes log at INFO"
    assert [r.getMessage() for r in records if r.levelno >= logging.WARNING] == []
    assert [r.getMessage() for r in records if any(w in r.getMessage() for w in SECRETS)] == []
    assert (list(package.handlers), list(logging.getLogger().handlers)) == handlers
    assert package.level == logging.DEBUG  # caplog's; the library set none of its own


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def audit_dsn(pg_databases: Any) -> str:
    """A database of this module's own (these tests commit)."""
    from cycgraph_memory.postgres import upgrade

    dsn = str(await pg_databases.create("a15_otel"))
    await upgrade(dsn, embedding_dim=8)
    return dsn


@pytest.mark.postgres
async def test_postgres_statement_counts_do_not_cross_between_concurrent_tasks(
    spans: Any, audit_dsn: str
) -> None:
    from opentelemetry import trace

    tenant = f"t_{secrets.token_hex(5)}"
    tracer = trace.get_tracer("audit15")
    async with await Memory.open(audit_dsn, tenant=tenant) as memory:
        await memory.add([{"role": "user", "content": SECRET_TEXT}])
        await memory.search(SECRETS[1], mode="text")  # warm: the schema's width is read once
        spans.clear()
        await memory.search(SECRETS[1], mode="text")
        [solo] = finished(spans, "cycgraph.retrieve")
        alone = solo.attributes["cycgraph.statement_count"]
        spans.clear()

        async def under(name: str) -> None:
            with tracer.start_as_current_span(name):
                await memory.search(SECRETS[1], mode="text")

        await asyncio.gather(*(under(n) for n in "ABC"))
        counts = [
            s.attributes["cycgraph.statement_count"] for s in finished(spans, "cycgraph.retrieve")
        ]
        assert counts == [alone] * 3
        spans.clear()
        erased = await memory.erase(tenant=True)
        [inner] = finished(spans, "cycgraph.purge")
        assert inner.attributes["cycgraph.tenant"] == tenant
        assert inner.attributes["cycgraph.rows"] == sum(erased.counts().values()) > 0
        assert inner.attributes["cycgraph.statement_count"] > 0
    assert no_content(spans) == []


async def test_bug_detect_conflicts_ends_its_compare_stage_without_pairs() -> None:
    # Before: no pair to compare sent no "compare" event, so the last event was the
    # load's (total unknown) and a progress bar never reached its end.
    async with await Memory.open("memory://", tenant="acme", embedding_dim=16) as memory:
        await memory.add([{"role": "user", "content": "Uma Rao owns the search API."}])
        events: list[ProgressEvent] = []
        found = await ConflictDetector(memory.store).detect_conflicts(progress=events.append)
    assert found == []
    assert [(e.stage, e.total) for e in events][-1] == ("compare", 0)
    assert events[-1].done == 0 and events[-1].fraction == 1.0
    assert [e.stage for e in events] == ["load"] * (len(events) - 1) + ["compare"]


@pytest.mark.postgres
async def test_postgres_bulk_import_opens_a_span(spans: Any, audit_dsn: str) -> None:
    from cycgraph_memory import Provenance, SemanticFact
    from cycgraph_memory.postgres import PostgresMemoryStore, bulk_import, create_engine_from_dsn

    engine = create_engine_from_dsn(audit_dsn, pool_size=2)
    store = PostgresMemoryStore(engine, tenant_id=f"t_{secrets.token_hex(5)}")
    facts = [
        SemanticFact(content=f"{SECRETS[0]} {i}", provenance=Provenance(source="agent"))
        for i in range(3)
    ]
    try:
        spans.clear()
        report = await bulk_import(store, facts=facts)
        [span] = finished(spans, "cycgraph.bulk_import")
        assert span.attributes["cycgraph.tenant"] == store.tenant_id
        assert span.attributes["cycgraph.rows"] == sum(report.counts.values()) == 3
        assert no_content(spans) == []
    finally:
        await store.clear()
        await engine.dispose()

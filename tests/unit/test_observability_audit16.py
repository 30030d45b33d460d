"""Spans of ``record_outcome`` and ``Memory.remember`` (sixteenth audit pass).

Bugs this module found (each failed before its fix):

* ``record_outcome`` (both ledgers) opened no span, unlike the other public operations:
  it now opens ``cycgraph.record_outcome`` with counts (``cycgraph.rows``: the run and
  the fact links written; ``cycgraph.erased_fact_ids``: erased ids left out), and a
  refused outcome ends the span with an error status;
* ``Memory.remember``'s span said ``cycgraph.rows=1`` when a repeated idempotency key
  wrote nothing (it returned the earlier id): it now says 0 then.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from pydantic import ValidationError

from cycgraph_memory import InMemoryOutcomeLedger, Memory, RunOutcome

SECRET = "Quetzalcoatlus-ledger"


@pytest.fixture(scope="module")
def spans() -> Iterator[Any]:
    """Finished spans of the library (an in-memory exporter on the global provider)."""
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        trace.set_tracer_provider(TracerProvider())
        provider = trace.get_tracer_provider()
    assert isinstance(provider, TracerProvider)
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield exporter
    exporter.shutdown()


def _finished(exporter: Any, name: str) -> list[Any]:
    return [s for s in exporter.get_finished_spans() if s.name == name]


async def _record_outcome_spans(spans: Any, ledger: Any, tenant: str | None) -> None:
    kept, gone = uuid.uuid4(), uuid.uuid4()
    spans.clear()
    await ledger.record_outcome(RunOutcome(run_id="r1", score=0.5, fact_ids=[kept, gone]))
    await ledger.erase_facts([gone])
    await ledger.record_outcome(RunOutcome(run_id="r2", score=0.5, fact_ids=[kept, gone, kept]))
    await ledger.record_outcome(RunOutcome(run_id="r3", score=0.5))
    first, second, third = _finished(spans, "cycgraph.record_outcome")
    for span, rows, erased in ((first, 3, 0), (second, 2, 1), (third, 1, 0)):
        assert span.status.is_ok
        assert span.attributes["cycgraph.rows"] == rows
        assert span.attributes["cycgraph.erased_fact_ids"] == erased
        assert span.attributes.get("cycgraph.tenant") == tenant

    spans.clear()
    with pytest.raises(ValidationError):
        await ledger.record_outcome({"run_id": SECRET, "score": "not a score", "fact_ids": []})
    [refused] = _finished(spans, "cycgraph.record_outcome")
    assert not refused.status.is_ok and refused.status.description == "ValidationError"
    assert [(e.name, dict(e.attributes or {})) for e in refused.events] == [
        ("exception", {"exception.type": "pydantic_core._pydantic_core.ValidationError"})
    ]
    values = [*dict(refused.attributes or {}).values(), refused.status.description]
    assert not any(SECRET in str(v) for v in values)  # no text of the refused outcome


async def test_in_memory_record_outcome_opens_a_span(spans: Any) -> None:
    await _record_outcome_spans(spans, InMemoryOutcomeLedger(), None)


@pytest.mark.postgres
async def test_postgres_record_outcome_opens_a_span(spans: Any, pg_sessionmaker: Any) -> None:
    from cycgraph_memory.postgres import PostgresOutcomeLedger

    tenant = f"otel16-{uuid.uuid4().hex[:8]}"
    await _record_outcome_spans(spans, PostgresOutcomeLedger(pg_sessionmaker, tenant), tenant)


async def _remember_rows(spans: Any, memory: Any) -> None:
    spans.clear()
    first = await memory.remember("Rotate the deploy keys monthly", idempotency_key="run:n:1")
    again = await memory.remember("Rotate the deploy keys monthly", idempotency_key="run:n:1")
    other = await memory.remember("Page the on-call owner first")
    assert again == first and other != first
    rows = [s.attributes["cycgraph.rows"] for s in _finished(spans, "cycgraph.memory.remember")]
    assert rows == [1, 0, 1]


async def test_remember_with_a_repeated_key_counts_no_row(spans: Any) -> None:
    async with await Memory.open("memory://", tenant="acme", embedding_dim=16) as memory:
        await _remember_rows(spans, memory)


@pytest.mark.postgres
async def test_remember_with_a_repeated_key_counts_no_row_on_postgres(
    spans: Any, pg_dsn: str
) -> None:
    tenant = f"otel16-{uuid.uuid4().hex[:8]}"
    async with await Memory.open(pg_dsn, tenant=tenant, embedding_dim=8) as memory:
        await _remember_rows(spans, memory)


async def test_a_writer_without_put_facts_once_counts_no_row_for_a_repeated_key() -> None:
    """The per-process key memory of a store without ``put_facts_once``."""
    from cycgraph_memory.inmemory.store import InMemoryMemoryStore
    from cycgraph_memory.integration import _counting_writer

    class PlainStore:
        def __init__(self) -> None:
            self._inner = InMemoryMemoryStore()

        async def put_facts(self, facts: Any) -> None:
            await self._inner.put_facts(facts)

    write = _counting_writer(PlainStore())  # type: ignore[arg-type]
    fact = {"content": "Rotate the deploy keys monthly", "tags": ["lesson"]}
    ids, wrote = await write([fact], {"idempotency_key": "k"})
    again, wrote_again = await write([fact], {"idempotency_key": "k"})
    plain, wrote_plain = await write([fact, fact])
    assert (wrote, wrote_again, wrote_plain) == (1, 0, 2) and again == ids and len(plain) == 2

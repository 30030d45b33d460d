"""Front doors audit 5: ``memory_stats`` arguments, span attributes, DSN parameters.

* ``memory_stats(top=-1)`` dropped the last tag in memory and raised ``StorageError`` on
  Postgres (``LIMIT -1``); ``top="2"`` and ``candidate_tag=5`` raised ``TypeError`` in
  memory and ``StorageError`` on Postgres; ``progress="x"`` was refused in memory and
  silently accepted on Postgres, whose counting path never called the callback at all.
* ``Memory.search(mode=<anything>)`` put the string on the span as ``cycgraph.mode``
  before it was refused, although no attribute may carry the caller's text.
* A DSN query parameter ``asyncpg.connect`` cannot take (libpq's ``sslmode``,
  ``connect_timeout``, ``application_name``; ``timeout`` given as text) escaped as a
  ``TypeError`` from inside SQLAlchemy's pool at the first connection.
"""

from __future__ import annotations

from typing import Any

import pytest

from cycgraph_memory import InvalidInputError, InvalidTypeError, Memory, ProgressEvent
from cycgraph_memory.inspection import memory_stats


async def _two_tags(memory: Memory) -> None:
    await memory.remember("the first fact", tags=["alpha", "beta"])
    await memory.remember("the second fact", tags=["alpha"])


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"top": -1}, InvalidInputError),
        ({"top": "2"}, InvalidTypeError),
        ({"top": 2.5}, InvalidTypeError),
        ({"top": True}, InvalidTypeError),
        ({"candidate_tag": ""}, InvalidInputError),
        ({"candidate_tag": 5}, InvalidTypeError),
        ({"candidate_tag": None}, InvalidTypeError),
        ({"progress": "not callable"}, InvalidTypeError),
    ],
)
async def test_memory_stats_refuses_bad_arguments_alike(
    memory: Memory, kwargs: dict[str, Any], error: type[Exception]
) -> None:
    await _two_tags(memory)
    with pytest.raises(error):
        await memory_stats(memory.store, **kwargs)


async def test_memory_stats_top_zero_and_one(memory: Memory) -> None:
    await _two_tags(memory)
    assert (await memory_stats(memory.store, top=0)).tags == {}
    top = (await memory_stats(memory.store, top=1)).tags
    assert len(top) == 1


async def test_memory_stats_reports_progress_on_every_backend(memory: Memory) -> None:
    await _two_tags(memory)
    events: list[ProgressEvent] = []
    await memory.stats(progress=events.append)
    assert events, "no progress event"
    assert all(e.operation == "stats" and e.stage == "facts" for e in events)
    assert events[-1].done == 2


# ----------------------------------------------------------------------------- spans


@pytest.fixture(scope="module")
def exporter() -> Any:
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        trace.set_tracer_provider(TracerProvider())
    provider = trace.get_tracer_provider()
    assert isinstance(provider, TracerProvider)
    memory_exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(memory_exporter))
    return memory_exporter


async def test_an_invalid_mode_never_reaches_a_span(exporter: Any) -> None:
    secret = "who holds the launch codes"
    exporter.clear()
    async with await Memory.open("memory://", tenant="acme") as memory:
        await memory.remember("Grace Hall runs the on-call rota.")
        with pytest.raises(InvalidInputError):
            await memory.search("on-call", mode=secret)  # type: ignore[arg-type]
        await memory.search("on-call", mode="text")
    spans = exporter.get_finished_spans()
    modes = [dict(s.attributes or {}).get("cycgraph.mode") for s in spans]
    assert "text" in modes
    assert all(m in (None, "vector", "text", "hybrid") for m in modes), modes
    assert secret not in repr([(dict(s.attributes or {}), s.events) for s in spans])


# ----------------------------------------------------------------------------- DSN


@pytest.mark.parametrize(
    "query",
    ["timeout=5", "direct_tls=false", "bogus=1", "sslrootcert=/x"],
)
def test_a_dsn_parameter_asyncpg_cannot_take_is_refused_up_front(query: str) -> None:
    from cycgraph_memory.postgres import asyncpg_url, create_engine_from_dsn

    dsn = f"postgresql://u@h/db?{query}"
    name = query.split("=")[0]
    with pytest.raises(InvalidInputError, match=name):
        asyncpg_url(dsn)
    with pytest.raises(InvalidInputError, match=name):
        create_engine_from_dsn(dsn)


def test_libpq_sslmode_becomes_asyncpgs_ssl() -> None:
    """libpq's spelling is translated, not refused (see tests/postgres/test_ops_audit5.py)."""
    from cycgraph_memory.postgres import asyncpg_url

    assert asyncpg_url("postgresql://u@h/db?sslmode=require").query == {"ssl": "require"}


@pytest.mark.parametrize(
    "query",
    ["host=/tmp/sock", "ssl=require", "port=5433", "target_session_attrs=any",
     "command_timeout=5", "prepared_statement_cache_size=0", "user=x&password=y"],
)
def test_dsn_parameters_asyncpg_takes_as_text_still_pass(query: str) -> None:
    from cycgraph_memory.postgres import asyncpg_url

    url = asyncpg_url(f"postgresql://u@h/db?{query}")
    assert url.drivername == "postgresql+asyncpg"
    assert set(url.query) == {kv.split("=")[0] for kv in query.split("&")}


@pytest.mark.postgres
async def test_a_dsn_with_ssl_disable_connects(pg_dsn: str) -> None:
    sep = "&" if "?" in pg_dsn else "?"
    async with await Memory.open(f"{pg_dsn}{sep}ssl=disable", tenant="dsn_ssl") as memory:
        stats = await memory.stats()
    assert stats.records["fact"].live == 0

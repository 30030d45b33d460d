"""Migrations open spans: ``cycgraph.migrate.upgrade`` / ``cycgraph.migrate.downgrade``.

Sixteenth audit: ``upgrade()`` and ``downgrade()`` opened no span, so a deploy's schema
change (minutes of ``ACCESS EXCLUSIVE`` locks for some revisions) was invisible in the
traces of the service that ran it. Each now opens one with the revision it started from,
the one asked for and the one committed, and never the DSN (its password, host or
database name); a refused or failed run ends it with an error status.
"""

from __future__ import annotations

from typing import Any

import pytest
import pytest_asyncio

from cycgraph_memory.errors import EmbeddingDimensionMismatchError, InvalidInputError
from cycgraph_memory.observability import span

pytestmark = [pytest.mark.postgres]

PASSWORD = "s3cret-Pw-16"
UPGRADE = "cycgraph.migrate.upgrade"
DOWNGRADE = "cycgraph.migrate.downgrade"


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


@pytest_asyncio.fixture(loop_scope="session")
async def fresh_dsn(pg_databases: Any) -> str:
    """A new, unmigrated database, its DSN carrying a password (trust auth ignores it)."""
    from sqlalchemy.engine import make_url

    dsn = str(await pg_databases.create("a16_migrate_span"))
    return make_url(dsn).set(password=PASSWORD).render_as_string(hide_password=False)


def _spans(exporter: Any, name: str) -> list[Any]:
    return [s for s in exporter.get_finished_spans() if s.name == name]


def _revision_attributes(sp: Any) -> dict[str, Any]:
    return {
        k.removeprefix("cycgraph."): v
        for k, v in sp.attributes.items()
        if k.startswith("cycgraph.revision")
    }


def _no_dsn(sp: Any, dsn: str) -> None:
    from sqlalchemy.engine import make_url

    url = make_url(dsn)
    secrets = [PASSWORD, dsn, str(url.database), str(url.query.get("host", ""))]
    for value in sp.attributes.values():
        for secret in secrets:
            assert secret not in str(value), (secret, value)
    for event in sp.events:
        for value in event.attributes.values():
            assert PASSWORD not in str(value) and str(url.database) not in str(value)


async def test_upgrade_and_downgrade_open_spans_with_their_revisions(
    exporter: Any, fresh_dsn: str
) -> None:
    from cycgraph_memory.postgres.migrate import downgrade, head_revision, upgrade

    head = head_revision()
    exporter.clear()
    with span("app.deploy"):
        await upgrade(fresh_dsn, embedding_dim=8)
    [deploy] = _spans(exporter, "app.deploy")
    [up] = _spans(exporter, UPGRADE)
    assert up.status.is_ok
    assert up.parent is not None and up.parent.span_id == deploy.context.span_id
    assert _revision_attributes(up) == {
        "revision_target": "head", "revision_from": "base", "revision_to": head,
    }
    _no_dsn(up, fresh_dsn)

    exporter.clear()
    await downgrade(fresh_dsn, "-1")
    [down] = _spans(exporter, DOWNGRADE)
    assert down.status.is_ok
    attrs = _revision_attributes(down)
    assert attrs["revision_target"] == "-1" and attrs["revision_from"] == head
    assert attrs["revision_to"] not in (head, "base")
    _no_dsn(down, fresh_dsn)

    exporter.clear()
    await upgrade(fresh_dsn)  # one revision up again, then nothing left to do
    await upgrade(fresh_dsn)
    first, second = _spans(exporter, UPGRADE)
    assert _revision_attributes(first)["revision_from"] == attrs["revision_to"]
    assert _revision_attributes(first)["revision_to"] == head
    assert _revision_attributes(second) == {
        "revision_target": "head", "revision_from": head, "revision_to": head,
    }

    exporter.clear()
    await downgrade(fresh_dsn)
    [down] = _spans(exporter, DOWNGRADE)
    assert _revision_attributes(down) == {
        "revision_target": "base", "revision_from": head, "revision_to": "base",
    }


async def test_a_failed_or_refused_migration_ends_its_span_with_an_error(
    exporter: Any, fresh_dsn: str
) -> None:
    from cycgraph_memory.postgres.migrate import downgrade, head_revision, upgrade

    await upgrade(fresh_dsn, embedding_dim=8)
    exporter.clear()
    # refused before any work: the span is open already and fails
    with pytest.raises(InvalidInputError):
        await upgrade(fresh_dsn, hnsw_m=1)
    # an unknown revision: Alembic refuses it inside the run
    with pytest.raises(InvalidInputError):
        await downgrade(fresh_dsn, "0000nope")
    # refused by env.py before any revision runs
    with pytest.raises(EmbeddingDimensionMismatchError):
        await upgrade(fresh_dsn, embedding_dim=16)
    refused, mismatch = _spans(exporter, UPGRADE)
    [unknown] = _spans(exporter, DOWNGRADE)
    for sp, kind in (
        (refused, InvalidInputError), (unknown, InvalidInputError),
        (mismatch, EmbeddingDimensionMismatchError),
    ):
        assert not sp.status.is_ok and sp.status.description == kind.__name__
        [event] = [e for e in sp.events if e.name == "exception"]
        assert event.attributes["exception.type"].endswith(kind.__name__)
        assert "cycgraph.revision_to" not in sp.attributes
        _no_dsn(sp, fresh_dsn)
    assert _revision_attributes(refused) == {"revision_target": "head"}
    assert _revision_attributes(unknown) == {
        "revision_target": "0000nope", "revision_from": head_revision(),
    }
    assert _revision_attributes(mismatch)["revision_from"] == head_revision()
    await downgrade(fresh_dsn)


_CLI_UNDER_A_PROVIDER = r"""
import json, sys
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from alembic.config import main

exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(provider)
try:
    main(argv=sys.argv[1:])
except SystemExit:
    pass
print(json.dumps([
    {"name": s.name, "ok": s.status.is_ok, "attributes": dict(s.attributes),
     "events": [dict(e.attributes) for e in s.events]}
    for s in exporter.get_finished_spans()
]))
"""


def _cli(dsn: str, *args: str) -> list[dict[str, Any]]:
    """Run ``alembic <args>`` in a process with a tracer provider; its finished spans."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    env = {**os.environ, "CYCGRAPH_MEMORY_DSN": dsn}
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(repo / "src"), env.get("PYTHONPATH", "")) if p
    )
    done = subprocess.run(
        [sys.executable, "-c", _CLI_UNDER_A_PROVIDER, "-c", str(repo / "alembic.ini"), *args],
        env=env, capture_output=True, text=True, check=False, timeout=300,
    )
    assert done.returncode == 0, done.stderr
    spans: list[dict[str, Any]] = json.loads(done.stdout.strip().splitlines()[-1])
    return spans


def test_the_alembic_command_line_opens_the_same_spans(fresh_dsn: str) -> None:
    from cycgraph_memory.postgres.migrate import head_revision

    head = head_revision()
    [up] = _cli(fresh_dsn, "-x", "embedding_dim=8", "upgrade", "head")
    assert up["name"] == UPGRADE and up["ok"]
    assert {k: v for k, v in up["attributes"].items() if "revision" in k} == {
        "cycgraph.revision_target": "head",
        "cycgraph.revision_from": "base",
        "cycgraph.revision_to": head,
    }
    [down] = _cli(fresh_dsn, "downgrade", "-1")
    assert down["name"] == DOWNGRADE and down["ok"]
    assert down["attributes"]["cycgraph.revision_target"] == "-1"
    assert down["attributes"]["cycgraph.revision_from"] == head
    assert down["attributes"]["cycgraph.revision_to"] not in (head, "base")
    # refused by env.py (another width): error status, the revision it stayed at
    [refused] = _cli(fresh_dsn, "-x", "embedding_dim=16", "upgrade", "head")
    assert refused["name"] == UPGRADE and not refused["ok"]
    assert refused["attributes"]["cycgraph.revision_from"] == down["attributes"][
        "cycgraph.revision_to"
    ]
    assert "cycgraph.revision_to" not in refused["attributes"]
    assert [e["exception.type"] for e in refused["events"]] == ["alembic.util.exc.CommandError"]
    assert _cli(fresh_dsn, "current") == []  # only upgrade and downgrade open one
    for sp in (up, down, refused):
        for value in [*sp["attributes"].values(), *(v for e in sp["events"] for v in e.values())]:
            assert PASSWORD not in str(value) and fresh_dsn not in str(value)
    _cli(fresh_dsn, "downgrade", "base")

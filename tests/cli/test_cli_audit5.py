"""CLI audit 5: strict JSON from the gate commands, DSN parameters asyncpg cannot take.

* ``gate evaluate --json`` and ``gate audit --json`` printed ``"df": Infinity`` (a z-test
  whose variances all come from the floor has infinite degrees of freedom): not JSON, so
  ``jq`` and every strict parser refused the "one JSON document" ``--json`` promises.
* ``--dsn 'postgresql://...?sslmode=require'`` (libpq's spelling, what managed Postgres
  hands out) ended in a ``TypeError`` traceback from inside SQLAlchemy's pool instead of
  one error line.
"""

from __future__ import annotations

import asyncio
import json
import secrets
from collections.abc import Callable
from typing import Any

import pytest
import pytest_asyncio
from typer.testing import CliRunner

from cycgraph_memory import Memory, RunOutcome
from cycgraph_memory.cli import app
from cycgraph_memory.cli._common import Settings, emit_json


def _strict(text: str) -> Any:
    """``json.loads`` refusing ``Infinity`` / ``NaN`` (what jq and JavaScript do)."""

    def refuse(constant: str) -> Any:
        raise ValueError(f"not JSON: {constant}")

    return json.loads(text, parse_constant=refuse)


def test_emit_json_writes_non_finite_floats_as_strings(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from cycgraph_memory.records import RetentionEvidence

    evidence = RetentionEvidence(lift=0.1, se=0.1, df=float("inf"), p_promote=0.5,
                                 p_evict=0.1, trials=3, baseline_runs=3)
    emit_json(Settings(), {"evidence": evidence, "rows": [float("-inf"), float("nan"), 1.5],
                           "nested": {"x": (float("inf"),)}})
    payload = _strict(capsys.readouterr().out)
    assert payload["evidence"]["df"] == "Infinity"
    assert payload["rows"] == ["-Infinity", "NaN", 1.5]
    assert payload["nested"] == {"x": ["Infinity"]}
    # The library's models read the string back as the float.
    assert RetentionEvidence.model_validate(payload["evidence"]).df == float("inf")


# ----------------------------------------------------------------------------- Postgres


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def audit_dsn(pg_databases: Any) -> str:
    """A database of this module's own (the commands commit for real)."""
    from cycgraph_memory.postgres import upgrade

    dsn = str(await pg_databases.create("audit5_cli"))
    await upgrade(dsn, embedding_dim=8)
    return dsn


@pytest.fixture
def cli(audit_dsn: str) -> Callable[..., Any]:
    tenant = f"a5_{secrets.token_hex(5)}"
    runner = CliRunner()

    def invoke(*args: str, dsn: str = audit_dsn) -> Any:
        return runner.invoke(app, ["--dsn", dsn, "--tenant", tenant, *args])

    invoke.tenant = tenant  # type: ignore[attr-defined]
    invoke.dsn = audit_dsn  # type: ignore[attr-defined]
    return invoke


def _seed_a_promotable_lesson(dsn: str, tenant: str) -> None:
    """A candidate lesson whose runs score clearly higher (floor-variance z-test: df = inf)."""

    async def work() -> None:
        async with await Memory.open(dsn, tenant=tenant) as memory:
            fact_id = await memory.remember("Always check the cache first.", tags=["candidate"])
            assert memory.ledger is not None
            for i in range(30):
                used = [fact_id] if i % 2 else []
                await memory.ledger.record_outcome(
                    RunOutcome(run_id=f"run-{i}", score=0.8 if i % 2 else 0.5, fact_ids=used)
                )

    asyncio.run(work())


@pytest.mark.postgres
def test_gate_evaluate_and_audit_print_strict_json(cli: Callable[..., Any]) -> None:
    _seed_a_promotable_lesson(cli.dsn, cli.tenant)  # type: ignore[attr-defined]
    evaluated = cli("gate", "evaluate", "--json")
    assert evaluated.exit_code == 0, evaluated.output
    report = _strict(evaluated.stdout)
    [promoted] = report["promoted"]
    assert promoted["evidence"]["df"] == "Infinity"
    audited = cli("gate", "audit", "--json")
    assert audited.exit_code == 0, audited.output
    entries = _strict(audited.stdout)["entries"]
    assert [e["verdict"] for e in entries] == ["promoted"]
    assert entries[0]["evidence"]["df"] == "Infinity"


@pytest.mark.postgres
@pytest.mark.parametrize("query", ["timeout=5", "sslrootcert=/x", "bogus=1"])
@pytest.mark.parametrize("command", [["stats"], ["db", "current"], ["search", "x"]])
def test_a_dsn_parameter_asyncpg_cannot_take_is_one_error_line(
    cli: Callable[..., Any], query: str, command: list[str]
) -> None:
    dsn = cli.dsn  # type: ignore[attr-defined]
    result = cli(*command, dsn=f"{dsn}{'&' if '?' in dsn else '?'}{query}")
    assert result.exit_code == 1, result.output
    assert isinstance(result.exception, SystemExit), result.exception  # no traceback
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert query.split("=")[0] in lines[0]
    assert "Traceback" not in result.output


@pytest.mark.postgres
@pytest.mark.parametrize(
    "query", ["ssl=disable", "sslmode=disable", "connect_timeout=5", "application_name=x"]
)
def test_a_dsn_with_ssl_or_libpq_parameters_works(cli: Callable[..., Any], query: str) -> None:
    dsn = cli.dsn  # type: ignore[attr-defined]
    result = cli("db", "current", "--json", dsn=f"{dsn}{'&' if '?' in dsn else '?'}{query}")
    assert result.exit_code == 0, result.output
    assert _strict(result.stdout)["up_to_date"] is True


# ----------------------------------------------------------------------------- stdin


@pytest.mark.parametrize(
    "data",
    [b'{"role": "user", "content": "caf\xe9"}\n',  # Latin-1 inside a JSON string
     b'\xff\xfe{"role": "user", "content": "x"}\n',  # UTF-16 byte order mark
     b'{"role": "user", "content": "x", "metadata": {"k": "\xe9t\xe9"}}\n'],
)
def test_non_utf8_stdin_is_reported_like_a_non_utf8_file(data: bytes, tmp_path: Any) -> None:
    """``ingest -`` named a Latin-1 byte "a lone surrogate" or "not JSON" (stdin's text
    layer uses surrogateescape); a file with the same bytes says "not UTF-8 text"."""
    import os
    import subprocess
    import sys

    file = tmp_path / "messages.jsonl"
    file.write_bytes(data)
    env = {**os.environ, "PYTHONIOENCODING": "", "CYCGRAPH_MEMORY_DSN": "postgresql://u@h/db"}
    outputs = []
    for source, stdin in ((str(file), b""), ("-", data)):
        done = subprocess.run(
            [sys.executable, "-m", "cycgraph_memory.cli", "ingest", source],
            input=stdin, capture_output=True, env=env, timeout=120, check=False,
        )
        assert done.returncode == 1, done.stderr
        lines = done.stderr.decode().strip().splitlines()
        assert len(lines) == 1 and "not UTF-8 text" in lines[0], lines
        outputs.append(lines[0].split(": ", 2)[-1])
    assert outputs[0] == outputs[1]  # the same byte and reason


# ----------------------------------------------------------------------------- vector indexes


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def empty_dsn(pg_databases: Any) -> str:
    """A database without the schema."""
    return str(await pg_databases.create("audit5_empty"))


@pytest.mark.postgres
def test_dedicate_large_tenants_without_the_schema_is_exit_3(empty_dsn: str) -> None:
    """``db vector-indexes dedicate --min-documents N`` on an unmigrated database ended in
    a SQLAlchemy ``ProgrammingError`` traceback (the raw engine's errors were not the
    library's)."""
    result = CliRunner().invoke(
        app, ["--dsn", empty_dsn, "db", "vector-indexes", "dedicate", "--min-documents", "5"]
    )
    assert result.exit_code == 3, result.output
    assert isinstance(result.exception, SystemExit), result.exception
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: schema not ready"), result.stderr


@pytest.mark.postgres
def test_a_min_documents_past_64_bits_selects_no_tenant(cli: Callable[..., Any]) -> None:
    """It was sent as a bind parameter: "value out of int64 range" and a traceback."""
    result = cli("db", "vector-indexes", "dedicate", "--min-documents", str(2**70), "--json")
    assert result.exit_code == 0, result.output
    assert _strict(result.stdout) == {"built": {}}


@pytest.mark.postgres
async def test_tenant_index_functions_raise_library_errors(empty_dsn: str) -> None:
    from cycgraph_memory import SchemaNotReadyError
    from cycgraph_memory.postgres import create_engine_from_dsn
    from cycgraph_memory.postgres.tenant_indexes import dedicate_large_tenants

    engine = create_engine_from_dsn(empty_dsn)
    try:
        with pytest.raises(SchemaNotReadyError):
            await dedicate_large_tenants(engine, min_documents=1)
    finally:
        await engine.dispose()


# ----------------------------------------------------------------------------- encodings


def _run_with_encoding(encoding: str, dsn: str, tenant: str, *args: str) -> Any:
    import os
    import subprocess
    import sys

    env = {**os.environ, "PYTHONIOENCODING": encoding, "CYCGRAPH_MEMORY_DSN": dsn,
           "CYCGRAPH_MEMORY_TENANT": tenant, "COLUMNS": "200"}
    return subprocess.run(
        [sys.executable, "-m", "cycgraph_memory.cli", *args],
        capture_output=True, env=env, timeout=120, check=False,
    )


NON_LATIN = "Zoë Müller owns the café\u2028service 日本 🚀."


@pytest.mark.postgres
@pytest.mark.parametrize("encoding", ["ascii", "latin-1"])
def test_json_and_exports_survive_a_narrow_stdout_encoding(
    cli: Callable[..., Any], encoding: str
) -> None:
    """``--json`` (and ``export graph`` on stdout) raised ``UnicodeEncodeError`` with a
    traceback when stdout's encoding (a pipe on Windows: the ANSI code page) could not
    hold a stored character."""
    from cycgraph_memory import Entity, Provenance

    dsn, tenant = cli.dsn, cli.tenant  # type: ignore[attr-defined]

    async def seed() -> None:
        async with await Memory.open(dsn, tenant=tenant) as memory:
            await memory.remember(NON_LATIN, tags=["enc"])
            await memory.store.put_entities(
                [Entity(name=NON_LATIN, entity_type="thing", provenance=Provenance(source="agent"))]
            )

    asyncio.run(seed())
    found = _run_with_encoding(encoding, dsn, tenant, "search", "--tag", "enc", "--json")
    assert found.returncode == 0, found.stderr.decode()
    assert _strict(found.stdout.decode("ascii" if encoding == "ascii" else "latin-1"))[
        "facts"][0]["content"] == NON_LATIN
    stats = _run_with_encoding(encoding, dsn, tenant, "stats", "--json")
    assert stats.returncode == 0, stats.stderr.decode()
    assert json.loads(stats.stdout)["tags"] == {"candidate": 1, "enc": 1}
    for fmt in ("json", "graphml", "mermaid"):
        exported = _run_with_encoding(encoding, dsn, tenant, "export", "graph", "--format", fmt)
        assert exported.returncode == 0, exported.stderr.decode()
        text = exported.stdout.decode("utf-8")  # UTF-8, as with --output
        if fmt == "json":
            assert [n["name"] for n in json.loads(text)["nodes"]] == [NON_LATIN]
        elif fmt == "graphml":
            assert NON_LATIN in text
        else:
            assert "日本 🚀" in text
    table = _run_with_encoding(encoding, dsn, tenant, "search", "--tag", "enc")
    assert table.returncode == 1
    err = table.stderr.decode().strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and "PYTHONIOENCODING" in err[0], err


# ----------------------------------------------------------------------------- chart


def test_simulate_chart_draws_every_rate_even_for_one_run_volume(tmp_path: Any) -> None:
    """With one ``--runs`` value every line had one point, which SVG draws as nothing: the
    chart showed axes and a legend but no rate at all."""
    import xml.etree.ElementTree as ET

    chart = tmp_path / "oc.svg"
    result = CliRunner().invoke(
        app, ["gate", "simulate", "--runs", "5", "--replicates", "2", "--effects", "0.1,-0.1",
              "--noise", "0,0.1", "--chart", str(chart), "--json"],
    )
    assert result.exit_code == 0, result.output
    rows = _strict(result.stdout)["rows"]
    svg = ET.parse(chart).getroot()
    ns = "{http://www.w3.org/2000/svg}"
    markers = [(float(c.get("cx", "nan")), float(c.get("cy", "nan")), c.get("fill"))
               for c in svg.iter(f"{ns}circle")]
    # One marker per rate (promotion and eviction) per cell: 2 effects x 2 noises x 1 volume.
    assert len(rows) == 4 and len(markers) == 2 * len(rows)
    assert all(y == y for _, y, _ in markers)  # no NaN coordinates

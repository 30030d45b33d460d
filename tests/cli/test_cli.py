"""The ``cycgraph-memory`` command through Typer's CliRunner, against the test server.

Every command runs for real (real commits) in a random tenant of the session's migrated
database; output, the ``--json`` shape and exit codes are checked, and ``--dry-run`` is
proven to change nothing by comparing full snapshots of the tenant before and after.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from typer.testing import CliRunner

from cycgraph_memory import Entity, Memory, Provenance, SemanticFact
from cycgraph_memory.cli import app, main

pytestmark = pytest.mark.postgres

MESSAGES = [
    {
        "id": "00000000-0000-4000-8000-000000000001",
        "role": "user",
        "content": "Alice Smith maintains the billing service.",
        "timestamp": "2026-01-01T10:00:00Z",
    },
    {
        "id": "00000000-0000-4000-8000-000000000002",
        "role": "assistant",
        "content": "Noted: Alice Smith deploys the billing service on Fridays.",
        "timestamp": "2026-01-01T10:01:00Z",
    },
    {
        "id": "00000000-0000-4000-8000-000000000003",
        "role": "user",
        "content": "Bob Jones owns the search cluster.",
        "timestamp": "2026-01-01T10:02:00Z",
    },
]


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def cli_dsn(pg_databases: Any) -> str:
    """A database of this module's own: the commands commit for real, and other modules
    count rows of the session database."""
    from cycgraph_memory.postgres import upgrade

    dsn = str(await pg_databases.create("w20_cli"))
    await upgrade(dsn, embedding_dim=8)
    return dsn


@pytest.fixture
def tenant() -> str:
    return f"cli_{secrets.token_hex(5)}"


@pytest.fixture
def cli(cli_dsn: str, tenant: str) -> Callable[..., Any]:
    runner = CliRunner()

    def invoke(*args: str, input: str | None = None, dsn: str | None = cli_dsn) -> Any:
        prefix = ["--dsn", dsn] if dsn else []
        return runner.invoke(app, [*prefix, "--tenant", tenant, *args], input=input)

    return invoke


def _json(result: Any) -> Any:
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def _one_line_error(result: Any, code: int, text: str) -> None:
    assert result.exit_code == code, result.output
    assert isinstance(result.exception, SystemExit)  # no traceback escaped
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert text in lines[0]
    assert "Traceback" not in result.output


def _with_memory(dsn: str, tenant: str, work: Callable[[Memory], Any]) -> Any:
    async def go() -> Any:
        async with await Memory.open(dsn, tenant=tenant) as memory:
            return await work(memory)

    return asyncio.run(go())


def _snapshot(dsn: str, tenant: str) -> Any:
    async def read(memory: Memory) -> Any:
        store: Any = memory.store
        facts = await store.find_facts(include_invalidated=True)
        entities = await store.find_entities(include_invalidated=True)
        edges = await store.get_relationships_for_entities(
            [e.id for e in entities], include_invalidated=True
        )
        themes = await store.list_themes(include_invalidated=True)
        episodes = await store.list_episodes(include_invalidated=True)
        return [
            [r.model_dump(mode="json") for r in group]
            for group in (facts, entities, edges, themes, episodes)
        ]

    return _with_memory(dsn, tenant, read)


def _ingest(cli: Callable[..., Any], tmp_path: Path, messages: list[dict[str, Any]]) -> Any:
    path = tmp_path / "messages.jsonl"
    path.write_text("\n".join(json.dumps(m) for m in messages) + "\n", encoding="utf-8")
    return _json(cli("ingest", str(path), "--tag", "notes", "--json"))


# ----------------------------------------------------------------------------- db


def test_db_current_reports_head_and_width(cli: Callable[..., Any]) -> None:
    data = _json(cli("db", "current", "--json"))
    assert data["up_to_date"] is True and data["current"] == data["head"]
    assert data["embedding_dim"] == 8
    table = cli("db", "current")
    assert table.exit_code == 0 and data["head"] in table.stdout


def test_db_upgrade_and_downgrade_a_fresh_database(
    pg_databases: Any, cli: Callable[..., Any]
) -> None:
    dsn = asyncio.run(_create(pg_databases))
    before = _json(cli("db", "current", "--json", dsn=dsn))
    assert before["current"] is None and before["up_to_date"] is False
    _one_line_error(cli("stats", dsn=dsn), 3, "db upgrade")
    up = _json(cli("db", "upgrade", "--embedding-dim", "16", "--json", dsn=dsn))
    assert up["up_to_date"] is True and up["embedding_dim"] == 16
    _one_line_error(cli("db", "downgrade", "base", dsn=dsn), 1, "--yes")
    down = _json(cli("db", "downgrade", "base", "--yes", "--json", dsn=dsn))
    assert down["current"] is None


async def _create(pg_databases: Any) -> str:
    # The factory's admin engine is created and disposed in this loop.
    return str(await pg_databases.create("w20_cli"))


def test_db_vector_indexes_dedicate_list_drop(cli: Callable[..., Any], tenant: str) -> None:
    assert _json(cli("db", "vector-indexes", "list", "--json")) == []
    built = _json(cli("db", "vector-indexes", "dedicate", "--json"))["built"]
    assert list(built) == [tenant] and len(built[tenant]) == 5
    assert cli("db", "vector-indexes", "dedicate").stdout.startswith("nothing to build")
    listed = _json(cli("db", "vector-indexes", "list", "--json"))
    assert {(r["tenant"], r["valid"]) for r in listed} == {(tenant, True)}
    assert sorted(r["table"] for r in listed) == sorted(
        ["entities", "themes", "episodes", "episode_messages", "facts"]
    )
    assert tenant in cli("db", "vector-indexes", "list").stdout
    # No tenant of this database holds a million facts: nothing to build.
    assert _json(
        cli("db", "vector-indexes", "dedicate", "--min-documents", "1000000", "--json")
    ) == {"built": {}}
    dropped = _json(cli("db", "vector-indexes", "drop", "--json"))["dropped"]
    assert sorted(dropped) == sorted(r["index"] for r in listed)
    assert _json(cli("db", "vector-indexes", "list", "--json")) == []
    assert cli("db", "vector-indexes", "drop").stdout.startswith("no dedicated index")
    _one_line_error(
        cli("db", "vector-indexes", "dedicate", "--min-documents", "0"), 1, "--min-documents"
    )


def test_embedded_server_start_uri_stop(tmp_path: Path) -> None:
    runner = CliRunner()
    data_dir = str(tmp_path / "pgdata")
    base = ["--data-dir", data_dir]
    missing = runner.invoke(app, [*base, "db", "embedded", "uri"])
    assert missing.exit_code == 1 and "no embedded server" in missing.stderr
    started = runner.invoke(app, [*base, "db", "embedded", "start", "--json"])
    try:
        assert started.exit_code == 0, started.output
        dsn = json.loads(started.stdout)["dsn"]
        assert dsn.startswith("postgresql://")
        uri = runner.invoke(app, [*base, "db", "embedded", "uri"])
        assert uri.exit_code == 0 and uri.stdout.strip() == dsn
        # Without --dsn the commands use the running embedded server.
        current = runner.invoke(app, [*base, "db", "current", "--json"])
        assert current.exit_code == 0 and json.loads(current.stdout)["current"] is None

        # Memory.open without a DSN uses the embedded server in data_dir too.
        async def facade() -> int:
            async with await Memory.open(None, data_dir=data_dir, migrate=True) as memory:
                await memory.add(MESSAGES)
                return len((await memory.search("billing", mode="text")).result.facts)

        assert asyncio.run(facade()) >= 1
        assert runner.invoke(app, [*base, "stats", "--json"]).exit_code == 0
    finally:
        stopped = runner.invoke(app, [*base, "db", "embedded", "stop"])
    assert stopped.exit_code == 0, stopped.output
    after = runner.invoke(app, [*base, "db", "embedded", "uri", "--json"])
    assert json.loads(after.stdout)["running"] is False


def test_no_database_is_a_one_line_error(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["--data-dir", str(tmp_path / "none"), "stats"])
    _one_line_error(result, 4, "CYCGRAPH_MEMORY_DSN")


# ----------------------------------------------------------------------------- data


def test_stats_ingest_and_search(cli: Callable[..., Any], tmp_path: Path) -> None:
    empty = _json(cli("stats", "--json"))
    assert set(empty) >= {
        "tenant",
        "records",
        "tags",
        "themes",
        "index",
        "ledger_runs",
        "pending_candidates",
    }
    assert all(
        c == {"live": 0, "invalidated": 0, "quarantined": 0} for c in empty["records"].values()
    )

    report = _ingest(cli, tmp_path, MESSAGES)
    assert report["messages_ingested"] == 3 and report["facts"] >= 3
    again = _ingest(cli, tmp_path, MESSAGES)
    assert again["messages_ingested"] == 0 and again["messages_skipped"] == 3

    stats = _json(cli("stats", "--json"))
    assert stats["records"]["message"]["live"] == 3
    assert stats["tags"]["notes"] == report["facts"]
    table = cli("stats")
    assert table.exit_code == 0 and "relationship" in table.stdout

    found = _json(cli("search", "who maintains the billing service?", "--json"))
    assert set(found) == {"facts", "messages", "themes", "entities", "relationships", "prompt"}
    assert found["facts"] and "fused_score" in found["facts"][0]["score"]
    assert any("Alice Smith maintains" in f["content"] for f in found["facts"])
    assert found["messages"] and found["prompt"].startswith("## Relevant Memory")
    shown = cli("search", "who maintains the billing service?")
    assert shown.exit_code == 0 and "facts" in shown.stdout and "turns" in shown.stdout

    by_entity = _json(cli("search", "--entity", "Alice Smith", "--json"))
    assert "Alice Smith" in [e["name"] for e in by_entity["entities"]]
    assert any(r["source"] == "Alice Smith" for r in by_entity["relationships"])
    assert "subgraph" in cli("search", "--entity", "Alice Smith").stdout
    by_tag = _json(cli("search", "--tag", "notes", "--limit", "50", "--json"))
    assert len(by_tag["facts"]) == report["facts"]

    _one_line_error(cli("search", "--entity", "Nobody Here"), 1, "not found")
    _one_line_error(cli("search"), 1, "--tag or --entity")
    _one_line_error(cli("search", "x", "--mode", "fuzzy"), 1, "--mode")
    _one_line_error(cli("search", "x", "--limit", "1000"), 1, "limit")


def test_ingest_reads_stdin_and_rejects_bad_lines(
    cli: Callable[..., Any], cli_dsn: str, tenant: str
) -> None:
    lines = "\n".join(json.dumps(m) for m in MESSAGES[:1])
    data = _json(cli("ingest", "-", "--json", input=lines))
    assert data["messages_ingested"] == 1
    before = _snapshot(cli_dsn, tenant)
    _one_line_error(
        cli("ingest", "-", input='{"role": "user", "content": "ok"}\nnot json\n'), 1, "line 2"
    )
    _one_line_error(cli("ingest", "-", input='{"role": "robot", "content": "x"}\n'), 1, "role")
    _one_line_error(cli("ingest", "/no/such/file.jsonl"), 1, "no such file")
    assert _snapshot(cli_dsn, tenant) == before


def test_user_errors_are_one_line_never_a_traceback(
    cli: Callable[..., Any], cli_dsn: str, tenant: str, tmp_path: Path
) -> None:
    before = _snapshot(cli_dsn, tenant)
    binary = tmp_path / "binary.jsonl"
    binary.write_bytes(b'\xff\xfe{"role":"user"}\n')
    _one_line_error(cli("ingest", str(binary)), 1, "not UTF-8")
    deep = tmp_path / "deep.jsonl"
    deep.write_text("[" * 200_000 + "]" * 200_000 + "\n", encoding="utf-8")
    _one_line_error(cli("ingest", str(deep)), 1, "line 1")
    bad = '{"role": "user", "content": "ok"}\n{"role": "robot", "content": "x"}\n'
    _one_line_error(cli("ingest", "-", input=bad), 1, "line 2: invalid message (role")
    _one_line_error(
        cli("export", "graph", "-o", str(tmp_path / "no" / "dir.json")), 1, "cannot write"
    )
    _one_line_error(cli("export", "graph", "-o", str(tmp_path)), 1, "cannot write")
    _one_line_error(cli("db", "upgrade", "bogusrev"), 1, "revision 'bogusrev'")
    _one_line_error(cli("db", "downgrade", "bogusrev", "--yes"), 1, "revision 'bogusrev'")
    assert _snapshot(cli_dsn, tenant) == before


def test_export_graph_formats(cli: Callable[..., Any], tmp_path: Path) -> None:
    _ingest(cli, tmp_path, MESSAGES)
    graph = _json(cli("export", "graph", "--format", "json"))
    names = {n["name"] for n in graph["nodes"]}
    assert {"Alice Smith", "Bob Jones"} <= names
    ids = {n["id"] for n in graph["nodes"]}
    assert graph["edges"] and all(e["source"] in ids and e["target"] in ids for e in graph["edges"])
    graphml = cli("export", "graph", "--format", "graphml")
    assert graphml.exit_code == 0 and graphml.stdout.startswith("<?xml")
    assert "Alice Smith" in graphml.stdout and "<edge " in graphml.stdout
    mermaid = cli("export", "graph", "-f", "mermaid")
    assert mermaid.stdout.startswith("flowchart LR") and "-->|" in mermaid.stdout
    out = tmp_path / "graph.mmd"
    written = _json(cli("export", "graph", "-f", "mermaid", "-o", str(out), "--json"))
    assert written["entities"] == len(graph["nodes"]) and out.read_text() == mermaid.stdout
    _one_line_error(cli("export", "graph", "--format", "dot"), 1, "--format")


# ----------------------------------------------------------------------------- maintenance


def _duplicate_entities(dsn: str, tenant: str) -> None:
    async def work(memory: Memory) -> None:
        prov = Provenance(source="system")
        a = Entity(name="Carol White", entity_type="person", provenance=prov)
        b = Entity(name="carol white", entity_type="person", provenance=prov)
        await memory.store.put_entities([a, b])
        await memory.store.put_facts(
            [
                SemanticFact(
                    content="Carol White runs payroll.", entity_ids=[b.id], provenance=prov
                ),
            ]
        )

    _with_memory(dsn, tenant, work)


def test_resolve_entities_dry_run_changes_nothing(
    cli: Callable[..., Any], cli_dsn: str, tenant: str
) -> None:
    _duplicate_entities(cli_dsn, tenant)
    before = _snapshot(cli_dsn, tenant)
    plan = _json(cli("resolve-entities", "--dry-run", "--json"))
    assert plan["dry_run"] is True and plan["report"]["entities_absorbed"] == 1
    assert {m["kind"] for m in plan["mutations"]} >= {"entity", "fact"}
    assert set(plan["mutations"][0]) == {"action", "kind", "id", "reason", "record"}
    shown = cli("resolve-entities", "--dry-run")
    assert shown.exit_code == 0 and "would be applied" in shown.stdout
    assert _snapshot(cli_dsn, tenant) == before

    applied = _json(cli("resolve-entities", "--json"))
    assert applied["report"]["entities_absorbed"] == 1 and "mutations" not in applied
    assert _snapshot(cli_dsn, tenant) != before
    again = _json(cli("resolve-entities", "--dry-run", "--json"))
    assert again["mutations"] == []
    assert "nothing to change" in cli("resolve-entities", "--dry-run").stdout


def test_consolidate_dry_run_changes_nothing(
    cli: Callable[..., Any], cli_dsn: str, tenant: str, tmp_path: Path
) -> None:
    _ingest(cli, tmp_path, MESSAGES)
    before = _snapshot(cli_dsn, tenant)
    plan = _json(cli("consolidate", "--dry-run", "--max-facts", "1", "--json"))
    assert plan["report"]["total_reclaimed"] >= 2 and plan["mutations"]
    assert _snapshot(cli_dsn, tenant) == before
    applied = _json(cli("consolidate", "--max-facts", "1", "--json"))
    assert applied["report"]["total_reclaimed"] == plan["report"]["total_reclaimed"]
    assert _snapshot(cli_dsn, tenant) != before
    assert _json(cli("consolidate", "--dry-run", "--max-facts", "1", "--json"))["mutations"] == []
    _one_line_error(cli("consolidate", "--delete-mode", "never"), 1, "--delete-mode")


def _conflicting_facts(dsn: str, tenant: str) -> None:
    async def work(memory: Memory) -> None:
        prov = Provenance(source="system")
        alice = Entity(name="Alice Smith", entity_type="person", provenance=prov)
        await memory.store.put_entities([alice])
        await memory.store.put_facts(
            [
                SemanticFact(
                    content="Alice Smith likes green tea",
                    entity_ids=[alice.id],
                    provenance=prov,
                    valid_from="2026-01-01T00:00:00Z",
                ),
                SemanticFact(
                    content="Alice Smith does not like green tea",
                    entity_ids=[alice.id],
                    provenance=prov,
                    valid_from="2026-01-02T00:00:00Z",
                ),
            ]
        )

    _with_memory(dsn, tenant, work)


def test_conflicts_detect_and_resolve_dry_run(
    cli: Callable[..., Any], cli_dsn: str, tenant: str
) -> None:
    _conflicting_facts(cli_dsn, tenant)
    before = _snapshot(cli_dsn, tenant)
    found = _json(cli("conflicts", "detect", "--json"))
    assert [c["type"] for c in found["conflicts"]] == ["negation"]
    assert set(found["conflicts"][0]) == {"type", "confidence", "fact_a", "fact_b"}
    assert "negation" in cli("conflicts", "detect").stdout
    assert _snapshot(cli_dsn, tenant) == before

    policy = ["--policy", "negation-invalidates-positive"]
    plan = _json(cli("conflicts", "resolve", *policy, "--dry-run", "--json"))
    assert plan["resolved"] == 1 and len(plan["mutations"]) == 1
    assert plan["mutations"][0]["record"] == "Alice Smith likes green tea"
    assert _snapshot(cli_dsn, tenant) == before
    done = _json(cli("conflicts", "resolve", *policy, "--json"))
    assert done["resolved"] == 1 and "mutations" not in done
    assert _snapshot(cli_dsn, tenant) != before
    assert _json(cli("conflicts", "detect", "--json"))["conflicts"] == []
    _one_line_error(cli("conflicts", "resolve", "--policy", "coin-flip"), 1, "--policy")


# ----------------------------------------------------------------------------- gate


def test_gate_evaluate_and_audit(cli: Callable[..., Any], cli_dsn: str, tenant: str) -> None:
    async def seed(memory: Memory) -> uuid.UUID:
        lesson = await memory.remember("Retry flaky deploys once.")
        assert memory.ledger is not None
        for run in range(8):
            used = [lesson] if run % 2 == 0 else []
            score = 0.9 if used else 0.3
            await memory.ledger.record_outcome(
                {"run_id": f"r{run}", "score": score + 0.01 * run, "fact_ids": used}
            )
        return lesson

    lesson = _with_memory(cli_dsn, tenant, seed)
    report = _json(cli("gate", "evaluate", "--decision-rule", "margin", "--json"))
    assert [p["fact_id"] for p in report["promoted"]] == [str(lesson)]
    audit = _json(cli("gate", "audit", "--json"))
    assert [e["verdict"] for e in audit["entries"]] == ["promoted"]
    assert audit["entries"][0]["fact_id"] == str(lesson)
    table = cli("gate", "audit")
    assert table.exit_code == 0 and "promoted" in table.stdout
    assert _json(cli("gate", "audit", "--offset", "1", "--json"))["entries"] == []
    assert _json(cli("gate", "audit", "--fact-id", str(uuid.uuid4()), "--json"))["entries"] == []
    _one_line_error(cli("gate", "evaluate", "--decision-rule", "vibes"), 1, "--decision-rule")
    _one_line_error(cli("gate", "audit", "--pass-id", "not-a-uuid"), 1, "not-a-uuid")


def test_gate_simulate_writes_a_chart(tmp_path: Path) -> None:
    chart = tmp_path / "oc.svg"
    runner = CliRunner()
    args = [
        "gate",
        "simulate",
        "--effects",
        "0.2,-0.2",
        "--runs",
        "10,30",
        "--replicates",
        "2",
        "--chart",
        str(chart),
    ]
    result = runner.invoke(app, ["--json", *args])
    data = _json(result)
    assert len(data["rows"]) == 4 and data["chart"] == str(chart)
    assert {"effect", "runs", "promote_rate", "evict_rate"} <= set(data["rows"][0])
    svg = chart.read_text()
    assert svg.startswith("<svg") and svg.count("<polyline") == 4
    shown = runner.invoke(app, args)
    assert shown.exit_code == 0 and "operating characteristics" in shown.stdout
    bad = runner.invoke(app, ["gate", "simulate", "--runs", "ten"])
    _one_line_error(bad, 1, "--runs")


# ----------------------------------------------------------------------------- main


def test_verbose_sends_library_logs_to_stderr(cli_dsn: str, tenant: str, tmp_path: Path) -> None:
    runner = CliRunner()
    path = tmp_path / "m.jsonl"
    path.write_text(json.dumps(MESSAGES[0]) + "\n", encoding="utf-8")
    base = ["--dsn", cli_dsn, "--tenant", tenant]
    quiet = runner.invoke(app, [*base, "consolidate"])
    assert quiet.exit_code == 0 and "INFO" not in quiet.stderr
    loud = runner.invoke(app, [*base, "-v", "consolidate"])
    assert loud.exit_code == 0, loud.output
    assert "INFO cycgraph_memory.consolidation.consolidator: consolidation" in loud.stderr


def test_main_returns_exit_codes(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["--help"]) == 0
    assert "cycgraph-memory" in capsys.readouterr().out
    assert main(["stats", "--bogus"]) == 2
    assert main(["--data-dir", str(tmp_path / "none"), "stats"]) == 4
    assert "error: no database" in capsys.readouterr().err

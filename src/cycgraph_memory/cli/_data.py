"""``stats``, ``ingest``, ``search`` and ``export graph``."""

from __future__ import annotations

import json
import sys
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from cycgraph_memory.cli._common import (
    JSON_OPTION,
    Settings,
    emit_json,
    fail,
    open_memory,
    progress_bar,
    run,
    settings,
    table,
    write_text,
)

if TYPE_CHECKING:
    from cycgraph_memory.inspection import MemoryStats
    from cycgraph_memory.records import MemoryResult

__all__ = ["register"]

export_app = typer.Typer(help="Export memory for people to look at.", no_args_is_help=True)


def register(app: typer.Typer) -> None:
    """Add this module's commands to ``app``."""
    app.command("stats")(stats_cmd)
    app.command("ingest")(ingest_cmd)
    app.command("search")(search_cmd)
    app.add_typer(export_app, name="export")


# ----------------------------------------------------------------------------- stats


def _holds_nothing(stats: MemoryStats) -> bool:
    """No record of any kind (live or not) and no ledger run: a new tenant, or a typo."""
    counts = stats.records.values()
    return stats.ledger_runs == 0 and all(
        c.live + c.invalidated + c.quarantined == 0 for c in counts
    )


def _empty_tenant_note(state: Settings) -> str:
    return (
        f"tenant {state.tenant} holds no records (a new tenant, or check --tenant / "
        "CYCGRAPH_MEMORY_TENANT)"
    )


def _show_stats(state: Settings, stats: MemoryStats) -> None:
    console = state.console
    console.print(
        table(
            f"tenant {state.tenant}",
            ["record", "live", "invalidated", "quarantined"],
            [[k, c.live, c.invalidated, c.quarantined] for k, c in stats.records.items()],
        )
    )
    if stats.tags:
        console.print(table("tags (facts)", ["tag", "facts"], list(stats.tags.items())))
    if stats.themes:
        themes = [[t.label, t.facts] for t in stats.themes]
        console.print(table("themes", ["theme", "facts"], themes))
    if stats.index:
        # In memory the index reports the vectors it holds; on Postgres the bytes on disk
        # of indexes every tenant of the database shares: the unit and title say which.
        in_memory = "vectors" in stats.index
        sizes = [
            [k, f"{v:,} vectors" if k == "vectors" else f"{v:,} bytes"]
            for k, v in stats.index.items()
        ]
        title = "index" if in_memory else "indexes (on disk, shared by every tenant)"
        console.print(table(title, ["index", "size"], sizes))
    console.print(f"ledger runs: {stats.ledger_runs}", markup=False)
    console.print(f"pending lesson candidates: {stats.pending_candidates}", markup=False)
    if _holds_nothing(stats):
        console.print(_empty_tenant_note(state), markup=False)


def stats_cmd(ctx: typer.Context, json_output: bool = JSON_OPTION) -> None:
    """Counts per record type, tags, themes, index sizes, ledger runs, pending candidates."""
    state = settings(ctx, json_output)

    async def work() -> MemoryStats:
        async with await open_memory(state) as memory:
            with progress_bar(state, "reading") as progress:
                return await memory.stats(progress=progress)

    stats = run(work)
    if state.json:
        emit_json(state, {"tenant": state.tenant, **stats.model_dump(mode="json")})
    else:
        _show_stats(state, stats)


# ----------------------------------------------------------------------------- ingest


_ONE_PER_LINE = "write one message object per line (from an array: jq -c '.[]' FILE)"


def _one_json_document(text: str) -> bool:
    """Whether ``text`` is one (pretty-printed) JSON array or object, not JSON Lines."""
    try:
        return isinstance(json.loads(text), list | dict)
    except (json.JSONDecodeError, RecursionError):
        return False


def _read_messages(source: str) -> list[dict[str, Any]]:
    from pydantic import ValidationError

    from cycgraph_memory._validate import validate_record
    from cycgraph_memory.records import Message

    try:
        if source == "-":
            # The bytes, decoded strictly like a file: the text layer of stdin uses
            # surrogateescape, which turned a non-UTF-8 byte into a lone surrogate (a
            # misleading "not JSON" or "lone surrogate" error instead of "not UTF-8").
            raw = getattr(sys.stdin, "buffer", None)
            text = sys.stdin.read() if raw is None else raw.read().decode("utf-8")
        else:
            path = Path(source)
            if path.is_dir():
                fail(f"{source} is a directory: give a JSON Lines file (or - for stdin)")
            if not path.is_file():
                fail(f"no such file: {source}")
            text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        fail(f"{source}: not UTF-8 text (byte {exc.start}: {exc.reason})")
    except OSError as exc:
        fail(f"{source}: cannot read ({exc.strerror or exc})")
    # A UTF-8 byte-order mark (what Notepad and Excel write first) is no part of line 1.
    text = text.removeprefix("\ufeff")
    messages: list[dict[str, Any]] = []
    # Lines end at "\n" only (JSON Lines): str.splitlines() would also split inside a JSON
    # string at U+2028, U+2029 or U+0085, which JSON writes raw (ensure_ascii=False). A
    # "\r" before the "\n" is JSON whitespace.
    for number, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError as exc:
            if number == 1 and _one_json_document(text):
                name = "stdin" if source == "-" else source
                fail(f"{name} is one JSON document, not JSON Lines: {_ONE_PER_LINE}")
            fail(f"line {number}: not JSON ({exc.msg})")
        except RecursionError:
            fail(f"line {number}: JSON nested too deeply")
        if isinstance(value, list):
            fail(f"line {number}: a JSON array, not a message: {_ONE_PER_LINE}")
        if not isinstance(value, dict):
            fail(f"line {number}: expected a JSON object (a message), got {type(value).__name__}")
        try:
            validate_record(Message, value)  # the pipeline's own check, with the line
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first.get("loc", ())) or "message"
            fail(f"line {number}: invalid message ({where}: {first.get('msg')})")
        except RecursionError:
            fail(f"line {number}: message nested too deeply")
        messages.append(value)
    return messages


def ingest_cmd(
    ctx: typer.Context,
    file: str = typer.Argument(..., help="JSON Lines of messages (role, content, ...); - = stdin."),
    tags: list[str] = typer.Option(
        [], "--tag", "--tags", help="Tag added to every new fact (repeatable)."
    ),
    run_id: str | None = typer.Option(None, "--run-id", help="Run recorded in the provenance."),
    json_output: bool = JSON_OPTION,
) -> None:
    """Ingest conversation messages through the pipeline (one transaction)."""
    state = settings(ctx, json_output)
    messages = _read_messages(file)
    if not messages:
        fail("no messages to ingest")

    async def work() -> Any:
        async with await open_memory(state) as memory:
            with progress_bar(state, "ingesting") as progress:
                return await memory.add(messages, tags=tags, run_id=run_id, progress=progress)

    report = run(work, {"tags": "--tag", "run_id": "--run-id"})
    payload = {
        "messages_ingested": report.messages_ingested,
        "messages_skipped": report.messages_skipped,
        "episodes": len(report.episode_ids),
        "facts": len(report.fact_ids),
        "entities": len(report.entity_ids),
        "relationships": len(report.relationship_ids),
        "themes": len(report.theme_ids),
    }
    if state.json:
        emit_json(state, {**payload, "report": report.model_dump(mode="json")})
    else:
        state.console.print(table("ingested", ["", "count"], list(payload.items())))


# ----------------------------------------------------------------------------- search


def _score_row(result: MemoryResult, fact_id: uuid.UUID) -> dict[str, Any]:
    score = result.fact_scores.get(fact_id)
    return {} if score is None else score.model_dump(mode="json")


def _search_payload(result: MemoryResult, prompt: str) -> dict[str, Any]:
    names = {e.id: e.name for e in result.entities}
    return {
        "facts": [
            {
                "id": str(f.id),
                "content": f.content,
                "tags": f.tags,
                "valid_from": f.valid_from.isoformat(),
                "score": _score_row(result, f.id),
                "source_message_ids": [str(m) for m in f.source_message_ids],
            }
            for f in result.facts
        ],
        "messages": [
            {
                "id": str(m.id),
                "role": m.role,
                "content": m.content,
                "timestamp": m.timestamp.isoformat(),
            }
            for m in result.messages
        ],
        "themes": [{"id": str(t.id), "label": t.label} for t in result.themes],
        "entities": [
            {"id": str(e.id), "name": e.name, "type": e.entity_type} for e in result.entities
        ],
        "relationships": [
            {
                "id": str(r.id),
                "source": names.get(r.source_id, str(r.source_id)),
                "relation": r.relation_type,
                "target": names.get(r.target_id, str(r.target_id)),
            }
            for r in result.relationships
        ],
        "prompt": prompt,
    }


def _fmt(value: Any, digits: int = 3) -> str:
    if value is None:
        return "-"
    return f"{value:.{digits}f}" if isinstance(value, float) else str(value)


def _pair(score: dict[str, Any], signal: str) -> str:
    return f"{_fmt(score.get(signal + '_rank'))} / {_fmt(score.get(signal + '_score'))}"


def _show_search(state: Settings, payload: dict[str, Any], empty_tenant: bool) -> None:
    console = state.console
    if not payload["facts"] and not payload["entities"]:
        note = f": {_empty_tenant_note(state)}" if empty_tenant else ""
        console.print(f"nothing found{note}", markup=False)
        return
    console.print(
        table(
            "facts",
            ["#", "fused", "vector (rank/score)", "text (rank/score)", "graph hops", "fact"],
            [
                [
                    i,
                    _fmt(f["score"].get("fused_score"), 4),
                    _pair(f["score"], "vector"),
                    _pair(f["score"], "text"),
                    _fmt(f["score"].get("graph_distance")),
                    f["content"],
                ]
                for i, f in enumerate(payload["facts"], 1)
            ],
        )
    )
    if payload["messages"]:
        console.print(
            table(
                "turns",
                ["when", "role", "message"],
                [[m["timestamp"][:16], m["role"], m["content"]] for m in payload["messages"]],
            )
        )
    if payload["themes"]:
        console.print(table("themes", ["theme"], [[t["label"]] for t in payload["themes"]]))
    if payload["entities"]:
        console.print(
            table(
                "entities",
                ["entity", "type"],
                [[e["name"], e["type"]] for e in payload["entities"]],
            )
        )
    if payload["relationships"]:
        console.print(
            table(
                "subgraph",
                ["source", "relation", "target"],
                [[r["source"], r["relation"], r["target"]] for r in payload["relationships"]],
            )
        )


def search_cmd(
    ctx: typer.Context,
    text: str | None = typer.Argument(None, help="The question."),
    tags: list[str] = typer.Option(
        [], "--tag", "--tags", help="Tag scope (repeatable); alone: a listing."
    ),
    entity: str | None = typer.Option(None, "--entity", help="Entity name: its subgraph."),
    mode: str | None = typer.Option(None, "--mode", help="vector, text or hybrid."),
    limit: int = typer.Option(10, "--limit", "-n", help="Most records per type (1-100)."),
    hops: int = typer.Option(2, "--hops", help="Subgraph depth for --entity (0-5)."),
    json_output: bool = JSON_OPTION,
) -> None:
    """Search memory: facts with their score breakdown, turns, themes and the subgraph."""
    state = settings(ctx, json_output)
    if text is not None and not text.strip():
        text = None  # `search ""` (an unset shell variable) asks nothing: not a question
    if text is None and not tags and entity is None:
        fail("give a question, --tag or --entity")
    if entity is not None and not entity.strip():
        fail("--entity needs an entity name, got an empty one")
    if mode is not None and mode not in ("vector", "text", "hybrid"):
        fail(f"--mode must be vector, text or hybrid, got {mode!r}")

    async def work() -> tuple[Any, bool]:
        async with await open_memory(state) as memory:
            found = await memory.search(
                text,
                mode=mode,  # type: ignore[arg-type]
                limit=limit,
                tags=tags,
                entity=entity,
                max_hops=hops,
            )
            # "nothing found" in a tenant that holds nothing says so: a mistyped --tenant
            # reads as an empty answer otherwise.
            nothing = not found.result.facts and not found.result.entities
            empty = nothing and not state.json and _holds_nothing(await memory.stats())
            return found, empty

    found, empty_tenant = run(work, {"limit": "--limit", "max_hops": "--hops", "tags": "--tag"})
    payload = _search_payload(found.result, found.prompt)
    if state.json:
        emit_json(state, payload)
    else:
        _show_search(state, payload, empty_tenant)


# ----------------------------------------------------------------------------- export


@export_app.command("graph")
def export_graph_cmd(
    ctx: typer.Context,
    fmt: str = typer.Option("json", "--format", "-f", help="json, graphml or mermaid."),
    output: Path | None = typer.Option(
        None, "--output", "-o", help="Write to this file (- = stdout, as without it)."
    ),
    include_invalidated: bool = typer.Option(
        False, "--include-invalidated", help="Also export soft-deleted records."
    ),
    json_output: bool = JSON_OPTION,
) -> None:
    """Export the knowledge graph (entities and relationships)."""
    from cycgraph_memory.export import GRAPH_FORMATS, export_graph, render_graph

    state = settings(ctx, json_output)
    if fmt not in GRAPH_FORMATS:
        fail(f"--format must be one of {', '.join(GRAPH_FORMATS)}, got {fmt!r}")

    async def work() -> Any:
        async with await open_memory(state) as memory:
            with progress_bar(state, "exporting") as progress:
                return await export_graph(
                    memory.store, include_invalidated=include_invalidated, progress=progress
                )

    graph = run(work)
    text = render_graph(graph, fmt)
    counts = {"entities": len(graph.entities), "relationships": len(graph.relationships)}
    if output is not None and str(output) == "-":
        output = None  # `-o -`: stdout, as `ingest -` reads stdin (not a file named "-")
    if output is None:
        if state.json and fmt != "json":
            # --json promises one JSON document on stdout: GraphML / Mermaid come wrapped.
            emit_json(state, {"format": fmt, **counts, "text": text})
        else:
            write_text(text)
        return
    try:
        output.write_text(text, encoding="utf-8")
    except OSError as exc:
        fail(f"cannot write {output}: {exc.strerror or exc}")
    summary = {"format": fmt, "output": str(output), **counts}
    if state.json:
        emit_json(state, summary)
    else:
        state.console.print(
            f"wrote {summary['entities']} entities and {summary['relationships']} "
            f"relationships to {output}",
            markup=False,
        )

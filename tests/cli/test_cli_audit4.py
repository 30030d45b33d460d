"""CLI audit 4: graph renderings of odd names, ``--json`` for every format, ``--entity``.

* Mermaid: a carriage return (or U+2028, U+0085, ...) in a name went out raw and split a
  node over two lines, and a ``#`` was not escaped, so a name holding ``#quot;`` was shown
  as a quote (Mermaid decodes ``#name;`` / ``#code;`` entities).
* GraphML: a carriage return went out raw, which every XML parser reads back as a newline.
* ``--json export graph --format graphml|mermaid`` printed GraphML / Mermaid, not the one
  JSON document ``--json`` promises.
* ``search --entity NAME`` refused live entities whose name is not a short word n-gram
  ("Acme Inc." on Postgres, a five-word name, "The Who" on both backends).
"""

from __future__ import annotations

import asyncio
import html
import itertools
import json
import re
import secrets
import xml.etree.ElementTree as ET
from collections.abc import Callable
from typing import Any

import pytest
import pytest_asyncio
from typer.testing import CliRunner

from cycgraph_memory import Entity, Memory, Provenance, Relationship
from cycgraph_memory.cli import app
from cycgraph_memory.export import GraphExport, render_graph

PROV = Provenance(source="agent")

ODD_NAMES = [
    'He said "hi"',
    "line1\nline2\r\nline3",
    "carriage\rreturn",
    "para\u2028graph\u2029sep\x85nel\x0bvt\x0cff",
    "#quot; written as is",
    "C# & F# <3 | pipes",
    "`not markdown`",
    "ünïcødé 日本語 🚀",
    "x" * 1024,
    "tab\tand\x01control",
]

_NODE = re.compile(r'  n\d+\["(.*)"\]')
_GRAPHML = "{http://graphml.graphdrawing.org/xmlns}"


def _graph() -> GraphExport:
    entities = [Entity(name=n, entity_type="thing", provenance=PROV) for n in ODD_NAMES]
    edges = [
        Relationship(source_id=a.id, target_id=b.id, relation_type=b.name[:256],
                     provenance=PROV)
        for a, b in itertools.pairwise(entities)
    ]
    return GraphExport(entities=entities, relationships=edges)


def _mermaid_decode(text: str) -> str:
    """What Mermaid shows for a label: ``#name;`` -> ``&name;``, ``#35;`` -> ``&#35;``."""

    def entity(match: re.Match[str]) -> str:
        code = match[1]
        return html.unescape(f"&#{code};" if code.isdigit() else f"&{code};")

    return re.sub(r"#(\w+);", entity, text)


def _shown(name: str) -> str:
    """A name as a one-line label: every line break / control character is a space."""
    return re.sub("\r\n|[\x00-\x1f\x7f-\x9f\u2028\u2029]", " ", name)


def _check_mermaid(text: str, graph: GraphExport) -> None:
    lines = text.splitlines()
    assert len(lines) == 1 + len(graph.entities) + len(graph.relationships), lines[:3]
    labels = [m[1] for m in map(_NODE.fullmatch, lines[1:]) if m]
    assert [_mermaid_decode(label) for label in labels] == [
        f"{_shown(e.name)} ({e.entity_type})" for e in graph.entities
    ]


def _not_xml(name: str) -> str:
    """What GraphML keeps of a name: characters XML 1.0 cannot hold become U+FFFD."""
    return re.sub("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]", "\ufffd", name)


def _check_graphml(text: str, graph: GraphExport) -> None:
    root = ET.fromstring(text.encode("utf-8"))
    names = [d.text or "" for d in root.iter(f"{_GRAPHML}data") if d.get("key") == "name"]
    assert names == [_not_xml(e.name) for e in graph.entities]
    relations = [
        d.text or "" for d in root.iter(f"{_GRAPHML}data") if d.get("key") == "relation"
    ]
    assert relations == [_not_xml(r.relation_type) for r in graph.relationships]


def test_mermaid_keeps_each_node_on_one_line_and_shows_names_as_written() -> None:
    graph = _graph()
    _check_mermaid(render_graph(graph, "mermaid"), graph)


def test_graphml_reads_back_every_name_exactly() -> None:
    graph = _graph()
    _check_graphml(render_graph(graph, "graphml"), graph)


@pytest.mark.parametrize("fmt", ["graphml", "mermaid"])
def test_json_flag_wraps_graphml_and_mermaid_in_memory(fmt: str) -> None:
    result = CliRunner().invoke(
        app, ["--dsn", "memory://", "--json", "export", "graph", "--format", fmt]
    )
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert payload["format"] == fmt
    assert payload["entities"] == 0 and payload["relationships"] == 0
    assert payload["text"] == render_graph(GraphExport(), fmt)  # type: ignore[arg-type]


# ----------------------------------------------------------------------------- Postgres


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def audit_dsn(pg_databases: Any) -> str:
    """A database of this module's own (the commands commit for real)."""
    from cycgraph_memory.postgres import upgrade

    dsn = str(await pg_databases.create("audit4_cli"))
    await upgrade(dsn, embedding_dim=8)
    return dsn


def _seed(dsn: str, tenant: str, entities: list[Entity], edges: list[Relationship]) -> None:
    async def work() -> None:
        async with await Memory.open(dsn, tenant=tenant) as memory:
            store: Any = memory.store
            async with store.transaction():
                await store.put_entities(entities)
                for edge in edges:
                    await store.put_relationship(edge)

    asyncio.run(work())


@pytest.fixture
def cli(audit_dsn: str) -> Callable[..., Any]:
    tenant = f"a4_{secrets.token_hex(5)}"
    runner = CliRunner()

    def invoke(*args: str, input: str | None = None) -> Any:
        return runner.invoke(
            app, ["--dsn", audit_dsn, "--tenant", tenant, *args], input=input,
            env={"COLUMNS": "400"},
        )

    invoke.seed = lambda entities, edges: _seed(audit_dsn, tenant, entities, edges)  # type: ignore[attr-defined]
    return invoke


@pytest.mark.postgres
def test_export_graph_of_odd_names_on_postgres(cli: Callable[..., Any]) -> None:
    graph = _graph()
    cli.seed(graph.entities, graph.relationships)  # type: ignore[attr-defined]
    stored = cli("export", "graph", "--format", "json")
    assert stored.exit_code == 0, stored.output
    exported = json.loads(stored.stdout)
    assert sorted(n["name"] for n in exported["nodes"]) == sorted(ODD_NAMES)
    by_id = {str(e.id): e for e in graph.entities}
    edges_by_id = {str(r.id): r for r in graph.relationships}
    in_store_order = GraphExport(
        entities=[by_id[n["id"]] for n in exported["nodes"]],
        relationships=[edges_by_id[e["id"]] for e in exported["edges"]],
    )
    for fmt, check in (("mermaid", _check_mermaid), ("graphml", _check_graphml)):
        plain = cli("export", "graph", "--format", fmt)
        assert plain.exit_code == 0, plain.output
        check(plain.stdout, in_store_order)
        wrapped = cli("export", "graph", "--format", fmt, "--json")
        assert wrapped.exit_code == 0, wrapped.output
        payload = json.loads(wrapped.stdout)
        assert payload == {"format": fmt, "entities": len(ODD_NAMES),
                           "relationships": len(ODD_NAMES) - 1, "text": plain.stdout}


@pytest.mark.postgres
@pytest.mark.parametrize(
    "name", ["Acme Corp.", "Acme Corporation Billing Service Platform", "The Who"]
)
def test_search_entity_finds_a_stored_name(cli: Callable[..., Any], name: str) -> None:
    entity = Entity(name=name, entity_type="org", provenance=PROV)
    other = Entity(name="Zed", entity_type="person", provenance=PROV)
    edge = Relationship(source_id=other.id, target_id=entity.id, relation_type="works_at",
                        provenance=PROV)
    cli.seed([entity, other], [edge])  # type: ignore[attr-defined]
    result = cli("search", "--entity", name.upper(), "--json")
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert {e["name"] for e in payload["entities"]} == {name, "Zed"}
    assert [r["relation"] for r in payload["relationships"]] == ["works_at"]
    missing = cli("search", "--entity", "Nobody At All")
    assert missing.exit_code == 1 and "not found" in missing.stderr


# ----------------------------------------------------------------------------- tables

MARKUP = "Alice [/x] Smith maintains [bold]billing[/bold] and [link=http://x]search."


def test_table_cells_are_plain_text_never_markup() -> None:
    from rich.console import Console

    from cycgraph_memory.cli._common import table

    console = Console(width=200, record=True, color_system=None)
    console.print(table("[/t]", ["[/c]", "n"], [[MARKUP, 1], ["[/y]", None]]))
    shown = console.export_text()
    assert MARKUP in shown and "[/y]" in shown and "[/t]" in shown and "[/c]" in shown


@pytest.mark.postgres
def test_search_and_stats_tables_show_markup_as_written(cli: Callable[..., Any]) -> None:
    """The tables crashed with a MarkupError traceback (exit 1, nothing shown)."""
    line = json.dumps({"role": "user", "content": MARKUP}) + "\n"
    ingested = cli("ingest", "-", "--tag", "[/y]", input=line)
    assert ingested.exit_code == 0, ingested.output
    stats = cli("stats")
    assert stats.exit_code == 0 and "Traceback" not in stats.output, stats.output
    assert "[/y]" in stats.stdout
    found = cli("search", "billing search")
    assert found.exit_code == 0 and "Traceback" not in found.output, found.output
    assert MARKUP in found.stdout  # the turns table, on a wide terminal

"""Export a tenant's knowledge graph (entities and relationships) for people to look at.

:func:`export_graph` reads the live entities page by page and their relationships in
batches; :func:`render_graph` writes the result as JSON, GraphML (yEd, Gephi, networkx)
or a Mermaid flowchart (Markdown renderers, the Mermaid live editor).
"""

from __future__ import annotations

import json
import logging
import re
from typing import Any, Literal
from xml.sax.saxutils import escape, quoteattr

from pydantic import BaseModel, ConfigDict, Field

from cycgraph_memory.contracts import MemoryStore
from cycgraph_memory.errors import InvalidInputError
from cycgraph_memory.progress import ProgressCallback, report_progress
from cycgraph_memory.records import Entity, Relationship

__all__ = ["GRAPH_FORMATS", "GraphExport", "GraphFormat", "export_graph", "render_graph"]

_log = logging.getLogger(__name__)

GraphFormat = Literal["json", "graphml", "mermaid"]
"""The formats :func:`render_graph` writes."""

GRAPH_FORMATS: tuple[GraphFormat, ...] = ("json", "graphml", "mermaid")

_PAGE = 1000


class GraphExport(BaseModel):
    """Entities and the relationships between them, in the stores' listing order."""

    model_config = ConfigDict(extra="forbid")

    entities: list[Entity] = Field(default_factory=list)
    relationships: list[Relationship] = Field(default_factory=list)


async def export_graph(
    store: MemoryStore,
    *,
    include_invalidated: bool = False,
    progress: ProgressCallback | None = None,
) -> GraphExport:
    """Read the tenant's graph: entities by ``(created_at, id)``, edges by ``(valid_from, id)``.

    Args:
        store: Any ``MemoryStore``.
        include_invalidated: Also export soft-deleted entities and relationships.
        progress: Called with ``ProgressEvent("export", entities_read, None)`` per page.
    """
    from cycgraph_memory.consolidation._common import scan

    entities: list[Entity] = []
    async for page in scan(store, "entities", _PAGE, include_invalidated=include_invalidated):
        entities.extend(page)
        report_progress(progress, "export", len(entities), None, "entities")
    ids = [e.id for e in entities]
    edges: dict[Any, Relationship] = {}
    for start in range(0, len(ids), _PAGE):
        found = await store.get_relationships_for_entities(
            ids[start : start + _PAGE], include_invalidated=include_invalidated
        )
        for edge in found:
            edges.setdefault(edge.id, edge)
    known = set(ids)
    relationships = sorted(
        (r for r in edges.values() if r.source_id in known and r.target_id in known),
        key=lambda r: (r.valid_from, str(r.id)),
    )
    _log.debug("exported %d entities, %d relationships", len(entities), len(relationships))
    return GraphExport(entities=entities, relationships=relationships)


def _json(graph: GraphExport) -> str:
    payload = {
        "nodes": [
            {"id": str(e.id), "name": e.name, "type": e.entity_type, "attributes": e.attributes}
            for e in graph.entities
        ],
        "edges": [
            {
                "id": str(r.id),
                "source": str(r.source_id),
                "target": str(r.target_id),
                "type": r.relation_type,
                "weight": r.weight,
                "valid_from": r.valid_from.isoformat(),
                "valid_until": None if r.valid_until is None else r.valid_until.isoformat(),
            }
            for r in graph.relationships
        ],
    }
    return json.dumps(payload, indent=2, ensure_ascii=False) + "\n"


# Characters XML 1.0 does not allow (C0 controls other than tab, newline and carriage
# return; U+FFFE, U+FFFF). Record text may hold them; an XML parser refuses the file.
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


def _xml_text(value: str) -> str:
    """``value`` escaped for XML, characters XML cannot hold replaced by U+FFFD.

    A carriage return is written as ``&#13;``: a raw one is read back as a newline (XML
    normalises line ends), so CR LF in a name would come back as LF.
    """
    return escape(_NOT_XML.sub("\ufffd", value), {"\r": "&#13;"})


def _graphml(graph: GraphExport) -> str:
    lines = [
        '<?xml version="1.0" encoding="UTF-8"?>',
        '<graphml xmlns="http://graphml.graphdrawing.org/xmlns">',
        '  <key id="name" for="node" attr.name="name" attr.type="string"/>',
        '  <key id="type" for="node" attr.name="type" attr.type="string"/>',
        '  <key id="relation" for="edge" attr.name="relation" attr.type="string"/>',
        '  <key id="weight" for="edge" attr.name="weight" attr.type="double"/>',
        '  <graph id="memory" edgedefault="directed">',
    ]
    for e in graph.entities:
        lines.append(f"    <node id={quoteattr(str(e.id))}>")
        lines.append(f'      <data key="name">{_xml_text(e.name)}</data>')
        lines.append(f'      <data key="type">{_xml_text(e.entity_type)}</data>')
        lines.append("    </node>")
    for r in graph.relationships:
        lines.append(
            f"    <edge id={quoteattr(str(r.id))} source={quoteattr(str(r.source_id))} "
            f"target={quoteattr(str(r.target_id))}>"
        )
        lines.append(f'      <data key="relation">{_xml_text(r.relation_type)}</data>')
        lines.append(f'      <data key="weight">{r.weight}</data>')
        lines.append("    </edge>")
    lines += ["  </graph>", "</graphml>"]
    return "\n".join(lines) + "\n"


# Line breaks of every kind (str.splitlines() breaks at all of them) and other control
# characters: a label stays on its node's line.
_MERMAID_BREAKS = re.compile("\r\n|[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def _mermaid_text(value: str) -> str:
    # Mermaid labels are quoted strings; quotes and markup characters become entities
    # (#name; / #code;, which Mermaid decodes). "#" itself goes first, so a name holding
    # "#quot;" is shown as written; a backtick would open a Markdown string.
    return (
        _MERMAID_BREAKS.sub(" ", value)
        .replace("#", "#35;")
        .replace("`", "#96;")
        .replace("&", "#amp;")
        .replace('"', "#quot;")
        .replace("<", "#lt;")
        .replace(">", "#gt;")
        .replace("|", "#124;")
    )


def _mermaid(graph: GraphExport) -> str:
    node = {e.id: f"n{i}" for i, e in enumerate(graph.entities)}
    lines = ["flowchart LR"]
    for e in graph.entities:
        lines.append(f'  {node[e.id]}["{_mermaid_text(e.name)} ({_mermaid_text(e.entity_type)})"]')
    for r in graph.relationships:
        lines.append(
            f'  {node[r.source_id]} -->|"{_mermaid_text(r.relation_type)}"| {node[r.target_id]}'
        )
    return "\n".join(lines) + "\n"


def render_graph(graph: GraphExport, fmt: GraphFormat) -> str:
    """Render ``graph`` as ``"json"``, ``"graphml"`` or ``"mermaid"`` text.

    GraphML is XML 1.0, which cannot hold most control characters: those of a name or a
    type are written as U+FFFD (the JSON keeps them). Mermaid labels stay on their node's
    line (line breaks and control characters become spaces) and show a name as written
    (``#``, quotes, ``<``, ``>``, ``&``, ``|`` and backticks as Mermaid entity codes).

    Raises:
        InvalidInputError: An unknown format.
    """
    if fmt == "json":
        return _json(graph)
    if fmt == "graphml":
        return _graphml(graph)
    if fmt == "mermaid":
        return _mermaid(graph)
    raise InvalidInputError(f"format must be one of {', '.join(GRAPH_FORMATS)}, got {fmt!r}")

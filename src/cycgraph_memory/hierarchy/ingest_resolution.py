"""Ingest-time entity resolution: match new entities to stored ones before writing.

:class:`~cycgraph_memory.hierarchy.pipeline.MemoryPipeline` calls
:func:`resolve_ingest_entities` inside its ingest transaction, so "Alice Smith" mentioned
in two ingests stays one entity and the graph does not fragment between
:class:`~cycgraph_memory.consolidation.EntityResolver` passes. The rules are the
resolver's: same normalised name and ``entity_type``, the stored (older) entity is
canonical and absorbs the new one's attributes (stored values win) and embedding (if it
has none).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from cycgraph_memory.contracts import MemoryStore
from cycgraph_memory.hierarchy.extractors.closing import closed_at, closed_relations
from cycgraph_memory.normalize import normalize_entity_name
from cycgraph_memory.records import Entity, Relationship, SemanticFact, utc_now
from cycgraph_memory.temporal import windows_overlap

__all__ = ["IngestResolution", "resolve_ingest_entities"]


@dataclass
class IngestResolution:
    """What to write after matching an ingest's entities against the store.

    Attributes:
        entities: New entities that matched nothing, plus stored entities that absorbed
            attributes or an embedding (to be written).
        relationships: New edges with endpoints remapped; self-loops and duplicates of
            stored live edges dropped.
        matched: New entity id -> the stored entity it was resolved to.
    """

    entities: list[Entity] = field(default_factory=list)
    relationships: list[Relationship] = field(default_factory=list)
    matched: dict[uuid.UUID, uuid.UUID] = field(default_factory=dict)


async def resolve_ingest_entities(
    store: MemoryStore,
    entities: Sequence[Entity],
    facts: Sequence[SemanticFact],
    relationships: Sequence[Relationship],
    *,
    clock: Callable[[], datetime] | None = None,
    ended: Sequence[Relationship] = (),
    absorb: bool = True,
) -> IngestResolution:
    """Resolve new ``entities`` against the store with one batched lookup.

    ``facts``' ``entity_ids`` are rewritten in place (they are the ingest's own new
    records). Stores without ``find_entities_by_name_keys`` get everything back unchanged.

    Args:
        store: The store the ingest writes to (call inside its transaction).
        entities: The ingest's new entities.
        facts: The ingest's new facts.
        relationships: The ingest's new relationships.
        clock: Returns "now" for ``updated_at`` of stored entities that absorb data.
        ended: The ingest's ended markers (not written here): a stored open edge they
            close counts as closed when a new edge is checked against it, so "no longer
            works at" then "works at" in one ingest starts a new period after a stored
            open edge.
        absorb: Whether a stored entity a new one resolves to absorbs its attributes and
            embedding. ``False`` for an ingest that must not change stored records (a
            quarantined run): the new entities are still matched, so facts cite the
            stored ones.
    """
    lookup = getattr(store, "find_entities_by_name_keys", None)
    if lookup is None or not entities:
        return IngestResolution(list(entities), list(relationships))
    keys = {e.id: (normalize_entity_name(e.name), e.entity_type) for e in entities}
    stored: list[Entity] = await lookup(set(keys.values()))
    new_ids = {e.id for e in entities}
    canonical: dict[tuple[str, str], Entity] = {}
    for entity in stored:  # oldest first
        if entity.id in new_ids:
            continue  # the same record ingested again: nothing to resolve
        canonical.setdefault((normalize_entity_name(entity.name), entity.entity_type), entity)
    if not canonical:
        return IngestResolution(list(entities), list(relationships))

    out = IngestResolution()
    absorbed: dict[uuid.UUID, Entity] = {}
    for entity in entities:
        target = canonical.get(keys[entity.id])
        if target is None:
            out.entities.append(entity)
            continue
        out.matched[entity.id] = target.id
        current = absorbed.get(target.id, target)
        update: dict[str, Any] = {}
        attributes = {**entity.attributes, **current.attributes}
        if attributes != current.attributes:
            update["attributes"] = attributes
        if current.embedding is None and entity.embedding is not None:
            update["embedding"] = list(entity.embedding)
        if update and absorb:
            update["updated_at"] = (clock or utc_now)()
            absorbed[target.id] = current.model_copy(update=update)
    out.entities.extend(absorbed.values())
    if not out.matched:
        return IngestResolution(list(entities), list(relationships))

    remap = out.matched
    for fact in facts:
        if any(e in remap for e in fact.entity_ids):
            fact.entity_ids = list(dict.fromkeys(remap.get(e, e) for e in fact.entity_ids))
    seen = _closed_by_markers(await _stored_edges(store, relationships, remap), ended, remap)
    for rel in relationships:
        source = remap.get(rel.source_id, rel.source_id)
        target_id = remap.get(rel.target_id, rel.target_id)
        key = (source, target_id, rel.relation_type)
        if source == target_id or any(windows_overlap(rel, w) for w in seen.get(key, ())):
            continue
        seen.setdefault(key, []).append(rel)
        if source != rel.source_id or target_id != rel.target_id:
            rel = rel.model_copy(update={"source_id": source, "target_id": target_id})
        out.relationships.append(rel)
    return out


def _closed_by_markers(
    stored: dict[tuple[uuid.UUID, uuid.UUID, str], list[Relationship]],
    markers: Sequence[Relationship],
    remap: dict[uuid.UUID, uuid.UUID],
) -> dict[tuple[uuid.UUID, uuid.UUID, str], list[Relationship]]:
    """``stored`` with the open edges the ingest's ended markers close, closed.

    The rule of :func:`~cycgraph_memory.hierarchy.extractors.closing.close_ended_relationships`
    (which writes the closed copies later): a marker said at ``t`` closes each open edge of
    its triple with ``valid_from <= t`` (``closing.closed_at``), and of the relations it
    also closes (``closing.ALSO_CLOSES``: ``join`` for ``work_at``), markers applied in order.
    """
    if not markers or not stored:
        return stored
    out = {key: list(edges) for key, edges in stored.items()}
    for marker in markers:
        for relation in closed_relations(marker.relation_type):  # "left" also ends "joined"
            key = (
                remap.get(marker.source_id, marker.source_id),
                remap.get(marker.target_id, marker.target_id),
                relation,
            )
            edges = out.get(key)
            if not edges:
                continue
            out[key] = [
                e if (until := closed_at(e, marker)) is None
                else e.model_copy(update={"valid_until": until})
                for e in edges
            ]
    return out


async def _stored_edges(
    store: MemoryStore,
    relationships: Sequence[Relationship],
    remap: dict[uuid.UUID, uuid.UUID],
) -> dict[tuple[uuid.UUID, uuid.UUID, str], list[Relationship]]:
    """Live stored edges that new ``relationships`` may repeat, by triple.

    An edge repeats a stored one only while the stored one holds (their windows overlap,
    :func:`~cycgraph_memory.temporal.windows_overlap`): "works at" said again after a
    stored "no longer works at" closed the first edge is a new period of the relation.

    Only an edge whose two endpoints resolved to stored entities can repeat a stored one.
    With ``find_relationships_between`` (both shipped stores) exactly those triples are
    looked up, so the read follows the batch; other stores read the edges of the matched
    entities.
    """
    stored_ids = set(remap.values())
    keys = {
        (remap[r.source_id], remap[r.target_id], r.relation_type)
        for r in relationships
        if r.source_id in remap and r.target_id in remap
    }
    keys = {k for k in keys if k[0] in stored_ids and k[1] in stored_ids and k[0] != k[1]}
    if not keys:
        return {}
    between = getattr(store, "find_relationships_between", None)
    if between is not None:
        found: list[Relationship] = await between(sorted(keys, key=str))
    else:
        edges_for = getattr(store, "find_relationships_for_entities", None)
        if edges_for is None:
            return {}
        ends = sorted({e for s, t, _ in keys for e in (s, t)}, key=str)
        found = await edges_for(ends)
    out: dict[tuple[uuid.UUID, uuid.UUID, str], list[Relationship]] = {}
    for r in found:
        out.setdefault((r.source_id, r.target_id, r.relation_type), []).append(r)
    return out

"""Turn the extractors' ended markers into closed edges (used by the ingest pipeline).

A text that says a relation has ended ("Marsh no longer works at Tidewater") gives an
*ended marker*: a relationship with ``attributes["ended"] = True`` and the empty window
``[t, t]`` (``t`` the time of the message). :func:`close_ended_relationships` applies the
markers of one ingest batch: each closes the open edges with the same source, relation
and target, in the batch or in the store (``valid_until = t``), and is itself dropped, so
an ended claim about an edge that was never stored creates nothing. A job or a home is
stored under two relations: the state (``work_at``, ``live_in``) and the event that began
it, kept open until it ends ("Alice joined Acme" -> ``join``, "moved to Denver" ->
``move_to``); so a marker that ends the state closes the open edge of its beginning too
(:data:`ALSO_CLOSES`): "Alice left Acme" closes ``join`` Acme. A marker with an
earlier stop ("worked at Hooli until March": window ``[March, t]``, :func:`marker_times`)
closes the same edges (those that started by ``t``) at that stop, or at an edge's own start
when the edge began after it.

Work per call depends on the batch only: the stored edges the markers name are read with
one ``find_relationships_between`` call (their exact ``(source, target, relation)``
triples), so a well-connected entity's other edges are never read; a store without it gets
one ``get_relationships_for_entity`` lookup (by source entity and relation type) per marker.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime

from cycgraph_memory.contracts import MemoryStore
from cycgraph_memory.hierarchy.extractors._polarity import is_ended_marker
from cycgraph_memory.records import Relationship, RelationshipFilter

__all__ = [
    "ALSO_CLOSES",
    "close_ended_relationships",
    "closed_at",
    "marker_times",
    "closed_relations",
    "split_ended_markers",
]

ALSO_CLOSES: Mapping[str, tuple[str, ...]] = {"work_at": ("join",), "live_in": ("move_to",)}
"""The relations an ended marker of a relation closes besides its own: the event that
began the state ("joined Acme" began the job at Acme; "moved to Denver" the home there)."""


def closed_relations(relation: str) -> tuple[str, ...]:
    """The relation types an ended marker of ``relation`` closes (its own first)."""
    return (relation, *ALSO_CLOSES.get(relation, ()))


def marker_times(marker: Relationship) -> tuple[datetime, datetime]:
    """``(said, stop)`` of an ended marker: when the text said so, when the relation stopped.

    A marker's window is ``[stop, said]``: ``[t, t]`` for "no longer works at", an earlier
    stop for an "until" date ("worked at Hooli until March").
    """
    return marker.valid_until or marker.valid_from, marker.valid_from


def closed_at(edge: Relationship, marker: Relationship) -> datetime | None:
    """The ``valid_until`` ``marker`` gives the open ``edge`` of its triple (``None``: none).

    The edge closes when it started by the time the marker was said, at the marker's stop
    (or at the edge's start when it began after that stop: it held no time).
    """
    said, stop = marker_times(marker)
    if edge.valid_until is not None or edge.valid_from > said:
        return None
    return max(stop, edge.valid_from)


def split_ended_markers(
    relationships: Sequence[Relationship],
) -> tuple[list[Relationship], list[Relationship]]:
    """``(edges, ended markers)`` of a batch (take the markers out before de-duplication)."""
    plain = [r for r in relationships if not is_ended_marker(r.attributes)]
    return plain, [r for r in relationships if is_ended_marker(r.attributes)]


async def close_ended_relationships(
    store: MemoryStore,
    relationships: Sequence[Relationship],
    markers: Sequence[Relationship] = (),
    remap: Mapping[uuid.UUID, uuid.UUID] | None = None,
) -> list[Relationship]:
    """Apply the ended markers of a batch.

    Args:
        store: Where previously stored edges are looked up (not written).
        relationships: The batch's relationships to write, endpoints resolved (markers
            among them are applied too).
        markers: Ended markers taken out earlier (:func:`split_ended_markers`).
        remap: New entity id -> stored entity id, applied to the markers' endpoints.

    Returns:
        The relationships to write: without markers, the batch's own open edges closed by
        a later marker, plus closed copies of stored open edges.
    """
    kept, inline = split_ended_markers(relationships)
    remap = remap or {}
    markers = [
        m.model_copy(
            update={
                "source_id": remap.get(m.source_id, m.source_id),
                "target_id": remap.get(m.target_id, m.target_id),
            }
        )
        for m in [*markers, *inline]
    ]
    if not markers:
        return kept
    kept = [r.model_copy() for r in kept]
    closed: dict[uuid.UUID, Relationship] = {}
    stored_edges = await _stored_edges(store, markers)
    for marker in markers:
        relations = closed_relations(marker.relation_type)
        for edge in kept:
            if (
                edge.source_id == marker.source_id
                and edge.target_id == marker.target_id
                and edge.relation_type in relations
                and (until := closed_at(edge, marker)) is not None
            ):
                edge.valid_until = until
        for relation in relations:
            key = (marker.source_id, marker.target_id, relation)
            for edge in stored_edges.get(key, ()):
                if (
                    edge.target_id == marker.target_id
                    and edge.invalidated_by is None
                    and edge.id not in closed
                    and (until := closed_at(edge, marker)) is not None
                ):
                    closed[edge.id] = edge.model_copy(update={"valid_until": until})
    kept_ids = {r.id for r in kept}
    return [*kept, *(r for i, r in closed.items() if i not in kept_ids)]


async def _stored_edges(
    store: MemoryStore, markers: Sequence[Relationship]
) -> dict[tuple[uuid.UUID, uuid.UUID, str], list[Relationship]]:
    """Stored edges per ``(source, target, relation)`` triple ``markers`` close."""
    keys = list(
        dict.fromkeys(
            (m.source_id, m.target_id, relation)
            for m in markers
            for relation in closed_relations(m.relation_type)
        )
    )
    out: dict[tuple[uuid.UUID, uuid.UUID, str], list[Relationship]] = {k: [] for k in keys}
    between = getattr(store, "find_relationships_between", None)
    if between is not None:
        found: list[Relationship] = await between(keys)
    else:
        found = []
        for source, relation in dict.fromkeys((s, r) for s, _, r in keys):
            found.extend(
                await store.get_relationships_for_entity(
                    source, RelationshipFilter(direction="outgoing", relation_type=relation)
                )
            )
    for edge in found:
        bucket = out.get((edge.source_id, edge.target_id, edge.relation_type))
        if bucket is not None:
            bucket.append(edge)
    return out

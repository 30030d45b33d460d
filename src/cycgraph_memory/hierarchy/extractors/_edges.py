"""Private: relationship records from the edges of an analysed episode (rule and parser).

Each relationship is valid from the time of the message that stated it. An *ended* edge
("no longer works at") closes the open edge of the same triple stated earlier in the
episode (``valid_until`` = the ended message's time); when there is none it becomes an
ended marker (empty window ``[t, t]``, ``attributes["ended"] = True``) that the ingest
pipeline uses to close a stored edge and never stores itself. An ended claim with an
"until" date ("worked at Hooli until March", :mod:`._until`) stopped at that date: the
earlier edge closes there (never before it started), and the marker's window is
``[that date, t]``. An open claim with a "since" date ("has worked at Acme since 2021")
began then: its edge is valid from that date (a date it cannot place leaves the time of
the message), and the same triple said again in the episode with an earlier "since" date
moves the open edge's start back.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Protocol

from cycgraph_memory.hierarchy.extractors._conversation import Turn
from cycgraph_memory.hierarchy.extractors._polarity import ENDED_ATTRIBUTE
from cycgraph_memory.hierarchy.extractors._until import resolve_since, resolve_until
from cycgraph_memory.hierarchy.extractors.simple import derived_provenance, fact_id_for
from cycgraph_memory.records import Episode, Relationship

__all__ = ["EdgeLike", "relationships_of"]


class EdgeLike(Protocol):
    """The fields of an edge this module reads."""

    @property
    def source(self) -> str: ...
    @property
    def relation(self) -> str: ...
    @property
    def target(self) -> str: ...
    @property
    def confidence(self) -> float: ...
    @property
    def sentence(self) -> int: ...
    @property
    def ended(self) -> bool: ...
    @property
    def until(self) -> str | None: ...
    @property
    def since(self) -> str | None: ...


def relationships_of(
    episode: Episode,
    turns: Sequence[Turn],
    turn_of: Sequence[int],
    sentences: Sequence[str],
    edges: Sequence[EdgeLike],
    entity_ids: dict[str, uuid.UUID],
    namespace: str,
    now: datetime,
) -> list[Relationship]:
    """One relationship per period of each (source, relation, target), in edge order.

    A triple said again while its edge is open repeats it; said again after the episode
    ended it (or after an ended marker), it starts a new edge from that message.
    """
    out: list[Relationship] = []
    last: dict[tuple[str, str, str], Relationship] = {}
    periods: dict[tuple[str, str, str], int] = {}
    for edge in edges:
        triple = (edge.source, edge.relation, edge.target)
        if edge.source == edge.target:
            continue
        turn = turns[turn_of[edge.sentence]]
        when = turn.timestamp or episode.started_at
        # "worked at Hooli until March": it stopped then (else when the message said so).
        stop = (resolve_until(edge.until, when) if edge.until else None) or when
        # "has worked at Acme since 2021": it began then (else when the message said so).
        start = (
            min(resolve_since(edge.since, when) or when, when)
            if edge.since and not edge.ended
            else when
        )
        existing = last.get(triple)
        if existing is not None:
            if edge.ended:
                if existing.valid_until is None:
                    existing.valid_until = max(stop, existing.valid_from)
                continue
            if existing.valid_until is None:
                # The open edge said again; an earlier "since" date moves its start back.
                existing.valid_from = min(existing.valid_from, start)
                continue
        period = periods[triple] = periods.get(triple, -1) + 1
        key = "|".join(triple) if period == 0 else f"{'|'.join(triple)}|{period}"
        attributes: dict[str, object] = {
            "evidence": sentences[edge.sentence],
            "message_id": str(turn.message_id),
            "speaker": turn.speaker,
        }
        if edge.ended:
            attributes[ENDED_ATTRIBUTE] = True
        last[triple] = Relationship(
            id=fact_id_for(episode.id, namespace, key),
            source_id=entity_ids[edge.source],
            target_id=entity_ids[edge.target],
            relation_type=edge.relation,
            weight=1.0,
            attributes=attributes,
            valid_from=stop if edge.ended else start,
            valid_until=when if edge.ended else None,
            provenance=derived_provenance(
                episode, confidence=max(0.3, min(edge.confidence, 0.9)), created_at=now
            ),
        )
        out.append(last[triple])
    return out

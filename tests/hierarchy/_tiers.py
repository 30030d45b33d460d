"""The extractor tiers a polarity test runs on (rule-based, and the parser when installed),
and one chat message run through a tier."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from cycgraph_memory.hierarchy.extractors import RuleBasedExtractor
from cycgraph_memory.records import Episode, Message, Provenance, Relationship


def extractor_tiers() -> list[Any]:
    """A rule-based extractor, and a parser extractor when its extra and model are there."""
    tiers: list[Any] = [RuleBasedExtractor()]
    try:
        from cycgraph_memory.hierarchy.extractors.parser import ParserExtractor, parser_available

        if parser_available():
            tiers.append(ParserExtractor())
    except ImportError:  # pragma: no cover - the parser extra is absent
        pass
    return tiers


async def said_by(
    extractor: Any, text: str, at: datetime, name: str = "Dan"
) -> list[tuple[tuple[str, str, str], Relationship]]:
    """Extract one chat message ``name`` says at ``at``: each edge as (source, relation,
    target) names with the relationship."""
    message = Message(role="user", content=text, timestamp=at, metadata={"name": name})
    episode = Episode(
        topic="chat",
        messages=[message],
        started_at=at,
        ended_at=at,
        provenance=Provenance(source="system"),
    )
    result = await extractor.extract(episode)
    names = {e.id: e.name for e in result.entities}
    return [
        ((names[r.source_id], r.relation_type, names[r.target_id]), r) for r in result.relationships
    ]

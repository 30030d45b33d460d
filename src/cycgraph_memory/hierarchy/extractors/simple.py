"""Minimal extraction: one fact per episode whose content is the episode topic."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Callable
from datetime import datetime

from cycgraph_memory._validate import check_callable, instance_of
from cycgraph_memory.records import Episode, ExtractionResult, Provenance, SemanticFact, utc_now

__all__ = ["FACT_ID_NAMESPACE", "SimpleSemanticExtractor", "derived_provenance", "fact_id_for"]

FACT_ID_NAMESPACE = uuid.UUID("0b7d2c4e-8f31-5a6b-9d0e-4c2f1a3b5e77")
"""uuid5 namespace for deterministic fact, entity and relationship ids of extractors."""

_NAMESPACE_BYTES = FACT_ID_NAMESPACE.bytes
# uuid5's variant (RFC 4122) and version (5) bits, applied to the first 16 SHA-1 bytes.
_CLEAR = ~((0xC000 << 48) | (0xF000 << 64))
_SET = (0x8000 << 48) | (5 << 76)
_new_uuid = object.__new__
_set_field = object.__setattr__


def fact_id_for(episode_id: uuid.UUID, kind: str, key: str) -> uuid.UUID:
    """Return a deterministic id for something extracted from one episode.

    Args:
        episode_id: Id of the source episode.
        kind: Record kind and extractor, e.g. ``"simple-fact"`` or ``"rules-entity"``.
        key: Distinguishes records of one kind within the episode (index, name, ...).

    Returns:
        ``uuid5(FACT_ID_NAMESPACE, f"{kind}:{episode_id}:{key}")``.
    """
    # The same value as uuid.uuid5, without its argument checks and UUID.__init__ (the
    # extractors derive thousands of ids per ingest batch; a test compares the two).
    name = f"{kind}:{episode_id}:{key}".encode()
    digest = hashlib.sha1(_NAMESPACE_BYTES + name, usedforsecurity=False).digest()
    value = (int.from_bytes(digest[:16], "big") & _CLEAR) | _SET
    out = _new_uuid(uuid.UUID)
    _set_field(out, "int", value)
    _set_field(out, "is_safe", uuid.SafeUUID.unknown)
    return out


def derived_provenance(
    episode: Episode, *, confidence: float | None, created_at: datetime
) -> Provenance:
    """Provenance of a record derived from ``episode``.

    ``source`` is ``"derived"``; ``agent_id``, ``run_id`` and ``node_id`` are copied from the
    episode's provenance so lineage survives extraction.
    """
    return Provenance(
        source="derived",
        agent_id=episode.provenance.agent_id,
        run_id=episode.provenance.run_id,
        node_id=episode.provenance.node_id,
        confidence=confidence,
        created_at=created_at,
    )


class SimpleSemanticExtractor:
    """One fact per episode, zero configuration.

    The fact's content is the episode topic (an episode with an empty or blank topic yields
    no fact), ``source_episode_ids=[episode.id]``, ``valid_from=episode.started_at`` and a
    derived provenance. The fact id is deterministic (uuid5 of the episode id), so
    re-extracting an episode yields the same id. ``episode.fact_ids`` is set to the ids of
    the returned facts.

    Args:
        clock: Returns "now" for provenance timestamps (inject for deterministic tests).

    Raises:
        InvalidTypeError: ``clock`` is not callable.
    """

    def __init__(self, *, clock: Callable[[], datetime] = utc_now) -> None:
        self._clock = check_callable(clock, "clock")

    async def extract(self, episode: Episode) -> ExtractionResult:
        """Extract the topic fact from one episode.

        Args:
            episode: The episode; its ``fact_ids`` is replaced.

        Returns:
            An ``ExtractionResult`` with zero or one fact and no entities or relationships.
        """
        episode = instance_of(episode, Episode, "episode")
        topic = episode.topic.strip()
        facts: list[SemanticFact] = []
        if topic:
            facts.append(
                SemanticFact(
                    id=fact_id_for(episode.id, "simple-fact", "0"),
                    content=topic,
                    source_episode_ids=[episode.id],
                    provenance=derived_provenance(
                        episode, confidence=None, created_at=self._clock()
                    ),
                    valid_from=episode.started_at,
                )
            )
        episode.fact_ids = [f.id for f in facts]
        return ExtractionResult(facts=facts)

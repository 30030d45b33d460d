"""Episode segmentation (hierarchy level 0 -> 1): group messages into episodes by time gap.

:class:`SimpleEpisodeSegmenter` is the spec's rule-based segmenter. Its exact behaviour:

* Messages are sorted by ``timestamp``; messages with equal timestamps keep their input
  order (the sort is stable).
* A new episode starts when the gap between two consecutive messages is *strictly longer*
  than ``gap_threshold_ms``. A gap exactly equal to the threshold stays in the same episode.
* The topic is the content of the episode's first message with non-blank content, with
  every run of whitespace collapsed to one space, truncated to its first
  ``max_topic_length`` characters (a plain cut, as the spec says).
* Episode ids are deterministic by default: ``uuid5(EPISODE_ID_NAMESPACE, "episode:" +
  ",".join(sorted message ids))``. Re-segmenting the same messages yields the same episode
  ids, so downstream re-ingest is an idempotent upsert. Pass ``deterministic_ids=False`` for
  fresh random (version 4) ids instead.
"""

from __future__ import annotations

import itertools
import re
import uuid
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta

from pydantic import BaseModel, ConfigDict, Field

from cycgraph_memory.records import Episode, Message, Provenance, utc_now

__all__ = [
    "EPISODE_ID_NAMESPACE",
    "SimpleEpisodeSegmenter",
    "episode_id_for",
    "truncate_topic",
]

EPISODE_ID_NAMESPACE = uuid.UUID("6f1c8f0e-3b7a-5d2e-9c41-2a8e7d4b9f10")
"""uuid5 namespace for deterministic episode ids."""

_WHITESPACE = re.compile(r"\s+")


class _SegmenterOptions(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    gap_threshold_ms: int = Field(default=300_000, gt=0)
    max_topic_length: int = Field(default=100, gt=0)
    deterministic_ids: bool = True


def truncate_topic(text: str, max_length: int) -> str:
    """Collapse whitespace in ``text`` and keep its first ``max_length`` characters.

    This is the spec's "first message's content (truncated)": a plain cut, no ellipsis, so
    ``truncate_topic("the quick brown fox", 10) == "the quick "``. Runs of whitespace
    (including newlines) become one space and the ends are stripped before cutting.

    Args:
        text: Raw message content.
        max_length: Maximum length of the result, at least 1.

    Returns:
        The topic label.

    Raises:
        ValueError: If ``max_length`` is smaller than 1.
    """
    if max_length < 1:
        raise ValueError("max_length must be at least 1")
    return _WHITESPACE.sub(" ", text).strip()[:max_length]


def episode_id_for(messages: Sequence[Message]) -> uuid.UUID:
    """Return the deterministic episode id of a group of messages (order-independent)."""
    key = ",".join(sorted(str(m.id) for m in messages))
    return uuid.uuid5(EPISODE_ID_NAMESPACE, "episode:" + key)


class SimpleEpisodeSegmenter:
    """Time-gap segmentation, no LLM.

    Implements the ``EpisodeSegmenter`` contract. See the module docstring for the exact
    splitting, topic and id rules.

    Args:
        gap_threshold_ms: A gap strictly longer than this (milliseconds) starts a new
            episode. Must be a positive integer.
        max_topic_length: Maximum topic length in characters (positive integer).
        provenance: Template for each episode's provenance; ``created_at`` is replaced by
            the clock's time for every episode. Defaults to ``Provenance(source="system")``.
        deterministic_ids: Derive episode ids from the message ids (default) instead of
            generating random ones.
        clock: Returns "now" for provenance timestamps (inject for deterministic tests).

    Raises:
        pydantic.ValidationError: If an option is not a positive integer / boolean.
    """

    def __init__(
        self,
        gap_threshold_ms: int = 300_000,
        max_topic_length: int = 100,
        *,
        provenance: Provenance | None = None,
        deterministic_ids: bool = True,
        clock: Callable[[], datetime] = utc_now,
    ) -> None:
        self._options = _SegmenterOptions(
            gap_threshold_ms=gap_threshold_ms,
            max_topic_length=max_topic_length,
            deterministic_ids=deterministic_ids,
        )
        self._provenance = (
            provenance.model_copy() if provenance is not None else Provenance(source="system")
        )
        self._clock = clock

    @property
    def gap_threshold_ms(self) -> int:
        """The gap (milliseconds) that must be exceeded to start a new episode."""
        return self._options.gap_threshold_ms

    @property
    def max_topic_length(self) -> int:
        """Maximum topic length in characters."""
        return self._options.max_topic_length

    async def segment(self, messages: Sequence[Message]) -> list[Episode]:
        """Group messages into episodes, in time order.

        Args:
            messages: Messages in any order; they are not mutated.

        Returns:
            The episodes covering every message (``[]`` for no messages).
        """
        ordered = sorted(messages, key=lambda m: m.timestamp)
        if not ordered:
            return []
        threshold = timedelta(milliseconds=self._options.gap_threshold_ms)
        groups: list[list[Message]] = [[ordered[0]]]
        for previous, current in itertools.pairwise(ordered):
            if current.timestamp - previous.timestamp > threshold:
                groups.append([current])
            else:
                groups[-1].append(current)
        return [self._episode(group) for group in groups]

    def _episode(self, group: list[Message]) -> Episode:
        first_text = next((m.content for m in group if m.content.strip()), "")
        provenance = self._provenance.model_copy(update={"created_at": self._clock()})
        episode_id = episode_id_for(group) if self._options.deterministic_ids else uuid.uuid4()
        return Episode(
            id=episode_id,
            topic=truncate_topic(first_text, self._options.max_topic_length),
            messages=[m.model_copy(deep=True) for m in group],
            started_at=group[0].timestamp,
            ended_at=group[-1].timestamp,
            provenance=provenance,
        )

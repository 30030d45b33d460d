"""Episode segmentation (hierarchy level 0 -> 1): time gaps, and optionally size and topic.

:class:`SimpleEpisodeSegmenter` is the spec's rule-based segmenter: built with its
defaults it splits on time gaps only, as the spec says.
:meth:`SimpleEpisodeSegmenter.bounded` (the default segmenter of
:class:`~cycgraph_memory.hierarchy.pipeline.MemoryPipeline`) adds size bounds and
topic-shift cuts, which retrieval needs (an episode of a whole afternoon's chat is one
vector and one topic). Its exact behaviour:

* Messages are sorted by ``timestamp``; messages with equal timestamps keep their input
  order (the sort is stable).
* A new episode starts when the gap between two consecutive messages is *strictly longer*
  than ``gap_threshold_ms``. A gap exactly equal to the threshold stays in the same episode.
* Topic shifts (with ``topic_shifts``, and only where message vectors are available: each
  message's ``embedding``, or an ``embedder`` given to the segmenter): at every position
  ``i`` of a time-gap group the similarity between the mean vector of the
  ``topic_window`` messages before ``i`` and of the ``topic_window`` messages from ``i``
  on is computed. A position is a cut when its
  similarity is a local minimum that lies more than ``topic_shift_z`` standard deviations
  below the group's mean similarity (so the rule adapts to each embedder's similarity
  scale), and both sides keep at least ``min_messages`` messages.
* Size bounds: a group longer than ``max_messages`` messages is split into the fewest
  equal parts that fit (``None``, the default, = unbounded; 8 in ``bounded()``); then a
  part whose text exceeds ``max_characters`` (``None``, the default, = unbounded; 2,000
  in ``bounded()``) is cut greedily before the
  message that would overflow it (a single longer message stays whole).
* The topic is the content of the episode's first message with non-blank content, with
  every run of whitespace collapsed to one space, truncated to its first
  ``max_topic_length`` characters (a plain cut, as the spec says).
* Episode ids are deterministic by default: ``uuid5(EPISODE_ID_NAMESPACE, "episode:" +
  ",".join(sorted message ids))``. Re-segmenting the same messages yields the same episode
  ids, so downstream re-ingest is an idempotent upsert. Pass ``deterministic_ids=False`` for
  fresh random (version 4) ids instead.
"""

from __future__ import annotations

import copy
import itertools
import math
import re
import uuid
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from cycgraph_memory._validate import (
    check_callable,
    check_method,
    instances_of,
    keyword_options,
)
from cycgraph_memory.contracts import EmbeddingProvider
from cycgraph_memory.errors import InvalidInputError
from cycgraph_memory.records import Episode, Message, Number, Provenance, utc_now

__all__ = [
    "DEFAULT_MAX_EPISODE_CHARACTERS",
    "DEFAULT_MAX_EPISODE_MESSAGES",
    "EPISODE_ID_NAMESPACE",
    "SimpleEpisodeSegmenter",
    "episode_id_for",
    "truncate_topic",
]

EPISODE_ID_NAMESPACE = uuid.UUID("6f1c8f0e-3b7a-5d2e-9c41-2a8e7d4b9f10")
"""uuid5 namespace for deterministic episode ids."""

_WHITESPACE = re.compile(r"\s+")

DEFAULT_MAX_EPISODE_MESSAGES = 8
"""Most messages per episode of :meth:`SimpleEpisodeSegmenter.bounded`: small enough that an
episode is one or two topics."""

DEFAULT_MAX_EPISODE_CHARACTERS = 2_000
"""Most characters of message text per episode of :meth:`SimpleEpisodeSegmenter.bounded`."""


_LONGEST_GAP = datetime.max - datetime.min
"""No two timestamps are further apart: a longer ``gap_threshold_ms`` never splits (and
``timedelta`` cannot hold the longest ints), so the threshold is capped at it."""
_LONGEST_GAP_MS = _LONGEST_GAP // timedelta(milliseconds=1)


class _SegmenterOptions(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    gap_threshold_ms: int = Field(default=300_000, gt=0)
    max_topic_length: int = Field(default=100, gt=0)
    deterministic_ids: bool = True
    max_messages: int | None = Field(default=None, ge=1)
    max_characters: int | None = Field(default=None, ge=1)
    topic_shifts: bool = False
    topic_window: int = Field(default=2, ge=1)
    topic_shift_z: Number = Field(default=1.0, ge=0.0)
    min_messages: int = Field(default=3, ge=1)


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

    Implements the ``EpisodeSegmenter`` contract. With its defaults it is the spec's
    segmenter: only a gap longer than ``gap_threshold_ms`` starts an episode.
    :meth:`bounded` also bounds an episode's size and cuts at topic shifts (the default
    of ``MemoryPipeline``). See the module docstring for the exact splitting, topic and
    id rules.

    The options may also come as one mapping in the first place (the spec's
    ``new SimpleEpisodeSegmenter({ gapThresholdMs })``):
    ``SimpleEpisodeSegmenter({"gap_threshold_ms": 300_000})``, with the names below; an
    unknown name is an ``InvalidTypeError``, a mapping together with other arguments an
    ``InvalidInputError``.

    Args:
        gap_threshold_ms: A gap strictly longer than this (milliseconds) starts a new
            episode. Must be a positive integer (default 300,000: 5 minutes); one longer
            than any two timestamps can be apart never splits. Or the options mapping.
        max_topic_length: Maximum topic length in characters (positive integer, default
            100).
        provenance: Template for each episode's provenance; ``created_at`` is replaced by
            the clock's time for every episode. Defaults to ``Provenance(source="system")``.
        deterministic_ids: Derive episode ids from the message ids (default) instead of
            generating random ones.
        clock: Returns "now" for provenance timestamps (inject for deterministic tests).
        max_messages: Most messages per episode (default ``None``: unbounded).
        max_characters: Most characters of message text per episode (default ``None``:
            unbounded).
        topic_shifts: Cut a time-gap group where the topic shifts (default ``False``;
            ``True`` when an ``embedder`` is given, unless set).
        embedder: Embeds messages that carry no ``embedding`` for the topic-shift cut
            (and turns ``topic_shifts`` on unless it is given). Without it, only messages
            with embeddings take part in topic cuts (a group with any message lacking one
            is not cut by topic).
        topic_window: Messages on each side compared at a candidate cut (default 2).
        topic_shift_z: A cut needs a similarity this many standard deviations below the
            group's mean adjacent-window similarity (default 1.0).
        min_messages: Fewest messages on each side of a topic cut (default 3).

    Raises:
        pydantic.ValidationError: If an option is out of range.
        InvalidTypeError: An options mapping with an unknown name, a ``clock`` that is not
            callable or an ``embedder`` without ``embed``.
        InvalidInputError: An options mapping together with other arguments.
    """

    def __init__(
        self,
        gap_threshold_ms: int | Mapping[str, Any] = 300_000,
        max_topic_length: int = 100,
        *,
        provenance: Provenance | None = None,
        deterministic_ids: bool = True,
        clock: Callable[[], datetime] = utc_now,
        max_messages: int | None = None,
        max_characters: int | None = None,
        topic_shifts: bool | None = None,
        embedder: EmbeddingProvider | None = None,
        topic_window: int = 2,
        topic_shift_z: float = 1.0,
        min_messages: int = 3,
    ) -> None:
        if isinstance(gap_threshold_ms, Mapping):
            given = keyword_options(
                SimpleEpisodeSegmenter.__init__,
                gap_threshold_ms,
                locals(),
                "SimpleEpisodeSegmenter",
                slot="gap_threshold_ms",
            )
            SimpleEpisodeSegmenter.__init__(self, **given)
            return
        self._options = _SegmenterOptions(
            gap_threshold_ms=gap_threshold_ms,
            max_topic_length=max_topic_length,
            deterministic_ids=deterministic_ids,
            max_messages=max_messages,
            max_characters=max_characters,
            topic_shifts=embedder is not None if topic_shifts is None else topic_shifts,
            topic_window=topic_window,
            topic_shift_z=topic_shift_z,
            min_messages=min_messages,
        )
        if embedder is not None:
            check_method(embedder, "embed", "embedder", "EmbeddingProvider")
        self._embedder = embedder
        self._provenance = (
            provenance.model_copy() if provenance is not None else Provenance(source="system")
        )
        self._clock = check_callable(clock, "clock")

    @classmethod
    def bounded(
        cls,
        gap_threshold_ms: int = 300_000,
        *,
        max_messages: int | None = DEFAULT_MAX_EPISODE_MESSAGES,
        max_characters: int | None = DEFAULT_MAX_EPISODE_CHARACTERS,
        topic_shifts: bool = True,
        **options: Any,
    ) -> SimpleEpisodeSegmenter:
        """The segmenter retrieval wants: time gaps, size bounds and topic-shift cuts.

        ``MemoryPipeline``'s default: at most ``max_messages`` (8) messages and
        ``max_characters`` (2,000) characters per episode, and cuts where the topic shifts
        (when message vectors exist), so an episode's vector and topic stay about one or
        two subjects. Every other option is :class:`SimpleEpisodeSegmenter`'s.
        """
        return cls(
            gap_threshold_ms,
            max_messages=max_messages,
            max_characters=max_characters,
            topic_shifts=topic_shifts,
            **options,
        )

    @property
    def gap_threshold_ms(self) -> int:
        """The gap (milliseconds) that must be exceeded to start a new episode."""
        return self._options.gap_threshold_ms

    @property
    def max_topic_length(self) -> int:
        """Maximum topic length in characters."""
        return self._options.max_topic_length

    @property
    def max_messages(self) -> int | None:
        """Most messages per episode (``None`` = unbounded)."""
        return self._options.max_messages

    @property
    def max_characters(self) -> int | None:
        """Most characters of message text per episode (``None`` = unbounded)."""
        return self._options.max_characters

    async def segment(self, messages: Sequence[Message]) -> list[Episode]:
        """Group messages into episodes, in time order.

        Args:
            messages: Messages in any order; they are not mutated.

        Returns:
            The episodes covering every message (``[]`` for no messages).

        Raises:
            InvalidTypeError: ``messages`` is not a list of messages (mappings are
                validated into messages).
            InvalidInputError: The embedder returned a wrong number of vectors.
        """
        ordered = sorted(instances_of(messages, Message, "messages"), key=lambda m: m.timestamp)
        if not ordered:
            return []
        gap_ms = self._options.gap_threshold_ms
        threshold = _LONGEST_GAP if gap_ms >= _LONGEST_GAP_MS else timedelta(milliseconds=gap_ms)
        groups: list[list[Message]] = [[ordered[0]]]
        for previous, current in itertools.pairwise(ordered):
            if current.timestamp - previous.timestamp > threshold:
                groups.append([current])
            else:
                groups[-1].append(current)
        vectors = await self._vectors(ordered) if self._options.topic_shifts else {}
        bounded: list[list[Message]] = []
        for group in groups:
            for part in self._topic_parts(group, vectors):
                for sized in _split_count(part, self._options.max_messages):
                    bounded.extend(_split_chars(sized, self._options.max_characters))
        return [self._episode(group) for group in bounded]

    async def _vectors(self, ordered: list[Message]) -> dict[uuid.UUID, list[float]]:
        """Message vectors for topic cuts: stored embeddings, else the embedder's."""
        out = {m.id: m.embedding for m in ordered if m.embedding is not None}
        if self._embedder is not None:
            missing = [m for m in ordered if m.id not in out]
            if missing:
                embedded = await self._embedder.embed([m.content for m in missing])
                if len(embedded) != len(missing):
                    raise InvalidInputError(
                        f"the embedder returned {len(embedded)} vectors for "
                        f"{len(missing)} messages"
                    )
                out.update({m.id: v for m, v in zip(missing, embedded, strict=True)})
        return out

    def _topic_parts(
        self, group: list[Message], vectors: dict[uuid.UUID, list[float]]
    ) -> list[list[Message]]:
        opts = self._options
        if (
            not opts.topic_shifts
            or len(group) < 2 * opts.min_messages
            or any(m.id not in vectors for m in group)
        ):
            return [group]
        cuts = topic_cuts(
            np.asarray([vectors[m.id] for m in group], dtype=np.float64),
            window=opts.topic_window,
            z=opts.topic_shift_z,
            min_size=opts.min_messages,
        )
        bounds = [0, *cuts, len(group)]
        return [group[a:b] for a, b in itertools.pairwise(bounds)]

    def _episode(self, group: list[Message]) -> Episode:
        first_text = next((m.content for m in group if m.content.strip()), "")
        provenance = self._provenance.model_copy(update={"created_at": self._clock()})
        episode_id = episode_id_for(group) if self._options.deterministic_ids else uuid.uuid4()
        return Episode(
            id=episode_id,
            topic=truncate_topic(first_text, self._options.max_topic_length),
            messages=[_copy_message(m) for m in group],
            started_at=group[0].timestamp,
            ended_at=group[-1].timestamp,
            provenance=provenance,
        )


def _copy_message(message: Message) -> Message:
    """An independent copy of ``message``, cheaper than a generic deep copy.

    The metadata is deep-copied and the embedding list copied (its floats are immutable).
    """
    update: dict[str, object] = {"metadata": copy.deepcopy(message.metadata)}
    if message.embedding is not None:
        update["embedding"] = list(message.embedding)
    return message.model_copy(update=update)


def topic_cuts(vectors: np.ndarray, *, window: int, z: float, min_size: int) -> list[int]:
    """Positions where the topic shifts in a sequence of message vectors.

    The score at position ``i`` is the cosine similarity between the mean of the ``window``
    vectors before ``i`` and the mean of the ``window`` vectors from ``i`` on. A position is
    a cut when its score is a local minimum (not above either neighbour), lies more than
    ``z`` standard deviations below the mean score of the sequence, and leaves at least
    ``min_size`` vectors in every part. Deeper minima are taken first.

    Args:
        vectors: ``(n, d)`` array, one row per message, in order.
        window: Messages on each side of a candidate cut.
        z: Standard deviations below the mean a cut must reach.
        min_size: Fewest vectors per part.

    Returns:
        Sorted cut positions (each ``i`` starts a new part).
    """
    n = len(vectors)
    if n < 2 * min_size:
        return []
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    unit = vectors / np.where(norms == 0.0, 1.0, norms)
    positions = list(range(1, n))
    scores = np.empty(len(positions))
    for k, i in enumerate(positions):
        left = unit[max(0, i - window) : i].mean(axis=0)
        right = unit[i : i + window].mean(axis=0)
        denom = float(np.linalg.norm(left) * np.linalg.norm(right))
        scores[k] = float(left @ right) / denom if denom > 0.0 else 1.0
    mean, std = float(scores.mean()), float(scores.std())
    if std == 0.0 or not math.isfinite(std):
        return []
    threshold = mean - z * std
    candidates: list[tuple[float, int]] = []
    for k, i in enumerate(positions):
        low = scores[k] < threshold
        left_ok = k == 0 or scores[k] <= scores[k - 1]
        right_ok = k == len(positions) - 1 or scores[k] <= scores[k + 1]
        if low and left_ok and right_ok:
            candidates.append((float(scores[k]), i))
    cuts: list[int] = []
    for _, i in sorted(candidates):
        bounds = sorted([0, *cuts, i, n])
        if all(b - a >= min_size for a, b in itertools.pairwise(bounds)):
            cuts.append(i)
    return sorted(cuts)


def _split_count(group: list[Message], limit: int | None) -> list[list[Message]]:
    """Split into the fewest near-equal parts of at most ``limit`` messages."""
    if limit is None or len(group) <= limit:
        return [group]
    parts = math.ceil(len(group) / limit)
    size, extra = divmod(len(group), parts)
    out: list[list[Message]] = []
    start = 0
    for p in range(parts):
        end = start + size + (1 if p < extra else 0)
        out.append(group[start:end])
        start = end
    return out


def _split_chars(group: list[Message], limit: int | None) -> list[list[Message]]:
    """Cut before the message that would push a part's text past ``limit`` characters."""
    if limit is None:
        return [group]
    out: list[list[Message]] = [[]]
    used = 0
    for message in group:
        size = len(message.content)
        if out[-1] and used + size > limit:
            out.append([])
            used = 0
        out[-1].append(message)
        used += size
    return out

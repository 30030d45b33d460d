"""Re-embedding: recompute every stored vector with a new provider, without re-extraction.

``reembed(store, provider)`` walks the store type by type, in listing order, soft-deleted
records included, and rewrites only the vectors (no other field changes):

* ``message``/``episode``: messages embed their content; an episode's vector is the
  normalised mean of its messages' new unit vectors (the ingest rule), or the embedding of
  its text when a message has none.
* ``entity``: the name; ``fact``: the content.
* ``theme``: the centroid of its servable member facts' new vectors (invalidated and
  quarantined members are left out, as every theme writer computes centroids; nothing is
  embedded).
* the tenant's theme calibration (thresholds read off its fact vectors, kept in the
  tenant settings), when facts were re-embedded: fitted again on the new vectors.

Each batch is written in its own unit of work and then reported to ``progress`` as a
:class:`ReembedProgress`; pass the last one back as ``resume_from`` to continue after a
crash (work done before the checkpoint is not repeated; a batch in flight is redone,
which is harmless). The checkpoint counts records in listing order, so run re-embedding
when no record is being deleted (inserted records are fine: ingest embeds them).

On Postgres, ``target="next"`` writes a staging column of another width (see
``cycgraph_memory.postgres.begin_width_change``): reads keep using the old vectors until
``finish_width_change`` swaps them in.
"""

from __future__ import annotations

import asyncio
import logging
import operator
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from cycgraph_memory._primary import primary_reads
from cycgraph_memory.errors import (
    EmbeddingDimensionMismatchError,
    InvalidInputError,
    InvalidTypeError,
    ProviderError,
)
from cycgraph_memory.hierarchy.calibration import DEFAULT_THEME_SIZE, refit_theme_calibration
from cycgraph_memory.observability import traced
from cycgraph_memory.progress import check_progress
from cycgraph_memory.records import EntityFilter, Episode, FactFilter, ListOptions

__all__ = ["REEMBED_RECORD_TYPES", "ReembedProgress", "ReembedReport", "reembed"]

_log = logging.getLogger(__name__)

ReembedRecordType = Literal["episode", "entity", "fact", "theme"]
REEMBED_RECORD_TYPES: tuple[ReembedRecordType, ...] = ("episode", "entity", "fact", "theme")
"""Record types in the order ``reembed`` processes them (``episode`` includes messages)."""

_EPISODE_TEXT_LIMIT = 2000


class ReembedProgress(BaseModel):
    """A checkpoint: ``done`` records of ``record_type`` (in listing order) are written.

    Attributes:
        record_type: The type being processed.
        done: Records of that type written so far.
        written: Vectors written so far in the whole run (messages included).
        finished: Every requested type is done.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    record_type: ReembedRecordType
    done: int = Field(default=0, ge=0)
    written: int = Field(default=0, ge=0)
    finished: bool = False


class ReembedReport(BaseModel):
    """Vectors rewritten by ``reembed``, by kind (``message``, ``episode``, ...)."""

    model_config = ConfigDict(extra="forbid")

    counts: dict[str, int]
    dimensions: int
    target: Literal["current", "next"]


def _unit_mean(vectors: Sequence[Sequence[float]]) -> list[float] | None:
    m = np.asarray(vectors, dtype=np.float64)
    if m.size == 0:
        return None
    norms = np.linalg.norm(m, axis=1, keepdims=True)
    mean = (m / np.where(norms == 0.0, 1.0, norms)).mean(axis=0)
    length = float(np.linalg.norm(mean))
    if length == 0.0:
        return None
    return [float(x) for x in mean / length]


class _Embedder:
    def __init__(self, provider: Any) -> None:
        raw = getattr(provider, "dimensions", None)
        try:
            dim = -1 if isinstance(raw, bool) else operator.index(raw)  # type: ignore[arg-type]
        except TypeError:
            dim = -1
        if not callable(getattr(provider, "embed", None)) or dim < 1:
            raise InvalidTypeError(
                "provider must be an EmbeddingProvider (an embed() method and a positive "
                f"int dimensions), got {type(provider).__name__}"
            )
        self.provider = provider
        self.dim = dim

    async def __call__(self, texts: list[str]) -> list[list[float]]:
        if not texts:
            return []
        try:
            out = await self.provider.embed(texts)
        except Exception as exc:
            if isinstance(exc, ProviderError):
                raise
            raise ProviderError(f"embedding provider failed: {exc}") from exc
        if len(out) != len(texts):
            raise ProviderError(f"provider returned {len(out)} vectors for {len(texts)} texts")
        for i, v in enumerate(out):
            if len(v) != self.dim:
                raise EmbeddingDimensionMismatchError(self.dim, len(v), f"provider output {i}")
        return [list(map(float, v)) for v in out]


@traced("cycgraph.reembed", lambda report: {"rows": sum(report.counts.values())})
async def reembed(
    store: Any,
    provider: Any,
    *,
    record_types: Sequence[str] = REEMBED_RECORD_TYPES,
    batch_size: int = 256,
    index: Any = None,
    progress: Callable[[ReembedProgress], Awaitable[None] | None] | None = None,
    resume_from: ReembedProgress | None = None,
    target: Literal["current", "next"] = "current",
    theme_size: int = DEFAULT_THEME_SIZE,
) -> ReembedReport:
    """Recompute the stored vectors of ``record_types`` with ``provider``.

    Args:
        store: A store with the ``SupportsEmbeddingRewrite`` capability (both shipped
            stores).
        provider: The new ``EmbeddingProvider``.
        record_types: Any of ``episode`` (with its messages), ``entity``, ``fact``,
            ``theme``; processed in that order whatever the order given.
        batch_size: Records per provider call and per unit of work.
        index: An index that keeps its own copies (the in-memory one): rebuilt at the
            end, and when the run stops part-way (cancelled or failing) after a batch
            committed, so it always serves the vectors the store holds.
        progress: Called (sync or async) with a checkpoint after every committed batch.
        resume_from: The last checkpoint of an interrupted run.
        target: ``"current"`` rewrites the vectors in place; ``"next"`` fills the staging
            table of a Postgres width change.
        theme_size: Facts per theme of the tenant's calibration (the calibrator's
            ``theme_size``): when facts are re-embedded in place, the stored theme
            calibration is fitted again on the new vectors.

    Returns:
        Vectors written by kind.

    Raises:
        InvalidInputError: Unknown record type, bad batch size, ``theme_size`` or
            checkpoint.
        InvalidTypeError: The store cannot rewrite embeddings, ``record_types`` is not a
            list, ``provider`` is not an embedding provider or ``progress`` is not
            callable (all checked before anything is written).
        ProviderError / EmbeddingDimensionMismatchError: The provider failed or returned
            vectors of the wrong width (the batch is not written).
    """
    if isinstance(record_types, str | bytes) or not isinstance(record_types, Iterable):
        raise InvalidTypeError(
            f"record_types must be a list of record types, got {type(record_types).__name__}"
        )
    record_types = list(record_types)
    unknown = [t for t in record_types if t not in REEMBED_RECORD_TYPES]
    if unknown or not record_types:
        raise InvalidInputError(
            f"record_types must be a non-empty subset of {REEMBED_RECORD_TYPES}, "
            f"got {list(record_types)}"
        )
    if not isinstance(batch_size, int) or not 1 <= batch_size <= 100_000:
        raise InvalidInputError(f"batch_size must be in [1, 100000], got {batch_size!r}")
    if not hasattr(store, "write_embeddings"):
        raise InvalidTypeError(f"{type(store).__name__} cannot rewrite embeddings")
    if target not in ("current", "next"):
        raise InvalidInputError(f"target must be 'current' or 'next', got {target!r}")
    if resume_from is not None and not isinstance(resume_from, ReembedProgress):
        resume_from = ReembedProgress.model_validate(resume_from)
    # Checked before the first batch: each of these is used only after batches commit.
    if progress is not None:
        check_progress(progress)
    if isinstance(theme_size, bool) or not isinstance(theme_size, int) or theme_size < 1:
        raise InvalidInputError(f"theme_size must be a positive int, got {theme_size!r}")
    embed = _Embedder(provider)
    types = [t for t in REEMBED_RECORD_TYPES if t in record_types]
    if resume_from is not None and resume_from.record_type not in types:
        raise InvalidInputError(f"checkpoint type {resume_from.record_type!r} not requested")
    counts = dict.fromkeys(("message", "episode", "entity", "fact", "theme"), 0)
    written = 0 if resume_from is None else resume_from.written

    async def report(kind: ReembedRecordType, done: int, finished: bool = False) -> None:
        if progress is None:
            return
        result = progress(
            ReembedProgress(record_type=kind, done=done, written=written, finished=finished)
        )
        if result is not None:
            await result

    done = 0  # records of the current type written (the final checkpoint carries it)
    keeps_copies = index is not None and hasattr(index, "upsert_many")
    completed = False
    # The records are read outside the batches' units of work and their new vectors are
    # written from what was read: on the primary, never from a lagging read engine (a
    # record not yet replicated would keep its old vector; a renamed one would get the
    # vector of its old name).
    with primary_reads(store, index):
        try:
            for kind in types:
                if resume_from is not None:
                    if types.index(kind) < types.index(resume_from.record_type):
                        continue
                    offset = resume_from.done if kind == resume_from.record_type else 0
                else:
                    offset = 0
                if kind == "theme":
                    async with store.transaction():
                        n = await store.recompute_theme_centroids(target=target)
                    counts["theme"] += n
                    written += n
                    done = n
                    await report(kind, n)
                    continue
                async for page in _pages(store, kind, offset, batch_size):
                    async with store.transaction():
                        n = await _rewrite(store, embed, kind, page, counts, target)
                    written += n
                    offset += len(page)
                    await report(kind, offset)
                done = offset
            if "fact" in types and target == "current":
                # The calibrated theme thresholds are quantiles of the tenant's fact similarities:
                # another embedder, other similarities (on Postgres a width change refits them at
                # the swap, when the new vectors become the readable ones).
                async with store.transaction():
                    await refit_theme_calibration(store, theme_size=theme_size)
            # The last type's count, like every checkpoint: resuming from it repeats nothing.
            await report(types[-1], done, finished=True)
            completed = True
        finally:
            # An index keeping its own copies is rebuilt from the store at the end, and also
            # when the run stops part-way (cancelled, or the provider failed) after a batch
            # committed: the vectors committed so far are the ones it must serve. Shielded:
            # a caller cancelling meanwhile does not stop it half-way (it finishes on its own).
            if keeps_copies and (
                completed or written > (0 if resume_from is None else resume_from.written)
            ):
                await asyncio.shield(index.rebuild(store))
    _log.info("re-embedding done: %s", counts)
    return ReembedReport(counts=counts, dimensions=embed.dim, target=target)


async def _pages(store: Any, kind: str, skip: int, size: int) -> AsyncIterator[list[Any]]:
    """Pages of ``size`` records after the first ``skip`` (listing order, all records)."""
    scan = {"entity": "scan_entities", "fact": "scan_facts"}.get(kind)
    if scan is not None and hasattr(store, scan):
        pending: list[Any] = []
        async for batch in getattr(store, scan)(include_invalidated=True, page_size=size):
            if skip >= len(batch):
                skip -= len(batch)
                continue
            pending.extend(batch[skip:])
            skip = 0
            while len(pending) >= size:
                yield pending[:size]
                pending = pending[size:]
        if pending:
            yield pending
        return
    offset = skip
    while True:
        if kind == "entity":
            page = await store.find_entities(
                EntityFilter(include_invalidated=True, limit=size, offset=offset)
            )
        elif kind == "fact":
            page = await store.find_facts(
                FactFilter(include_invalidated=True, limit=size, offset=offset)
            )
        else:
            page = await store.list_episodes(
                ListOptions(include_invalidated=True, limit=size, offset=offset)
            )
        if page:
            yield list(page)
        if len(page) < size:
            return
        offset += len(page)


async def _rewrite(
    store: Any,
    embed: _Embedder,
    kind: str,
    page: list[Any],
    counts: dict[str, int],
    target: Literal["current", "next"],
) -> int:
    if kind == "entity":
        vectors = await embed([e.name for e in page])
        await store.write_embeddings(
            "entity", dict(zip([e.id for e in page], vectors, strict=True)), target=target
        )
        counts["entity"] += len(page)
        return len(page)
    if kind == "fact":
        vectors = await embed([f.content for f in page])
        await store.write_embeddings(
            "fact", dict(zip([f.id for f in page], vectors, strict=True)), target=target
        )
        counts["fact"] += len(page)
        return len(page)
    episodes: list[Episode] = page
    messages = [m for ep in episodes for m in ep.messages]
    message_vectors = await embed([m.content for m in messages])
    by_id = dict(zip([m.id for m in messages], message_vectors, strict=True))
    episode_vectors: dict[Any, list[float]] = {}
    missing = [ep for ep in episodes if not ep.messages]
    for ep in episodes:
        if ep.messages:
            mean = _unit_mean([by_id[m.id] for m in ep.messages])
            if mean is None:
                missing.append(ep)
            else:
                episode_vectors[ep.id] = mean
    texts = [
        (" ".join(m.content for m in ep.messages) or ep.topic)[:_EPISODE_TEXT_LIMIT]
        for ep in missing
    ]
    for ep, vector in zip(missing, await embed(texts), strict=True):
        episode_vectors[ep.id] = vector
    await store.write_embeddings("message", by_id, target=target)
    await store.write_embeddings("episode", episode_vectors, target=target)
    counts["message"] += len(by_id)
    counts["episode"] += len(episode_vectors)
    return len(by_id) + len(episode_vectors)

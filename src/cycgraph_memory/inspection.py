"""What a tenant holds: record counts, tags, themes, index sizes, ledger runs, candidates.

:func:`memory_stats` is written against the contracts, so it runs on every backend. It
reads the whole tenant page by page (it is an operator's report, not a per-request call);
a store offering ``record_counts()`` (the Postgres store does, with two aggregate
statements) is asked for the counts instead of being scanned, and an index offering
``index_sizes()`` reports its on-disk sizes.
"""

from __future__ import annotations

import logging
from collections import Counter
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from cycgraph_memory._validate import check_same_tenant, check_text
from cycgraph_memory.contracts import MemoryIndex, MemoryStore, OutcomeLedger
from cycgraph_memory.errors import InvalidInputError, InvalidTypeError
from cycgraph_memory.progress import ProgressCallback, check_progress, report_progress
from cycgraph_memory.records import MAX_TAG_LENGTH, QUARANTINE_TAG

__all__ = [
    "RECORD_KINDS",
    "MemoryStats",
    "RecordCounts",
    "TenantCounts",
    "ThemeSize",
    "memory_stats",
]

_log = logging.getLogger(__name__)

RECORD_KINDS = ("entity", "relationship", "episode", "message", "fact", "theme")
"""The record types :class:`MemoryStats` counts, in display order."""

_PAGE = 1000


class RecordCounts(BaseModel):
    """Counts of one record type.

    Attributes:
        live: Records served by default reads.
        invalidated: Soft-deleted records (``invalidated_at`` / ``invalidated_by`` set,
            or an entity merged into another).
        quarantined: Live facts tagged ``quarantined`` (always 0 for other types).
    """

    model_config = ConfigDict(extra="forbid")

    live: int = 0
    invalidated: int = 0
    quarantined: int = 0


class TenantCounts(BaseModel):
    """What a store's optional ``record_counts()`` returns (counted in the database).

    Attributes:
        records: Counts per record type except themes (``memory_stats`` counts those).
        tags: Non-invalidated facts per tag, most used first.
        pending_candidates: Live, non-quarantined facts with the candidate tag.
    """

    model_config = ConfigDict(extra="forbid")

    records: dict[str, RecordCounts]
    tags: dict[str, int]
    pending_candidates: int


class ThemeSize(BaseModel):
    """One live theme and how many facts it lists."""

    model_config = ConfigDict(extra="forbid")

    id: str
    label: str
    facts: int


class MemoryStats(BaseModel):
    """A tenant's contents (see :func:`memory_stats`).

    Attributes:
        records: Counts per record type (keys from :data:`RECORD_KINDS`).
        tags: Live facts per tag, most used first (at most ``top`` tags).
        themes: Live themes, largest first (at most ``top``).
        index: Index sizes by name (vectors held in memory, or bytes on disk for the
            Postgres HNSW indexes, which are shared by every tenant of the database).
        ledger_runs: Outcomes recorded in the ledger (0 without a ledger).
        pending_candidates: Live, non-quarantined facts carrying the candidate tag (lessons
            the retention gate has not ruled on yet).
    """

    model_config = ConfigDict(extra="forbid")

    records: dict[str, RecordCounts] = Field(default_factory=dict)
    tags: dict[str, int] = Field(default_factory=dict)
    themes: list[ThemeSize] = Field(default_factory=list)
    index: dict[str, int] = Field(default_factory=dict)
    ledger_runs: int = 0
    pending_candidates: int = 0


async def _scan(store: Any, kind: str, **filters: Any) -> Any:
    from cycgraph_memory.consolidation._common import scan

    async for page in scan(store, kind, _PAGE, **filters):  # type: ignore[arg-type]
        yield page


async def _counted(
    store: MemoryStore, candidate_tag: str, progress: ProgressCallback | None
) -> tuple[dict[str, RecordCounts], Counter[str], int]:
    counts = {kind: RecordCounts() for kind in RECORD_KINDS}
    tags: Counter[str] = Counter()
    candidates = 0
    done = 0
    async for page in _scan(store, "facts", include_invalidated=True):
        for fact in page:
            c = counts["fact"]
            if fact.invalidated_by is not None:
                c.invalidated += 1
                continue
            if QUARANTINE_TAG in fact.tags:
                c.quarantined += 1
            else:
                c.live += 1
                candidates += candidate_tag in fact.tags
            tags.update(dict.fromkeys(fact.tags, 1))
        done += len(page)
        report_progress(progress, "stats", done, None, "facts")
    entity_ids = []
    async for page in _scan(store, "entities", include_invalidated=True):
        for entity in page:
            dead = entity.invalidated_at is not None or entity.superseded_by is not None
            counts["entity"].invalidated += dead
            counts["entity"].live += not dead
            entity_ids.append(entity.id)
    seen: set[Any] = set()
    finder = getattr(store, "find_relationships_for_entities", None)
    for start in range(0, len(entity_ids), _PAGE):
        chunk = entity_ids[start : start + _PAGE]
        if finder is not None:
            edges = await finder(chunk, include_invalidated=True)
        else:
            edges = await store.get_relationships_for_entities(chunk, include_invalidated=True)
        for edge in edges:
            if edge.id in seen:
                continue
            seen.add(edge.id)
            dead = edge.invalidated_by is not None
            counts["relationship"].invalidated += dead
            counts["relationship"].live += not dead
    offset = 0
    while True:
        episodes = await store.list_episodes(include_invalidated=True, limit=_PAGE, offset=offset)
        for episode in episodes:
            dead = episode.invalidated_at is not None
            counts["episode"].invalidated += dead
            counts["episode"].live += not dead
            if dead:
                counts["message"].invalidated += len(episode.messages)
            else:
                counts["message"].live += len(episode.messages)
        if len(episodes) < _PAGE:
            break
        offset += _PAGE
    return counts, tags, candidates


async def memory_stats(
    store: MemoryStore,
    *,
    index: MemoryIndex | None = None,
    ledger: OutcomeLedger | None = None,
    candidate_tag: str = "candidate",
    top: int = 20,
    progress: ProgressCallback | None = None,
) -> MemoryStats:
    """Count what ``store`` holds (for an operator; reads the tenant page by page).

    Args:
        store: The store to inspect.
        index: Its index; sizes are reported when it offers ``__len__`` (in memory) or
            ``index_sizes()`` (Postgres).
        ledger: The outcome ledger; its recorded runs are counted.
        candidate_tag: The tag marking lessons on trial (``RetentionPolicy.candidate_tag``).
        top: How many tags and themes to list.
        progress: Called with ``ProgressEvent("stats", facts_read, None, "facts")`` per page
            (a store counting in the database reports its fact count once).

    Returns:
        The :class:`MemoryStats`.

    Raises:
        InvalidTypeError: ``top`` is not an int, ``candidate_tag`` not a str, or
            ``progress`` not callable.
        InvalidInputError: ``top`` is negative or ``candidate_tag`` is not a valid tag
            (empty, over ``MAX_TAG_LENGTH`` characters, a NUL or a lone surrogate).
    """
    check_same_tenant(store, index=index, ledger=ledger)
    if isinstance(top, bool) or not isinstance(top, int):
        raise InvalidTypeError(f"top must be an int, got {type(top).__name__}")
    if top < 0:
        raise InvalidInputError(f"top must be >= 0, got {top}")
    if not isinstance(candidate_tag, str):
        raise InvalidTypeError(f"candidate_tag must be a str, got {type(candidate_tag).__name__}")
    if not candidate_tag:
        raise InvalidInputError("candidate_tag must not be empty")
    if len(candidate_tag) > MAX_TAG_LENGTH:
        raise InvalidInputError(
            f"candidate_tag must be 1-{MAX_TAG_LENGTH} characters (a tag), "
            f"got {len(candidate_tag)}"
        )
    try:
        check_text(candidate_tag, "candidate_tag")  # Postgres cannot even compare it
    except ValueError as exc:
        raise InvalidInputError(str(exc)) from None
    if progress is not None:
        check_progress(progress)
    native = getattr(store, "record_counts", None)
    if native is not None:
        found: TenantCounts = await native(candidate_tag=candidate_tag, top=top)
        counts = {kind: found.records.get(kind, RecordCounts()) for kind in RECORD_KINDS}
        counts["theme"] = RecordCounts()
        tags: Counter[str] = Counter(found.tags)
        candidates = found.pending_candidates
        fact = counts["fact"]
        read = fact.live + fact.invalidated + fact.quarantined
        report_progress(progress, "stats", read, None, "facts")
    else:
        counts, tags, candidates = await _counted(store, candidate_tag, progress)
    themes = await store.list_themes(include_invalidated=True)
    sizes: list[ThemeSize] = []
    for theme in themes:
        if theme.invalidated_at is not None:
            counts["theme"].invalidated += 1
            continue
        counts["theme"].live += 1
        sizes.append(ThemeSize(id=str(theme.id), label=theme.label, facts=len(theme.fact_ids)))
    sizes.sort(key=lambda t: (-t.facts, t.label, t.id))
    index_sizes: dict[str, int] = {}
    if index is not None:
        sized = getattr(index, "index_sizes", None)
        if sized is not None:
            index_sizes = dict(await sized())
        elif hasattr(index, "__len__"):
            index_sizes = {"vectors": len(index)}  # type: ignore[arg-type]
    runs = 0
    if ledger is not None:
        runs = (await ledger.get_baseline()).runs
    ordered_tags = dict(sorted(tags.items(), key=lambda kv: (-kv[1], kv[0]))[:top])
    stats = MemoryStats(
        records=counts,
        tags=ordered_tags,
        themes=sizes[:top],
        index=index_sizes,
        ledger_runs=runs,
        pending_candidates=candidates,
    )
    _log.debug("memory stats: %s", stats.model_dump(include={"records", "ledger_runs"}))
    return stats

"""MemoryConsolidator: near-duplicate merging, decay pruning, episode budget, theme cascade.

One pass collects every mutation first (nothing is written while planning), then applies
them in one exclusive unit of work. Quarantined facts are invisible to the pass: never
merged, never pruned, never counted against ``max_facts``.

**Near duplicates.** Every live, non-quarantined fact with an embedding is compared with
every other by cosine similarity over one float32 matrix of unit rows (memory: that
matrix, 4 bytes per dimension per fact, plus ``batch_size``-sized tiles; no per-record
objects are kept). ``dedup_method="exact"`` scans all pairs in blocked numpy matrix
products of ``batch_size`` x ``batch_size`` tiles; ``"lsh"`` verifies only the candidates
of seeded random-hyperplane LSH tables, chosen so a pair at the threshold is a candidate
with probability >= 0.99 (see :mod:`~cycgraph_memory.consolidation.near_duplicates`);
``"auto"`` (default) is exact up to ``EXACT_MAX_ROWS`` (20,000) embedded facts and LSH
above when its estimated cost is lower. Pairs at or above ``dedup_threshold`` (within
1e-6; float32 products near the cut re-decided in float64) whose validity windows
overlap form a similarity graph (the same sentence valid in two separate periods is two
facts, so a temporal query of the first period still finds it).
Keepers are chosen greedily in priority order: facts tagged ``verified_tag`` first, then
the most recent ``valid_from``, then the smallest id. Each fact not yet absorbed becomes a
keeper and absorbs its not-yet-absorbed neighbours, so every absorbed fact is itself similar to its
keeper (no chaining) and a verified fact is never absorbed by an unverified one.

A keeper keeps the evidence of everything it absorbed: ``access_count`` summed (saturating
at ``MAX_ACCESS_COUNT``, as ``touch_facts`` does),
``last_accessed_at`` the latest, ``entity_ids``, ``source_episode_ids`` and tags united (in
order, keeper first), and a keeper tagged ``verified_tag`` drops ``candidate_tag``. The
absorbed facts are invalidated with ``invalidated_by`` = the keeper's id (their own
provenance untouched), or deleted in ``delete_mode="hard"``.

**Decay.** ``score = 0.5 ** (age_days / decay_half_life_days) * (1 + ln(1 + access_count))``
with age measured from ``last_accessed_at`` (else ``valid_from``) to the pass's clock,
never negative. When more than ``max_facts`` facts remain after merging, the lowest scores
are pruned (ties: older ``valid_from``, then smaller id) with ``invalidated_by =
"consolidation:decay"`` (or deleted).

**Episodes.** Over ``max_episodes``, the oldest (``(started_at, id)``) are invalidated (or
deleted).

**Themes.** A theme listing removed facts gets its ``fact_ids`` updated, and its
embedding, label and description taken again from its remaining servable facts, live and
not quarantined (``hierarchy.theme_upkeep.recentre_theme``: the normalised mean of their
unit embeddings, ``None`` when none has one; the label quotes the one nearest it). A live
theme that a quarantined fact names is repaired the same way (a fact quarantined after it
joined a theme stops shaping it); a theme is written only when that changes it. A theme
left with no live fact (only facts invalidated earlier, e.g.
by a conflict resolution, or none) is invalidated (or deleted). In hard mode,
themes already soft-deleted and episodes stop citing the deleted facts too (an episode
cites a merged fact's keeper instead), and a fact invalidated in favour of a deleted fact
(``invalidated_by`` = its id) names the deleted fact's keeper instead when it was merged
into one that survives, else ``ERASED_BY`` (``"erased"``, as after a purge: it stays
invalidated); a quarantined one is left as it is.
"""

from __future__ import annotations

import logging
import math
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

import numpy as np
from numpy.typing import NDArray
from pydantic import AliasChoices, BaseModel, ConfigDict, Field

from cycgraph_memory._exclusive import FACTS_LOCK, exclusive_passes
from cycgraph_memory._validate import (
    check_bool,
    check_logger,
    check_same_tenant,
    instance_of,
    keyword_options,
)
from cycgraph_memory.consolidation._common import (
    check_batch_size,
    check_delete_mode,
    check_index,
    check_lifecycle_tag,
    check_store,
    check_unit_interval,
    facts_reader_for_update,
    scan,
)
from cycgraph_memory.consolidation.near_duplicates import (
    EXACT_MAX_ROWS,
    LSH_RECALL,
    SIM_TOLERANCE,
    lsh_near_duplicate_pairs,
    lsh_parameters_for,
    near_duplicate_pairs,
)
from cycgraph_memory.consolidation.plan import (
    Delete,
    Mutation,
    MutationPlan,
    Put,
    apply_mutations,
    sync_index,
)
from cycgraph_memory.contracts import MemoryIndex, MemoryStore
from cycgraph_memory.errors import InvalidInputError, InvalidTypeError
from cycgraph_memory.hierarchy.theme_upkeep import recentre_theme, theme_changed
from cycgraph_memory.lifecycle.models import ERASED_BY
from cycgraph_memory.observability import span, tenant_of
from cycgraph_memory.progress import ProgressCallback, report_progress
from cycgraph_memory.records import (
    MAX_ACCESS_COUNT,
    QUARANTINE_TAG,
    ConsolidationMutation,
    ConsolidationReport,
    Count,
    SemanticFact,
    utc_now,
)

__all__ = [
    "ConsolidationPlan",
    "ConsolidationThresholds",
    "MemoryConsolidator",
    "decay_score",
    "near_duplicate_pairs",
]

_log = logging.getLogger(__name__)

DECAY_REASON = "consolidation:decay"
"""``invalidated_by`` of facts pruned for a low decay score (soft mode)."""

_DAY = 86_400.0
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)
_OPEN = np.iinfo(np.int64).max
"""``valid_until`` of an open fact, after every datetime (microseconds since the epoch)."""


def _micros(when: datetime) -> int:
    """``when`` as exact integer microseconds since the epoch."""
    return (when - _EPOCH) // _MICROSECOND

ConsolidationPlan = MutationPlan[ConsolidationReport]
"""The plan of one consolidation pass."""

FloatMatrix = NDArray[np.float32]
DedupMethod = Literal["auto", "exact", "lsh"]
"""How near-duplicate pairs are found (see the module docs)."""


class ConsolidationThresholds(BaseModel):
    """When :meth:`MemoryConsolidator.auto_consolidate` should run.

    The counts may also be given as ``max_facts`` / ``max_episodes`` (the names of the
    consolidator's own budgets), e.g. ``auto_consolidate({"max_facts": 1000})``.

    Attributes:
        facts: Consolidate when the store holds more live facts than this (alias
            ``max_facts``).
        episodes: Consolidate when the store holds more live episodes than this (alias
            ``max_episodes``).
    """

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    facts: Count | None = Field(
        default=None, ge=0, validation_alias=AliasChoices("facts", "max_facts")
    )
    episodes: Count | None = Field(
        default=None, ge=0, validation_alias=AliasChoices("episodes", "max_episodes")
    )


def decay_score(age_days: float, access_count: int, half_life_days: float) -> float:
    """Relevance of a fact: ``0.5 ** (age / half_life) * (1 + ln(1 + access_count))``.

    Args:
        age_days: Days since last access (else since ``valid_from``); negatives count as 0.
        access_count: Times the fact was served.
        half_life_days: Days after which the age factor halves.
    """
    return float(0.5 ** (max(age_days, 0.0) / half_life_days) * (1.0 + math.log1p(access_count)))


@dataclass
class _Facts:
    """Columnar summary of the eligible facts (no records kept)."""

    ids: list[uuid.UUID]
    # Exact microseconds since the epoch: a float timestamp has no microsecond resolution
    # before 1697 or after 2242, which put facts a microsecond apart in id order.
    valid_from: NDArray[np.int64]
    valid_until: NDArray[np.int64]  # _OPEN when open
    last_access: NDArray[np.float64]  # nan when never accessed
    access: NDArray[np.int64]
    verified: NDArray[np.bool_]
    emb_rows: NDArray[np.intp]  # fact index of each embedding row
    vectors: FloatMatrix


class MemoryConsolidator:
    """Budgeted pruning, near-duplicate merging and theme cleanup (see the module docs).

    Args:
        store: The store to consolidate.
        index: The index over it; kept in sync after the commit when it holds its own
            copies (the in-memory index).
        options: The keyword options below as one mapping (the spec's
            ``new MemoryConsolidator(store, index, options)``), instead of keywords.
        max_facts: Facts to retain; the lowest decay scores are pruned past it.
        max_episodes: Episodes to retain; the oldest are pruned past it.
        decay_half_life_days: Half-life of the age factor of the decay score.
        dedup_threshold: Cosine similarity at or above which two facts are duplicates.
        delete_mode: ``"soft"`` invalidates (recoverable), ``"hard"`` deletes.
        debug: Log every mutation and return the mutation log in the report.
        logger: Optional ``logging.Logger``, or any object with some of ``debug`` /
            ``info`` / ``warning`` (or the spec's ``warn``): the levels it lacks are
            dropped (default: this module's logger).
        batch_size: Page size for loading facts, and the tile size of the similarity scan.
        verified_tag: A fact with this tag is never absorbed by one without it.
        candidate_tag: Dropped from a verified keeper that absorbs duplicates (must differ
            from ``verified_tag``).
        clock: Returns "now" (aware UTC) for decay ages and invalidation timestamps.
        dedup_method: ``"auto"`` (exact up to 20,000 embedded facts, LSH above when
            cheaper), ``"exact"`` (all pairs) or ``"lsh"`` (LSH candidates, each verified).
        seed: Seed of the LSH hyperplanes (same seed and data, same plan).

    Raises:
        InvalidInputError: An option out of range (a negative budget, a threshold outside
            [0, 1], an unknown ``delete_mode`` / ``dedup_method``, equal tags, or a tag no
            fact could carry: empty, over ``MAX_TAG_LENGTH``, NUL, a lone surrogate, or
            ``quarantined``).
        InvalidTypeError: A ``store`` without the ``MemoryStore`` methods, an ``index``
            that is neither ``None`` nor a ``MemoryIndex``, a tag that is not a ``str``,
            ``debug`` that is not a ``bool``, a ``clock`` that is not callable, a logger
            with none of the logging methods.
    """

    def __init__(
        self,
        store: MemoryStore,
        index: MemoryIndex | None = None,
        options: Mapping[str, Any] | None = None,
        *,
        max_facts: int | None = None,
        max_episodes: int | None = None,
        decay_half_life_days: float = 30,
        dedup_threshold: float = 0.9,
        delete_mode: Literal["soft", "hard"] = "soft",
        debug: bool = False,
        logger: logging.Logger | object | None = None,
        batch_size: int = 1000,
        verified_tag: str = "verified",
        candidate_tag: str = "candidate",
        clock: Callable[[], datetime] | None = None,
        dedup_method: DedupMethod = "auto",
        seed: int = 0,
    ) -> None:
        if options is not None:
            given = keyword_options(
                MemoryConsolidator.__init__, options, locals(), "MemoryConsolidator"
            )
            MemoryConsolidator.__init__(self, store, index, **given)
            return
        for name, value in (("max_facts", max_facts), ("max_episodes", max_episodes)):
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int) or value < 0
            ):
                raise InvalidInputError(f"{name} must be a non-negative integer or None")
        if (
            isinstance(decay_half_life_days, bool)
            or not isinstance(decay_half_life_days, (int, float))
            or not decay_half_life_days > 0
            or not math.isfinite(decay_half_life_days)
        ):
            raise InvalidInputError("decay_half_life_days must be a positive number")
        if dedup_method not in ("auto", "exact", "lsh"):
            raise InvalidInputError(
                f"dedup_method must be 'auto', 'exact' or 'lsh', got {dedup_method!r}"
            )
        if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
            raise InvalidInputError(f"seed must be a non-negative integer, got {seed!r}")
        verified_tag = check_lifecycle_tag("verified_tag", verified_tag)
        candidate_tag = check_lifecycle_tag("candidate_tag", candidate_tag)
        if verified_tag == candidate_tag:
            # A verified keeper drops candidate_tag: it would drop its own verified tag.
            raise InvalidInputError("verified_tag and candidate_tag must differ")
        if clock is not None and not callable(clock):
            raise InvalidTypeError(f"clock must be a callable, got {type(clock).__name__}")
        self.store = check_store(store)
        self.index = check_index(index)
        check_same_tenant(self.store, index=self.index)
        self.max_facts = max_facts
        self.max_episodes = max_episodes
        self.decay_half_life_days = float(decay_half_life_days)
        self.dedup_threshold = check_unit_interval("dedup_threshold", dedup_threshold)
        self.delete_mode = check_delete_mode(delete_mode)
        self.debug = check_bool(debug, "debug")
        self.logger = check_logger(logger, _log)
        self.batch_size = check_batch_size(batch_size)
        self.verified_tag = verified_tag
        self.candidate_tag = candidate_tag
        self.clock = clock or utc_now
        self.dedup_method: DedupMethod = dedup_method
        self.seed = seed
        if dedup_method == "lsh" and not self.dedup_threshold > SIM_TOLERANCE:
            raise InvalidInputError("dedup_method='lsh' needs a positive dedup_threshold")

    # ------------------------------------------------------------------ public API

    async def consolidate(self, *, progress: ProgressCallback | None = None) -> ConsolidationReport:
        """Plan and apply one pass as one exclusive unit of work; return its report.

        Two workers consolidating at once end in the state of one run; a failure while
        writing leaves the store unchanged. A second run right after reports zeros.
        ``progress`` receives ``ProgressEvent("consolidate", step, 6, stage)`` per phase.
        """
        # "themes" is the ingest's THEMES_LOCK (hierarchy.pipeline): the pass rewrites themes,
        # so it must not interleave with ingest's theme assignment; FACTS_LOCK keeps the
        # other passes that rewrite facts (the gate, forget, ...) out until it commits.
        # exclusive_passes takes them in the one lock order, so no cycle.
        async with exclusive_passes(self.store, "consolidation", FACTS_LOCK, "themes"):
            with span("cycgraph.consolidate", tenant=tenant_of(self.store)) as sp:
                plan = await self.plan(progress=progress)
                await apply_mutations(self.store, plan.mutations)
                # Before the commit (and the index sync): a callback that raises on the
                # last event rolls the pass back like any other error.
                report_progress(progress, "consolidate", 6, 6, "write")
                sp.set(rows=len(plan.mutations))
        sync_index(self.index, plan.mutations)
        assert plan.report is not None
        if self.debug:
            for m in plan.mutations:
                reason = m.reason
                self.logger.debug("consolidation mutation %s %s", reason, m.id)
        self.logger.info(
            "consolidation: %s", plan.report.model_dump(exclude={"mutation_log"})
        )
        return plan.report

    async def auto_consolidate(
        self, thresholds: ConsolidationThresholds | Mapping[str, Any]
    ) -> ConsolidationReport | None:
        """Consolidate only when :meth:`should_consolidate` says so; else return ``None``."""
        if not await self.should_consolidate(self.store, thresholds):
            return None
        return await self.consolidate()

    @staticmethod
    async def should_consolidate(
        store: MemoryStore, thresholds: ConsolidationThresholds | Mapping[str, Any]
    ) -> bool:
        """True when the store holds more live facts or episodes than the thresholds.

        Quarantined facts are not counted (consolidation never touches them).

        Reads at most one record per threshold (``limit=1, offset=threshold``); writes
        nothing.

        Raises:
            InvalidTypeError: ``store`` lacks the ``MemoryStore`` methods, or
                ``thresholds`` is neither thresholds nor a mapping.
        """
        check_store(store)
        t = instance_of(thresholds, ConsolidationThresholds, "thresholds")
        # Quarantined facts are outside consolidation: they neither count nor trigger it.
        if t.facts is not None and await store.find_facts(
            limit=1, offset=t.facts, exclude_tags=[QUARANTINE_TAG]
        ):
            return True
        return t.episodes is not None and bool(
            await store.list_episodes(limit=1, offset=t.episodes)
        )

    async def plan(self, *, progress: ProgressCallback | None = None) -> ConsolidationPlan:
        """Compute every mutation of a pass without writing anything.

        What to merge, prune and re-point is decided on the facts as loaded (the pass
        holds the ``facts`` lock: no other pass rewrites them meanwhile); the facts it
        writes back are then re-read locked (Postgres: ``FOR UPDATE``) in ONE ascending id
        order across all their batches, the order of the retrieval touch, so a touch of
        several of them queues behind the pass instead of deadlocking it.
        """
        now = self.clock()
        report_progress(progress, "consolidate", 0, 6, "load")
        facts = await self._load_facts()
        report_progress(progress, "consolidate", 1, 6, "dedup")
        groups = self._dedup_groups(facts)
        absorbed = {loser for losers in groups.values() for loser in losers}
        report_progress(progress, "consolidate", 2, 6, "decay")
        decayed = self._decay(facts, groups, absorbed, now)
        removed: set[uuid.UUID] = {facts.ids[i] for i in absorbed}
        removed.update(facts.ids[i] for i in decayed)
        keeper_of = {
            facts.ids[loser]: facts.ids[keeper]
            for keeper, losers in groups.items()
            for loser in losers
        }
        doomed = await self._doomed_episodes()
        forward: dict[str, str] = {}
        forwarded: list[uuid.UUID] = []
        cascaded: set[uuid.UUID] = set()
        if self.delete_mode == "hard" and (removed or doomed):
            forward = self._forwarding(removed, keeper_of)
            forwarded, cascaded = await self._hard_mode_rows(removed, forward, set(doomed))
        mutations: list[Mutation] = []
        merged = await self._write_locked(
            facts, groups, decayed, forward, forwarded, cascaded, mutations
        )
        report_progress(progress, "consolidate", 3, 6, "episodes")
        episodes_pruned = await self._prune_episodes(doomed, mutations, now)
        report_progress(progress, "consolidate", 4, 6, "themes")
        cleaned, themes_removed = await self._cascade_themes(removed, merged, mutations, now)
        if self.delete_mode == "hard" and removed:
            await self._cascade_episodes(removed, keeper_of, mutations)
        report = ConsolidationReport(
            facts_deduped=len(absorbed),
            facts_decayed=len(decayed),
            episodes_pruned=episodes_pruned,
            themes_cleaned_up=cleaned,
            themes_removed=themes_removed,
            total_reclaimed=len(absorbed) + len(decayed) + episodes_pruned + themes_removed,
        )
        if self.debug:
            report.mutation_log = [
                ConsolidationMutation(type=m.reason, id=m.id) for m in mutations
            ]
        report_progress(progress, "consolidate", 5, 6, "planned")
        return ConsolidationPlan(mutations, report)

    # ------------------------------------------------------------------ phases

    async def _load_facts(self) -> _Facts:
        """Page through the eligible facts, keeping only columns and unit embeddings."""
        ids: list[uuid.UUID] = []
        valid_from: list[int] = []
        valid_until: list[int] = []
        last_access: list[float] = []
        access: list[int] = []
        verified: list[bool] = []
        emb_rows: list[int] = []
        blocks: list[FloatMatrix] = []
        async for page in scan(
            self.store, "facts", self.batch_size, exclude_tags=[QUARANTINE_TAG]
        ):
            rows: list[list[float]] = []
            for fact in page:
                i = len(ids)
                ids.append(fact.id)
                valid_from.append(_micros(fact.valid_from))
                valid_until.append(
                    _OPEN if fact.valid_until is None else _micros(fact.valid_until)
                )
                last_access.append(
                    math.nan if fact.last_accessed_at is None
                    else fact.last_accessed_at.timestamp()
                )
                access.append(fact.access_count)
                verified.append(self.verified_tag in fact.tags)
                if fact.embedding is not None:
                    emb_rows.append(i)
                    rows.append(fact.embedding)
            if rows:
                block = np.asarray(rows, dtype=np.float32)
                norms = np.linalg.norm(block, axis=1, keepdims=True)
                norms[norms == 0] = 1.0
                blocks.append((block / norms).astype(np.float32, copy=False))
        dims = {b.shape[1] for b in blocks}
        if len(dims) > 1:
            raise InvalidInputError(f"facts have embeddings of several lengths: {sorted(dims)}")
        vectors = np.concatenate(blocks) if blocks else np.zeros((0, 1), dtype=np.float32)
        return _Facts(
            ids=ids,
            valid_from=np.asarray(valid_from, dtype=np.int64),
            valid_until=np.asarray(valid_until, dtype=np.int64),
            last_access=np.asarray(last_access, dtype=np.float64),
            access=np.asarray(access, dtype=np.int64),
            verified=np.asarray(verified, dtype=np.bool_),
            emb_rows=np.asarray(emb_rows, dtype=np.intp),
            vectors=vectors,
        )

    def _priority(self, facts: _Facts, idx: NDArray[np.intp]) -> list[int]:
        """``idx`` sorted by keeper priority: verified, newest ``valid_from``, smallest id."""
        return sorted(
            (int(i) for i in idx),
            key=lambda i: (not facts.verified[i], -facts.valid_from[i], str(facts.ids[i])),
        )

    def _lsh_pays(self, vectors: FloatMatrix) -> bool:
        """Whether ``dedup_method="auto"`` should use LSH for these rows."""
        n = vectors.shape[0]
        if n <= EXACT_MAX_ROWS or not self.dedup_threshold > SIM_TOLERANCE:
            return False
        params = lsh_parameters_for(
            vectors, self.dedup_threshold, seed=self.seed, recall=LSH_RECALL
        )
        return params.estimated_cost < params.exact_cost

    def _pairs(
        self, vectors: FloatMatrix
    ) -> Iterator[tuple[NDArray[np.intp], NDArray[np.intp]]]:
        """Near-duplicate row pairs ``(i < j)`` by the configured method, each once."""
        method = self.dedup_method
        if method == "auto":
            method = "lsh" if self._lsh_pays(vectors) else "exact"
        if method == "exact":
            yield from near_duplicate_pairs(vectors, self.dedup_threshold, self.batch_size)
            return
        yield lsh_near_duplicate_pairs(
            vectors, self.dedup_threshold, self.batch_size, seed=self.seed, recall=LSH_RECALL
        )

    def _dedup_groups(self, facts: _Facts) -> dict[int, list[int]]:
        """Keeper fact index -> absorbed fact indexes (greedy, see the module docs)."""
        neighbours: dict[int, list[int]] = {}
        start, end = facts.valid_from, facts.valid_until
        for a, b in self._pairs(facts.vectors):
            fa = facts.emb_rows[a]
            fb = facts.emb_rows[b]
            # Duplicates must also hold at a common instant: the same sentence valid in
            # 2024 and again from 2025 is two periods (a temporal query of 2024 needs
            # the first), not one fact said twice.
            same_time = (start[fa] < end[fb]) & (start[fb] < end[fa])
            fa, fb = fa[same_time], fb[same_time]
            for x, y in zip(fa.tolist(), fb.tolist(), strict=True):
                neighbours.setdefault(x, []).append(y)
                neighbours.setdefault(y, []).append(x)
        if not neighbours:
            return {}
        order = self._priority(facts, np.fromiter(neighbours, dtype=np.intp))
        rank = {i: r for r, i in enumerate(order)}
        taken: set[int] = set()
        groups: dict[int, list[int]] = {}
        for i in order:
            if i in taken:
                continue
            taken.add(i)
            losers = sorted((j for j in neighbours[i] if j not in taken), key=rank.__getitem__)
            if losers:
                taken.update(losers)
                groups[i] = losers
        return groups

    async def _write_locked(
        self,
        facts: _Facts,
        groups: dict[int, list[int]],
        decayed: list[int],
        forward: Mapping[str, str],
        forwarded: list[uuid.UUID],
        cascaded: set[uuid.UUID],
        mutations: list[Mutation],
    ) -> dict[uuid.UUID, SemanticFact]:
        """Re-read locked every fact the pass writes; plan the merges, decays and re-points.

        Every fact the pass will write, delete or have the store unlink (``cascaded``:
        hard mode) is locked until the pass commits (Postgres: ``FOR UPDATE``), in one
        ascending id order across all the batches of ``batch_size`` ids: the order of the
        retrieval touch (``touch_facts``), which therefore waits for the pass instead of
        holding a lower id the pass needs while the pass holds a higher one it touches
        (a deadlock). A touch committed before the lock is kept in what is written; one
        after it waits for the commit. The records kept at once are those of the planned
        writes (what the plan holds anyway) and the members of the duplicate groups whose
        other members a later batch brings. Mutations come in the planned order: each
        group (keeper priority order), then the decayed facts, then the re-pointed ones.

        Returns:
            The merged keepers by id.
        """
        ids = facts.ids
        hard = self.delete_mode == "hard"
        group_of = {ids[i]: k for k, losers in groups.items() for i in (k, *losers)}
        pending = {k: 1 + len(losers) for k, losers in groups.items()}
        decayed_ids = [ids[i] for i in decayed]
        kept_ids = set(forwarded) if hard else set(decayed_ids)
        wanted = sorted({*group_of, *decayed_ids, *forwarded, *cascaded})
        members: dict[uuid.UUID, SemanticFact] = {}
        kept: dict[uuid.UUID, SemanticFact] = {}
        planned: dict[int, list[Mutation]] = {}
        merged: dict[uuid.UUID, SemanticFact] = {}
        read = facts_reader_for_update(self.store)
        for start in range(0, len(wanted), self.batch_size):
            for fid, record in (await read(wanted[start : start + self.batch_size])).items():
                if fid in kept_ids:
                    kept[fid] = record
                k = group_of.get(fid)
                if k is None:
                    continue
                members[fid] = record
                pending[k] -= 1
                if not pending[k]:
                    planned[k] = self._merge_group(facts, k, groups[k], members, merged)
        for k in groups:
            if k not in planned:  # a member gone since the load: fails as it always did
                planned[k] = self._merge_group(facts, k, groups[k], members, merged)
            mutations.extend(planned.pop(k))
        if hard:
            mutations.extend(Delete("fact", fid, "fact_decayed") for fid in decayed_ids)
        else:
            mutations.extend(
                Put(
                    merged.get(fid, kept[fid]).model_copy(
                        update={"invalidated_by": DECAY_REASON}
                    ),
                    "fact_decayed",
                )
                for fid in decayed_ids
                if fid in kept
            )
        # Hard mode, before the episode deletes: a re-pointed fact is written as re-read,
        # and an episode deleted after it leaves its source_episode_ids (the store's cascade).
        for fid in forwarded:
            fact = kept.get(fid)
            by = None if fact is None else fact.invalidated_by
            if fact is not None and by is not None and by in forward and (
                QUARANTINE_TAG not in fact.tags
            ):
                mutations.append(
                    Put(fact.model_copy(update={"invalidated_by": forward[by]}), "fact_forwarded")
                )
        return merged

    def _merge_group(
        self,
        facts: _Facts,
        keeper_index: int,
        losers_index: list[int],
        members: dict[uuid.UUID, SemanticFact],
        merged: dict[uuid.UUID, SemanticFact],
    ) -> list[Mutation]:
        """The mutations of one duplicate group, from its members as re-read locked.

        The group's records leave ``members``; the new keeper goes into ``merged``.
        """
        keeper = members.pop(facts.ids[keeper_index])
        losers = [members.pop(facts.ids[i]) for i in losers_index]
        new = self._absorb(keeper, losers)
        merged[new.id] = new
        out: list[Mutation] = [Put(new, "fact_kept")]
        for loser in losers:
            if self.delete_mode == "hard":
                out.append(Delete("fact", loser.id, "fact_merged"))
            else:
                out.append(
                    Put(loser.model_copy(update={"invalidated_by": str(keeper.id)}),
                        "fact_merged")
                )
        return out

    def _absorb(self, keeper: SemanticFact, losers: list[SemanticFact]) -> SemanticFact:
        """The keeper carrying the evidence of every absorbed duplicate."""
        everyone = [keeper, *losers]
        tags = list(dict.fromkeys(t for f in everyone for t in f.tags))
        if self.verified_tag in keeper.tags:
            tags = [t for t in tags if t != self.candidate_tag]
        accessed = [f.last_accessed_at for f in everyone if f.last_accessed_at is not None]
        return keeper.model_copy(
            update={
                # Saturates like touch_facts: past it the store refuses the keeper.
                "access_count": min(sum(f.access_count for f in everyone), MAX_ACCESS_COUNT),
                "last_accessed_at": max(accessed) if accessed else None,
                "entity_ids": list(dict.fromkeys(e for f in everyone for e in f.entity_ids)),
                "source_episode_ids": list(
                    dict.fromkeys(e for f in everyone for e in f.source_episode_ids)
                ),
                "tags": tags,
            }
        )

    def _decay(
        self,
        facts: _Facts,
        groups: dict[int, list[int]],
        absorbed: set[int],
        now: datetime,
    ) -> list[int]:
        """Indexes of the facts pruned to get down to ``max_facts``.

        A keeper is scored with the evidence it absorbs (``access_count`` summed,
        saturating, the latest ``last_accessed_at``), as loaded: the pass decides on the
        facts it loaded, before it locks those it writes.
        """
        n = len(facts.ids)
        remaining = n - len(absorbed)
        if self.max_facts is None or remaining <= self.max_facts:
            return []
        access = facts.access.astype(np.float64)
        anchor = np.where(
            np.isnan(facts.last_access), facts.valid_from / 1e6, facts.last_access
        )
        for keeper, losers in groups.items():
            group = [keeper, *losers]
            access[keeper] = min(sum(int(facts.access[i]) for i in group), MAX_ACCESS_COUNT)
            seen = facts.last_access[group]
            seen = seen[~np.isnan(seen)]
            if seen.size:
                anchor[keeper] = seen.max()
        age_days = np.maximum((now.timestamp() - anchor) / _DAY, 0.0)
        scores = 0.5 ** (age_days / self.decay_half_life_days) * (1.0 + np.log1p(access))
        alive = np.ones(n, dtype=np.bool_)
        if absorbed:
            alive[np.fromiter(absorbed, dtype=np.intp)] = False
        candidates = np.nonzero(alive)[0]
        id_rank = np.empty(n, dtype=np.int64)
        id_rank[np.argsort(np.array([str(i) for i in facts.ids]), kind="stable")] = np.arange(n)
        order = np.lexsort(
            (id_rank[candidates], facts.valid_from[candidates], scores[candidates])
        )
        excess = remaining - self.max_facts
        return [int(i) for i in candidates[order[:excess]]]

    async def _doomed_episodes(self) -> list[uuid.UUID]:
        """Ids of the oldest live episodes past ``max_episodes`` (``(started_at, id)``)."""
        if self.max_episodes is None:
            return []
        ids: list[uuid.UUID] = []
        offset = 0
        while True:
            page = await self.store.list_episodes(limit=self.batch_size, offset=offset)
            ids.extend(e.id for e in page)
            if len(page) < self.batch_size:
                break
            offset += self.batch_size
        return ids[: max(len(ids) - self.max_episodes, 0)]

    async def _prune_episodes(
        self, doomed: list[uuid.UUID], mutations: list[Mutation], now: datetime
    ) -> int:
        """Plan the removal of the episodes ``doomed``; return how many."""
        excess = len(doomed)
        if not excess:
            return 0
        if self.delete_mode == "hard":
            mutations.extend(Delete("episode", i, "episode_pruned") for i in doomed)
            return excess
        for start in range(0, excess, self.batch_size):
            part = doomed[start : start + self.batch_size]
            found = await self.store.get_episodes(part)
            mutations.extend(
                Put(found[i].model_copy(update={"invalidated_at": now}), "episode_pruned")
                for i in part
                if i in found
            )
        return excess

    async def _quarantined_themes(self) -> set[uuid.UUID]:
        """Ids of the themes named by a quarantined fact's ``theme_id``.

        A fact tagged ``quarantined`` after it joined a theme must stop shaping it (its
        centroid, label and description): the pass repairs those themes too. Only the
        quarantined facts are read.
        """
        ids: set[uuid.UUID] = set()
        async for page in scan(self.store, "facts", self.batch_size, tags=[QUARANTINE_TAG]):
            ids.update(f.theme_id for f in page if f.theme_id is not None)
        return ids

    async def _cascade_themes(
        self,
        removed: set[uuid.UUID],
        merged: dict[uuid.UUID, SemanticFact],
        mutations: list[Mutation],
        now: datetime,
    ) -> tuple[int, int]:
        """Plan theme updates for removed facts; return (cleaned up, removed) counts.

        A live theme that lists a removed fact, or that a quarantined fact names, is
        re-centred and relabelled from its servable members (``recentre_theme``); it is
        written only when that changes it, so a second pass plans nothing. "Cleaned up"
        counts the themes whose ``fact_ids`` change (the spec's ``themesCleanedUp``), not
        those only relabelled around a quarantined member.
        """
        quarantined = await self._quarantined_themes()
        if not removed and not quarantined:
            return 0, 0
        cleaned = 0
        gone = 0
        offset = 0
        hard = self.delete_mode == "hard"
        while True:
            # Hard mode deletes the facts: a theme already soft-deleted must not keep
            # citing them either (it is cleaned, not counted).
            page = await self.store.list_themes(
                limit=self.batch_size, offset=offset, include_invalidated=hard
            )
            for theme in page:
                lists_removed = not removed.isdisjoint(theme.fact_ids)
                if not lists_removed and theme.id not in quarantined:
                    continue
                left = [f for f in theme.fact_ids if f not in removed]
                if theme.invalidated_at is not None:
                    if not lists_removed:
                        continue
                    if left:
                        mutations.append(Put(theme.model_copy(update={"fact_ids": left}),
                                             "theme_updated"))
                    else:
                        mutations.append(Delete("theme", theme.id, "theme_removed"))
                    continue
                members = await self._members(left, merged)
                if not any(f.invalidated_by is None for f in members):
                    # Invalidated (or missing) facts do not remain: the theme serves nothing.
                    gone += 1
                    if self.delete_mode == "hard":
                        mutations.append(Delete("theme", theme.id, "theme_removed"))
                    else:
                        mutations.append(
                            Put(theme.model_copy(update={"invalidated_at": now}),
                                "theme_removed")
                        )
                    continue
                repaired = recentre_theme(theme, members).model_copy(
                    update={"fact_ids": left}
                )
                if not theme_changed(theme, repaired):
                    continue
                if lists_removed:
                    # The spec's themesCleanedUp: themes whose fact_ids were updated. A
                    # theme only relabelled (a quarantined member) is written, not counted.
                    cleaned += 1
                mutations.append(Put(repaired, "theme_updated"))
            if len(page) < self.batch_size:
                break
            offset += self.batch_size
        return cleaned, gone

    async def _members(
        self, fact_ids: list[uuid.UUID], merged: Mapping[uuid.UUID, SemanticFact]
    ) -> list[SemanticFact]:
        """The stored facts among ``fact_ids`` (in that order), merged keepers as planned."""
        found: dict[uuid.UUID, SemanticFact] = {}
        for start in range(0, len(fact_ids), self.batch_size):
            found.update(await self.store.get_facts(fact_ids[start : start + self.batch_size]))
        return [merged.get(fid, found[fid]) for fid in fact_ids if fid in found]

    async def _cascade_episodes(
        self,
        removed: set[uuid.UUID],
        keeper_of: Mapping[uuid.UUID, uuid.UUID],
        mutations: list[Mutation],
    ) -> None:
        """Hard mode: episodes stop citing deleted facts (a merged one: its keeper).

        No record may reference a record that no longer exists; an episode the pass
        deletes itself is left alone.
        """
        deleted_episodes = {
            m.id for m in mutations if isinstance(m, Delete) and m.kind == "episode"
        }
        offset = 0
        while True:
            page = await self.store.list_episodes(
                limit=self.batch_size, offset=offset, include_invalidated=True
            )
            for episode in page:
                if episode.id in deleted_episodes or removed.isdisjoint(episode.fact_ids):
                    continue
                kept = dict.fromkeys(
                    r for f in episode.fact_ids if (r := keeper_of.get(f, f)) not in removed
                )
                mutations.append(
                    Put(episode.model_copy(update={"fact_ids": list(kept)}), "episode_updated")
                )
            if len(page) < self.batch_size:
                break
            offset += self.batch_size

    @staticmethod
    def _forwarding(
        removed: set[uuid.UUID], keeper_of: Mapping[uuid.UUID, uuid.UUID]
    ) -> dict[str, str]:
        """Hard mode: the ``invalidated_by`` each deleted fact's id is replaced with.

        No fact may keep ``invalidated_by`` naming a fact the pass deletes. Such a pointer
        (an earlier conflict resolution or merge) is re-pointed at the deleted fact's
        keeper when it has one that survives (its keeper carries its content and
        evidence; a chain ends at the first surviving keeper), else set to
        :data:`~cycgraph_memory.lifecycle.models.ERASED_BY`, as a purge does: the fact
        stays invalidated and no row keeps the deleted id.
        """
        forward: dict[str, str] = {}
        for fid in removed:
            target: uuid.UUID | None = fid
            seen: set[uuid.UUID] = set()
            while target is not None and target in removed and target not in seen:
                seen.add(target)
                target = keeper_of.get(target)
            forward[str(fid)] = (
                ERASED_BY if target is None or target in removed else str(target)
            )
        return forward

    async def _hard_mode_rows(
        self, removed: set[uuid.UUID], forward: Mapping[str, str], doomed: set[uuid.UUID]
    ) -> tuple[list[uuid.UUID], set[uuid.UUID]]:
        """Hard mode: the facts to re-point, and the other facts the deletes will change.

        Returns the facts whose ``invalidated_by`` names a deleted fact (in the listing
        order; quarantined facts stay as they are, for audit), and the facts the store
        itself updates when the pass deletes an episode (it leaves their
        ``source_episode_ids``) or a theme listing a deleted fact (they lose their
        ``theme_id``): those are locked with the others, in the one id order, before
        any write.
        """
        themes: set[uuid.UUID] = set()
        offset = 0
        while removed:
            page = await self.store.list_themes(
                limit=self.batch_size, offset=offset, include_invalidated=True
            )
            themes.update(t.id for t in page if not removed.isdisjoint(t.fact_ids))
            if len(page) < self.batch_size:
                break
            offset += self.batch_size
        forwarded: list[uuid.UUID] = []
        cascaded: set[uuid.UUID] = set()
        async for page in scan(self.store, "facts", self.batch_size, include_invalidated=True):
            for f in page:
                if (
                    f.invalidated_by is not None
                    and f.invalidated_by in forward
                    and QUARANTINE_TAG not in f.tags
                ):
                    forwarded.append(f.id)
                elif (f.theme_id is not None and f.theme_id in themes) or not doomed.isdisjoint(
                    f.source_episode_ids
                ):
                    cascaded.add(f.id)
        return forwarded, cascaded

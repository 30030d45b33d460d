"""ConflictDetector: negation, supersession and semantic contradiction between facts.

Only facts that share at least one entity id are compared (run the
:class:`~cycgraph_memory.consolidation.EntityResolver` first), and only while both hold:
two facts whose validity windows ``[valid_from, valid_until)`` share no instant are two
periods of history ("Alice works at Acme" until 2022, "Alice doesn't work at Acme" from
2023), never a conflict, so no resolution invalidates a fact that had already ended.
Words are lowercase ``[a-z0-9]`` runs with an optional apostrophe suffix (``can't``), so
negation words match as whole words only: "significant" contains no "can't", "knot" no
"not". Word overlap is the Jaccard index of the two facts' word sets, negation words left
out.

Each pair gets at most one conflict, the first rule that matches, in this order:

1. ``negation`` (confidence 0.8): exactly one of the two facts contains a negation word and
   their word overlap is at least 0.5.
2. ``supersession`` (0.9): the same (non-empty) set of entity ids, similar content (cosine
   >= ``embedding_threshold`` when both have embeddings, else word overlap >= 0.5), and
   ``valid_from`` more than ``supersession_day_threshold`` days apart.
3. ``semantic_contradiction`` (0.3-0.7): cosine >= ``embedding_threshold`` but word overlap
   below ``semantic_overlap_threshold``; confidence ``0.3 + 0.4 * min(1, shorter / 20)``
   where ``shorter`` is the word count of the shorter fact (short facts say little).

Cosines are computed from the embeddings rounded to float32 (what pgvector stores, so both
backends decide alike), and a cosine within ``SIM_TOLERANCE`` (1e-6) below
``embedding_threshold`` counts as reaching it, as for near duplicates.

In a conflict ``fact_a`` is the older fact (``(valid_from, id)`` order), ``fact_b`` the newer.
Detection is read-only unless ``auto_resolve_supersession=True``. Quarantined facts are
never compared, and a resolution never invalidates a fact for (or invalidates) a fact
quarantined in the store, even one quarantined after detection. A resolution also
re-centres and relabels the themes of the facts it invalidates (``theme_updated``
mutations of the plan; written under the ``themes`` lock), so none keeps quoting a loser.
"""

from __future__ import annotations

import logging
import math
import re
import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

import numpy as np
from numpy.typing import NDArray

from cycgraph_memory._exclusive import FACTS_LOCK, exclusive_passes
from cycgraph_memory._primary import primary_reads
from cycgraph_memory._validate import (
    check_bool,
    check_same_tenant,
    instance_of,
    instances_of,
    keyword_options,
)
from cycgraph_memory.consolidation._common import (
    check_batch_size,
    check_index,
    check_store,
    check_unit_interval,
    facts_reader_for_update,
    scan,
)
from cycgraph_memory.consolidation.near_duplicates import SIM_TOLERANCE
from cycgraph_memory.consolidation.plan import (
    Mutation,
    MutationPlan,
    Put,
    apply_mutations,
    sync_index,
)
from cycgraph_memory.contracts import MemoryIndex, MemoryStore
from cycgraph_memory.errors import InvalidInputError
from cycgraph_memory.hierarchy.theme_upkeep import refresh_themes, themes_lock_for
from cycgraph_memory.observability import span, tenant_of
from cycgraph_memory.progress import ProgressCallback, report_progress
from cycgraph_memory.records import (
    QUARANTINE_TAG,
    Conflict,
    ConflictResolutionDetail,
    ConflictResolutionReport,
    SemanticFact,
    utc_now,
)
from cycgraph_memory.temporal import windows_overlap

__all__ = [
    "NEGATION_WORDS",
    "ConflictDetector",
    "ConflictResolutionPolicy",
    "word_overlap",
    "words",
]

_log = logging.getLogger(__name__)

ConflictResolutionPolicy = Literal[
    "supersede-on-newer", "negation-invalidates-positive", "manual-review"
]
"""How :meth:`ConflictDetector.auto_resolve_all` decides."""

_POLICIES = ("supersede-on-newer", "negation-invalidates-positive", "manual-review")

NEGATION_WORDS = frozenset(
    {
        "not", "no", "never", "none", "nobody", "nothing", "neither", "nor", "nowhere",
        "cannot", "can't", "won't", "don't", "doesn't", "didn't", "isn't", "aren't",
        "wasn't", "weren't", "shouldn't", "wouldn't", "couldn't", "hasn't", "haven't",
        "hadn't", "mustn't", "shan't", "ain't", "needn't",
    }
)
"""Whole words that make a statement negative."""

_WORD = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")
_HIGH_OVERLAP = 0.5
_NEGATION_CONFIDENCE = 0.8
_SUPERSESSION_CONFIDENCE = 0.9


def words(text: str) -> list[str]:
    """Lowercase words of ``text`` (curly apostrophes read as straight ones)."""
    return _WORD.findall(text.lower().replace("\u2019", "'"))


def word_overlap(a: Iterable[str], b: Iterable[str]) -> float:
    """Jaccard index of two word collections (0 when both are empty)."""
    sa, sb = set(a), set(b)
    union = sa | sb
    return len(sa & sb) / len(union) if union else 0.0


def _unit(embedding: Sequence[float] | None) -> NDArray[np.float64] | None:
    """``embedding`` rounded to float32 (what pgvector stores), as a float64 unit vector.

    Rounding first makes both backends compute the same cosines from the same facts. A
    zero vector stays zero (its cosine with anything is 0).
    """
    if embedding is None:
        return None
    v = np.asarray(embedding, dtype=np.float32).astype(np.float64)
    norm = float(np.linalg.norm(v))
    return v / norm if norm > 0 else v


def _cosine(a: NDArray[np.float64] | None, b: NDArray[np.float64] | None) -> float | None:
    if a is None or b is None or a.shape != b.shape:
        return None
    return float(a @ b)


def _order(a: SemanticFact, b: SemanticFact) -> tuple[SemanticFact, SemanticFact]:
    return (a, b) if (a.valid_from, str(a.id)) <= (b.valid_from, str(b.id)) else (b, a)


class ConflictDetector:
    """Find and resolve contradictory, negating or superseding facts (see module docs).

    Args:
        store: The store holding the facts.
        index: The index over it; kept in sync after resolutions when it holds copies.
        options: The keyword options below as one mapping (the spec's
            ``new ConflictDetector(store, index, options)``), instead of keywords.
        auto_resolve_supersession: Invalidate the older fact of every supersession pair
            during :meth:`detect_conflicts` (off: detection is read-only).
        embedding_threshold: Cosine similarity for "similar content".
        semantic_overlap_threshold: Word overlap below which similar facts contradict.
        policy: Default policy of :meth:`auto_resolve_all`.
        supersession_day_threshold: Two facts are a supersession only when more than this
            many days apart.
        batch_size: Page size when loading facts.

    Raises:
        InvalidInputError: An option out of range or an unknown ``policy``.
        InvalidTypeError: A ``store`` without the ``MemoryStore`` methods, an ``index``
            that is neither ``None`` nor a ``MemoryIndex``, a flag that is not a ``bool``.
    """

    def __init__(
        self,
        store: MemoryStore,
        index: MemoryIndex | None = None,
        options: Mapping[str, Any] | None = None,
        *,
        auto_resolve_supersession: bool = False,
        embedding_threshold: float = 0.8,
        semantic_overlap_threshold: float = 0.3,
        policy: ConflictResolutionPolicy = "manual-review",
        supersession_day_threshold: float = 1,
        batch_size: int = 1000,
    ) -> None:
        if options is not None:
            given = keyword_options(
                ConflictDetector.__init__, options, locals(), "ConflictDetector"
            )
            ConflictDetector.__init__(self, store, index, **given)
            return
        if policy not in _POLICIES:
            raise InvalidInputError(f"unknown policy {policy!r}; expected one of {_POLICIES}")
        if (
            isinstance(supersession_day_threshold, bool)
            or not isinstance(supersession_day_threshold, (int, float))
            or not supersession_day_threshold >= 0
            or not math.isfinite(supersession_day_threshold)
        ):
            raise InvalidInputError("supersession_day_threshold must be a number >= 0")
        self.store = check_store(store)
        self.index = check_index(index)
        check_same_tenant(self.store, index=self.index)
        self.auto_resolve_supersession = check_bool(
            auto_resolve_supersession, "auto_resolve_supersession"
        )
        self.embedding_threshold = check_unit_interval("embedding_threshold", embedding_threshold)
        self.semantic_overlap_threshold = check_unit_interval(
            "semantic_overlap_threshold", semantic_overlap_threshold
        )
        self.policy: ConflictResolutionPolicy = policy
        self.supersession_day_threshold = float(supersession_day_threshold)
        self.batch_size = check_batch_size(batch_size)

    # ------------------------------------------------------------------ detection

    async def detect_conflicts(
        self,
        facts: Sequence[SemanticFact] | None = None,
        *,
        progress: ProgressCallback | None = None,
    ) -> list[Conflict]:
        """Conflicts among ``facts`` (default: every live, non-quarantined fact).

        Invalidated and quarantined facts in an explicit ``facts`` list are left out too.

        Returns conflicts ordered by ``(fact_a, fact_b)`` in ``(valid_from, id)`` order.
        With ``auto_resolve_supersession`` the older fact of each supersession pair is
        invalidated (one unit of work) before returning. ``progress`` receives
        ``ProgressEvent("detect-conflicts", done, total, stage)`` (facts loaded, then pairs
        compared).
        """
        with span("cycgraph.detect_conflicts", tenant=tenant_of(self.store)) as sp:
            if facts is not None:
                pool = instances_of(facts, SemanticFact, "facts")
            elif self.auto_resolve_supersession:
                # What is found here is then written: read the primary, not a lagging
                # read engine.
                with primary_reads(self.store):
                    pool = await self._load(progress)
            else:
                pool = await self._load(progress)
            conflicts = self._detect(pool, progress)
            sp.set(rows=len(pool), conflicts=len(conflicts))
        if self.auto_resolve_supersession:
            superseding = [c for c in conflicts if c.type == "supersession"]
            if superseding:
                await self.auto_resolve_all(superseding, "supersede-on-newer")
        return conflicts

    async def _load(self, progress: ProgressCallback | None = None) -> list[SemanticFact]:
        out: list[SemanticFact] = []
        async for page in scan(
            self.store, "facts", self.batch_size, exclude_tags=[QUARANTINE_TAG]
        ):
            out.extend(page)
            report_progress(progress, "detect-conflicts", len(out), None, "load")
        return out

    def _detect(
        self, pool: list[SemanticFact], progress: ProgressCallback | None = None
    ) -> list[Conflict]:
        unique = {
            f.id: f for f in pool if f.invalidated_by is None and QUARANTINE_TAG not in f.tags
        }
        ordered = sorted(unique.values(), key=lambda f: (f.valid_from, str(f.id)))
        by_entity: dict[uuid.UUID, list[int]] = {}
        for i, fact in enumerate(ordered):
            for eid in dict.fromkeys(fact.entity_ids):
                by_entity.setdefault(eid, []).append(i)
        pairs: set[tuple[int, int]] = set()
        for members in by_entity.values():
            for x in range(len(members)):
                for y in range(x + 1, len(members)):
                    pairs.add((members[x], members[y]))
        tokens = [words(f.content) for f in ordered]
        units = [_unit(f.embedding) for f in ordered]
        out: list[Conflict] = []
        if not pairs:  # the stage still ends: a progress bar reaches its total
            report_progress(progress, "detect-conflicts", 0, 0, "compare")
        every = max(1, len(pairs) // 100)
        for done, (i, j) in enumerate(sorted(pairs), 1):
            if done % every == 0 or done == len(pairs):
                report_progress(progress, "detect-conflicts", done, len(pairs), "compare")
            conflict = self._classify(
                ordered[i], ordered[j], tokens[i], tokens[j], _cosine(units[i], units[j])
            )
            if conflict is not None:
                out.append(conflict)
        return out

    def _classify(
        self,
        a: SemanticFact,
        b: SemanticFact,
        wa: list[str],
        wb: list[str],
        cosine: float | None,
    ) -> Conflict | None:
        if not windows_overlap(a, b):
            return None  # two periods of history: the earlier one ended before
        neg_a = any(w in NEGATION_WORDS for w in wa)
        neg_b = any(w in NEGATION_WORDS for w in wb)
        overlap = word_overlap(
            (w for w in wa if w not in NEGATION_WORDS), (w for w in wb if w not in NEGATION_WORDS)
        )
        if neg_a != neg_b and overlap >= _HIGH_OVERLAP:
            return Conflict(fact_a=a, fact_b=b, type="negation", confidence=_NEGATION_CONFIDENCE)
        # At the threshold within SIM_TOLERANCE, as for near duplicates: float32 storage
        # must not move a pair meant to sit exactly at the threshold below it.
        close = cosine is not None and cosine >= self.embedding_threshold - SIM_TOLERANCE
        similar = close if cosine is not None else overlap >= _HIGH_OVERLAP
        days = abs((b.valid_from - a.valid_from).total_seconds()) / 86_400.0
        if (
            a.entity_ids
            and set(a.entity_ids) == set(b.entity_ids)
            and similar
            and days > self.supersession_day_threshold
        ):
            return Conflict(
                fact_a=a, fact_b=b, type="supersession", confidence=_SUPERSESSION_CONFIDENCE
            )
        if close and overlap < self.semantic_overlap_threshold:
            shorter = min(len(wa), len(wb))
            confidence = 0.3 + 0.4 * min(1.0, shorter / 20.0)
            return Conflict(
                fact_a=a, fact_b=b, type="semantic_contradiction", confidence=confidence
            )
        return None

    # ------------------------------------------------------------------ resolution

    def _decide(
        self, conflict: Conflict, policy: ConflictResolutionPolicy
    ) -> tuple[Literal["keep_a", "keep_b", "skipped"], str]:
        a, b = conflict.fact_a, conflict.fact_b
        newer = "keep_b" if (b.valid_from, str(b.id)) >= (a.valid_from, str(a.id)) else "keep_a"
        if policy == "manual-review":
            return "skipped", "manual-review"
        if policy == "supersede-on-newer":
            return newer, "newer fact kept"  # type: ignore[return-value]
        if conflict.type == "negation":
            neg_a = any(w in NEGATION_WORDS for w in words(a.content))
            return ("keep_a" if neg_a else "keep_b"), "negation kept"
        if conflict.type == "supersession":
            return newer, "newer fact kept"  # type: ignore[return-value]
        return "skipped", "semantic contradictions need review under this policy"

    async def auto_resolve_all(
        self,
        conflicts: Sequence[Conflict],
        policy: ConflictResolutionPolicy | None = None,
    ) -> ConflictResolutionReport:
        """Resolve ``conflicts`` under ``policy`` (default: the detector's) in one unit of work.

        ``supersede-on-newer`` keeps the newer fact; ``negation-invalidates-positive`` keeps
        the negating fact of a negation, the newer fact of a supersession and skips
        semantic contradictions; ``manual-review`` resolves nothing. A conflict whose loser
        is already invalidated, or whose winner is (in the store or earlier in this call),
        is skipped, so re-running is a no-op; so is one with a fact quarantined (in the
        store) on either side.

        Raises:
            InvalidInputError: An unknown policy, or a conflict whose two sides are the same
                fact (nothing is written).
        """
        chosen = self.policy if policy is None else policy
        if chosen not in _POLICIES:
            raise InvalidInputError(f"unknown policy {chosen!r}; expected one of {_POLICIES}")
        items = instances_of(conflicts, Conflict, "conflicts")
        decisions = [(c, *self._decide(c, chosen)) for c in items]
        return await self._apply(decisions)

    async def resolve_conflict(
        self, conflict: Conflict, action: Literal["keep_a", "keep_b", "keep_both"]
    ) -> ConflictResolutionDetail:
        """Resolve one conflict by hand; the loser is invalidated with the winner's id.

        ``keep_both`` changes nothing. Returns the detail of what happened (``skipped`` when
        the loser or the winner was already invalidated, or either is quarantined).

        Raises:
            InvalidInputError: An unknown action, or a conflict whose two sides are the
                same fact (nothing is written).
        """
        if action not in ("keep_a", "keep_b", "keep_both"):
            raise InvalidInputError(f"action must be keep_a, keep_b or keep_both, got {action!r}")
        conflict = instance_of(conflict, Conflict, "conflict")
        if action == "keep_both":
            return ConflictResolutionDetail(conflict=conflict, action="keep_both", reason="manual")
        report = await self._apply([(conflict, action, "manual")])
        return report.details[0]

    async def plan_resolution(
        self,
        conflicts: Sequence[Conflict],
        policy: ConflictResolutionPolicy | None = None,
    ) -> MutationPlan[ConflictResolutionReport]:
        """What :meth:`auto_resolve_all` would write, computed without writing anything.

        The plan's mutations invalidate each loser; its report is what the resolution
        would return. Resolving, then planning again, gives an empty plan.
        """
        chosen = self.policy if policy is None else policy
        if chosen not in _POLICIES:
            raise InvalidInputError(f"unknown policy {chosen!r}; expected one of {_POLICIES}")
        items = instances_of(conflicts, Conflict, "conflicts")
        return await self._plan([(c, *self._decide(c, chosen)) for c in items])

    async def _theme_repairs(self, losers: list[SemanticFact]) -> list[Mutation]:
        """The themes listing invalidated losers, re-centred and relabelled without them."""
        themes = await refresh_themes(
            self.store, losers, now=utc_now(), batch_size=self.batch_size
        )
        return [Put(t, "theme_updated") for t in themes]

    async def _plan(
        self,
        decisions: list[tuple[Conflict, Literal["keep_a", "keep_b", "skipped"], str]],
        *,
        themes: bool = True,
        locked: bool = False,
    ) -> MutationPlan[ConflictResolutionReport]:
        for conflict, _, _ in decisions:
            if conflict.fact_a.id == conflict.fact_b.id:  # built without validation
                raise InvalidInputError(
                    f"a conflict needs two different facts, got {conflict.fact_a.id} twice"
                )
        report = ConflictResolutionReport()
        wanted = {f.id for c, _, _ in decisions for f in (c.fact_a, c.fact_b)}
        puts: list[Mutation] = []
        current: dict[uuid.UUID, SemanticFact] = {}
        ids = sorted(wanted)
        # ``locked``: the rows stay locked (Postgres) until the pass commits, so a touch is
        # not lost to the write-back (taken after the themes lock, never before it), in id
        # order across batches (the touch's order: the two queue instead of deadlocking).
        read = facts_reader_for_update(self.store) if locked else self.store.get_facts
        for start in range(0, len(ids), self.batch_size):
            current.update(await read(ids[start : start + self.batch_size]))
        for conflict, action, reason in decisions:
            if action == "skipped":
                report.skipped += 1
                report.details.append(
                    ConflictResolutionDetail(conflict=conflict, action="skipped", reason=reason)
                )
                continue
            winner_id, loser_id = (
                (conflict.fact_a.id, conflict.fact_b.id)
                if action == "keep_a"
                else (conflict.fact_b.id, conflict.fact_a.id)
            )
            winner = current.get(winner_id)
            loser = current.get(loser_id)
            why = ""
            if loser is None or winner is None:
                why = "fact no longer exists"
            elif loser.invalidated_by is not None:
                why = "loser already invalidated"
            elif winner.invalidated_by is not None:
                why = "winner is invalidated"
            elif QUARANTINE_TAG in winner.tags or QUARANTINE_TAG in loser.tags:
                # Quarantined facts are outside consolidation: a poisoned fact must not
                # displace a live one, and stays as it was for audit.
                why = "quarantined fact"
            if why or loser is None:
                report.skipped += 1
                report.details.append(
                    ConflictResolutionDetail(conflict=conflict, action="skipped", reason=why)
                )
                continue
            updated = loser.model_copy(update={"invalidated_by": str(winner_id)})
            current[loser_id] = updated
            puts.append(Put(updated, "fact_invalidated"))
            report.resolved += 1
            report.details.append(
                ConflictResolutionDetail(conflict=conflict, action=action, reason=reason)
            )
        plan = MutationPlan(puts, report)
        if themes:
            puts.extend(await self._theme_repairs(_facts_of(plan)))
        return plan

    async def _apply(
        self,
        decisions: list[tuple[Conflict, Literal["keep_a", "keep_b", "skipped"], str]],
    ) -> ConflictResolutionReport:
        with span("cycgraph.resolve_conflicts", tenant=tenant_of(self.store)) as sp:
            async with exclusive_passes(self.store, "conflict-resolution", FACTS_LOCK):
                plan = await self._plan(decisions, themes=False)
                # The themes of the losers are planned and written under the themes lock,
                # taken before any write and before the rows are locked (an ingest holding
                # it may rewrite the losers' rows); the plan is made again under it, on the
                # rows locked (an ingest may have moved a loser's theme; a touch waits
                # meanwhile).
                async with themes_lock_for(self.store, _facts_of(plan)):
                    plan = await self._plan(decisions, themes=False, locked=True)
                    plan.mutations.extend(await self._theme_repairs(_facts_of(plan)))
                    await apply_mutations(self.store, plan.mutations)
            sync_index(self.index, plan.mutations)
            sp.set(rows=len(plan.mutations))
        report = plan.report
        assert report is not None
        _log.info("conflict resolution: %d resolved, %d skipped", report.resolved, report.skipped)
        return report


def _facts_of(plan: MutationPlan[ConflictResolutionReport]) -> list[SemanticFact]:
    """The facts a resolution plan writes (the invalidated losers)."""
    return [
        m.record for m in plan.mutations
        if isinstance(m, Put) and isinstance(m.record, SemanticFact)
    ]

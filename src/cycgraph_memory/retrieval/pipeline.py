"""Pure stages of ``retrieve_memory``: filters, scoring, merging, ranking and cuts.

Backends hand the retrieval paths candidate lists (theme facts, a direct kNN, subgraph
facts); everything that decides *which* records a query returns and in *what order* is a
pure function here, tested without a database. No function does I/O.

Ranking rules (all ties broken by id as a UUID string, so every order is total):

* hierarchical facts: cosine similarity to the query, best first, computed here for
  every candidate whichever way it was reached (theme or direct search), so a fact
  reached through a theme can never push out a better direct match;
* subgraph facts: rank of the nearest entity they mention (BFS hop, then id), then
  newest first;
* relationships: nearest endpoint hop, then ``(valid_from, id)``;
* themes: similarity; episodes and entities: the rank of the best fact that cites them.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from operator import attrgetter
from typing import Any, TypeVar

import numpy as np

from cycgraph_memory.records import (
    QUARANTINE_TAG,
    Entity,
    MemoryQuery,
    Relationship,
    SemanticFact,
    Theme,
)
from cycgraph_memory.temporal import is_changed_since, is_valid_at

__all__ = [
    "MAX_SEARCH_FETCH",
    "SIMILARITY_FLOOR_TOLERANCE",
    "FactScope",
    "by_citation",
    "cosine_scores",
    "cut",
    "entity_is_live",
    "filter_entities",
    "filter_relationships",
    "merge_unique",
    "ordered_ids",
    "rank_by_similarity",
    "rank_relationships",
    "rank_subgraph_facts",
    "rank_themes",
]

T = TypeVar("T")

MAX_SEARCH_FETCH = 1000
"""Largest default-sized search of a retrieval signal (its widening included)."""

SIMILARITY_FLOOR_TOLERANCE = 1e-9
"""How far below ``min_similarity`` a float64 cosine may fall and still be kept.

A vector exactly at the threshold scores it up to rounding: an identical vector can
score ``0.9999999999999999`` and an orthogonal one ``-1e-17``. The indexes keep such
results (``SCORE_FLOOR_TOLERANCE``, pgvector's exact 1.0 for an identical vector), so
the ranking keeps them too: ``min_similarity=1.0`` serves exact duplicates. A score of
0 (a record without a vector, or a zero one) never clears a positive threshold.
"""


def _floor_test(min_similarity: float) -> Callable[[float], bool]:
    """``score -> kept`` for ``min_similarity`` (see :data:`SIMILARITY_FLOOR_TOLERANCE`)."""
    floor = min_similarity - SIMILARITY_FLOOR_TOLERANCE
    if min_similarity > 0.0:
        return lambda s: s >= floor and s > 0.0
    return lambda s: s >= floor


@dataclass(frozen=True)
class FactScope:
    """The fact-level conditions a query imposes on every path.

    Attributes:
        tags: Keep facts carrying at least one of these (empty: no restriction).
        exclude_tags: Drop facts carrying any of these (``quarantined`` unless the
            query's tags name it: the audit path).
        include_invalidated: Keep soft-deleted facts.
        valid_at: Keep facts valid at this instant.
        changed_since: Keep facts that started or ended strictly after this instant.
    """

    tags: frozenset[str]
    exclude_tags: frozenset[str]
    include_invalidated: bool
    valid_at: datetime | None
    changed_since: datetime | None

    @classmethod
    def for_query(cls, query: MemoryQuery) -> FactScope:
        """Derive the scope of a validated query."""
        tags = frozenset(query.tags)
        exclude = frozenset() if QUARANTINE_TAG in tags else frozenset({QUARANTINE_TAG})
        return cls(
            tags=tags,
            exclude_tags=exclude,
            include_invalidated=query.include_invalidated,
            valid_at=query.valid_at,
            changed_since=query.changed_since,
        )

    @property
    def temporal(self) -> bool:
        """Whether a temporal condition is set (backends cannot always push it down)."""
        return self.valid_at is not None or self.changed_since is not None

    def admits(self, fact: SemanticFact) -> bool:
        """Whether the fact passes every condition."""
        if not self.include_invalidated and fact.invalidated_by is not None:
            return False
        if self.tags and self.tags.isdisjoint(fact.tags):
            return False
        if self.exclude_tags and not self.exclude_tags.isdisjoint(fact.tags):
            return False
        if self.valid_at is not None and not is_valid_at(fact, self.valid_at):
            return False
        return self.changed_since is None or is_changed_since(fact, self.changed_since)

    def apply(self, facts: Iterable[SemanticFact]) -> list[SemanticFact]:
        """Keep the admitted facts, in input order."""
        if self.temporal:
            return [f for f in facts if self.admits(f)]
        # admits() without its temporal conditions, inline (no call per fact).
        live, tags, exclude = not self.include_invalidated, self.tags, self.exclude_tags
        return [
            f for f in facts
            if not (live and f.invalidated_by is not None)
            and not (tags and tags.isdisjoint(f.tags))
            and not (exclude and not exclude.isdisjoint(f.tags))
        ]

    def widened(
        self, fetch: int, *, returned: int, wanted: int, fixed: bool,
        passed: int | None = None, candidates: Sequence[SemanticFact] = (),
    ) -> int | None:
        """The next size of a search whose hits this scope's temporal filters drop.

        The temporal filters apply after a search: a default-sized one (not ``fixed`` by
        the caller) that came back full (``returned == fetch``) with fewer than
        ``wanted`` hits passing (``passed``, or else the admitted ``candidates``, counted
        only then) is widened 4 times, up to :data:`MAX_SEARCH_FETCH`, so a valid fact is
        never lost behind better-matching expired ones. ``None``: the search stands.
        """
        if (
            not self.temporal
            or fixed
            or returned < fetch
            or fetch >= MAX_SEARCH_FETCH
            or (len(self.apply(candidates)) if passed is None else passed) >= wanted
        ):
            return None
        return min(MAX_SEARCH_FETCH, 4 * fetch)


def merge_unique(*lists: Iterable[T], key: str = "id") -> list[T]:
    """Concatenate lists keeping the first occurrence of each id."""
    first: dict[object, T] = {}
    get = attrgetter(key)
    for items in lists:
        for item in items:
            first.setdefault(get(item), item)  # a dict keeps its keys' first-seen order
    return list(first.values())


def cosine_scores(
    embeddings: Sequence[Sequence[float] | None], query: Sequence[float]
) -> list[float]:
    """Cosine similarity of each embedding to ``query`` (float64).

    A missing embedding, a zero vector or one whose length differs from the query's
    scores 0.0 (it cannot be compared, so it never clears a positive threshold).
    """
    q = np.asarray(query, dtype=np.float64)
    qn = float(np.linalg.norm(q))
    scores = [0.0] * len(embeddings)
    if isinstance(embeddings, np.ndarray) and embeddings.ndim == 2:
        # Every vector present, already one float64 matrix (a backend's candidate_vectors).
        if not len(embeddings) or embeddings.shape[1] != q.shape[0] or qn == 0.0:
            return scores
        return _cosines(embeddings, q, qn, range(len(embeddings)), scores)
    rows = [
        i for i, e in enumerate(embeddings) if e is not None and len(e) == q.shape[0]
    ]
    if not rows or qn == 0.0:
        return scores
    chosen = [embeddings[i] for i in rows]
    if isinstance(chosen[0], np.ndarray):
        m = np.asarray(chosen, dtype=np.float64)  # arrays: stacked
    else:
        # Lists: one flat buffer, then the matrix (the same float64 values as
        # ``np.asarray`` of the nested lists, faster for a few hundred 384-d vectors).
        m = np.fromiter(
            itertools.chain.from_iterable(chosen),  # type: ignore[arg-type]
            dtype=np.float64,
            count=len(rows) * q.shape[0],
        ).reshape(len(rows), q.shape[0])
    return _cosines(m, q, qn, rows, scores)


def _cosines(
    m: Any, q: Any, qn: float, rows: Sequence[int], scores: list[float]
) -> list[float]:
    norms = np.linalg.norm(m, axis=1)
    # Row by row, not ``m @ q``: a BLAS product rounds a row by its position in the
    # matrix, so equal vectors scored a last bit apart and ranked by position, not by id.
    # ``einsum`` (no BLAS) reduces every row with the same loop, and costs about a quarter
    # of ``(m * q).sum(axis=1)`` (no temporary matrix).
    dots = np.einsum("ij,j->i", m, q)
    with np.errstate(invalid="ignore", divide="ignore"):
        sims = np.where(norms > 0.0, dots / (norms * qn), 0.0)
    # Clipped to [-1, 1] in one pass; NaN (no finite vector gives one) to -1.0, as
    # min(1.0, max(-1.0, nan)) does.
    clipped = np.clip(sims, -1.0, 1.0)
    clipped[np.isnan(clipped)] = -1.0
    values: list[float] = clipped.tolist()
    if len(rows) == len(scores):  # every row scored (rows is 0..n-1, in order)
        return values
    for i, s in zip(rows, values, strict=True):
        scores[i] = s
    return scores


def rank_by_similarity(
    facts: Sequence[SemanticFact],
    query: Sequence[float],
    min_similarity: float,
    embeddings: Sequence[Sequence[float] | None] | None = None,
) -> list[tuple[SemanticFact, float]]:
    """Score every fact against the query, drop those below ``min_similarity``, sort.

    The order is similarity descending, then id: the full merged list is ranked before
    any ``limit`` cut. A score below ``min_similarity`` by at most
    :data:`SIMILARITY_FLOOR_TOLERANCE` (rounding) is kept. ``embeddings``: the facts'
    vectors when the caller holds them in another form (e.g. arrays); default, each
    fact's ``embedding``.
    """
    if embeddings is None:
        embeddings = [f.embedding for f in facts]
    scores = cosine_scores(embeddings, query)
    floor = min_similarity - SIMILARITY_FLOOR_TOLERANCE  # as _floor_test, inline
    positive = min_similarity > 0.0
    # Sort keys built in one pass; the position breaks exact ties as the stable sort by
    # (score, id) did (a fact listed twice), so records are never compared.
    keyed = [
        (-s, f.id.int, i, f, s)
        for i, (f, s) in enumerate(zip(facts, scores, strict=True))
        if s >= floor and (s > 0.0 or not positive)
    ]
    keyed.sort()
    return [(f, s) for _, _, _, f, s in keyed]


def rank_themes(
    themes: Sequence[Theme], query: Sequence[float], min_similarity: float
) -> list[Theme]:
    """Live themes by similarity (then id), those below ``min_similarity`` dropped.

    As in :func:`rank_by_similarity`, rounding (:data:`SIMILARITY_FLOOR_TOLERANCE`) is
    not a miss.
    """
    scores = cosine_scores([t.embedding for t in themes], query)
    passes = _floor_test(min_similarity)
    kept = [(t, s) for t, s in zip(themes, scores, strict=True) if passes(s)]
    kept.sort(key=lambda ts: (-ts[1], ts[0].id.int))
    return [t for t, _ in kept]


def cut(items: Sequence[T], limit: int) -> list[T]:
    """The first ``limit`` items."""
    return list(items[:limit])


def ordered_ids(groups: Iterable[Iterable[uuid.UUID]]) -> list[uuid.UUID]:
    """Flatten id lists keeping first occurrences (rank order of the citing records)."""
    return list(dict.fromkeys(itertools.chain.from_iterable(groups)))


def entity_is_live(entity: Entity) -> bool:
    """Neither invalidated nor superseded by a merge."""
    return entity.invalidated_at is None and entity.superseded_by is None


def filter_entities(
    entities: Iterable[Entity],
    *,
    include_invalidated: bool,
    entity_types: Sequence[str] | None,
) -> list[Entity]:
    """Drop invalidated/superseded entities (unless asked) and those of other types."""
    types = None if entity_types is None else frozenset(entity_types)
    return [
        e
        for e in entities
        if (include_invalidated or entity_is_live(e))
        and (types is None or e.entity_type in types)
    ]


def filter_relationships(
    relationships: Iterable[Relationship],
    *,
    include_invalidated: bool,
    valid_at: datetime | None,
    changed_since: datetime | None,
    relation_types: Sequence[str] | None,
) -> list[Relationship]:
    """Temporal, soft-delete and type filters on relationships, in input order."""
    types = None if relation_types is None else frozenset(relation_types)
    return [
        r
        for r in relationships
        if (include_invalidated or r.invalidated_by is None)
        and (valid_at is None or is_valid_at(r, valid_at))
        and (changed_since is None or is_changed_since(r, changed_since))
        and (types is None or r.relation_type in types)
    ]


def rank_relationships(
    relationships: Iterable[Relationship], hops: Mapping[uuid.UUID, int]
) -> list[Relationship]:
    """Order by the nearest endpoint's hop (unknown endpoints last), then ``(valid_from, id)``."""
    far = len(hops) + 1_000_000

    def key(r: Relationship) -> tuple[int, datetime, int]:
        near = min(hops.get(r.source_id, far), hops.get(r.target_id, far))
        return (near, r.valid_from, r.id.int)

    return sorted(relationships, key=key)


def rank_subgraph_facts(
    facts_by_entity: Mapping[uuid.UUID, Sequence[SemanticFact]],
    entity_order: Sequence[uuid.UUID],
) -> list[SemanticFact]:
    """Facts of ranked entities: nearest cited entity first, then newest, then id."""
    rank = {eid: i for i, eid in enumerate(entity_order)}
    best: dict[uuid.UUID, tuple[int, SemanticFact]] = {}
    for eid, facts in facts_by_entity.items():
        r = rank.get(eid)
        if r is None:
            continue
        for fact in facts:
            held = best.get(fact.id)
            if held is None or r < held[0]:
                best[fact.id] = (r, fact)
    ordered = sorted(best.values(), key=lambda rf: rf[1].id.int)
    ordered.sort(key=lambda rf: rf[1].valid_from, reverse=True)
    ordered.sort(key=lambda rf: rf[0])
    return [f for _, f in ordered]


def by_citation(records: Mapping[uuid.UUID, T], cited: Sequence[uuid.UUID]) -> list[T]:
    """Records in the order their ids were first cited (missing ids skipped)."""
    return [records[i] for i in cited if i in records]

"""Theme upkeep: a theme shows only what memory still serves.

A theme's ``label`` quotes one of its facts, its ``description`` names their key terms
and its ``embedding`` is their centroid. When a writer stops a fact from being served
(consolidation merges or decays it, the retention gate evicts it, a conflict resolution
or ``Memory.forget`` invalidates it, a purge erases it) or the fact is tagged
``quarantined``, the themes listing it are repaired by that writer, under the ``themes``
lock ingest's theme assignment holds, with :func:`recentre_theme`:

* the centroid is the normalised mean of the unit embeddings of its *servable* members
  (live, ``invalidated_by`` unset, and not tagged ``quarantined``); ``None`` without one,
  so the theme is no longer matched by similarity;
* the label quotes the servable member nearest that centroid (the first in the theme's
  order among those within :data:`LABEL_TIE_TOLERANCE` of the nearest: rounding, float32
  on Postgres and float64 in memory, never picks the label), else the first servable
  member; a theme with no servable member is labelled :data:`UNTITLED_THEME`;
* the description (``"N facts; key terms: ..."``) counts and quotes the servable
  members only.

A theme left with no live member at all serves nothing and is soft-deleted by
:func:`refresh_themes` (consolidation and purge apply their own rule, see their docs).
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator, Iterable, Sequence
from datetime import datetime

import numpy as np

from cycgraph_memory._exclusive import THEMES_LOCK, exclusive_pass
from cycgraph_memory.contracts import MemoryStore
from cycgraph_memory.hierarchy.clustering import theme_description, theme_label
from cycgraph_memory.records import QUARANTINE_TAG, SemanticFact, Theme

__all__ = [
    "LABEL_TIE_TOLERANCE",
    "UNTITLED_THEME",
    "recentre_theme",
    "refresh_themes",
    "servable",
    "theme_changed",
    "themes_lock_for",
]

LABEL_TIE_TOLERANCE = 1e-6
"""Members this close to the nearest one are tied for the label (the first one wins)."""

UNTITLED_THEME = "Untitled theme"
"""Label of a theme none of whose members is servable (it quotes no fact)."""

_VECTOR_TOLERANCE = 1e-6
"""Centroids this close are the same (a stored float32 centroid against float64)."""


def servable(fact: SemanticFact) -> bool:
    """Whether default retrieval may serve ``fact``: live and not quarantined."""
    return fact.invalidated_by is None and QUARANTINE_TAG not in fact.tags


def recentre_theme(theme: Theme, members: Sequence[SemanticFact]) -> Theme:
    """``theme`` listing ``members``, re-centred and relabelled from its servable ones.

    Args:
        theme: The theme to repair (not changed).
        members: Its member facts as they now are, in the theme's order (invalidated and
            quarantined ones included: they stay listed, but shape nothing).

    Returns:
        A copy with ``fact_ids`` = the members' ids, and centroid, label and description
        made from the servable members (see the module docs).
    """
    shown = [f for f in members if servable(f)]
    with_vec = [f for f in shown if f.embedding]
    embedding: list[float] | None = None
    label = ""
    if with_vec:
        vectors = [np.asarray(f.embedding, dtype=np.float64) for f in with_vec]
        norms = [float(np.linalg.norm(v)) for v in vectors]
        units = [v / n if n > 0.0 else v for v, n in zip(vectors, norms, strict=True)]
        total = np.sum(units, axis=0)
        norm = float(np.linalg.norm(total))
        if norm > 0.0:
            centre = total / norm
            embedding = [float(x) for x in centre]
            scores = [float(np.dot(u, centre)) for u in units]
            best = max(scores) - LABEL_TIE_TOLERANCE
            label = theme_label(
                next(f for f, s in zip(with_vec, scores, strict=True) if s >= best).content
            )
    if not label and shown:
        label = theme_label(shown[0].content)
    description = theme_description([f.content for f in shown], len(shown))
    return theme.model_copy(
        update={
            "fact_ids": [f.id for f in members],
            "embedding": embedding,
            "label": label or UNTITLED_THEME,
            "description": description,
        }
    )


def theme_changed(before: Theme, after: Theme) -> bool:
    """Whether ``after`` differs from ``before`` in what a repair rewrites.

    Centroids are compared within a tolerance: a stored float32 centroid and the float64
    one computed again from the same members are the same centroid.
    """
    if (
        before.label != after.label
        or before.description != after.description
        or before.fact_ids != after.fact_ids
        or before.invalidated_at != after.invalidated_at
    ):
        return True
    if before.embedding is None or after.embedding is None:
        return (before.embedding is None) != (after.embedding is None)
    if len(before.embedding) != len(after.embedding):
        return True
    return not np.allclose(
        np.asarray(before.embedding, dtype=np.float64),
        np.asarray(after.embedding, dtype=np.float64),
        rtol=0.0,
        atol=_VECTOR_TOLERANCE,
    )


async def _members(
    store: MemoryStore, ids: Sequence[uuid.UUID], batch_size: int
) -> dict[uuid.UUID, SemanticFact]:
    found: dict[uuid.UUID, SemanticFact] = {}
    for start in range(0, len(ids), batch_size):
        found.update(await store.get_facts(ids[start : start + batch_size]))
    return found


async def refresh_themes(
    store: MemoryStore,
    facts: Iterable[SemanticFact],
    *,
    now: datetime,
    batch_size: int = 1000,
) -> list[Theme]:
    """The repaired themes of ``facts``, a writer's changed facts (nothing is written).

    The themes repaired are the live ones named by the facts' ``theme_id`` that list the
    fact (read by id: the cost follows the facts changed, not the tenant). Each is
    re-centred and relabelled from its members as they are once ``facts`` are written
    (:func:`recentre_theme`; membership is kept, so a query including invalidated records
    still reaches them), or soft-deleted (``invalidated_at = now``) when none of its
    members is live any more. Only themes that change are returned. Call it in the
    writer's unit of work, inside :func:`themes_lock_for` (ingest's ``THEMES_LOCK``), and
    write what it returns.

    Args:
        store: The store the facts belong to.
        facts: The writer's facts, as it is about to write them.
        now: The invalidation time of a theme left with no live member.
        batch_size: Facts read per ``get_facts`` call.

    Returns:
        The themes to write, in the order their ids first appear among ``facts``.
    """
    changed = {f.id: f for f in facts}
    theme_ids = list(dict.fromkeys(f.theme_id for f in changed.values() if f.theme_id))
    if not theme_ids:
        return []
    found = await store.get_themes(theme_ids)
    out: list[Theme] = []
    for tid in theme_ids:
        theme = found.get(tid)
        if theme is None or theme.invalidated_at is not None:
            continue
        if all(fid not in changed for fid in theme.fact_ids):
            continue  # the fact's theme_id is stale: the theme does not list it
        stored = await _members(store, theme.fact_ids, batch_size)
        stored.update((fid, changed[fid]) for fid in theme.fact_ids if fid in changed)
        members = [stored[fid] for fid in theme.fact_ids if fid in stored]
        if not any(f.invalidated_by is None for f in members):
            out.append(theme.model_copy(update={"invalidated_at": now}))
            continue
        repaired = recentre_theme(theme, members)
        if theme_changed(theme, repaired):
            out.append(repaired)
    return out


@contextlib.asynccontextmanager
async def themes_lock_for(
    store: MemoryStore, facts: Iterable[SemanticFact]
) -> AsyncIterator[bool]:
    """Hold the ``themes`` lock when one of ``facts`` names a theme; yield whether it does.

    For a pass inside its own unit of work (holding ``FACTS_LOCK``, having only *read* the
    facts): ``THEMES_LOCK`` comes last in the lock order, so taking it late cannot form a
    cycle of passes, and a pass whose facts belong to no theme never waits for an ingest.
    Take it before writing or row-locking the facts (an ingest holding it may rewrite
    them: waiting for it while holding their rows would deadlock), and read the facts
    again under it when it was taken (an ingest may have moved them to another theme).
    """
    if any(f.theme_id is not None for f in facts):
        async with exclusive_pass(store, THEMES_LOCK):
            yield True
    else:
        yield False

"""The stored themes one ingest batch can touch, found through a kNN index.

:class:`~cycgraph_memory.hierarchy.pipeline.MemoryPipeline` clusters a batch against these
candidates instead of every theme of the tenant, so the cost of an ingest follows the batch:

* each embedded fact asks the index for its ``limit`` nearest live themes (above a floor,
  the clusterer's lowest threshold, when it has one), all facts in one call when the index
  offers ``search_themes_many`` (both shipped indexes; one SQL statement on Postgres);
* the union is read back from the store by id inside the ingest's unit of work (current
  values, so a stale index entry never overwrites newer data; invalidated or missing
  themes are dropped) and handed to the clusterer in the store's listing order;
* facts without a usable vector go to the tenant's "General" theme, which has a fixed id
  (:data:`GENERAL_THEME_ID`) so it is found by key, never by listing.

The index is the pipeline's ``index`` when it has one (the Postgres index reads the store's
tables inside the same transaction; the in-memory index is kept in sync by the pipeline).
Without one, :class:`ThemeNeighbours` is a private numpy table of live theme centroids,
filled once from the store (one paged listing, on the first ingest of this pipeline
object) and kept up to date with this pipeline's own writes. It does not see themes other
writers create later (they may then get a near-duplicate theme); pass ``index=`` to share
one view.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from cycgraph_memory.contracts import MemoryIndex, MemoryStore
from cycgraph_memory.hierarchy.clustering import GENERAL_THEME_LABEL
from cycgraph_memory.records import ListOptions, Provenance, SemanticFact, Theme, utc_now

__all__ = ["GENERAL_THEME_ID", "ThemeNeighbours", "candidate_themes", "general_theme"]

GENERAL_THEME_ID = uuid.uuid5(uuid.NAMESPACE_URL, "cycgraph-memory:theme:general")
"""Id of the catch-all theme an ingest gives facts without embeddings (one per tenant)."""

_PAGE = 1000
FloatArray = npt.NDArray[np.float64]


def general_theme(provenance: Provenance | None = None) -> Theme:
    """A new, empty "General" theme with the fixed id.

    Args:
        provenance: Its provenance (``created_at`` is set to now); default
            ``Provenance(source="derived")``.
    """
    base = provenance if provenance is not None else Provenance(source="derived")
    return Theme(
        id=GENERAL_THEME_ID,
        label=GENERAL_THEME_LABEL,
        description="Facts without embeddings",
        provenance=base.model_copy(update={"created_at": utc_now()}),
    )


def _unit(vector: Sequence[float] | None) -> FloatArray | None:
    if vector is None:
        return None
    v = np.asarray(vector, dtype=np.float64)
    norm = float(np.linalg.norm(v))
    if norm == 0.0 or not np.isfinite(norm):
        return None
    out: FloatArray = v / norm
    return out


class ThemeNeighbours:
    """Live theme centroids of one tenant as a numpy table (the no-index fallback)."""

    def __init__(self) -> None:
        self._ids: list[uuid.UUID] = []
        self._rows: dict[uuid.UUID, int] = {}
        self._matrix: FloatArray = np.zeros((0, 0), dtype=np.float64)
        self._size = 0
        self.loaded = False

    async def load(self, store: MemoryStore) -> None:
        """Read the live themes once (paged)."""
        offset = 0
        while True:
            page = await store.list_themes(ListOptions(limit=_PAGE, offset=offset))
            self.update(page, ())
            offset += len(page)
            if len(page) < _PAGE:
                break
        self.loaded = True

    def update(self, themes: Iterable[Theme], removed: Iterable[uuid.UUID]) -> None:
        """Add or move the centroids of ``themes``; drop ``removed`` and invalidated ones."""
        for theme_id in removed:
            self._drop(theme_id)
        for theme in themes:
            vec = _unit(theme.embedding)
            if theme.invalidated_at is not None or vec is None:
                self._drop(theme.id)
                continue
            row = self._rows.get(theme.id)
            if row is None:
                row = self._append(theme.id, vec.shape[0])
            if vec.shape[0] == self._matrix.shape[1]:
                self._matrix[row] = vec

    def search(self, vector: Sequence[float], limit: int, floor: float | None) -> list[uuid.UUID]:
        """Ids of the ``limit`` nearest centroids (at least ``floor``), best first."""
        q = _unit(vector)
        n = self._size
        if q is None or n == 0 or q.shape[0] != self._matrix.shape[1]:
            return []
        sims = self._matrix[:n] @ q
        k = min(limit, n)
        top = np.argpartition(-sims, k - 1)[:k] if k < n else np.arange(n)
        ranked = sorted(top.tolist(), key=lambda i: (-sims[i], str(self._ids[i])))
        return [self._ids[i] for i in ranked if floor is None or sims[i] >= floor - 1e-9]

    def _append(self, theme_id: uuid.UUID, dim: int) -> int:
        if self._matrix.shape[1] != dim:
            if self._size:
                return self._size  # a vector of another width: never a candidate
            self._matrix = np.zeros((16, dim), dtype=np.float64)
        if self._size == self._matrix.shape[0]:
            grown = np.zeros((2 * self._size, dim), dtype=np.float64)
            grown[: self._size] = self._matrix
            self._matrix = grown
        row = self._size
        self._size += 1
        self._ids.append(theme_id)
        self._rows[theme_id] = row
        return row

    def _drop(self, theme_id: uuid.UUID) -> None:
        row = self._rows.pop(theme_id, None)
        if row is None:
            return
        last = self._size - 1
        if row != last:
            moved = self._ids[last]
            self._ids[row] = moved
            self._rows[moved] = row
            self._matrix[row] = self._matrix[last]
        self._ids.pop()
        self._size = last


async def candidate_themes(
    store: MemoryStore,
    facts: Sequence[SemanticFact],
    *,
    index: MemoryIndex | None,
    neighbours: ThemeNeighbours | None,
    limit: int,
    floor: float | None,
    max_facts: int | None = None,
    provenance: Provenance | None = None,
) -> list[Theme]:
    """The live stored themes near ``facts`` (plus "General" when a fact has no vector).

    Reads at most ``limit`` themes per fact through the index (or ``neighbours``) and
    that many by id from the store, whatever the size of the tenant. A theme holding
    ``max_facts`` facts or more is full: it is not a candidate, so it neither grows nor
    merges, and related facts start a sibling theme (the cost of writing a theme stays
    bounded too). Call it inside the ingest's unit of work. A "General" theme that is not
    stored yet is made with ``provenance`` (see :func:`general_theme`).
    """
    wanted: dict[uuid.UUID, None] = {}
    need_general = any(f.embedding is None or _unit(f.embedding) is None for f in facts)
    vectors = [
        f.embedding for f in facts if f.embedding is not None and _unit(f.embedding) is not None
    ]
    many = getattr(index, "search_themes_many", None)
    if many is not None and vectors:
        # Both shipped indexes: every fact's neighbours in one call (one SQL statement).
        for hits in await many(vectors, limit=limit, min_similarity=floor):
            for theme_id, _ in hits:
                wanted[theme_id] = None
        facts = []
    for fact in facts:
        if fact.embedding is None or _unit(fact.embedding) is None:
            continue
        if index is not None:
            options: dict[str, Any] = {"limit": limit}
            if floor is not None:
                options["min_similarity"] = floor
            hits = await index.search_themes(fact.embedding, options)
            for hit in hits:
                wanted[hit.item.id] = None
        elif neighbours is not None:
            for theme_id in neighbours.search(fact.embedding, limit, floor):
                wanted[theme_id] = None
    if need_general:
        wanted[GENERAL_THEME_ID] = None
    stored = await store.get_themes(list(wanted)) if wanted else {}
    live = [
        t
        for t in stored.values()
        if t.invalidated_at is None
        and (max_facts is None or len(t.fact_ids) < max_facts or t.id == GENERAL_THEME_ID)
    ]
    live.sort(key=lambda t: (t.provenance.created_at, str(t.id)))
    if need_general and not any(t.id == GENERAL_THEME_ID for t in live):
        live.append(general_theme(provenance))  # new (or revived after a soft delete)
    return live

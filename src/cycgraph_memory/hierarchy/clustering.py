"""Theme clustering (hierarchy level 2 -> 3): greedy assignment, optional centroid merging.

Both clusterers implement :class:`~cycgraph_memory.contracts.ThemeClusterer`.

Assignment (both): facts are visited in input order. Each fact's embedding is compared
(cosine) with the centroid of every theme that has one; the fact joins the most similar
theme when the similarity is at least the threshold (inclusive, with a 1e-9 tolerance; ties
go to the older theme), otherwise it starts a new theme. A centroid is the L2-normalised mean
of the *normalised* member embeddings; an existing theme enters with its stored embedding,
weighted by its number of ``fact_ids``. Facts without an embedding (or with an all-zero one)
go to a single theme labelled ``"General"``, reusing an existing theme with that label.

Re-clustering: a fact already listed in an existing theme's ``fact_ids`` stays there (its
embedding is not counted twice); a fact whose ``theme_id`` names one of the existing themes
joins that theme. Every other fact is assigned afresh.

Merging (:class:`ConsolidatingThemeClusterer` only): the most similar pair of embedded themes
is merged while its similarity reaches ``merge_threshold``; the merged centroid is the
member-weighted mean, so a merged theme can merge again (cascades). While more themes than
``max_themes`` remain, the most similar pairs are merged regardless of the threshold. The
``"General"`` theme and themes without an embedding never merge, so the cap is soft. The
survivor of a merge is an existing theme rather than a new one; among existing themes the
one with more facts (ties: the smaller id); among new themes the older one.

Results: the returned list holds *copies*. The caller's ``Theme`` objects are never mutated;
persist the returned ones. Only a theme this call changes is deep-copied; an unchanged
existing theme comes back as a shallow copy (equal to the input, sharing its lists), so
the cost of a call follows the themes it touches, not the number passed in.
Existing themes come first (input order), then new themes in
creation order. An existing theme absent from the result was merged away; the mapping
``merged-away id -> surviving id`` is in :attr:`ClusteringResult.merged_into` (and in
:attr:`ConsolidatingThemeClusterer.last_merges`). Facts passed to the call are re-pointed
automatically; facts persisted earlier under a merged-away theme must be remapped by the
caller with that mapping. Invalidated (soft-deleted) existing themes are passed through
unchanged and take no part in assignment or merging.

Ids: by default a new theme's id is derived from the fact that founded it (the first
fact placed in it): ``uuid5(THEME_ID_NAMESPACE, "theme:<fact id>")``, see
:func:`theme_id_for`. Fact ids are derived from message ids, so the same input gives the
same themes (ids, labels, members, centroids) in a fresh tenant, on every backend. An id
already taken in the call (an existing theme passed in, or another new theme) moves on to
``"theme:<fact id>:1"``, ``":2"``, ...; :class:`~cycgraph_memory.hierarchy.pipeline.MemoryPipeline`
also checks new ids against the store (a theme founded by a fact that was later erased
keeps its id) and derives another one on a clash. All themes created by one call share one
``provenance.created_at`` (one reading of ``now``), so the store's ``(created_at, id)``
order of a call's themes does not depend on timing. Pass ``id_factory`` for ids of your
own (called once per new theme; random UUIDs with ``id_factory=new_id``).

Labels: a new theme is labelled with the member fact closest to its centroid (cut at a word
boundary to about 60 characters) and described as ``"N facts; key terms: ..."``; the
``"<speaker> on <date>: "`` that grounding puts before a conversation's facts is left out
of both (:func:`~cycgraph_memory.hierarchy.grounding.without_grounding`). Existing
themes keep their label and description; their ``fact_ids`` and centroid are updated.
"""

from __future__ import annotations

import logging
import re
import uuid
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ConfigDict, Field

from cycgraph_memory._validate import check_callable, instances_of, keyword_options
from cycgraph_memory.errors import EmbeddingDimensionMismatchError, InvalidInputError
from cycgraph_memory.hierarchy.grounding import without_grounding
from cycgraph_memory.records import Provenance, SemanticFact, Theme, utc_now

__all__ = [
    "GENERAL_THEME_LABEL",
    "ClusteringResult",
    "ConsolidatingThemeClusterer",
    "Linkage",
    "SimpleThemeClusterer",
    "THEME_ID_NAMESPACE",
    "theme_id_for",
]

logger = logging.getLogger(__name__)

Linkage = Literal["centroid", "average"]
"""How a fact is compared with a theme: its centroid, or the mean over its members."""

GENERAL_THEME_LABEL = "General"
"""Label of the catch-all theme for facts without embeddings."""

THEME_ID_NAMESPACE = uuid.UUID("5d0c7a3e-2b9f-5e41-8c6d-1f4a7b2e9c30")
"""uuid5 namespace of the theme ids a clusterer derives from founding facts."""


def theme_id_for(founder: uuid.UUID, attempt: int = 0) -> uuid.UUID:
    """The derived id of a theme founded by the fact ``founder``.

    ``uuid5(THEME_ID_NAMESPACE, "theme:<founder>")``; ``attempt`` > 0 appends
    ``":<attempt>"`` (the next candidate when the id is already taken).
    """
    name = f"theme:{founder}" if attempt == 0 else f"theme:{founder}:{attempt}"
    return uuid.uuid5(THEME_ID_NAMESPACE, name)


_EPS = 1e-9
_LABEL_CHARS = 60
_KEY_TERMS = 3
_WORD = re.compile(r"[^\W\d_][\w'-]{2,}", re.UNICODE)
_STOPWORD_TEXT = """
about above after again against all also and any are because been before being below
between both but can could did does doing down during each few for from further had has
have having her here hers him his how into its itself just more most must not now off
once only other our ours out over own same she should some such than that the their
theirs them then there these they this those through too under until very was were what
when where which while who whom why will with would you your yours uses using used use
"""
_STOPWORDS = frozenset(_STOPWORD_TEXT.split())

FloatArray = npt.NDArray[np.float64]


class ClusteringResult(BaseModel):
    """Outcome of one clustering call.

    Attributes:
        themes: Surviving existing themes (updated copies) followed by new themes.
        merged_into: For each theme merged away in this call (existing or new), the id of
            the theme that finally absorbed it.
    """

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=False)

    themes: list[Theme] = Field(default_factory=list)
    merged_into: dict[uuid.UUID, uuid.UUID] = Field(default_factory=dict)


@dataclass(eq=False)
class _Cluster:
    """One theme being built. An existing theme is copied only when it changes."""

    theme: Theme
    existing: bool
    order: int
    general: bool = False
    active: bool = True
    vec_sum: FloatArray | None = None
    count: float = 0.0  # unit vectors summed in ``vec_sum`` (estimated for stored themes)
    members: list[SemanticFact] = field(default_factory=list)
    member_vecs: list[tuple[SemanticFact, FloatArray]] = field(default_factory=list)
    changed: bool = False
    merged_into: _Cluster | None = None
    owned: bool = True  # False while ``theme`` is still the caller's object
    _known: set[uuid.UUID] | None = None

    def own(self) -> Theme:
        """The theme, deep-copied first if it is still the caller's object."""
        if not self.owned:
            # Ids are immutable and the centroid is replaced, never mutated: copying the
            # list is a deep copy in effect, at a fraction of ``copy.deepcopy``'s cost.
            theme = self.theme
            self.theme = theme.model_copy(update={"fact_ids": list(theme.fact_ids)})
            self.theme.provenance = theme.provenance.model_copy()
            self.owned = True
        return self.theme

    def knows(self, fact_id: uuid.UUID) -> bool:
        if self._known is None:
            self._known = set(self.theme.fact_ids)
        return fact_id in self._known

    def add_id(self, fact_id: uuid.UUID) -> None:
        if not self.knows(fact_id):
            assert self._known is not None
            self._known.add(fact_id)
            self.own().fact_ids.append(fact_id)
            self.changed = True

    def add_vec(self, vec: FloatArray, count: float = 1.0) -> None:
        self.vec_sum = vec.copy() if self.vec_sum is None else self.vec_sum + vec
        self.count += count
        self.changed = True

    def centroid(self) -> FloatArray | None:
        return None if self.vec_sum is None else _unit(self.vec_sum)

    def survivor_rank(self) -> tuple[int, int, str]:
        if self.existing:
            return (0, -len(self.theme.fact_ids), str(self.theme.id))
        return (1, self.order, "")


def _unit(vec: FloatArray) -> FloatArray | None:
    norm = float(np.linalg.norm(vec))
    if norm == 0.0 or not np.isfinite(norm):
        return None
    return vec / norm


def _unit_or_zero(vec: FloatArray) -> FloatArray:
    u = _unit(vec)
    return np.zeros_like(vec) if u is None else u


def _check_threshold(name: str, value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidInputError(f"{name} must be a number, got {value!r}")
    if not -1.0 <= float(value) <= 1.0:
        raise InvalidInputError(f"{name} must be in [-1, 1], got {value!r}")
    return float(value)


def _short_label(text: str) -> str:
    text = " ".join(text.split())
    if len(text) <= _LABEL_CHARS:
        return text
    cut = text[:_LABEL_CHARS]
    space = cut.rfind(" ")
    if space >= _LABEL_CHARS // 2:
        cut = cut[:space]
    return cut.rstrip(" ,;:.-") + "..."


def theme_label(content: str) -> str:
    """A theme label quoting ``content``: without its grounding prefix, cut to ~60 chars."""
    return _short_label(without_grounding(content))


def theme_description(contents: Sequence[str], count: int) -> str:
    """``"N facts; key terms: ..."``: ``count`` facts, key terms of their ``contents``."""
    n = count
    terms = _key_terms([without_grounding(c) for c in contents])
    return f"{n} fact{'s' if n != 1 else ''}" + (
        f"; key terms: {', '.join(terms)}" if terms else ""
    )


def _key_terms(contents: Sequence[str]) -> list[str]:
    counts: Counter[str] = Counter()
    for text in contents:
        words = {w.lower().strip("'-") for w in _WORD.findall(text)}
        counts.update(w for w in words if len(w) >= 3 and w not in _STOPWORDS)
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    return [w for w, _ in ranked[:_KEY_TERMS]]


class _GreedyClusterer:
    """Shared assignment + merge engine of both public clusterers."""

    def __init__(
        self,
        threshold: float,
        merge_threshold: float | None,
        max_themes: int | None,
        id_factory: Callable[[], uuid.UUID] | None,
        now: Callable[[], datetime],
        linkage: Linkage = "centroid",
    ) -> None:
        if linkage not in ("centroid", "average"):
            raise InvalidInputError(f"linkage must be 'centroid' or 'average', got {linkage!r}")
        self._linkage: Linkage = linkage
        if id_factory is not None:
            check_callable(id_factory, "id_factory")
        check_callable(now, "now")
        self._threshold = threshold
        self._merge_threshold = merge_threshold
        self._max_themes = max_themes
        self._id_factory = id_factory
        self._now = now
        self._last_merges: dict[uuid.UUID, uuid.UUID] = {}

    @property
    def linkage(self) -> Linkage:
        """How a fact's similarity to a theme is measured (``centroid`` or ``average``)."""
        return self._linkage

    @property
    def _average(self) -> bool:
        return self._linkage == "average"

    def _stored_norm(self, m: int) -> float:
        """Estimated norm of the sum of a stored theme's ``m`` unit member vectors.

        A stored theme keeps only its unit centroid; with average linkage its members were
        admitted at a mean similarity of at least the threshold, so their pairwise
        similarity is taken to be the threshold: ``|sum|^2 = m + m (m - 1) t``.
        """
        t = max(self._threshold, 0.0)
        return float(np.sqrt(m + m * (m - 1) * t))

    @property
    def last_merges(self) -> dict[uuid.UUID, uuid.UUID]:
        """``merged-away theme id -> surviving theme id`` of the most recent call.

        Prefer the ``merged_into`` of :meth:`cluster_detailed` when calls may run
        concurrently on one instance.
        """
        return dict(self._last_merges)

    async def cluster(
        self, facts: Sequence[SemanticFact], existing_themes: Sequence[Theme] | None = None
    ) -> list[Theme]:
        """Cluster ``facts`` into themes, reusing ``existing_themes``.

        Sets ``theme_id`` on each passed fact. Returns updated copies of the surviving
        existing themes followed by the new themes; an existing theme missing from the list
        was merged away (see :attr:`last_merges`).

        Raises:
            EmbeddingDimensionMismatchError: If embeddings of different lengths are mixed.
            InvalidInputError: If two existing themes share an id.
        """
        return (await self.cluster_detailed(facts, existing_themes)).themes

    async def cluster_detailed(
        self, facts: Sequence[SemanticFact], existing_themes: Sequence[Theme] | None = None
    ) -> ClusteringResult:
        """Like :meth:`cluster`, also returning the merge mapping of this call.

        Raises:
            EmbeddingDimensionMismatchError: If embeddings of different lengths are mixed.
            InvalidInputError: If two existing themes share an id.
        """
        result = self._run(
            instances_of(facts, SemanticFact, "facts"),
            instances_of(existing_themes or [], Theme, "existing_themes"),
        )
        self._last_merges = dict(result.merged_into)
        return result

    # ------------------------------------------------------------------ engine

    def _new_theme(
        self, label: str, founder: uuid.UUID, taken: set[uuid.UUID], now: list[datetime]
    ) -> Theme:
        """A new theme founded by the fact ``founder``; its id is added to ``taken``."""
        if self._id_factory is not None:
            theme_id = self._id_factory()
        else:
            attempt = 0
            theme_id = theme_id_for(founder)
            while theme_id in taken:
                attempt += 1
                theme_id = theme_id_for(founder, attempt)
        taken.add(theme_id)
        if not now:  # one reading per call: every new theme of the call shares it
            now.append(self._now())
        return Theme(
            id=theme_id,
            label=label,
            provenance=Provenance(source="derived", created_at=now[0]),
        )

    def _run(self, facts: list[SemanticFact], existing: list[Theme]) -> ClusteringResult:
        dim = _common_dimension(facts, existing)
        clusters: list[_Cluster] = []
        passthrough: dict[uuid.UUID, Theme] = {}
        by_id: dict[uuid.UUID, _Cluster] = {}
        member_of: dict[uuid.UUID, _Cluster] = {}
        general: _Cluster | None = None
        taken: set[uuid.UUID] = {t.id for t in existing}
        created: list[datetime] = []

        batch_ids = {f.id for f in facts}
        for theme in existing:
            if theme.id in by_id or theme.id in passthrough:
                raise InvalidInputError(f"existing themes contain id {theme.id} twice")
            if theme.invalidated_at is not None:
                passthrough[theme.id] = theme.model_copy()
                continue
            # No copy yet: a theme is deep-copied only when this call changes it.
            cl = _Cluster(theme=theme, existing=True, order=len(clusters), owned=False)
            if theme.embedding is not None:
                u = _unit(np.asarray(theme.embedding, dtype=np.float64))
                if u is not None:
                    m = max(len(theme.fact_ids), 1)
                    cl.count = float(m)
                    cl.vec_sum = u * (self._stored_norm(m) if self._average else m)
            clusters.append(cl)
            by_id[theme.id] = cl
            for fid in batch_ids.intersection(theme.fact_ids):
                member_of.setdefault(fid, cl)
            if general is None and theme.label == GENERAL_THEME_LABEL:
                general = cl

        capacity = len(clusters) + len(facts)
        matrix = np.zeros((capacity, max(dim, 1)), dtype=np.float64)
        attract = np.zeros(capacity, dtype=bool)
        average = self._average

        def refresh_row(cl: _Cluster) -> None:
            if average:  # mean similarity to the members: x . sum / count
                if cl.vec_sum is not None and cl.count > 0:
                    matrix[cl.order] = cl.vec_sum / cl.count
                    attract[cl.order] = True
                return
            c = cl.centroid()
            if c is not None:
                matrix[cl.order] = c
                attract[cl.order] = True

        for cl in clusters:
            refresh_row(cl)

        placed: dict[uuid.UUID, _Cluster] = {}
        for fact in facts:
            if fact.id in placed:
                continue
            vec = None
            if fact.embedding is not None:
                vec = _unit(np.asarray(fact.embedding, dtype=np.float64))
            target = member_of.get(fact.id)
            if target is None and fact.theme_id is not None:
                target = by_id.get(fact.theme_id)
            if target is None and vec is None:
                if general is None:
                    general = _Cluster(
                        theme=self._new_theme(GENERAL_THEME_LABEL, fact.id, taken, created),
                        existing=False,
                        order=len(clusters),
                        general=True,
                    )
                    general.theme.description = "Facts without embeddings"
                    clusters.append(general)
                target = general
            if target is None:
                assert vec is not None
                n = len(clusters)
                sims = matrix[:n] @ vec
                sims[~attract[:n]] = -np.inf
                best = int(np.argmax(sims)) if n else -1
                if best >= 0 and sims[best] >= self._threshold - _EPS:
                    target = clusters[best]
                else:
                    target = _Cluster(
                        theme=self._new_theme("", fact.id, taken, created),
                        existing=False,
                        order=len(clusters),
                    )
                    clusters.append(target)
            placed[fact.id] = target
            if not target.knows(fact.id):
                target.add_id(fact.id)
                if vec is not None:
                    target.add_vec(vec)
                    refresh_row(target)
            target.members.append(fact)
            if vec is not None:
                target.member_vecs.append((fact, vec))

        if self._merge_threshold is not None:
            self._merge(clusters, self._merge_threshold)

        def final(cl: _Cluster) -> _Cluster:
            while cl.merged_into is not None:
                cl = cl.merged_into
            return cl

        merged_into: dict[uuid.UUID, uuid.UUID] = {
            cl.theme.id: final(cl).theme.id for cl in clusters if not cl.active
        }
        for fact in facts:
            target = final(placed[fact.id])
            if fact.theme_id != target.theme.id:
                fact.theme_id = target.theme.id

        themes: list[Theme] = []
        for theme in existing:
            if theme.id in passthrough:
                themes.append(passthrough[theme.id])
        ordered = [cl for cl in clusters if cl.active]
        for cl in ordered:
            self._finish(cl)
            if not cl.owned:  # unchanged: a shallow copy, nothing in it differs
                cl.theme = cl.theme.model_copy()
                cl.owned = True
        # existing themes keep their input order (passthrough included), new ones follow
        position = {t.id: i for i, t in enumerate(existing)}
        existing_out = [cl.theme for cl in ordered if cl.existing] + themes
        existing_out.sort(key=lambda t: position[t.id])
        new_out = [cl.theme for cl in ordered if not cl.existing]
        return ClusteringResult(themes=existing_out + new_out, merged_into=merged_into)

    def _finish(self, cl: _Cluster) -> None:
        """Write the centroid and (for new themes) the label back into the theme copy."""
        if cl.changed and cl.vec_sum is not None:
            c = cl.centroid()
            if c is not None:
                cl.own().embedding = c.tolist()
        if cl.existing or cl.general:
            return
        label = ""
        c = cl.centroid()
        if c is not None and cl.member_vecs:
            closest = int(np.argmax(np.stack([v for _, v in cl.member_vecs]) @ c))
            label = theme_label(cl.member_vecs[closest][0].content)
        if not label and cl.members:
            label = theme_label(cl.members[0].content)
        cl.theme.label = label or "Untitled theme"
        cl.theme.description = theme_description(
            [f.content for f in cl.members], len(cl.theme.fact_ids)
        )

    def _merge(self, clusters: list[_Cluster], threshold: float) -> None:
        """Merge the most similar embedded themes (threshold pass, then the soft cap)."""
        eligible = [cl for cl in clusters if cl.vec_sum is not None and not cl.general]
        eligible = [cl for cl in eligible if cl.theme.label != GENERAL_THEME_LABEL]
        k = len(eligible)
        if k < 2:
            return
        cap = self._max_themes
        count = len(clusters)  # live themes; invalidated pass-through ones do not count
        average = self._average

        def row(cl: _Cluster) -> FloatArray:
            # centroid linkage: the unit centroid; average linkage: sum / count, so that
            # row_a . row_b is the mean similarity between the two themes' members
            return _vec(cl) / max(cl.count, 1.0) if average else _unit_or_zero(_vec(cl))

        cents = np.stack([row(cl) for cl in eligible])
        sims = cents @ cents.T
        np.fill_diagonal(sims, -np.inf)
        alive = np.ones(k, dtype=bool)
        rowmax = sims.max(axis=1)
        rowarg = sims.argmax(axis=1)
        while True:
            i = int(np.argmax(rowmax))
            best = float(rowmax[i])
            if not np.isfinite(best):
                break
            over_cap = cap is not None and count > cap
            if best < threshold - _EPS and not over_cap:
                break
            j = int(rowarg[i])
            a, b = (i, j) if eligible[i].survivor_rank() <= eligible[j].survivor_rank() else (j, i)
            keep, lose = eligible[a], eligible[b]
            logger.debug(
                "merging theme %s into %s (similarity %.4f)", lose.theme.id, keep.theme.id, best
            )
            for fid in lose.theme.fact_ids:
                keep.add_id(fid)
            keep.members.extend(lose.members)
            keep.member_vecs.extend(lose.member_vecs)
            keep.add_vec(_vec(lose), lose.count)
            lose.active = False
            lose.merged_into = keep
            count -= 1
            alive[b] = False
            cents[a] = row(keep)
            new = cents @ cents[a]
            new[~alive] = -np.inf
            new[a] = -np.inf
            sims[a, :] = new
            sims[:, a] = new
            sims[b, :] = -np.inf
            sims[:, b] = -np.inf
            stale = alive & ((rowarg == a) | (rowarg == b))
            stale[a] = False
            if stale.any():
                rowmax[stale] = sims[stale].max(axis=1)
                rowarg[stale] = sims[stale].argmax(axis=1)
            better = alive & ~stale & (new > rowmax)
            better[a] = False
            rowmax[better] = new[better]
            rowarg[better] = a
            rowmax[a] = sims[a].max()
            rowarg[a] = int(sims[a].argmax())
            rowmax[b] = -np.inf


def _vec(cl: _Cluster) -> FloatArray:
    assert cl.vec_sum is not None  # only embedded clusters take part in merging
    return cl.vec_sum


def _common_dimension(facts: Sequence[SemanticFact], themes: Sequence[Theme]) -> int:
    """The shared embedding length (0 if nothing is embedded); mixed lengths raise."""
    dim = 0
    for kind, records in (("fact", facts), ("theme", themes)):
        for rec in records:
            if rec.embedding is None:
                continue
            if kind == "theme" and getattr(rec, "invalidated_at", None) is not None:
                continue
            n = len(rec.embedding)
            if dim == 0:
                dim = n
            elif n != dim:
                raise EmbeddingDimensionMismatchError(dim, n, f"{kind} {rec.id}")
    return dim


class SimpleThemeClusterer(_GreedyClusterer):
    """Greedy single-pass clustering by cosine similarity to theme centroids.

    The options may also come as one mapping in the first place (the spec's
    ``new SimpleThemeClusterer(opts?)``): ``SimpleThemeClusterer({"similarity_threshold":
    0.8})``, with the names below; an unknown name is an ``InvalidTypeError``, a mapping
    together with keyword arguments an ``InvalidInputError``.

    Args:
        similarity_threshold: Minimum cosine similarity (inclusive) for a fact to join an
            existing theme; otherwise it starts a new one (default 0.7). Or the options
            mapping.
        id_factory: Makes ids of new themes. Default (``None``): derived from the
            founding fact's id (:func:`theme_id_for`), so the same input gives the same
            themes; ``new_id`` gives random UUIDs.
        now: Wall clock for new themes' ``provenance.created_at``.

    Raises:
        InvalidInputError: If the threshold is outside ``[-1, 1]``, or an options mapping
            comes with keyword arguments.
        InvalidTypeError: An options mapping with an unknown name, or an ``id_factory`` /
            ``now`` that is not callable.
    """

    def __init__(
        self,
        similarity_threshold: float | Mapping[str, Any] = 0.7,
        *,
        id_factory: Callable[[], uuid.UUID] | None = None,
        now: Callable[[], datetime] = utc_now,
    ) -> None:
        if isinstance(similarity_threshold, Mapping):
            given = keyword_options(
                SimpleThemeClusterer.__init__,
                similarity_threshold,
                locals(),
                "SimpleThemeClusterer",
                slot="similarity_threshold",
            )
            SimpleThemeClusterer.__init__(self, **given)
            return
        super().__init__(
            _check_threshold("similarity_threshold", similarity_threshold),
            None,
            None,
            id_factory,
            now,
        )

    @property
    def similarity_threshold(self) -> float:
        """Minimum similarity to join an existing theme."""
        return self._threshold


class ConsolidatingThemeClusterer(_GreedyClusterer):
    """Two-pass clustering: greedy assignment, then centroid merging with a soft cap.

    The options may also come as one mapping in the first place (the spec's
    ``new ConsolidatingThemeClusterer({ assignmentThreshold, mergeThreshold, maxThemes })``):
    ``ConsolidatingThemeClusterer({"assignment_threshold": 0.7, "merge_threshold": 0.85,
    "max_themes": 50})``, with the names below; an unknown name is an ``InvalidTypeError``,
    a mapping together with other arguments an ``InvalidInputError``.

    Args:
        assignment_threshold: Minimum cosine similarity for a fact to join a theme
            (default 0.7). Or the options mapping.
        merge_threshold: Minimum centroid similarity for two themes to merge (default
            0.85).
        max_themes: Soft cap on the number of themes returned (``None``, the default: no
            cap).
        id_factory: Makes ids of new themes. Default (``None``): derived from the
            founding fact's id (:func:`theme_id_for`), so the same input gives the same
            themes; ``new_id`` gives random UUIDs.
        now: Wall clock for new themes' ``provenance.created_at``.
        linkage: ``"centroid"`` (default): a fact is compared with a theme's unit
            centroid and two themes by their centroids. ``"average"``: by the mean
            cosine similarity to the theme's members (``x . sum / count``) and between
            two themes' members, the quantity pairwise-calibrated thresholds are read
            from; a large theme's centroid drifts towards the tenant's mean direction,
            which every fact resembles, so centroid linkage lets it absorb facts that
            resemble none of its members.

    Raises:
        InvalidInputError: If a threshold is outside ``[-1, 1]``, ``max_themes`` is not a
            positive integer or ``linkage`` is unknown, or an options mapping comes with
            other arguments.
        InvalidTypeError: An options mapping with an unknown name, or an ``id_factory`` /
            ``now`` that is not callable.
    """

    def __init__(
        self,
        assignment_threshold: float | Mapping[str, Any] = 0.7,
        merge_threshold: float = 0.85,
        max_themes: int | None = None,
        *,
        id_factory: Callable[[], uuid.UUID] | None = None,
        now: Callable[[], datetime] = utc_now,
        linkage: Linkage = "centroid",
    ) -> None:
        if isinstance(assignment_threshold, Mapping):
            given = keyword_options(
                ConsolidatingThemeClusterer.__init__,
                assignment_threshold,
                locals(),
                "ConsolidatingThemeClusterer",
                slot="assignment_threshold",
            )
            ConsolidatingThemeClusterer.__init__(self, **given)
            return
        if max_themes is not None and (
            isinstance(max_themes, bool) or not isinstance(max_themes, int) or max_themes < 1
        ):
            raise InvalidInputError(f"max_themes must be a positive integer, got {max_themes!r}")
        super().__init__(
            _check_threshold("assignment_threshold", assignment_threshold),
            _check_threshold("merge_threshold", merge_threshold),
            max_themes,
            id_factory,
            now,
            linkage,
        )

    @property
    def assignment_threshold(self) -> float:
        """Minimum similarity to join an existing theme."""
        return self._threshold

    @property
    def merge_threshold(self) -> float:
        """Minimum similarity between two themes to merge them."""
        return float(self._merge_threshold or 0.0)

    @property
    def max_themes(self) -> int | None:
        """Soft cap on the number of themes."""
        return self._max_themes

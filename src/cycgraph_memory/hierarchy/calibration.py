"""Theme-clustering thresholds calibrated to an embedder's own similarity distribution.

Absolute cosine thresholds do not transfer between embedders: one model scores unrelated
sentences 0.1, another 0.75, so a fixed 0.7 makes one theme per fact with the first and
one theme per conversation with the second. :func:`calibrate_theme_thresholds` reads the
thresholds off the distribution of pairwise similarities of a sample of the embedder's
own vectors (for instance the facts about to be clustered):

* ``assignment_threshold`` = the ``assignment_quantile`` (default 0.95) of the pairwise
  similarities: a fact joins a theme only when it is closer to it than 95% of random
  pairs are to each other;
* ``merge_threshold`` = the ``merge_quantile`` (default 0.99), at least the assignment
  threshold.

:func:`calibrated_clusterer` builds a :class:`ConsolidatingThemeClusterer` from them.
The sample needs at least :data:`MIN_CALIBRATION_SAMPLE` vectors; the default pair budget
(``max_pairs``) keeps the cost bounded for large samples (rows are taken in order, no
randomness).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from cycgraph_memory._validate import check_number
from cycgraph_memory.contracts import MemoryStore
from cycgraph_memory.errors import InvalidInputError
from cycgraph_memory.hierarchy.clustering import ConsolidatingThemeClusterer, Linkage
from cycgraph_memory.records import FactFilter, Number, SemanticFact

__all__ = [
    "DEFAULT_THEME_SIZE",
    "MIN_CALIBRATION_SAMPLE",
    "THEME_CALIBRATION_KEY",
    "TenantThemeCalibrator",
    "ThemeCalibration",
    "ThemeThresholds",
    "calibrate_theme_thresholds",
    "calibrated_clusterer",
    "fit_theme_calibration",
    "refit_theme_calibration",
    "sample_fact_vectors",
]

MIN_CALIBRATION_SAMPLE = 10
"""Fewest vectors a calibration sample needs."""


class ThemeThresholds(BaseModel):
    """Calibrated clustering thresholds.

    Attributes:
        assignment_threshold: Minimum similarity for a fact to join a theme.
        merge_threshold: Minimum centroid similarity for two themes to merge.
        pairs: Number of vector pairs the quantiles were read from.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    assignment_threshold: Number = Field(ge=-1.0, le=1.0)
    merge_threshold: Number = Field(ge=-1.0, le=1.0)
    pairs: int = Field(ge=1)


def calibrate_theme_thresholds(
    vectors: Sequence[Sequence[float]],
    *,
    assignment_quantile: float = 0.95,
    merge_quantile: float = 0.99,
    max_pairs: int = 200_000,
) -> ThemeThresholds:
    """Thresholds at quantiles of the sample's pairwise cosine similarities.

    Args:
        vectors: At least :data:`MIN_CALIBRATION_SAMPLE` embeddings of one embedder.
        assignment_quantile: Quantile (0-1) giving the assignment threshold.
        merge_quantile: Quantile (0-1) giving the merge threshold (raised to at least the
            assignment threshold).
        max_pairs: Use only the first ``n`` rows with ``n * (n - 1) / 2 <= max_pairs``.

    Returns:
        The calibrated thresholds.

    Raises:
        InvalidInputError: Too few vectors, ragged or non-finite vectors, or a quantile
            outside ``[0, 1]``.
        InvalidTypeError: A quantile that is not a number (a bool or a string).
    """
    for name, q in (("assignment_quantile", assignment_quantile),
                    ("merge_quantile", merge_quantile)):
        if not 0.0 <= check_number(q, name) <= 1.0:
            raise InvalidInputError(f"{name} must be in [0, 1], got {q!r}")
    if len(vectors) < MIN_CALIBRATION_SAMPLE:
        raise InvalidInputError(
            f"calibration needs at least {MIN_CALIBRATION_SAMPLE} vectors, got {len(vectors)}"
        )
    try:
        m = np.asarray(vectors, dtype=np.float64)
    except ValueError as exc:
        raise InvalidInputError("calibration vectors must all have the same length") from exc
    if m.ndim != 2 or not np.all(np.isfinite(m)):
        raise InvalidInputError("calibration vectors must be finite and of one length")
    n = len(m)
    while n > 2 and n * (n - 1) // 2 > max_pairs:
        n -= 1
    m = m[:n]
    norms = np.linalg.norm(m, axis=1, keepdims=True)
    unit = m / np.where(norms == 0.0, 1.0, norms)
    sims = (unit @ unit.T)[np.triu_indices(n, k=1)]
    assign = float(np.quantile(sims, assignment_quantile))
    merge = max(assign, float(np.quantile(sims, merge_quantile)))
    return ThemeThresholds(
        assignment_threshold=min(1.0, max(-1.0, assign)),
        merge_threshold=min(1.0, max(-1.0, merge)),
        pairs=len(sims),
    )


def calibrated_clusterer(
    vectors: Sequence[Sequence[float]],
    *,
    assignment_quantile: float = 0.95,
    merge_quantile: float = 0.99,
    max_themes: int | None = None,
) -> ConsolidatingThemeClusterer:
    """A :class:`ConsolidatingThemeClusterer` with thresholds calibrated on ``vectors``."""
    t = calibrate_theme_thresholds(
        vectors, assignment_quantile=assignment_quantile, merge_quantile=merge_quantile
    )
    return ConsolidatingThemeClusterer(
        assignment_threshold=t.assignment_threshold,
        merge_threshold=t.merge_threshold,
        max_themes=max_themes,
    )


# --------------------------------------------------------------------------- per tenant

THEME_CALIBRATION_KEY = "theme_calibration"
"""Key of the per-tenant calibration record (``SupportsTenantSettings``)."""

DEFAULT_THEME_SIZE = 40
"""Facts a theme gathers on average that the tenant calibration aims at."""

_SAMPLE_PAGE = 32
_SAMPLE_PAGES = 16
_MAX_SAMPLE = 600


class ThemeCalibration(BaseModel):
    """The theme thresholds of one tenant, as stored with the tenant.

    The thresholds are quantiles of the pairwise similarities of a sample of the tenant's
    own fact vectors, chosen so that a fact joins a theme when the theme is about as close
    as a fact's ``theme_size`` nearest facts of the tenant are:
    ``assignment_quantile = 1 - theme_size / facts`` and
    ``merge_quantile = 1 - theme_size / (4 * facts)``, each clipped to
    ``[0.5, 0.9995]``: a fact never joins a theme it is less similar to than the median
    pair of the tenant's facts. As the tenant grows the quantiles rise, so themes keep a
    bounded size instead of absorbing everything; below ``2 * theme_size`` facts the
    median holds.

    The floor was 0.70 before (records fitted then keep their thresholds until the tenant
    doubles). It set the quantile of every tenant under 133 facts, and with
    all-MiniLM-L6-v2 on one-conversation tenants of about 93 facts that left the facts
    least like the rest (the assistant's replies, whose grounded prefix differs) in
    one-fact themes: 112 themes per 1,000 facts, above the 5-100 band.

    Linkage. The thresholds describe fact-to-fact similarities, while the default
    clusterer compares a fact with a theme's centroid, and a large theme's centroid tends
    to the tenant's mean direction, which every fact resembles (with all-MiniLM-L6-v2 the
    grounded prefix "Priya on 2024-09-06:" alone does it), so one theme gathers most of a
    small tenant. ``linkage="average"`` compares by the mean similarity to the members
    instead (quantiles clipped at 0): in those small tenants it gives themes of 15-60
    facts instead of one of 80-110, but a growing tenant (1,351 facts of the three
    frozen sets in one tenant) gets about 200 themes per 1,000 facts, out of the band,
    because the rising quantile is too strict a bar for a mean over members. It is an
    option, not the default, until its fit accounts for that.

    Attributes:
        assignment_threshold: Minimum similarity for a fact to join a theme.
        merge_threshold: Minimum centroid similarity for two themes to merge.
        facts: Facts of the tenant counted so far (estimated at the first fit, then
            increased by every ingest).
        fitted_at: ``facts`` when the thresholds were last fitted; they are fitted again
            once ``facts`` reaches twice this (so a refit happens at doublings, never on
            every call).
        sample: Vectors the last fit read.
        dimensions: Width of the vectors fitted (another width forces a refit).
        linkage: The clusterer linkage the thresholds were fitted for (records written
            before it existed were fitted for ``"centroid"``; another linkage forces a
            refit).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    assignment_threshold: Number = Field(ge=-1.0, le=1.0)
    merge_threshold: Number = Field(ge=-1.0, le=1.0)
    facts: int = Field(ge=0)
    fitted_at: int = Field(ge=0)
    sample: int = Field(ge=0)
    dimensions: int = Field(ge=0)
    linkage: Linkage = "centroid"

    def due(self, facts: int, dimensions: int, linkage: Linkage | None = None) -> bool:
        """Whether a tenant with ``facts`` facts of width ``dimensions`` needs a refit.

        A record fitted for another ``linkage`` (when one is given) is due as well.
        """
        if dimensions != self.dimensions or self.sample < MIN_CALIBRATION_SAMPLE:
            return True
        if linkage is not None and linkage != self.linkage:
            return True
        return facts >= 2 * max(self.fitted_at, MIN_CALIBRATION_SAMPLE)


_QUANTILE_FLOOR = {"centroid": 0.5, "average": 0.0}
_QUANTILE_CEILING = 0.9995


def _quantiles(facts: int, theme_size: int, linkage: Linkage) -> tuple[float, float]:
    n = max(facts, 1)
    floor = _QUANTILE_FLOOR[linkage]
    assign = min(_QUANTILE_CEILING, max(floor, 1.0 - theme_size / n))
    merge = min(_QUANTILE_CEILING, max(floor, 1.0 - theme_size / (4.0 * n)))
    return assign, max(assign, merge)


def fit_theme_calibration(
    vectors: Sequence[Sequence[float]],
    facts: int,
    *,
    theme_size: int = DEFAULT_THEME_SIZE,
    linkage: Linkage = "centroid",
) -> ThemeCalibration:
    """Fit the thresholds of a tenant of ``facts`` facts on a sample of its vectors.

    Deterministic: the same vectors in the same order give the same thresholds. The
    quantiles are ``1 - theme_size / facts`` (assignment) and ``1 - theme_size /
    (4 * facts)`` (merge), clipped to at least 0.5 for ``linkage="centroid"`` and to at
    least 0 for ``"average"`` (see :class:`ThemeCalibration`).

    Raises:
        InvalidInputError: Fewer than :data:`MIN_CALIBRATION_SAMPLE` vectors, or bad ones.
    """
    if theme_size < 1:
        raise InvalidInputError(f"theme_size must be >= 1, got {theme_size!r}")
    assign_q, merge_q = _quantiles(facts, theme_size, linkage)
    t = calibrate_theme_thresholds(
        vectors, assignment_quantile=assign_q, merge_quantile=merge_q
    )
    return ThemeCalibration(
        assignment_threshold=t.assignment_threshold,
        merge_threshold=t.merge_threshold,
        facts=facts,
        fitted_at=facts,
        sample=len(vectors),
        dimensions=len(vectors[0]),
        linkage=linkage,
    )


async def sample_fact_vectors(store: MemoryStore) -> tuple[list[list[float]], int]:
    """A bounded, deterministic sample of the stored facts' vectors, and a count estimate.

    Reads pages of 32 live facts at offsets 0, 32, 64, 128, ... in the store's listing
    order until a page comes back short (at most 16 pages, 512 facts), so the sample
    spans the tenant's history at any size. The estimate is the number of facts the
    probes prove to exist (within a factor of two of the true count up to ~1M facts).
    """
    vectors: list[list[float]] = []
    offset, counted = 0, 0
    for _ in range(_SAMPLE_PAGES):
        page = await store.find_facts(FactFilter(limit=_SAMPLE_PAGE, offset=offset))
        vectors.extend(list(f.embedding) for f in page if f.embedding is not None)
        if page:
            counted = offset + len(page)
        if len(page) < _SAMPLE_PAGE:
            break
        offset = max(_SAMPLE_PAGE, 2 * offset)
    return vectors, counted


async def refit_theme_calibration(
    store: MemoryStore, *, theme_size: int = DEFAULT_THEME_SIZE
) -> ThemeCalibration | None:
    """Fit the tenant's stored calibration again on its current vectors (after re-embedding).

    Does nothing (returns ``None``) when the store keeps no tenant settings or the tenant
    has no calibration yet (the first ingest fits one). The fact count is kept; with too
    few vectors the record falls back to the fixed defaults and is refitted at the next
    ingest, as :class:`TenantThemeCalibrator` does.
    """
    getter = getattr(store, "get_tenant_setting", None)
    putter = getattr(store, "put_tenant_setting", None)
    if getter is None or putter is None:
        return None
    raw = await getter(THEME_CALIBRATION_KEY)
    if raw is None:
        return None
    old = ThemeCalibration.model_validate(raw)
    vectors, counted = await sample_fact_vectors(store)
    dims = {len(v) for v in vectors}
    dim = len(vectors[0]) if vectors else old.dimensions
    vectors = [v for v in vectors if len(v) == dim][:_MAX_SAMPLE]
    total = max(old.facts, counted)
    if len(vectors) >= MIN_CALIBRATION_SAMPLE and len(dims) == 1:
        record = fit_theme_calibration(
            vectors, total, theme_size=theme_size, linkage=old.linkage
        )
    else:
        record = ThemeCalibration(
            assignment_threshold=0.7, merge_threshold=0.85, facts=total, fitted_at=0,
            sample=len(vectors), dimensions=dim, linkage=old.linkage,
        )
    await putter(THEME_CALIBRATION_KEY, record.model_dump())
    return record


class TenantThemeCalibrator:
    """Keeps a tenant's calibrated thresholds and builds the clusterer of each ingest.

    Used by :class:`~cycgraph_memory.hierarchy.pipeline.MemoryPipeline` when no
    clusterer is given. Inside the ingest's unit of work :meth:`clusterer_for` reads the
    tenant's :class:`ThemeCalibration` (one small record), refits it when it is missing or
    the tenant has doubled since the last fit (reading a bounded sample, see
    :func:`sample_fact_vectors`), counts the batch's facts and writes the record back.
    Stores without ``get_tenant_setting`` keep the record in this object instead.

    Args:
        theme_size: Facts per theme the fit aims at (:data:`DEFAULT_THEME_SIZE`).
        max_themes: Passed to every :class:`ConsolidatingThemeClusterer`.
        linkage: Passed to every :class:`ConsolidatingThemeClusterer` and stored in the
            record; a record fitted for another linkage is refitted. ``"centroid"`` (the
            default) or ``"average"`` (mean similarity to the members: better-shaped
            themes in small tenants, too many in growing ones; see
            :class:`ThemeCalibration`).
    """

    def __init__(
        self,
        *,
        theme_size: int = DEFAULT_THEME_SIZE,
        max_themes: int | None = None,
        linkage: Linkage = "centroid",
    ):
        if linkage not in ("centroid", "average"):
            raise InvalidInputError(f"linkage must be 'centroid' or 'average', got {linkage!r}")
        if theme_size < 1:
            raise InvalidInputError(f"theme_size must be >= 1, got {theme_size!r}")
        self.theme_size = theme_size
        self.max_themes = max_themes
        self.linkage: Linkage = linkage
        self._local: ThemeCalibration | None = None
        self.last: ThemeCalibration | None = None

    async def load(self, store: MemoryStore) -> ThemeCalibration | None:
        """The tenant's stored calibration, if any."""
        getter = getattr(store, "get_tenant_setting", None)
        if getter is None:
            return self._local
        raw = await getter(THEME_CALIBRATION_KEY)
        return None if raw is None else ThemeCalibration.model_validate(raw)

    async def _save(self, store: MemoryStore, record: ThemeCalibration) -> None:
        putter = getattr(store, "put_tenant_setting", None)
        if putter is None:
            self._local = record
        else:
            await putter(THEME_CALIBRATION_KEY, record.model_dump())

    async def clusterer_for(
        self, store: MemoryStore, facts: Sequence[SemanticFact]
    ) -> ConsolidatingThemeClusterer:
        """The clusterer for one ingest batch (call inside the ingest's unit of work)."""
        batch = [list(f.embedding) for f in facts if f.embedding is not None]
        record = await self.load(store)
        if not batch:
            self.last = record
            return self._build(record)
        dim = len(batch[0])
        if record is None or record.due(record.facts + len(batch), dim, self.linkage):
            stored, counted = await sample_fact_vectors(store)
            stored = [v for v in stored if len(v) == dim]
            total = max(counted, record.facts if record is not None else 0) + len(batch)
            sample = (stored + batch)[:_MAX_SAMPLE]
            if len(sample) >= MIN_CALIBRATION_SAMPLE:
                record = fit_theme_calibration(
                    sample, total, theme_size=self.theme_size, linkage=self.linkage
                )
            else:  # too little to fit yet: the fixed defaults, refitted next time
                record = ThemeCalibration(
                    assignment_threshold=0.7, merge_threshold=0.85, facts=total,
                    fitted_at=0, sample=len(sample), dimensions=dim, linkage=self.linkage,
                )
        else:
            record = record.model_copy(update={"facts": record.facts + len(batch)})
        await self._save(store, record)
        self.last = record
        return self._build(record)

    def _build(self, record: ThemeCalibration | None) -> ConsolidatingThemeClusterer:
        if record is None:
            return ConsolidatingThemeClusterer(max_themes=self.max_themes)
        return ConsolidatingThemeClusterer(
            assignment_threshold=record.assignment_threshold,
            merge_threshold=record.merge_threshold,
            max_themes=self.max_themes,
            linkage=self.linkage,
        )

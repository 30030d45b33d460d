"""Theme thresholds calibrated on the embedder's own similarity distribution."""

from __future__ import annotations

import numpy as np
import pytest

from cycgraph_memory.errors import InvalidInputError
from cycgraph_memory.hierarchy.calibration import (
    calibrate_theme_thresholds,
    calibrated_clusterer,
)


def test_thresholds_are_quantiles_of_pairwise_similarities() -> None:
    rng = np.random.default_rng(7)
    vectors = rng.normal(size=(30, 16))
    unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    sims = (unit @ unit.T)[np.triu_indices(30, k=1)]
    t = calibrate_theme_thresholds(vectors.tolist())
    assert t.pairs == 435
    assert t.assignment_threshold == pytest.approx(float(np.quantile(sims, 0.95)))
    assert t.merge_threshold == pytest.approx(float(np.quantile(sims, 0.99)))
    # a shifted embedder (every vector shares a big common component) gets higher
    # thresholds: the rule follows the embedder's scale, not an absolute cosine
    shifted = calibrate_theme_thresholds((vectors + 4.0).tolist())
    assert shifted.assignment_threshold > t.assignment_threshold + 0.3
    clusterer = calibrated_clusterer(vectors.tolist(), max_themes=5)
    assert clusterer.assignment_threshold == pytest.approx(t.assignment_threshold)
    assert clusterer.max_themes == 5


def test_pair_budget_and_bad_input() -> None:
    vectors = np.eye(20).tolist()
    assert calibrate_theme_thresholds(vectors, max_pairs=45).pairs == 45  # first 10 rows
    with pytest.raises(InvalidInputError):
        calibrate_theme_thresholds(vectors[:5])
    with pytest.raises(InvalidInputError):
        calibrate_theme_thresholds(vectors, assignment_quantile=1.5)
    with pytest.raises(InvalidInputError):
        calibrate_theme_thresholds([[1.0, 2.0]] * 9 + [[1.0]])
    with pytest.raises(InvalidInputError):
        calibrate_theme_thresholds([[float("nan"), 1.0]] * 10)


def test_tenant_fit_quantile_floors() -> None:
    from cycgraph_memory.hierarchy.calibration import fit_theme_calibration

    rng = np.random.default_rng(3)
    vectors = rng.normal(size=(60, 16))
    unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    sims = (unit @ unit.T)[np.triu_indices(60, k=1)]
    # 100 facts: 1 - 40/100 = 0.6 and 1 - 40/400 = 0.9, above both floors
    for linkage in ("centroid", "average"):
        fit = fit_theme_calibration(vectors.tolist(), 100, theme_size=40, linkage=linkage)
        assert fit.linkage == linkage
        assert fit.assignment_threshold == pytest.approx(float(np.quantile(sims, 0.6)))
        assert fit.merge_threshold == pytest.approx(float(np.quantile(sims, 0.9)))
    # 60 facts: 1 - 40/60 = 0.33, so centroid linkage holds the median
    small = fit_theme_calibration(vectors.tolist(), 60, theme_size=40)
    assert small.linkage == "centroid"
    assert small.assignment_threshold == pytest.approx(float(np.quantile(sims, 0.5)))
    # average linkage has no floor: fewer facts than a theme holds, the minimum
    tiny = fit_theme_calibration(vectors.tolist(), 30, theme_size=40, linkage="average")
    assert tiny.assignment_threshold == pytest.approx(float(sims.min()))
    # deterministic
    assert fit_theme_calibration(vectors.tolist(), 60, theme_size=40) == small


async def test_tenant_calibrator_refits_a_record_of_another_linkage() -> None:
    from cycgraph_memory.hierarchy.calibration import (
        THEME_CALIBRATION_KEY,
        TenantThemeCalibrator,
        ThemeCalibration,
    )
    from cycgraph_memory.inmemory import InMemoryMemoryStore
    from cycgraph_memory.records import Provenance, SemanticFact

    store = InMemoryMemoryStore()
    rng = np.random.default_rng(5)
    facts = [
        SemanticFact(content=f"f{i}", embedding=v.tolist(), provenance=Provenance(source="agent"))
        for i, v in enumerate(rng.normal(size=(20, 8)))
    ]
    # a record written before linkage existed (no such key): fitted for centroids
    old = ThemeCalibration(
        assignment_threshold=0.9, merge_threshold=0.95, facts=20, fitted_at=20,
        sample=20, dimensions=8,
    ).model_dump()
    del old["linkage"]
    await store.put_tenant_setting(THEME_CALIBRATION_KEY, old)
    assert ThemeCalibration.model_validate(old).linkage == "centroid"
    assert TenantThemeCalibrator().linkage == "centroid"
    calibrator = TenantThemeCalibrator(linkage="average")
    clusterer = await calibrator.clusterer_for(store, facts[:2])
    assert calibrator.last is not None and calibrator.last.linkage == "average"
    assert calibrator.last.assignment_threshold != 0.9
    assert clusterer.linkage == "average"
    stored = await store.get_tenant_setting(THEME_CALIBRATION_KEY)
    assert stored is not None and stored["linkage"] == "average"
    # same linkage, not doubled: kept, only the count grows
    again = await calibrator.clusterer_for(store, facts[2:4])
    assert again.assignment_threshold == clusterer.assignment_threshold
    with pytest.raises(InvalidInputError):
        TenantThemeCalibrator(linkage="single")  # type: ignore[arg-type]

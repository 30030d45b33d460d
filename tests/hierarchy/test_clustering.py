from __future__ import annotations

import itertools
import math
import uuid
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pytest

from cycgraph_memory.contracts import ThemeClusterer
from cycgraph_memory.errors import EmbeddingDimensionMismatchError, InvalidInputError
from cycgraph_memory.hierarchy.clustering import (
    GENERAL_THEME_LABEL,
    ConsolidatingThemeClusterer,
    SimpleThemeClusterer,
)
from cycgraph_memory.records import Provenance, SemanticFact, Theme

NOW = datetime(2026, 3, 1, tzinfo=UTC)


def ids() -> Any:
    counter = itertools.count(1)
    return lambda: uuid.UUID(int=next(counter))


def fact(content: str, emb: list[float] | None) -> SemanticFact:
    return SemanticFact(content=content, embedding=emb, provenance=Provenance(source="agent"))


def theme(
    label: str,
    emb: list[float] | None,
    fact_ids: list[uuid.UUID] | None = None,
    tid: uuid.UUID | None = None,
) -> Theme:
    kwargs: dict[str, Any] = {} if tid is None else {"id": tid}
    return Theme(
        label=label,
        description="kept",
        embedding=emb,
        fact_ids=fact_ids or [],
        provenance=Provenance(source="system"),
        **kwargs,
    )


def deg(angle: float, z: float = 0.0) -> list[float]:
    r = math.radians(angle)
    return [math.cos(r), math.sin(r), z]


def simple(threshold: float = 0.7) -> SimpleThemeClusterer:
    return SimpleThemeClusterer(threshold, id_factory=ids(), now=lambda: NOW)


def consolidating(**kwargs: Any) -> ConsolidatingThemeClusterer:
    return ConsolidatingThemeClusterer(id_factory=ids(), now=lambda: NOW, **kwargs)


def test_protocol() -> None:
    assert isinstance(simple(), ThemeClusterer)
    assert isinstance(consolidating(), ThemeClusterer)


# --------------------------------------------------------------------------- assignment


async def test_greedy_assignment_and_new_themes() -> None:
    facts = [
        fact("Alice deploys the API service", [1.0, 0.0]),
        fact("Bob likes green tea", [0.0, 1.0]),
        fact("Alice deploys the API gateway", [0.8, 0.6]),  # cos 0.8 with the first
    ]
    themes = await simple(0.7).cluster(facts)
    assert [t.id for t in themes] == [uuid.UUID(int=1), uuid.UUID(int=2)]
    assert themes[0].fact_ids == [facts[0].id, facts[2].id]
    assert themes[1].fact_ids == [facts[1].id]
    assert [f.theme_id for f in facts] == [themes[0].id, themes[1].id, themes[0].id]
    assert themes[0].embedding == pytest.approx(
        (np.array([1.0, 0.0]) + np.array([0.8, 0.6])) / np.linalg.norm([1.8, 0.6])
    )
    for t in themes:
        assert t.provenance.source == "derived"
        assert t.provenance.created_at == NOW


@pytest.mark.parametrize(
    ("threshold", "joins"), [(0.6, True), (0.6 + 1e-6, False), (0.59, True), (1.0, False)]
)
async def test_threshold_is_inclusive(threshold: float, joins: bool) -> None:
    facts = [fact("one", [1.0, 0.0]), fact("two", [0.6, 0.8])]  # cos exactly 0.6
    themes = await simple(threshold).cluster(facts)
    assert len(themes) == (1 if joins else 2)


async def test_unnormalised_embeddings_use_direction_only() -> None:
    facts = [fact("one", [10.0, 0.0]), fact("two", [0.1, 0.0]), fact("three", [0.0, 5.0])]
    themes = await simple(0.9).cluster(facts)
    assert [len(t.fact_ids) for t in themes] == [2, 1]
    assert themes[0].embedding == pytest.approx([1.0, 0.0])


async def test_ties_go_to_the_older_theme() -> None:
    facts = [fact("a", [1.0, 0.0]), fact("b", [0.0, 1.0]), fact("c", deg(45)[:2])]
    themes = await simple(0.7).cluster(facts)
    assert facts[2].theme_id == themes[0].id


async def test_general_theme_for_missing_or_zero_embeddings() -> None:
    facts = [fact("no vector", None), fact("embedded", [1.0, 0.0]), fact("zero", [0.0, 0.0])]
    themes = await simple().cluster(facts)
    general = [t for t in themes if t.label == GENERAL_THEME_LABEL]
    assert len(general) == 1
    assert general[0].fact_ids == [facts[0].id, facts[2].id]
    assert general[0].embedding is None
    assert facts[0].theme_id == facts[2].theme_id == general[0].id


async def test_existing_general_theme_is_reused() -> None:
    existing = theme(GENERAL_THEME_LABEL, None, [uuid.UUID(int=99)])
    f = fact("no vector", None)
    themes = await simple().cluster([f], [existing])
    assert [t.id for t in themes] == [existing.id]
    assert themes[0].fact_ids == [uuid.UUID(int=99), f.id]
    assert f.theme_id == existing.id


async def test_existing_theme_attracts_and_is_copied_not_mutated() -> None:
    member = uuid.UUID(int=500)
    existing = theme("Deployments", [1.0, 0.0], [member])
    before = existing.model_dump()
    f = fact("deploy again", [0.8, 0.6])
    themes = await simple(0.7).cluster([f], [existing])
    assert existing.model_dump() == before
    [out] = themes
    assert out is not existing
    assert out.id == existing.id
    assert out.label == "Deployments" and out.description == "kept"
    assert out.fact_ids == [member, f.id]
    # stored centroid weighted by its one fact + the new fact
    expected = np.array([1.8, 0.6]) / np.linalg.norm([1.8, 0.6])
    assert out.embedding == pytest.approx(expected.tolist())
    assert f.theme_id == existing.id


async def test_existing_theme_weight_follows_fact_count() -> None:
    existing = theme("Heavy", [1.0, 0.0], [uuid.UUID(int=i) for i in range(1, 4)])
    f = fact("new", [0.0, 1.0])
    [out, *_] = await simple(-1.0).cluster([f], [existing])
    assert out.embedding == pytest.approx((np.array([3.0, 1.0]) / math.sqrt(10)).tolist())


async def test_existing_theme_without_embedding_cannot_attract() -> None:
    existing = theme("Unembedded", None)
    f = fact("x", [1.0, 0.0])
    themes = await simple(-1.0).cluster([f], [existing])
    assert themes[0].id == existing.id
    assert themes[0].fact_ids == []
    assert f.theme_id == themes[1].id


async def test_untouched_existing_themes_survive_in_input_order() -> None:
    t1 = theme("one", [1.0, 0.0])
    t2 = theme("two", [0.0, 1.0])
    f = fact("x", [0.0, 1.0])
    themes = await simple().cluster([f], [t1, t2])
    assert [t.id for t in themes] == [t1.id, t2.id]
    assert themes[0] == t1 and themes[0] is not t1
    assert themes[0].embedding == t1.embedding


async def test_refact_already_member_stays_without_duplicate() -> None:
    f = fact("already there", [0.0, 1.0])
    existing = theme("Old", [1.0, 0.0], [f.id])
    themes = await simple(0.9).cluster([f, f], [existing])
    assert len(themes) == 1
    assert themes[0].fact_ids == [f.id]
    assert themes[0].embedding == [1.0, 0.0]  # not counted twice, unchanged
    assert f.theme_id == existing.id


async def test_fact_theme_id_pointing_at_existing_theme_is_honoured() -> None:
    existing = theme("Far away", [1.0, 0.0])
    f = fact("orthogonal", [0.0, 1.0])
    f.theme_id = existing.id
    themes = await simple(0.9).cluster([f], [existing])
    assert len(themes) == 1 and themes[0].fact_ids == [f.id]


async def test_invalidated_existing_theme_passes_through() -> None:
    dead = theme("Dead", [1.0, 0.0])
    dead.invalidated_at = NOW
    f = fact("x", [1.0, 0.0])
    themes = await consolidating(merge_threshold=0.0).cluster([f], [dead])
    assert themes[0] == dead and themes[0].fact_ids == []
    assert f.theme_id == themes[1].id


async def test_labels_and_description_for_new_themes() -> None:
    long = (
        "PostgreSQL replication lag exceeded the alert threshold during the nightly "
        "batch import window"
    )
    facts = [
        fact("Replication lag alerts on PostgreSQL", [1.0, 0.1]),
        fact(long, [1.0, 0.0]),
        fact("PostgreSQL replication lag was high", [1.0, -0.1]),
    ]
    [t] = await simple(0.5).cluster(facts)
    assert t.label == "PostgreSQL replication lag exceeded the alert threshold..."
    assert len(t.label) <= 63
    assert t.description == "3 facts; key terms: lag, postgresql, replication"


async def test_dimension_mismatch_raises() -> None:
    with pytest.raises(EmbeddingDimensionMismatchError):
        await simple().cluster([fact("a", [1.0, 0.0]), fact("b", [1.0, 0.0, 0.0])])
    with pytest.raises(EmbeddingDimensionMismatchError):
        await simple().cluster([fact("a", [1.0, 0.0])], [theme("t", [1.0, 0.0, 0.0])])


async def test_duplicate_existing_ids_rejected() -> None:
    t = theme("t", [1.0, 0.0])
    with pytest.raises(InvalidInputError):
        await simple().cluster([], [t, t])


async def test_empty_input() -> None:
    assert await simple().cluster([]) == []
    assert await consolidating().cluster([], None) == []


# --------------------------------------------------------------------------- merging


def cascade_facts() -> list[SemanticFact]:
    # A~B = cos 30 = 0.866; centroid(A, B) lies at 15 degrees; C is tilted out of the plane
    # so that C is 0.87 from centroid(A, B) but only 0.84 from A and from B.
    cphi = 0.87
    sphi = math.sqrt(1 - cphi**2)
    m = deg(15)
    c = [m[0] * cphi, m[1] * cphi, sphi]
    return [fact("alpha", deg(0)), fact("beta", deg(30)), fact("gamma", c)]


async def test_merge_cascade() -> None:
    facts = cascade_facts()
    cl = consolidating(assignment_threshold=0.9, merge_threshold=0.85)
    result = await cl.cluster_detailed(facts)
    [t] = result.themes
    assert t.id == uuid.UUID(int=1)  # the oldest new theme survives
    assert t.fact_ids == [facts[0].id, facts[1].id, facts[2].id]
    assert result.merged_into == {uuid.UUID(int=2): t.id, uuid.UUID(int=3): t.id}
    assert cl.last_merges == result.merged_into
    assert all(f.theme_id == t.id for f in facts)
    expected = np.sum([np.asarray(f.embedding) for f in facts], axis=0)
    assert t.embedding == pytest.approx((expected / np.linalg.norm(expected)).tolist())
    assert t.description.startswith("3 facts")


async def test_no_merge_below_threshold() -> None:
    facts = cascade_facts()
    themes = await consolidating(assignment_threshold=0.9, merge_threshold=0.87).cluster(facts)
    assert len(themes) == 3


async def test_simple_clusterer_never_merges() -> None:
    result = await simple(0.9).cluster_detailed(cascade_facts())
    assert len(result.themes) == 3 and result.merged_into == {}


async def test_existing_theme_survives_merge_with_new_theme() -> None:
    existing = theme("Existing", deg(10)[:2], [uuid.UUID(int=77)])
    f = fact("new", deg(40)[:2])  # 0.866 from existing: below assignment, above merge
    cl = consolidating(assignment_threshold=0.9, merge_threshold=0.85)
    themes = await cl.cluster([f], [existing])
    assert [t.id for t in themes] == [existing.id]
    assert themes[0].label == "Existing"
    assert themes[0].fact_ids == [uuid.UUID(int=77), f.id]
    assert f.theme_id == existing.id
    assert cl.last_merges == {uuid.UUID(int=1): existing.id}


async def test_merged_away_existing_theme_is_absent_and_mapped() -> None:
    small = theme("Small", deg(0)[:2], [uuid.UUID(int=1)], tid=uuid.UUID(int=1000))
    big_ids = [uuid.UUID(int=i) for i in (2, 3, 4)]
    big = theme("Big", deg(20)[:2], big_ids, tid=uuid.UUID(int=2000))
    f = fact("member of small", deg(0)[:2])
    f.theme_id = small.id
    cl = consolidating(assignment_threshold=0.99, merge_threshold=0.9)
    themes = await cl.cluster([f], [small, big])
    assert [t.id for t in themes] == [big.id]  # more facts wins (3 vs 1 + f), not the id
    assert themes[0].fact_ids == [*big_ids, uuid.UUID(int=1), f.id]
    assert themes[0].label == "Big"
    assert cl.last_merges == {small.id: big.id}
    assert f.theme_id == big.id
    assert small.fact_ids == [uuid.UUID(int=1)]  # caller's object untouched


async def test_existing_tie_broken_by_id() -> None:
    a = theme("A", deg(0)[:2], [uuid.UUID(int=1)], tid=uuid.UUID(int=9))
    b = theme("B", deg(10)[:2], [uuid.UUID(int=2)], tid=uuid.UUID(int=5))
    themes = await consolidating(merge_threshold=0.9).cluster([], [a, b])
    assert [t.id for t in themes] == [b.id]


async def test_max_themes_soft_cap() -> None:
    facts = [fact(f"f{i}", v) for i, v in enumerate(np.eye(4).tolist())]
    facts.append(fact("no vector", None))
    cl = consolidating(assignment_threshold=0.9, merge_threshold=0.95, max_themes=3)
    themes = await cl.cluster(facts)
    assert len(themes) == 3
    assert sum(t.label == GENERAL_THEME_LABEL for t in themes) == 1
    covered = [fid for t in themes for fid in t.fact_ids]
    assert sorted(covered) == sorted(f.id for f in facts)
    assert {f.theme_id for f in facts} == {t.id for t in themes}

    # soft: General never merges with an embedded theme, so a cap of 1 leaves 2
    facts2 = [fact(f"g{i}", v) for i, v in enumerate(np.eye(3).tolist())] + [fact("nv", None)]
    themes2 = await consolidating(assignment_threshold=0.9, max_themes=1).cluster(facts2)
    assert len(themes2) == 2
    assert {t.label == GENERAL_THEME_LABEL for t in themes2} == {True, False}


async def test_cap_merges_most_similar_pair_first() -> None:
    facts = [fact("a", deg(0)[:2]), fact("b", deg(60)[:2]), fact("c", deg(170)[:2])]
    themes = await consolidating(
        assignment_threshold=0.99, merge_threshold=0.99, max_themes=2
    ).cluster(facts)
    assert [sorted(t.fact_ids) for t in themes] == [
        sorted([facts[0].id, facts[1].id]),
        [facts[2].id],
    ]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"assignment_threshold": 1.5},
        {"merge_threshold": -2},
        {"max_themes": 0},
        {"max_themes": True},
        {"assignment_threshold": "0.7"},
    ],
)
def test_invalid_options(kwargs: dict[str, Any]) -> None:
    with pytest.raises(InvalidInputError):
        ConsolidatingThemeClusterer(**kwargs)
    if "assignment_threshold" in kwargs:
        with pytest.raises(InvalidInputError):
            SimpleThemeClusterer(kwargs["assignment_threshold"])


def test_option_properties() -> None:
    c = ConsolidatingThemeClusterer(0.6, 0.8, 10)
    assert (c.assignment_threshold, c.merge_threshold, c.max_themes) == (0.6, 0.8, 10)
    assert SimpleThemeClusterer().similarity_threshold == 0.7


async def test_many_facts_vectorised_smoke() -> None:
    rng = np.random.default_rng(0)
    centers = rng.normal(size=(5, 32))
    vecs = np.repeat(centers, 40, axis=0) + rng.normal(scale=0.05, size=(200, 32))
    facts = [fact(f"fact {i}", v.tolist()) for i, v in enumerate(vecs)]
    themes = await consolidating(assignment_threshold=0.8, merge_threshold=0.9).cluster(facts)
    assert len(themes) == 5
    assert sorted(len(t.fact_ids) for t in themes) == [40] * 5


# ---------------------------------------------------------------- average linkage


async def test_average_linkage_does_not_let_a_big_theme_absorb() -> None:
    # Members at +-60 degrees: their centroid points at 0 degrees, but a fact at
    # 0 degrees is only cos(60) = 0.5 similar to each member.
    members = [fact("a", deg(60)), fact("b", deg(-60))]
    probe = fact("c", deg(0))
    central = await consolidating(assignment_threshold=0.45, merge_threshold=0.99).cluster(
        [*members, fact("d", deg(0))]
    )
    assert len(central) == 2  # the first two are only cos(120) = -0.5 apart
    centroid = await consolidating(assignment_threshold=0.7, merge_threshold=0.99).cluster(
        [fact("x", deg(0)), *members, probe]
    )
    # centroid linkage: the fact at 0 degrees joins whatever is near the centroid
    assert any(len(t.fact_ids) >= 2 for t in centroid)
    big = theme("big", deg(0), [uuid.uuid4() for _ in range(50)])
    fresh = fact("e", deg(50))  # cos(50) = 0.64 to the stored centroid
    centroid_run = await consolidating(assignment_threshold=0.6, merge_threshold=0.99).cluster(
        [fresh], [big]
    )
    assert fresh.theme_id == big.id and len(centroid_run) == 1
    fresh2 = fact("f", deg(50))
    average_run = await consolidating(
        assignment_threshold=0.6, merge_threshold=0.99, linkage="average"
    ).cluster([fresh2], [big])
    # mean similarity to 50 members at cohesion 0.6: 0.64 * sqrt(50 + 50*49*0.6) / 50
    assert fresh2.theme_id != big.id and len(average_run) == 2


async def test_average_linkage_compares_means_over_members() -> None:
    # a, b identical; c at 70 degrees: mean similarity of c to {a, b} is cos(70) = 0.34
    c = consolidating(assignment_threshold=0.3, merge_threshold=0.99, linkage="average")
    out = await c.cluster([fact("a", deg(0)), fact("b", deg(0)), fact("c", deg(70))])
    assert [len(t.fact_ids) for t in out] == [3]
    c2 = consolidating(assignment_threshold=0.4, merge_threshold=0.99, linkage="average")
    out2 = await c2.cluster([fact("a", deg(0)), fact("b", deg(0)), fact("c", deg(70))])
    assert sorted(len(t.fact_ids) for t in out2) == [1, 2]
    assert c2.linkage == "average" and consolidating().linkage == "centroid"


async def test_average_linkage_merge_uses_mean_cross_similarity() -> None:
    # two themes of two facts: {0, 10} and {40, 50}; mean cross similarity is the mean
    # of cos(40), cos(50), cos(30), cos(40) = 0.760; centroids are cos(40) = 0.766 apart
    facts = [fact("a", deg(0)), fact("b", deg(10)), fact("c", deg(40)), fact("d", deg(50))]
    mean_cross = float(np.mean([math.cos(math.radians(x)) for x in (40, 50, 30, 40)]))
    between = (mean_cross + math.cos(math.radians(40))) / 2
    for linkage, merged in (("centroid", True), ("average", False)):
        c = consolidating(
            assignment_threshold=0.97, merge_threshold=between,
            linkage=linkage,
        )
        out = await c.cluster([fact(f.content, f.embedding) for f in facts])
        assert (len(out) == 1) is merged, linkage


def test_unknown_linkage_rejected() -> None:
    with pytest.raises(InvalidInputError):
        consolidating(linkage="single")


# --------------------------------------------------------------------------- labels


async def test_labels_and_key_terms_leave_out_the_grounding_prefix() -> None:
    """A conversation's facts start with "<speaker> on <date>: ": not a topic."""
    facts = [
        fact("Maya Lopez on 2026-11-30: The billing service depends on PostgreSQL", [1.0, 0.0]),
        fact("Maya Lopez on 2026-11-30: The billing service caches in Redis", [0.9, 0.1]),
    ]
    [only] = await consolidating().cluster(facts)
    assert only.label == "The billing service depends on PostgreSQL"
    assert only.description == "2 facts; key terms: billing, service, caches"
    # The facts themselves keep their grounding (it is what retrieval searches).
    assert facts[0].content.startswith("Maya Lopez on 2026-11-30: ")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("user on 2026-11-30: The deploy runs at noon", "The deploy runs at noon"),
        ("Dr. Ana: on call on 2025-01-02: paged twice", "paged twice"),
        ("no prefix here", "no prefix here"),
        ("Ana on 2025-01-02: ", "Ana on 2025-01-02: "),  # nothing after it: kept whole
        ("Ana on 2025-1-2: short date", "Ana on 2025-1-2: short date"),
        ("x" * 201 + " on 2025-01-02: body", "x" * 201 + " on 2025-01-02: body"),
    ],
)
def test_without_grounding(text: str, expected: str) -> None:
    from cycgraph_memory.hierarchy.grounding import without_grounding

    assert without_grounding(text) == expected


def test_purge_relabels_a_theme_as_the_clusterer_labels_it() -> None:
    """Purge's re-centred theme uses the clusterer's label and description rules."""
    from cycgraph_memory.hierarchy.clustering import theme_description, theme_label
    from cycgraph_memory.hierarchy.theme_upkeep import recentre_theme

    members = [
        fact("Maya Lopez on 2026-11-30: The billing service depends on PostgreSQL", [1.0, 0.0]),
        fact("Maya Lopez on 2026-11-30: The billing service caches in Redis", [0.9, 0.1]),
    ]
    kept = recentre_theme(theme("old label", [1.0, 0.0]), members)
    assert kept.label == theme_label(members[0].content)
    assert kept.label == "The billing service depends on PostgreSQL"
    assert kept.description == theme_description([f.content for f in members], 2)
    assert kept.description == "2 facts; key terms: billing, service, caches"

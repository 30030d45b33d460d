"""Validation of every record, filter, option and report model."""

from __future__ import annotations

import math
import uuid
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from cycgraph_memory import (
    MAX_TAG_LENGTH,
    MAX_TAGS,
    QUARANTINE_TAG,
    Conflict,
    ConflictResolutionDetail,
    ConflictResolutionReport,
    ConsolidationMutation,
    ConsolidationReport,
    Entity,
    EntityFilter,
    EntityResolutionReport,
    Episode,
    EvictedLesson,
    ExtractedEntity,
    ExtractionResult,
    FactFilter,
    FactStats,
    HeldLesson,
    ListOptions,
    MemoryQuery,
    MemoryResult,
    Message,
    OutcomeBaseline,
    PaginationOptions,
    PromotedLesson,
    Provenance,
    Relationship,
    RelationshipFilter,
    RetentionEvidence,
    RetentionReport,
    RunOutcome,
    ScoredResult,
    SearchOptions,
    SemanticFact,
    Theme,
    new_id,
    utc_now,
)

PROV = Provenance(source="agent")
T0 = datetime(2025, 1, 1, tzinfo=UTC)


def fact(**kw: Any) -> SemanticFact:
    return SemanticFact(content="c", provenance=PROV, **kw)


# ------------------------------------------------------------------ basics


def test_constants_and_factories() -> None:
    assert QUARANTINE_TAG == "quarantined"
    assert MAX_TAGS == 64 and MAX_TAG_LENGTH == 128
    assert new_id() != new_id() and new_id().version == 4
    now = utc_now()
    assert now.tzinfo is not None and now.utcoffset() == timedelta(0)


@pytest.mark.parametrize("source", ["agent", "tool", "human", "system", "derived"])
def test_provenance_sources(source: str) -> None:
    assert Provenance(source=source).source == source  # type: ignore[arg-type]


def test_provenance_rejects_unknown_source_and_confidence_range() -> None:
    with pytest.raises(ValidationError):
        Provenance(source="robot")  # type: ignore[arg-type]
    with pytest.raises(ValidationError):
        Provenance(source="agent", confidence=1.01)
    with pytest.raises(ValidationError):
        Provenance(source="agent", confidence=-0.01)
    assert Provenance(source="agent", confidence=0.0).confidence == 0.0
    assert Provenance(source="agent", confidence=1.0).confidence == 1.0
    assert Provenance(source="agent").confidence is None


def test_extra_fields_rejected_everywhere() -> None:
    for model, kwargs in [
        (Provenance, {"source": "agent"}),
        (Entity, {"name": "n", "entity_type": "t", "provenance": PROV}),
        (SemanticFact, {"content": "c", "provenance": PROV}),
        (Theme, {"label": "l", "provenance": PROV}),
        (Message, {"role": "user", "content": "x"}),
        (FactFilter, {}),
        (SearchOptions, {}),
        (MemoryQuery, {}),
    ]:
        with pytest.raises(ValidationError):
            model(**kwargs, unexpected=1)


def test_validate_assignment() -> None:
    f = fact()
    with pytest.raises(ValidationError):
        f.access_count = -1
    with pytest.raises(ValidationError):
        f.embedding = [math.nan]
    with pytest.raises(ValidationError):
        f.tags = [""]
    ep = Episode(topic="t", started_at=T0, ended_at=T0, provenance=PROV)
    fid = uuid.uuid4()
    ep.fact_ids = [str(fid)]  # type: ignore[list-item]
    assert ep.fact_ids == [fid]
    with pytest.raises(ValidationError):
        ep.fact_ids = ["not-a-uuid"]  # type: ignore[list-item]


# ------------------------------------------------------------------ ids and time


def test_ids_parse_strings_and_reject_garbage() -> None:
    i = uuid.uuid4()
    assert fact(id=str(i)).id == i
    with pytest.raises(ValidationError):
        fact(id="nope")
    with pytest.raises(ValidationError):
        fact(id=12)


def test_naive_datetimes_are_utc_and_aware_converted() -> None:
    naive = datetime(2025, 1, 1, 12, 0)
    f = fact(valid_from=naive)
    assert f.valid_from == datetime(2025, 1, 1, 12, 0, tzinfo=UTC)
    assert f.valid_from.tzinfo is UTC
    plus2 = timezone(timedelta(hours=2))
    g = fact(valid_from=datetime(2025, 1, 1, 14, 0, tzinfo=plus2))
    assert g.valid_from == datetime(2025, 1, 1, 12, 0, tzinfo=UTC)
    assert g.valid_from.tzinfo is UTC
    assert Provenance(source="agent", created_at=naive).created_at.tzinfo is UTC
    m = Message(role="user", content="x", timestamp=naive)
    assert m.timestamp.tzinfo is UTC


def test_validity_windows_ordered() -> None:
    fact(valid_from=T0, valid_until=T0)  # empty window allowed
    with pytest.raises(ValidationError):
        fact(valid_from=T0, valid_until=T0 - timedelta(seconds=1))
    a, b = uuid.uuid4(), uuid.uuid4()
    with pytest.raises(ValidationError):
        Relationship(
            source_id=a,
            target_id=b,
            relation_type="r",
            provenance=PROV,
            valid_from=T0,
            valid_until=T0 - timedelta(days=1),
        )
    with pytest.raises(ValidationError):
        Episode(topic="t", started_at=T0, ended_at=T0 - timedelta(1), provenance=PROV)


# ------------------------------------------------------------------ records


def test_entity_defaults_and_required() -> None:
    e = Entity(name="n", entity_type="t", provenance=PROV)
    assert e.attributes == {} and e.embedding is None and e.invalidated_at is None
    assert e.superseded_by is None
    for bad in ({"name": ""}, {"entity_type": ""}, {"name": "a\x00b"}):
        with pytest.raises(ValidationError):
            Entity(**{"name": "n", "entity_type": "t", "provenance": PROV, **bad})
    with pytest.raises(ValidationError):
        Entity(name="n", entity_type="t")  # type: ignore[call-arg]


def test_relationship_weight() -> None:
    a, b = uuid.uuid4(), uuid.uuid4()
    r = Relationship(source_id=a, target_id=b, relation_type="r", provenance=PROV)
    assert r.weight == 1.0 and r.invalidated_by is None and r.valid_until is None
    for w in (0.0, 0.5, 1.0):
        assert (
            Relationship(
                source_id=a, target_id=b, relation_type="r", provenance=PROV, weight=w
            ).weight
            == w
        )
    for w in (-0.1, 1.1):
        with pytest.raises(ValidationError):
            Relationship(source_id=a, target_id=b, relation_type="r", provenance=PROV, weight=w)
    with pytest.raises(ValidationError):
        Relationship(source_id=a, target_id=b, relation_type="", provenance=PROV)


def test_message_roles() -> None:
    for role in ("user", "assistant", "system", "tool"):
        assert Message(role=role, content="x").role == role  # type: ignore[arg-type]
    with pytest.raises(ValidationError):
        Message(role="bot", content="x")  # type: ignore[arg-type]
    with pytest.raises(ValidationError):
        Message(role="user", content="nul\x00")


def test_fact_defaults_and_ranges() -> None:
    f = fact()
    assert f.tags == [] and f.access_count == 0 and f.entity_ids == []
    assert f.source_episode_ids == [] and f.theme_id is None and f.invalidated_by is None
    with pytest.raises(ValidationError):
        fact(access_count=-1)
    with pytest.raises(ValidationError):
        SemanticFact(content="", provenance=PROV)


def test_theme_defaults() -> None:
    t = Theme(label="l", provenance=PROV)
    assert t.description == "" and t.fact_ids == [] and t.invalidated_at is None


@pytest.mark.parametrize(
    "bad",
    [[], [math.nan], [1.0, math.inf], [-math.inf], [0.0, float("nan")]],
)
def test_embeddings_must_be_finite_and_non_empty(bad: list[float]) -> None:
    with pytest.raises(ValidationError):
        fact(embedding=bad)
    with pytest.raises(ValidationError):
        Entity(name="n", entity_type="t", provenance=PROV, embedding=bad)
    with pytest.raises(ValidationError):
        Theme(label="l", provenance=PROV, embedding=bad)
    with pytest.raises(ValidationError):
        Episode(topic="t", started_at=T0, ended_at=T0, provenance=PROV, embedding=bad)
    with pytest.raises(ValidationError):
        MemoryQuery(embedding=bad)


@given(st.lists(st.floats(min_value=-(2.0**60), max_value=2.0**60, width=32), min_size=1,
                max_size=32))
def test_any_finite_embedding_within_the_norm_accepted(values: list[float]) -> None:
    assert fact(embedding=values).embedding == values


@given(st.floats(min_value=1e19, exclude_min=True, allow_infinity=False), st.booleans())
def test_embedding_with_a_norm_past_the_limit_refused(value: float, negative: bool) -> None:
    # pgvector sums squares in single precision: past ~1.8e19 every distance is NaN.
    with pytest.raises(ValidationError):
        fact(embedding=[0.0, -value if negative else value])


def test_the_norm_limit_is_on_the_vector_not_each_value() -> None:
    assert fact(embedding=[6e18, 8e18]).embedding == [6e18, 8e18]  # norm exactly 1e19
    with pytest.raises(ValidationError, match="MAX_EMBEDDING_NORM"):
        fact(embedding=[8e18, 8e18])  # each value fine, norm 1.13e19


def test_tags_rules() -> None:
    assert fact(tags=["a", "b", "a"]).tags == ["a", "b"]
    assert fact(tags=["x" * MAX_TAG_LENGTH]).tags == ["x" * MAX_TAG_LENGTH]
    with pytest.raises(ValidationError):
        fact(tags=["x" * (MAX_TAG_LENGTH + 1)])
    with pytest.raises(ValidationError):
        fact(tags=[""])
    with pytest.raises(ValidationError):
        fact(tags=["a\x00"])
    assert len(fact(tags=[f"t{i}" for i in range(MAX_TAGS)]).tags) == MAX_TAGS
    with pytest.raises(ValidationError):
        fact(tags=[f"t{i}" for i in range(MAX_TAGS + 1)])
    # duplicates do not count toward the limit
    assert len(fact(tags=["same"] * (MAX_TAGS + 5)).tags) == 1


@given(st.lists(st.text(min_size=1, max_size=8).filter(lambda s: "\x00" not in s), max_size=20))
def test_tags_dedupe_keeps_first_occurrence(tags: list[str]) -> None:
    assert fact(tags=tags).tags == list(dict.fromkeys(tags))


# ------------------------------------------------------------------ options


def test_pagination_options() -> None:
    p = PaginationOptions()
    assert p.limit is None and p.offset == 0
    assert PaginationOptions(limit=1).limit == 1
    assert PaginationOptions(limit=100_000).limit == 100_000
    for bad in ({"limit": 0}, {"limit": 100_001}, {"offset": -1}):
        with pytest.raises(ValidationError):
            PaginationOptions(**bad)
    assert ListOptions().include_invalidated is False


def test_filters_defaults() -> None:
    ef = EntityFilter()
    assert ef.entity_type is None and ef.include_invalidated is False
    ff = FactFilter()
    assert (ff.tags, ff.exclude_tags, ff.theme_id, ff.entity_id) == (None, None, None, None)
    assert FactFilter(entity_id=str(uuid.UUID(int=1))).entity_id == uuid.UUID(int=1)
    rf = RelationshipFilter()
    assert rf.direction == "both" and rf.relation_type is None
    for d in ("outgoing", "incoming", "both"):
        assert RelationshipFilter(direction=d).direction == d  # type: ignore[arg-type]
    with pytest.raises(ValidationError):
        RelationshipFilter(direction="sideways")  # type: ignore[arg-type]
    with pytest.raises(ValidationError):
        EntityFilter(entity_type="")


def test_search_options_ranges() -> None:
    s = SearchOptions()
    assert s.limit == 10 and s.min_similarity is None and s.ef_search is None
    assert s.include_invalidated is False and s.tags is None and s.exclude_tags is None
    for ok in (
        {"limit": 1},
        {"limit": 1000},
        {"min_similarity": 0.0},
        {"min_similarity": 1.0},
        {"ef_search": 1},
        {"ef_search": 1000},
    ):
        SearchOptions(**ok)
    for bad in (
        {"limit": 0},
        {"limit": 1001},
        {"min_similarity": -0.1},
        {"min_similarity": 1.1},
        {"ef_search": 0},
        {"ef_search": 1001},
    ):
        with pytest.raises(ValidationError):
            SearchOptions(**bad)


def test_memory_query_ranges_and_defaults() -> None:
    q = MemoryQuery()
    assert (q.limit, q.max_hops, q.min_similarity) == (20, 2, 0.5)
    assert q.tags == [] and q.include_invalidated is False
    for ok in (
        {"limit": 1},
        {"limit": 100},
        {"max_hops": 0},
        {"max_hops": 5},
        {"min_similarity": 0.0},
        {"min_similarity": 1.0},
    ):
        MemoryQuery(**ok)
    for bad in (
        {"limit": 0},
        {"limit": 101},
        {"max_hops": -1},
        {"max_hops": 6},
        {"min_similarity": -0.01},
        {"min_similarity": 1.01},
    ):
        with pytest.raises(ValidationError):
            MemoryQuery(**bad)
    assert MemoryQuery(valid_at=datetime(2025, 1, 1)).valid_at == T0


def test_scored_result_is_generic() -> None:
    f = fact()
    r = ScoredResult[SemanticFact](item=f, score=0.5)
    assert r.item is f and r.score == 0.5
    with pytest.raises(ValidationError):
        ScoredResult[SemanticFact](item=f, score=0.5, extra=1)  # type: ignore[call-arg]


# ------------------------------------------------------------------ reports


def test_report_models() -> None:
    assert MemoryResult().facts == []
    assert ExtractionResult().entities == []
    assert ExtractedEntity(name="Acme", type="organization").type == "organization"
    with pytest.raises(ValidationError):
        ExtractedEntity(name="", type="x")
    assert RunOutcome(run_id="r", score=1.0).fact_ids == []
    for bad in (-0.1, 1.1):
        with pytest.raises(ValidationError):
            RunOutcome(run_id="r", score=bad)
    with pytest.raises(ValidationError):
        RunOutcome(run_id="", score=0.5)
    assert FactStats(fact_id=uuid.uuid4(), trials=0, mean_score=0.3).variance is None
    with pytest.raises(ValidationError):
        FactStats(fact_id=uuid.uuid4(), trials=-1, mean_score=0.3)
    assert OutcomeBaseline(runs=0).mean_score == 0.0
    ev = RetentionEvidence(
        lift=0.1, se=0.05, df=10, p_promote=0.9, p_evict=0.1, trials=5, baseline_runs=20
    )
    rep = RetentionReport(
        promoted=[PromotedLesson(fact_id=uuid.uuid4(), evidence=ev)],
        evicted=[EvictedLesson(fact_id=uuid.uuid4(), reason="eval-gate:harmful")],
        held=[HeldLesson(fact_id=uuid.uuid4(), trials=2)],
    )
    assert len(rep.promoted) == len(rep.evicted) == len(rep.held) == 1
    with pytest.raises(ValidationError):
        EvictedLesson(fact_id=uuid.uuid4(), reason="bored")  # type: ignore[arg-type]
    assert ConsolidationReport().mutation_log is None
    assert ConsolidationMutation(type="dedupe", id=uuid.uuid4()).type == "dedupe"
    assert EntityResolutionReport().groups_merged == 0
    c = Conflict(fact_a=fact(), fact_b=fact(), type="negation", confidence=0.5)
    with pytest.raises(ValidationError):
        Conflict(fact_a=fact(), fact_b=fact(), type="negation", confidence=2.0)
    with pytest.raises(ValidationError):
        Conflict(fact_a=fact(), fact_b=fact(), type="other", confidence=0.5)  # type: ignore[arg-type]
    d = ConflictResolutionDetail(conflict=c, action="keep_a")
    assert d.reason == ""
    assert ConflictResolutionReport(details=[d]).resolved == 0


@pytest.mark.parametrize(
    ("vector", "ok"),
    [
        ([7e18, -7e18], True),  # a norm just under MAX_EMBEDDING_NORM
        ([3.4028234663852886e38, -3e38], False),  # float4 values, but the norm overflows
        ([1e308, 1e308], False),  # finite, but beyond single precision (pgvector's float4)
        ([1e308, 1e308, float("nan")], False),
        ([float("inf"), float("-inf")], False),
        ([0.0, -0.0], True),
    ],
)
def test_embedding_finiteness_edge_cases(vector: list[float], ok: bool) -> None:
    from cycgraph_memory import Provenance, SemanticFact

    prov = Provenance(source="agent")
    if ok:
        assert SemanticFact(content="x", provenance=prov, embedding=vector).embedding == vector
    else:
        with pytest.raises(ValidationError):
            SemanticFact(content="x", provenance=prov, embedding=vector)

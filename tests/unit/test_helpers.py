"""Temporal helpers, cosine_similarity, normalize_entity_name, batch_get_fallback, errors."""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cycgraph_memory import (
    ConcurrencyError,
    CycgraphMemoryError,
    DuplicateRecordError,
    EmbeddingDimensionMismatchError,
    IntegrityViolationError,
    InvalidInputError,
    InvalidTenantError,
    MissingExtraError,
    ProviderError,
    ProviderTimeoutError,
    RecordNotFoundError,
    SchemaNotReadyError,
    StorageError,
    TransactionError,
    batch_get_fallback,
    cosine_similarity,
    filter_valid,
    is_changed_since,
    is_valid_at,
    normalize_entity_name,
)

T0 = datetime(2025, 1, 1, tzinfo=UTC)


@dataclass
class Rec:
    valid_from: datetime
    valid_until: datetime | None = None
    invalidated_by: str | None = None


# ------------------------------------------------------------------ temporal


def test_is_valid_at_half_open_window() -> None:
    r = Rec(T0, T0 + timedelta(hours=1))
    assert not is_valid_at(r, T0 - timedelta(microseconds=1))
    assert is_valid_at(r, T0)  # start inclusive
    assert is_valid_at(r, T0 + timedelta(minutes=59, seconds=59, microseconds=999_999))
    assert not is_valid_at(r, T0 + timedelta(hours=1))  # end exclusive
    open_ended = Rec(T0)
    assert is_valid_at(open_ended, T0 + timedelta(days=10_000))
    assert not is_valid_at(open_ended, T0 - timedelta(seconds=1))
    empty = Rec(T0, T0)
    assert not is_valid_at(empty, T0)


def test_naive_datetimes_are_utc() -> None:
    r = Rec(T0, T0 + timedelta(hours=1))
    assert is_valid_at(r, datetime(2025, 1, 1, 0, 30))
    assert not is_valid_at(r, datetime(2025, 1, 1, 1, 0))
    assert is_changed_since(r, datetime(2024, 12, 31, 23, 59))


def test_is_changed_since_strict() -> None:
    r = Rec(T0, T0 + timedelta(hours=1))
    assert is_changed_since(r, T0 - timedelta(microseconds=1))  # started after
    assert is_changed_since(r, T0)  # ended after
    assert not is_changed_since(r, T0 + timedelta(hours=1))  # ended exactly then
    assert not is_changed_since(Rec(T0), T0)
    assert is_changed_since(Rec(T0), T0 - timedelta(seconds=1))


def test_filter_valid_combinations_keep_order() -> None:
    a = Rec(T0, T0 + timedelta(hours=2))
    b = Rec(T0 + timedelta(hours=1))
    c = Rec(T0, invalidated_by="superseded")
    d = Rec(T0 + timedelta(hours=3))
    recs = [a, b, c, d]
    assert filter_valid(recs) == [a, b, d]
    assert filter_valid(recs, include_invalidated=True) == recs
    assert filter_valid(recs, valid_at=T0 + timedelta(hours=1)) == [a, b]
    assert filter_valid(recs, valid_at=T0 + timedelta(hours=2)) == [b]
    assert filter_valid(recs, changed_since=T0 + timedelta(hours=1)) == [a, d]
    assert filter_valid(
        recs, valid_at=T0, changed_since=T0 - timedelta(hours=1), include_invalidated=True
    ) == [a, c]
    assert filter_valid([]) == []


offsets = st.integers(min_value=-1000, max_value=1000)


@given(start=offsets, length=st.one_of(st.none(), st.integers(0, 500)), probe=offsets)
def test_filter_valid_matches_half_open_definition(
    start: int, length: int | None, probe: int
) -> None:
    vf = T0 + timedelta(seconds=start)
    vu = None if length is None else vf + timedelta(seconds=length)
    at = T0 + timedelta(seconds=probe)
    inside = probe >= start and (length is None or probe < start + length)
    r = Rec(vf, vu)
    assert is_valid_at(r, at) is inside
    assert filter_valid([r], valid_at=at) == ([r] if inside else [])
    assert filter_valid([Rec(vf, vu, "x")], valid_at=at) == []


# ------------------------------------------------------------------ cosine


def test_cosine_examples() -> None:
    assert cosine_similarity([1, 0], [1, 0]) == pytest.approx(1.0)
    assert cosine_similarity([1, 0], [0, 1]) == pytest.approx(0.0)
    assert cosine_similarity([1, 0], [-1, 0]) == pytest.approx(-1.0)
    assert cosine_similarity([1, 1], [1, 0]) == pytest.approx(1 / math.sqrt(2))
    assert cosine_similarity([3, 4], [6, 8]) == pytest.approx(1.0)
    assert cosine_similarity([0, 0], [1, 2]) == 0.0
    assert cosine_similarity([1, 2], [0, 0]) == 0.0
    assert cosine_similarity([0.0], [0.0]) == 0.0
    with pytest.raises(ValueError):
        cosine_similarity([1, 2], [1, 2, 3])


vec_pairs = st.integers(1, 16).flatmap(
    lambda n: st.tuples(
        st.lists(st.floats(-1e6, 1e6, allow_nan=False), min_size=n, max_size=n),
        st.lists(st.floats(-1e6, 1e6, allow_nan=False), min_size=n, max_size=n),
    )
)


@given(vec_pairs)
def test_cosine_symmetric_and_bounded(pair: tuple[list[float], list[float]]) -> None:
    a, b = pair
    s = cosine_similarity(a, b)
    assert s == pytest.approx(cosine_similarity(b, a), abs=1e-12)
    assert -1.0 - 1e-9 <= s <= 1.0 + 1e-9
    assert isinstance(s, float)


@given(
    st.lists(st.floats(-1e3, 1e3, allow_nan=False), min_size=1, max_size=16),
    st.floats(1e-3, 1e3),
)
def test_cosine_scale_invariant(a: list[float], k: float) -> None:
    scaled = [k * x for x in a]
    if any(abs(x) > 1e-150 for x in a):
        assert cosine_similarity(a, scaled) == pytest.approx(1.0, abs=1e-9)


# ------------------------------------------------------------------ normalize_entity_name


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("The  Acme, Corp.", "acme corp"),
        ("Acme Corp", "acme corp"),
        ("ACME CORP", "acme corp"),
        ("a Tool", "tool"),
        ("An Apple", "apple"),
        ("Theatre", "theatre"),
        ("  spaced   out  ", "spaced out"),
        ("Straße", "strasse"),
        ("ﬁle", "file"),  # NFKC ligature
        ("", ""),
    ],
)
def test_normalize_entity_name_examples(raw: str, expected: str) -> None:
    assert normalize_entity_name(raw) == expected


@given(st.text(max_size=40))
def test_normalize_entity_name_idempotent(name: str) -> None:
    once = normalize_entity_name(name)
    assert once == once.strip()
    assert "  " not in once
    assert normalize_entity_name(once) == once


@pytest.mark.parametrize(
    ("name", "expected"),
    [("the the x", "x"), ("The A-Team", "ateam"), ("A-Team", "ateam"), ("a, the thing", "thing"),
     ("A.I. Labs", "ai labs"), ("The  Acme, Corp.", "acme corp")],
)
def test_normalize_entity_name_strips_every_leading_article(name: str, expected: str) -> None:
    assert normalize_entity_name(name) == expected
    assert normalize_entity_name(expected) == expected


# ------------------------------------------------------------------ batch_get_fallback


async def test_batch_get_fallback_missing_absent_duplicates_once() -> None:
    calls: list[str] = []
    data = {"a": 1, "b": 2}

    async def get(key: str) -> int | None:
        calls.append(key)
        return data.get(key)

    got = await batch_get_fallback(["a", "x", "b", "a", "a"], get)
    assert got == {"a": 1, "b": 2}
    assert sorted(calls) == ["a", "b", "x"]
    assert await batch_get_fallback([], get) == {}


async def test_batch_get_fallback_bounded_concurrency() -> None:
    running = 0
    peak = 0

    async def get(key: int) -> int:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await asyncio.sleep(0)
        running -= 1
        return key

    got = await batch_get_fallback(range(50), get, concurrency=4)
    assert got == {i: i for i in range(50)}
    assert peak <= 4


# ------------------------------------------------------------------ errors


def test_dimension_mismatch_error_attributes() -> None:
    err = EmbeddingDimensionMismatchError(384, 768, "search_facts query")
    assert (err.expected, err.actual, err.context) == (384, 768, "search_facts query")
    assert "384" in str(err) and "768" in str(err) and "search_facts query" in str(err)
    assert isinstance(err, ValueError) and isinstance(err, CycgraphMemoryError)
    bare = EmbeddingDimensionMismatchError(3, 4)
    assert bare.context == "" and "()" not in str(bare)


def test_error_tree() -> None:
    assert issubclass(InvalidTenantError, InvalidInputError)
    assert issubclass(InvalidInputError, ValueError)
    for cls in (
        DuplicateRecordError,
        IntegrityViolationError,
        ConcurrencyError,
        SchemaNotReadyError,
        TransactionError,
    ):
        assert issubclass(cls, StorageError)
    assert issubclass(StorageError, CycgraphMemoryError)
    assert issubclass(ProviderTimeoutError, ProviderError)
    assert issubclass(MissingExtraError, ImportError)
    nf = RecordNotFoundError("fact", "abc")
    assert isinstance(nf, KeyError) and str(nf) == "fact abc not found"
    assert (nf.kind, nf.record_id) == ("fact", "abc")
    se = DuplicateRecordError("dup", sqlstate="23505")
    assert se.sqlstate == "23505" and str(se) == "dup"
    me = MissingExtraError("postgres", "sqlalchemy")
    assert me.extra == "postgres" and "cycgraph-memory[postgres]" in str(me)


def test_filter_valid_accepts_an_options_mapping() -> None:
    from datetime import UTC, datetime

    from cycgraph_memory import Provenance, SemanticFact, filter_valid

    prov = Provenance(source="agent")
    early = SemanticFact(content="early fact", provenance=prov,
                         valid_from=datetime(2024, 1, 1, tzinfo=UTC),
                         valid_until=datetime(2024, 6, 1, tzinfo=UTC))
    late = SemanticFact(content="late fact", provenance=prov,
                        valid_from=datetime(2024, 3, 1, tzinfo=UTC))
    at = datetime(2024, 7, 1, tzinfo=UTC)
    assert filter_valid([early, late], {"valid_at": at}) == [late]
    assert filter_valid([early, late], valid_at=at) == [late]
    with pytest.raises(TypeError):
        filter_valid([early], {"validAt": at})


def test_extracted_entity_supports_the_spec_object_shape() -> None:
    from cycgraph_memory import ExtractedEntity

    e = ExtractedEntity(name="Acme Corp", type="organization")
    assert e["name"] == "Acme Corp" and e["type"] == "organization"
    assert e == {"name": "Acme Corp", "type": "organization"}
    assert e != {"name": "Acme Corp", "type": "person"}
    assert e == ExtractedEntity(name="Acme Corp", type="organization")
    assert len({e, ExtractedEntity(name="Acme Corp", type="organization")}) == 1
    with pytest.raises(KeyError):
        e["kind"]

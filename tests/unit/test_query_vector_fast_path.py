"""The one-pass query-vector checks accept, refuse and convert exactly like the slow path."""

from __future__ import annotations

import asyncio
import uuid

import numpy as np
import pytest

from cycgraph_memory._validate import (
    _check_query_vector_slow,
    check_query_vector,
    query_vector_array,
    query_vectors_array,
)
from cycgraph_memory.errors import EmbeddingDimensionMismatchError, InvalidInputError
from cycgraph_memory.inmemory import InMemoryMemoryIndex
from cycgraph_memory.records import Provenance, Theme

CASES: list[object] = [
    [1.0, 2.0],
    [True, 2],
    (1, 2, 3),
    np.arange(4, dtype=np.float32),
    [np.float32(0.1), 0.2],
    [2**63, 1],
    [2**63, -1],
    [10**400, 1],
    ["1"],
    [],
    [float("nan"), 1.0],
    [float("inf")],
    [1e39],
    [-1e39],
    [3.4028234663852886e38],
    [9e18, 9e18],
    [1e19],
    [None],
    [[1.0]],
    np.zeros((2, 2)),
    "abc",
    b"ab",
    {1.0},
    np.array(["a"]),
    [1 + 2j],
    np.array([1.0], dtype=object),
]


def _outcome(fn: object, value: object) -> tuple[str, object]:
    try:
        return "ok", fn(value, "q")  # type: ignore[operator]
    except Exception as exc:
        return type(exc).__name__, str(exc)


@pytest.mark.parametrize("value", CASES, ids=range(len(CASES)))
def test_fast_check_equals_slow_check(value: object) -> None:
    assert _outcome(check_query_vector, value) == _outcome(_check_query_vector_slow, value)
    kind, result = _outcome(query_vector_array, value)
    slow_kind, slow = _outcome(_check_query_vector_slow, value)
    assert kind == slow_kind
    if kind == "ok":
        assert isinstance(result, np.ndarray) and result.dtype == np.float64
        assert result.tolist() == slow


def test_block_check_declines_what_one_vector_would_refuse() -> None:
    assert query_vectors_array([[1.0, 2.0], [3.0, 4.0]]) is not None
    assert query_vectors_array([[1.0, 2.0], [3.0]]) is None  # ragged
    assert query_vectors_array([[1.0, float("nan")]]) is None
    assert query_vectors_array([]) is None
    assert query_vectors_array([["a", "b"]]) is None


def _theme(i: int, vector: list[float]) -> Theme:
    return Theme(
        id=uuid.UUID(int=i + 1),
        label=f"t{i}",
        embedding=vector,
        provenance=Provenance(source="derived"),
    )


def test_search_themes_many_equals_one_search_per_vector() -> None:
    rng = np.random.default_rng(3)
    index = InMemoryMemoryIndex(expected_dimensions=8)
    index.upsert_many([_theme(i, rng.normal(size=8).tolist()) for i in range(40)])
    queries = [rng.normal(size=8).tolist() for _ in range(25)]

    async def run() -> tuple[object, object]:
        many = await index.search_themes_many(queries, limit=4, min_similarity=0.1)
        one = [
            [(h.item.id, h.score) for h in await index.search_themes(q, limit=4,
                                                                     min_similarity=0.1)]
            for q in queries
        ]
        return many, one

    many, one = asyncio.run(run())
    assert many == one
    with pytest.raises(EmbeddingDimensionMismatchError):
        asyncio.run(index.search_themes_many([[1.0] * 7], limit=4))
    with pytest.raises(InvalidInputError):
        asyncio.run(index.search_themes_many([[1.0] * 8, [float("nan")] * 8], limit=4))


def test_upsert_stored_many_copies_without_validating_again() -> None:
    index = InMemoryMemoryIndex(expected_dimensions=2)
    theme = _theme(0, [1.0, 0.0])
    index.upsert_stored_many([theme])
    theme.label = "changed by the caller"
    hits = asyncio.run(index.search_themes([1.0, 0.0], limit=1))
    assert hits[0].item.label == "t0"  # the index kept its own copy
    with pytest.raises(EmbeddingDimensionMismatchError):
        index.upsert_stored_many([_theme(1, [1.0, 0.0, 0.0])])

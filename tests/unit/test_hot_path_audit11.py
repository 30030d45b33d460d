"""The retrieval hot path's fast forms give exactly what the plain forms gave.

Each case sets a pure function's fast path beside the plain computation it replaced
(written out here), on inputs chosen to reach the edges: exact ties, a fact listed twice,
scores at the similarity floor, vectors that score past 1 by rounding, names that are and
are not plain words.
"""

from __future__ import annotations

import itertools
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pytest

from cycgraph_memory.normalize import normalize_entity_name
from cycgraph_memory.postgres.signals import _MISSING, _Answers
from cycgraph_memory.records import Provenance, SemanticFact
from cycgraph_memory.retrieval.fusion import rrf_fuse
from cycgraph_memory.retrieval.pipeline import (
    SIMILARITY_FLOOR_TOLERANCE,
    FactScope,
    cosine_scores,
    merge_unique,
    rank_by_similarity,
)

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _fact(n: int, embedding: list[float] | None, **more: Any) -> SemanticFact:
    return SemanticFact(
        id=uuid.UUID(int=n), content=f"fact {n}", embedding=embedding,
        provenance=Provenance(source="system", created_at=T0), valid_from=T0, **more,
    )


def test_rank_by_similarity_orders_ties_by_id_and_keeps_a_repeated_fact_twice() -> None:
    a, b, c = _fact(3, [1.0, 0.0]), _fact(1, [1.0, 0.0]), _fact(2, [0.0, 1.0])
    ranked = rank_by_similarity([a, c, b, a], [1.0, 0.0], 0.0)
    # Equal scores: id 1 before id 3; ``a`` listed twice stays twice, in input order.
    assert [(f.id.int, s) for f, s in ranked] == [(1, 1.0), (3, 1.0), (3, 1.0), (2, 0.0)]
    assert ranked[1][0] is a and ranked[2][0] is a


@pytest.mark.parametrize("min_similarity", [0.0, 0.5, 1.0, -0.5])
def test_rank_by_similarity_keeps_what_the_floor_test_kept(min_similarity: float) -> None:
    vectors = [[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [-1.0, 0.2], [0.5, 0.5], None, [0.0, 0.0]]
    facts = [_fact(i + 1, v) for i, v in enumerate(vectors)]
    query = [1.0, 0.0]
    scores = cosine_scores([f.embedding for f in facts], query)
    floor = min_similarity - SIMILARITY_FLOOR_TOLERANCE
    plain = [
        (f, s) for f, s in zip(facts, scores, strict=True)
        if s >= floor and (s > 0.0 if min_similarity > 0.0 else True)
    ]
    plain.sort(key=lambda fs: (-fs[1], fs[0].id.int))
    assert rank_by_similarity(facts, query, min_similarity) == plain


def test_cosine_scores_clip_rounding_past_one_and_score_missing_vectors_zero() -> None:
    v = [0.1, 0.2, 0.3]
    scores = cosine_scores([v, None, [0.0, 0.0, 0.0], [-0.1, -0.2, -0.3], [1.0, 2.0]], v)
    assert scores == [1.0, 0.0, 0.0, -1.0, 0.0]
    matrix = np.array([v, [-x for x in v], [3.0, 0.0, 0.0]], dtype=np.float64)
    expected = [min(1.0, max(-1.0, float(s))) for s in
                np.einsum("ij,j->i", matrix, np.asarray(v)) /
                (np.linalg.norm(matrix, axis=1) * np.linalg.norm(v))]
    assert cosine_scores(matrix, v) == expected
    assert expected[0] == 1.0 and expected[1] == -1.0


def test_fact_scope_apply_is_admits_fact_by_fact() -> None:
    tags = [[], ["a"], ["b"], ["a", "quarantined"], ["quarantined"]]
    facts = [
        _fact(i + 1, None, tags=t, invalidated_by=inv,
              valid_until=T0 + timedelta(days=1) if i % 2 else None)
        for i, (t, inv) in enumerate(itertools.product(tags, [None, "fact:x"]))
    ]
    for scope_tags, exclude, inc, valid_at in itertools.product(
        [frozenset(), frozenset({"a"})], [frozenset(), frozenset({"quarantined"})],
        [False, True], [None, T0 + timedelta(days=2)],
    ):
        scope = FactScope(tags=scope_tags, exclude_tags=exclude, include_invalidated=inc,
                          valid_at=valid_at, changed_since=None)
        assert scope.apply(facts) == [f for f in facts if scope.admits(f)]


def test_merge_unique_keeps_each_first_record_in_first_seen_order() -> None:
    a1, b1, a2, c1 = _fact(1, None), _fact(2, None), _fact(1, None), _fact(3, None)
    merged = merge_unique([b1, a1], [a2, c1, b1])
    assert [f.id.int for f in merged] == [2, 1, 3]
    assert merged[1] is a1


def test_rrf_fuse_order_and_fields() -> None:
    i1, i2, i3 = uuid.UUID(int=1), uuid.UUID(int=2), uuid.UUID(int=3)
    fused = rrf_fuse({"v": [(i2, 0.9), (i1, 0.8), (i2, 0.1)], "t": [(i1, 5.0), (i3, 7.0)]},
                     k=1, weights={"t": 0.5})
    assert [(h.id, h.fused, h.ranks, h.scores) for h in fused] == [
        (i1, 1 / 3 + 0.5 / 2, {"v": 2, "t": 1}, {"v": 0.8, "t": 5.0}),
        (i2, 1 / 2, {"v": 1}, {"v": 0.9}),
        (i3, 0.5 / 3, {"t": 2}, {"t": 7.0}),
    ]
    # Equal fused scores: the best raw score first, then the id.
    tie = rrf_fuse({"x": [(i3, 1.0)], "y": [(i2, 2.0)], "z": [(i1, 2.0)]}, k=1)
    assert [h.id for h in tie] == [i1, i2, i3]


@pytest.mark.parametrize(("name", "key"), [
    ("acme corp", "acme corp"), ("the acme corp", "acme corp"), ("a", "a"), ("the", "the"),
    ("an apple pie", "apple pie"), ("the a team", "team"), ("abc  def", "abc def"),
    ("entity-5", "entity5"), ("Priya", "priya"), ("  x1 ", "x1"), ("théo", "théo"),
    ("ﬁle", "file"), ("anna", "anna"), ("then", "then"), ("a_b", "ab"),
])
def test_normalize_entity_name_plain_and_other_names(name: str, key: str) -> None:
    assert normalize_entity_name(name) == key


def test_planned_answers_match_equal_arguments_once() -> None:
    answers = _Answers()
    answers.put("search", ([1.0, 2.0],), {"limit": 3, "tags": ["a"]}, lambda _: "hit")
    assert answers.take("search", ([1.0, 2.5],), {"limit": 3, "tags": ["a"]}) is _MISSING
    assert answers.take("search", ([1.0, 2.0],), {"limit": 4, "tags": ["a"]}) is _MISSING
    assert answers.take("other", ([1.0, 2.0],), {"limit": 3, "tags": ["a"]}) is _MISSING
    # An array cannot be compared as the planned list is: not the planned call.
    assert answers.take("search", (np.array([1.0, 2.0]),), {"limit": 3, "tags": ["a"]}) is _MISSING
    # A tuple for a list, ints for floats: the same call (as the frozen keys compared).
    assert answers.take("search", ((1, 2),), {"tags": ("a",), "limit": 3}) == "hit"
    assert answers.take("search", ([1.0, 2.0],), {"limit": 3, "tags": ["a"]}) is _MISSING

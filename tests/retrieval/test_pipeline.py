"""Pure retrieval stages, tested without any store; validation happens before any I/O."""

from __future__ import annotations

import math
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from cycgraph_memory import (
    QUARANTINE_TAG,
    InvalidInputError,
    MemoryQuery,
    Provenance,
    Relationship,
    RetrievalOptions,
    SemanticFact,
    extract_subgraph,
    retrieve_memory,
)
from cycgraph_memory.retrieval.pipeline import (
    SIMILARITY_FLOOR_TOLERANCE,
    FactScope,
    cosine_scores,
    merge_unique,
    rank_by_similarity,
    rank_relationships,
    rank_subgraph_facts,
)

T0 = datetime(2025, 1, 1, tzinfo=UTC)
PROV = Provenance(source="agent", created_at=T0)


def fact(i: int, emb: list[float] | None = None, **kw: Any) -> SemanticFact:
    return SemanticFact(
        id=uuid.UUID(int=i), content=f"f{i}", embedding=emb, provenance=PROV,
        valid_from=kw.pop("valid_from", T0), **kw,
    )


class Bomb:
    """A store/index whose every attribute access fails: proves no I/O happened."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"I/O attempted: {name}")


@pytest.mark.parametrize(
    "query",
    [
        {"limit": 0}, {"limit": 101}, {"max_hops": 6}, {"min_similarity": 2},
        {"tags": [""]}, {"entity_ids": ["nope"]}, {"valid_at": "yesterday"},
        {"embedding": []},
    ],
)
async def test_invalid_query_fails_before_any_io(query: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        await retrieve_memory(Bomb(), Bomb(), query)


async def test_text_without_embedder_fails_before_any_io() -> None:
    with pytest.raises(InvalidInputError):
        await retrieve_memory(Bomb(), Bomb(), MemoryQuery(text="hello"))


async def test_bad_options_and_subgraph_arguments_fail_before_any_io() -> None:
    with pytest.raises(ValidationError):
        await retrieve_memory(Bomb(), Bomb(), {"tags": ["x"]}, options={"theme_limit": -1})
    with pytest.raises(InvalidInputError):
        await extract_subgraph(Bomb(), [uuid.uuid4()], max_hops=9)


async def test_empty_query_does_no_io() -> None:
    result = await retrieve_memory(Bomb(), Bomb(), {})
    assert result.facts == []


def test_retrieval_options_are_frozen_documented_defaults() -> None:
    opts = RetrievalOptions()
    assert (opts.theme_limit, opts.max_facts_per_theme) == (3, 200)
    assert opts.direct_fact_candidates is None and opts.max_facts_per_entity is None
    with pytest.raises(ValidationError):
        opts.theme_limit = 5
    assert opts.model_copy(update={"theme_limit": 5}).theme_limit == 5


def test_scope_quarantine_and_audit() -> None:
    plain = FactScope.for_query(MemoryQuery(tags=["lesson"]))
    assert plain.exclude_tags == {QUARANTINE_TAG}
    audit = FactScope.for_query(MemoryQuery(tags=["lesson", QUARANTINE_TAG]))
    assert audit.exclude_tags == frozenset()
    q = fact(1, tags=["lesson", QUARANTINE_TAG])
    assert not plain.admits(q) and audit.admits(q)
    assert not plain.admits(fact(2, tags=["other"]))
    assert FactScope.for_query(MemoryQuery()).admits(fact(3))


def test_scope_temporal() -> None:
    scope = FactScope.for_query(MemoryQuery(valid_at=T0 + timedelta(days=2)))
    assert scope.admits(fact(1))
    assert not scope.admits(fact(2, valid_until=T0 + timedelta(days=1)))
    assert not scope.admits(fact(3, valid_from=T0 + timedelta(days=3)))
    assert not scope.admits(fact(4, invalidated_by="x"))


def test_cosine_scores_exact_values() -> None:
    scores = cosine_scores([[1, 0], [1, 1], [0, 0], None, [1, 0, 0], [-1, 0]], [2, 0])
    assert scores[0] == 1.0
    assert scores[1] == pytest.approx(1 / math.sqrt(2), abs=1e-15)
    assert scores[2:5] == [0.0, 0.0, 0.0]
    assert scores[5] == -1.0


def test_rank_by_similarity_ranks_everything_before_the_cut() -> None:
    theme_facts = [fact(i, [1.0, 0.1 * i]) for i in range(1, 6)]
    direct_best = fact(9, [1.0, 0.0])
    merged = merge_unique(theme_facts, [direct_best, theme_facts[0]])
    ranked = rank_by_similarity(merged, [1.0, 0.0], 0.5)
    assert [f.id.int for f, _ in ranked] == [9, 1, 2, 3, 4, 5]
    assert ranked[0][1] == 1.0
    assert ranked[1][1] == pytest.approx(1 / math.sqrt(1.01))


def test_rank_by_similarity_ties_by_id_and_threshold() -> None:
    facts = [fact(3, [1.0, 0.0]), fact(1, [1.0, 0.0]), fact(2, [0.0, 1.0]), fact(4)]
    assert [f.id.int for f, _ in rank_by_similarity(facts, [1.0, 0.0], 0.5)] == [1, 3]
    assert [f.id.int for f, _ in rank_by_similarity(facts, [1.0, 0.0], 0.0)] == [1, 3, 2, 4]


@settings(max_examples=200, deadline=None)
@given(
    vectors=st.lists(
        st.lists(st.floats(-1, 1, allow_nan=False), min_size=3, max_size=3),
        min_size=1, max_size=30,
    ),
    query=st.lists(st.floats(-1, 1, allow_nan=False), min_size=3, max_size=3),
    threshold=st.floats(0, 1),
    split=st.integers(0, 30),
)
def test_merge_then_rank_equals_ranking_the_union(
    vectors: list[list[float]], query: list[float], threshold: float, split: int
) -> None:
    facts = [fact(i + 1, v) for i, v in enumerate(vectors)]
    # However the candidates are split between theme and direct lists (with overlap),
    # the result is the union ranked by (-similarity, id) above the threshold (less the
    # rounding tolerance).
    merged = merge_unique(facts[split:], facts[: split + 1])
    ranked = rank_by_similarity(merged, query, threshold)
    expected = sorted(
        ((f, s) for f, s in zip(facts, cosine_scores(vectors, query), strict=True)
         if s >= threshold - SIMILARITY_FLOOR_TOLERANCE and (s > 0.0 or threshold <= 0.0)),
        key=lambda fs: (-fs[1], str(fs[0].id)),
    )
    assert [f.id for f, _ in ranked] == [f.id for f, _ in expected]


def test_rank_subgraph_facts_nearest_entity_then_newest() -> None:
    a, b, c = uuid.UUID(int=101), uuid.UUID(int=102), uuid.UUID(int=103)
    day = timedelta(days=1)
    f_old_a = fact(1, valid_from=T0)
    f_new_a = fact(2, valid_from=T0 + day)
    f_b = fact(3, valid_from=T0 + 5 * day)
    f_ab = fact(4, valid_from=T0 + 9 * day)
    ranked = rank_subgraph_facts(
        {c: [f_b], b: [f_ab, f_b], a: [f_ab, f_new_a, f_old_a]}, [a, b, c]
    )
    assert [f.id.int for f in ranked] == [4, 2, 1, 3]
    assert rank_subgraph_facts({a: [f_old_a]}, [b]) == []


def test_rank_relationships_by_hop_then_time() -> None:
    a, b, c, d = (uuid.UUID(int=i) for i in range(1, 5))
    def rel(i: int, s: uuid.UUID, t: uuid.UUID, day: int) -> Relationship:
        return Relationship(id=uuid.UUID(int=100 + i), source_id=s, target_id=t,
                            relation_type="r", provenance=PROV,
                            valid_from=T0 + timedelta(days=day))
    far = rel(1, c, d, 0)
    near_late = rel(2, a, b, 5)
    near_early = rel(3, b, a, 1)
    ranked = rank_relationships([far, near_late, near_early], {a: 0, b: 1, c: 1, d: 2})
    assert [r.id.int for r in ranked] == [103, 102, 101]

"""Tokenizer, BM25 and reciprocal-rank fusion: exact values."""

from __future__ import annotations

import math
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cycgraph_memory.retrieval.fusion import rrf_fuse
from cycgraph_memory.textsearch import BM25Index, query_terms, tokenize

A, B, C, D = (uuid.UUID(int=i) for i in (1, 2, 3, 4))


def test_tokenize_lowercases_stems_and_drops_stop_words() -> None:
    assert tokenize("The dogs were RUNNING to the parties, and I'm married!") == [
        "dog", "run", "party", "marry",
    ]
    expected = ["biscuit", "14", "37", "half", "marathon"]
    assert tokenize("Biscuit's 2:14:37 half-marathon") == expected
    assert tokenize("boxes notes stopped") == ["box", "note", "stop"]
    assert tokenize("a I the of") == []
    assert query_terms("dog dogs Dog") == ["dog"]


def test_bm25_exact_scores() -> None:
    index = BM25Index()
    index.add(A, "greyhound rescue")
    index.add(B, "greyhound greyhound marathon")
    index.add(C, "kubernetes billing")
    # n=3, lengths 2, 3, 2 (avg 7/3); idf(greyhound) = ln(1 + (3 - 2 + 0.5) / (2 + 0.5))
    idf = math.log(1 + 1.5 / 2.5)
    k1, b = 1.2, 0.75

    def term(tf: int, length: int) -> float:
        return idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * length / (7 / 3)))

    scores = index.scores("greyhound")
    assert scores == {A: pytest.approx(term(1, 2)), B: pytest.approx(term(2, 3))}
    assert [d for d, _ in index.search("greyhound", 10)] == [B, A]
    assert index.search("greyhound", 10, allowed=[A]) == [(A, pytest.approx(term(1, 2)))]
    assert index.search("zebra", 10) == []
    assert index.remove(B) and not index.remove(B)
    assert set(index.scores("greyhound")) == {A}
    assert len(index) == 2 and A in index


def test_bm25_ties_by_id() -> None:
    index = BM25Index()
    for doc in (D, B, C):
        index.add(doc, "same words here")
    assert [d for d, _ in index.search("words", 2)] == [B, C]


def test_rrf_exact_values_and_order() -> None:
    fused = rrf_fuse({"vector": [(A, 0.9), (B, 0.8)], "text": [(B, 7.0), (C, 5.0)]}, k=60)
    assert [h.id for h in fused] == [B, A, C]
    by_id = {h.id: h for h in fused}
    assert by_id[B].fused == pytest.approx(1 / 62 + 1 / 61)
    assert by_id[A].fused == pytest.approx(1 / 61)
    assert by_id[B].ranks == {"vector": 2, "text": 1}
    assert by_id[C].scores == {"text": 5.0}
    # equal fused score: the better raw score wins, then the id
    tie = rrf_fuse({"x": [(C, 0.5)], "y": [(A, 0.7)], "z": [(B, 0.7)]}, k=1)
    assert [h.id for h in tie] == [A, B, C]
    weighted = rrf_fuse({"x": [(A, 1.0)], "y": [(B, 1.0)]}, k=10, weights={"y": 2.0})
    assert [h.id for h in weighted] == [B, A]
    with pytest.raises(ValueError):
        rrf_fuse({}, k=0)


@given(st.lists(st.integers(min_value=0, max_value=30), unique=True, max_size=20))
@settings(max_examples=100, deadline=None)
def test_rrf_single_signal_keeps_its_order(ids: list[int]) -> None:
    ranked = [(uuid.UUID(int=i), float(-n)) for n, i in enumerate(ids)]
    assert [h.id for h in rrf_fuse({"only": ranked})] == [u for u, _ in ranked]

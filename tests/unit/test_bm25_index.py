"""BM25Index (array scoring, lazy ranking) against the formula written per document."""

from __future__ import annotations

import math
import uuid
from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from cycgraph_memory.textsearch import BM25_B, BM25_K1, BM25Index, query_terms, tokenize

WORDS = ["greyhound", "rescue", "marathon", "billing", "kube", "deploy", "note", "alice",
         "2024", "entity-17", "café", "run", "running"]


class Reference:
    """The per-document loop BM25Index replaced (its exact float operations)."""

    def __init__(self) -> None:
        self.docs: dict[uuid.UUID, Counter[str]] = {}

    def add(self, doc_id: uuid.UUID, text: str) -> None:
        self.docs[doc_id] = Counter(tokenize(text))

    def remove(self, doc_id: uuid.UUID) -> None:
        self.docs.pop(doc_id, None)

    def scores(self, text: str) -> dict[uuid.UUID, float]:
        n = len(self.docs)
        if n == 0:
            return {}
        total = sum(sum(c.values()) for c in self.docs.values())
        avg = total / n if total else 1.0
        out: dict[uuid.UUID, float] = {}
        for term in query_terms(text):
            having = [d for d, c in self.docs.items() if term in c]
            if not having:
                continue
            idf = math.log(1.0 + (n - len(having) + 0.5) / (len(having) + 0.5))
            for d in having:
                tf = self.docs[d][term]
                length = sum(self.docs[d].values())
                norm = BM25_K1 * (1.0 - BM25_B + BM25_B * length / avg)
                out[d] = out.get(d, 0.0) + idf * tf * (BM25_K1 + 1.0) / (tf + norm)
        return out

    def ranked(self, text: str) -> list[tuple[uuid.UUID, float]]:
        return sorted(self.scores(text).items(), key=lambda kv: (-kv[1], str(kv[0])))


texts = st.lists(st.sampled_from(WORDS), min_size=0, max_size=6).map(" ".join)
ops = st.lists(
    st.tuples(st.sampled_from(["add", "add", "add", "remove"]), st.integers(0, 59), texts),
    min_size=1, max_size=120,
)


@settings(max_examples=60, deadline=None)
@given(ops=ops, query=texts, limit=st.integers(0, 70))
def test_same_scores_and_order_as_the_per_document_formula(
    ops: list[tuple[str, int, str]], query: str, limit: int
) -> None:
    index, ref = BM25Index(), Reference()
    for op, n, text in ops:
        doc = uuid.UUID(int=(n * 7919) % 61 + 1)
        if op == "add":
            index.add(doc, text)
            ref.add(doc, text)
        else:
            assert index.remove(doc) == (doc in ref.docs)
            ref.remove(doc)
        assert len(index) == len(ref.docs)
    assert index.scores(query) == ref.scores(query)  # exactly: the same float operations
    expected = ref.ranked(query)
    assert list(index.ranked(query)) == expected
    assert index.search(query, limit) == expected[:limit]
    allowed = [d for d, _ in expected[::2]]
    assert index.search(query, limit, allowed=allowed) == [
        kv for kv in expected if kv[0] in set(allowed)
    ][:limit]


def test_ranking_reads_past_the_first_chunks_with_ties_across_them() -> None:
    # 300 documents, scores in 3 tied groups: the lazy ranking crosses chunk boundaries
    # (32, then 128 more) and keeps the tie order by id.
    index, ref = BM25Index(), Reference()
    for i in range(300):
        doc = uuid.UUID(int=(i * 104729) % 1000 + 1)
        text = "deploy " + "note " * (i % 3)
        index.add(doc, text)
        ref.add(doc, text)
    assert list(index.ranked("deploy note")) == ref.ranked("deploy note")
    index.clear()
    assert len(index) == 0 and list(index.ranked("deploy")) == []

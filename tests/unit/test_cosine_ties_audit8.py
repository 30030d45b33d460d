"""The retrieval pipeline scores equal vectors equally (audit 8).

Found by ``tests/postgres/test_differential_pipeline.py`` (seed 8): two facts with the
same text (so the same vector) got last-bit different float64 scores from one BLAS
matrix-vector product (its last row is rounded apart) and were ranked by their position
in the candidate list, which differs between backends, instead of by id.
"""

from __future__ import annotations

import numpy as np

from cycgraph_memory.embeddings import HashingEmbeddingProvider
from cycgraph_memory.retrieval.pipeline import cosine_scores


def test_copies_of_one_vector_get_one_score() -> None:
    embedder = HashingEmbeddingProvider(dimensions=8)
    same = embedder.embed_array(["Priya on 2024-04-25: Priya live in Toronto now."])[0]
    query = embedder.embed_array(["board games Oslo"])[0]
    for copies in range(2, 12):
        matrix = np.tile(same, (copies, 1))
        as_lists = [same.tolist()] * copies
        assert len(set(cosine_scores(matrix, query))) == 1, copies
        assert len(set(cosine_scores(as_lists, query.tolist()))) == 1, copies

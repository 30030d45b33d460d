"""Equal vectors tie exactly in every vector search, and ties go by id (audit 8).

Found by ``tests/postgres/test_differential_pipeline.py``: a chat repeats itself ("Noted."
twice), the two messages get the same embedding, and ``retrieve_memory`` listed them in
another order on each backend. The in-memory index scored by one BLAS matrix-vector
product, which rounds a row differently by its position in the matrix, so two copies of
one vector scored about 1e-8 apart and came back in insertion order; pgvector scores
each row on its own, so they tie and the contract's "ties by id" order applies.
"""

from __future__ import annotations

import uuid
from typing import Any

from .factories import make_episode, make_fact, make_message, sorted_ids

# The 8-d HashingEmbeddingProvider vector of "Noted." and of two queries: not
# float32-exact, so a matrix product's rounding shows.
NOTED = [0.0, 0.28328519834053423, -0.28328519834053423, -0.5008891337513033,
         0.6542996723937172, -0.28328519834053423, -0.28328519834053423, 0.0]
QUERIES = [
    [0.31, -0.12, 0.77, 0.05, -0.41, 0.23, 0.09, -0.28],
    [-0.5, 0.1, 0.2, -0.3, 0.6, 0.05, -0.15, 0.45],
    [0.12, 0.34, -0.56, 0.78, -0.9, 0.11, 0.13, -0.17],
]
COPIES = 13


def _check_ties(hits: list[Any], ids: list[uuid.UUID], label: str) -> None:
    mine = [h for h in hits if h.item.id in set(ids)]
    assert len(mine) == len(ids), label
    assert len({h.score for h in mine}) == 1, f"{label}: equal vectors scored apart"
    assert [h.item.id for h in mine] == sorted_ids(*ids), f"{label}: ties not by id"


async def test_equal_fact_vectors_tie_and_come_back_in_id_order(store: Any, index: Any) -> None:
    facts = [make_fact(content=f"noted {i}", embedding=NOTED) for i in range(COPIES)]
    await store.put_facts(facts)
    await index.rebuild(store)
    ids = [f.id for f in facts]
    for q in QUERIES:
        _check_ties(await index.search_facts(q, limit=COPIES), ids, f"search_facts({q})")
        # A limit that cuts through the tie keeps the smallest ids.
        cut = await index.search_facts(q, limit=4)
        assert [h.item.id for h in cut] == sorted_ids(*ids)[:4]


async def test_equal_message_vectors_tie_and_come_back_in_id_order(
    store: Any, index: Any
) -> None:
    messages = [make_message(content="Noted.", embedding=NOTED) for _ in range(COPIES)]
    await store.put_episodes([make_episode(messages=messages[:6]),
                              make_episode(messages=messages[6:])])
    await index.rebuild(store)
    ids = [m.id for m in messages]
    for q in QUERIES:
        _check_ties(await index.search_messages(q, limit=COPIES), ids, f"search_messages({q})")
        cut = await index.search_messages(q, limit=4)
        assert [h.item.id for h in cut] == sorted_ids(*ids)[:4]


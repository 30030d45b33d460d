"""Acceptance audit 10: the spec's API reference, read as an outside checker would.

Defaults, output fields and edges of the documented functions, on both backends. The
tests named ``test_bug_...`` failed before the fix that came with them.
"""

from __future__ import annotations

from typing import Any

import pytest

from cycgraph_memory import retrieve_memory

from .factories import EMBED_DIM, make_entity, make_episode, make_fact, make_theme

# Float32-exact vectors whose single-precision unit rows are not exactly of length 1.
SELF_VECTORS = [
    [1.0] * EMBED_DIM,
    [0.125] * EMBED_DIM,
    [0.5, 0.25, 0.0, 1.0, 0.0, 0.75, 0.0, 0.0],
]


@pytest.mark.parametrize("vector", SELF_VECTORS, ids=["ones", "eighths", "mixed"])
async def test_bug_a_stored_vector_scores_exactly_one_against_itself(
    store: Any, index: Any, vector: list[float]
) -> None:
    # Before: the in-memory index scored [1.0] * 8 against itself 0.9999999403953552
    # (pgvector: 1.0), so `score == 1.0` for an exact match held on one backend only.
    fact = make_fact(content="match", embedding=vector)
    entity = make_entity(name="Match", embedding=vector)
    theme = make_theme(label="match", embedding=vector)
    episode = make_episode(topic="match", embedding=vector, messages=[])
    await store.put_entity(entity)
    await store.put_theme(theme)
    await store.put_episode(episode)
    await store.put_fact(fact)
    await index.rebuild(store)

    for search in (index.search_facts, index.search_entities, index.search_themes,
                   index.search_episodes):
        hits = await search(vector, {"limit": 1})
        assert [h.score for h in hits] == [1.0], search.__name__
        exact = await search(vector, {"limit": 5, "min_similarity": 1.0})
        assert len(exact) == 1, search.__name__

    result = await retrieve_memory(store, index, {"embedding": vector, "min_similarity": 1.0})
    assert [f.id for f in result.facts] == [fact.id]
    assert [t.id for t in result.themes] == [theme.id]

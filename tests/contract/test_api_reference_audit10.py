"""Acceptance audit 10: the spec's API reference, read as an outside checker would.

Defaults, output fields and edges of the documented functions, on both backends. The
tests named ``test_bug_...`` failed before the fix that came with them.
"""

from __future__ import annotations

from typing import Any

import pytest

from cycgraph_memory import QUARANTINE_TAG, MemoryConsolidator, retrieve_memory

from .factories import EMBED_DIM, at, make_entity, make_episode, make_fact, make_theme, unit

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


# --------------------------------------------------------------------------- ConsolidationReport


async def test_bug_themes_cleaned_up_counts_themes_whose_fact_ids_changed(
    store: Any, index: Any
) -> None:
    # The spec: themesCleanedUp = "Themes whose fact_ids were updated". Before, a theme
    # only relabelled because one of its facts is quarantined (fact_ids unchanged) was
    # counted too, so a pass that removed nothing reported themes_cleaned_up == 1.
    relabelled = make_theme(label="poisoned advice", embedding=unit(1))
    trimmed = make_theme(label="tea", embedding=unit(2))
    good = make_fact(content="good advice", embedding=unit(0), theme_id=relabelled.id)
    poisoned = make_fact(content="poisoned advice", embedding=unit(1),
                         theme_id=relabelled.id, tags=[QUARANTINE_TAG])
    older = make_fact(content="Alice likes tea", embedding=unit(2), theme_id=trimmed.id,
                      valid_from=at(days=-1))
    newer = make_fact(content="Alice likes tea a lot", embedding=unit(2),
                      theme_id=trimmed.id)
    await store.put_themes([relabelled, trimmed])
    await store.put_facts([good, poisoned, older, newer])
    relabelled = relabelled.model_copy(update={"fact_ids": [good.id, poisoned.id]})
    trimmed = trimmed.model_copy(update={"fact_ids": [older.id, newer.id]})
    await store.put_themes([relabelled, trimmed])
    await index.rebuild(store)

    report = await MemoryConsolidator(store, index, debug=True).consolidate()

    assert (report.facts_deduped, report.themes_cleaned_up, report.themes_removed) == (1, 1, 0)
    assert report.total_reclaimed == 1
    updated = sorted(str(m.id) for m in report.mutation_log or [] if m.type == "theme_updated")
    assert updated == sorted([str(relabelled.id), str(trimmed.id)])  # both written
    stored = await store.get_themes([relabelled.id, trimmed.id])
    assert stored[relabelled.id].fact_ids == [good.id, poisoned.id]
    assert stored[relabelled.id].label == "good advice"
    assert stored[trimmed.id].fact_ids == [newer.id]
    again = await MemoryConsolidator(store, index).consolidate()
    assert again.themes_cleaned_up == again.total_reclaimed == 0

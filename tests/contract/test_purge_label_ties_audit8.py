"""A purge relabels a theme the same way on both backends when members tie (audit 8).

Found by ``tests/postgres/test_differential_pipeline.py``: a purge left a theme with two
live facts; both are exactly as near their centroid (the normalised sum of two unit
vectors), so the label was decided by rounding: Postgres (float32 vectors) quoted the
first fact, the in-memory store (float64) the second. Members tied to within
``LABEL_TIE_TOLERANCE`` now go by the theme's order: the first one wins.
"""

from __future__ import annotations

from typing import Any

from cycgraph_memory.embeddings import HashingEmbeddingProvider
from cycgraph_memory.hierarchy.clustering import theme_label
from cycgraph_memory.lifecycle import purge

from .factories import EMBED_DIM, make_fact, make_theme, provenance

# The two facts of the differential run that tied (seed 11), and one purged fact.
FIRST = "Maya on 2024-03-26: Maya don't like jazz anymore."
SECOND = "Liam on 2024-03-30: Liam don't like sushi anymore."
GONE = "Liam on 2024-04-07: Liam don't like board games anymore."


async def test_a_purge_labels_a_theme_with_two_tied_members_by_the_first(store: Any) -> None:
    embedder = HashingEmbeddingProvider(dimensions=EMBED_DIM)
    vectors = await embedder.embed([FIRST, SECOND, GONE])
    theme = make_theme(label="before", provenance=provenance(run_id="keep"))
    facts = [
        make_fact(content=text, embedding=vector, theme_id=theme.id,
                  provenance=provenance(run_id=run))
        for text, vector, run in zip(
            [FIRST, SECOND, GONE], vectors, ["keep", "keep", "gone"], strict=True
        )
    ]
    await store.put_themes([theme.model_copy(update={"fact_ids": [f.id for f in facts]})])
    await store.put_facts(facts)

    report = await purge(store, run_id="gone")

    assert report.facts == 1
    stored = await store.get_theme(theme.id)
    assert stored is not None
    assert stored.fact_ids == [facts[0].id, facts[1].id]
    assert stored.label == theme_label(FIRST)

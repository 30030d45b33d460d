"""Fourth retrieval audit: acceptance checks written from the spec, on both backends."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

import pytest

from cycgraph_memory import retrieve_memory
from cycgraph_memory.retrieval.pipeline import cosine_scores

from .factories import make_entity, make_fact, make_theme, unit


def ids(records: Sequence[Any]) -> list[uuid.UUID]:
    return [r.id for r in records]


# float32-exact values whose cosine with themselves computes to 0.9999999999999999
DUPLICATE = [
    0.04695051163434982, -0.3233650028705597, 0.45393702387809753, -0.9701305627822876,
    0.9471058249473572, 0.3730144202709198, -0.45918646454811096, -0.8780491948127747,
]


@pytest.mark.parametrize("native", [True, False], ids=["native", "generic"])
@pytest.mark.parametrize("mode", ["vector", "hybrid"])
async def test_min_similarity_one_serves_an_identical_vector(
    store: Any, index: Any, mode: str, native: bool
) -> None:
    """min_similarity=1.0 keeps an exact duplicate (cosine 1 up to rounding), fact and theme.

    The indexes return it (score 1.0), but the ranking compared its float64 cosine,
    0.9999999999999999, with 1.0 exactly and dropped it, and the theme with it.
    """
    assert cosine_scores([DUPLICATE], DUPLICATE)[0] < 1.0  # the rounding this is about
    fact = make_fact(content="an exact duplicate", embedding=DUPLICATE)
    theme = make_theme(embedding=DUPLICATE, fact_ids=[fact.id])
    await store.put_facts([fact])
    await store.put_themes([theme])
    await index.rebuild(store)
    hits = await index.search_facts(DUPLICATE, limit=5, min_similarity=1.0)
    assert [h.item.id for h in hits] == [fact.id]
    r = await retrieve_memory(
        store, index,
        {"embedding": DUPLICATE, "text": "nothing in common", "min_similarity": 1.0},
        mode=mode, options={"native_paths": native},
    )
    assert ids(r.facts) == [fact.id]
    assert ids(r.themes) == [theme.id]
    assert r.fact_scores[fact.id].vector_rank == 1


@pytest.mark.parametrize("native", [True, False], ids=["native", "generic"])
@pytest.mark.parametrize("mode", ["text", "hybrid"])
async def test_graph_signal_filters_entity_types_before_the_match_limit(
    store: Any, index: Any, mode: str, native: bool
) -> None:
    """The entities named in the question are those of ``entity_types``, then the limit.

    "Acme" is named first; with ``entity_match_limit=1`` and ``entity_types=["person"]``
    the match took Acme, the type filter then dropped it, and Zed (a person, also named)
    added nothing: his fact, reached by no other signal, was not served.
    """
    acme = make_entity(name="Acme", entity_type="organization")
    zed = make_entity(name="Zed", entity_type="person")
    await store.put_entities([acme, zed])
    of_zed = make_fact(content="prefers tea", embedding=unit(3), entity_ids=[zed.id])
    of_acme = make_fact(content="sells widgets", embedding=unit(4), entity_ids=[acme.id])
    await store.put_facts([of_zed, of_acme])
    await index.rebuild(store)
    query: dict[str, Any] = {"text": "acme and zed", "entity_types": ["person"],
                             "min_similarity": 0.9}
    if mode == "hybrid":
        query["embedding"] = unit(0)
    r = await retrieve_memory(
        store, index, query, mode=mode,
        options={"native_paths": native, "entity_match_limit": 1},
    )
    assert ids(r.facts) == [of_zed.id]
    assert r.fact_scores[of_zed.id].graph_distance == 0
    assert ids(r.entities) == [zed.id]

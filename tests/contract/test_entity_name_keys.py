"""Entities named in a question are matched by identity key, alike on both backends.

The key is ``normalize_entity_name`` (NFKC, case folding, leading article and punctuation
stripped). Postgres once compared ``lower(name)`` with the question's words, so "Acme
Corp." (punctuation), "The Beatles" (article) and "Straße" (folded to "strasse") were
found in memory only; it now compares the stored ``name_key`` (migration 0017).
"""

from __future__ import annotations

from typing import Any

import pytest

from cycgraph_memory import MemoryQuery
from cycgraph_memory.normalize import name_candidate_keys
from cycgraph_memory.retrieval.retrieve import retrieve_memory

from .factories import at, make_entity, make_fact, unit


async def _named(store: Any, index: Any) -> dict[str, Any]:
    acme = make_entity(name="Acme Corp.", entity_type="organization")
    beatles = make_entity(name="The Beatles", entity_type="organization")
    bank = make_entity(name="Straße Bank", entity_type="organization")
    await store.put_entities([acme, beatles, bank])
    facts = {
        "acme": make_fact(content="signed the supplier deal", embedding=unit(1),
                          entity_ids=[acme.id], valid_from=at(10)),
        "beatles": make_fact(content="played four encores", embedding=unit(2),
                             entity_ids=[beatles.id], valid_from=at(11)),
        "bank": make_fact(content="opens at nine on weekdays", embedding=unit(3),
                          entity_ids=[bank.id], valid_from=at(12)),
    }
    await store.put_facts(list(facts.values()))
    await index.rebuild(store)
    return {"acme": acme, "beatles": beatles, "bank": bank, **{f"f_{k}": v
                                                              for k, v in facts.items()}}


def test_candidate_keys_are_normalised_once_in_order() -> None:
    assert name_candidate_keys("The Acme, Corp. and ACME CORP") [:3] == [
        "acme", "acme corp", "acme corp and"]
    keys = name_candidate_keys("STRASSE bank or straße BANK")
    assert keys.count("strasse bank") == 1
    assert keys.index("strasse") < keys.index("strasse bank")
    assert name_candidate_keys("") == []


@pytest.mark.parametrize(
    ("question", "who"),
    [
        ("what did acme corp agree to?", ["acme"]),
        ("when do the beatles play", ["beatles"]),
        ("is STRASSE BANK open on monday", ["bank"]),
        ("ask straße bank and Acme Corp.", ["bank", "acme"]),
    ],
)
async def test_question_names_match_by_identity_key(
    store: Any, index: Any, question: str, who: list[str]
) -> None:
    w = await _named(store, index)
    assert [e.id for e in await index.match_entity_names(question)] == [w[k].id for k in who]


async def test_text_retrieval_reaches_the_facts_of_a_key_matched_entity(
    store: Any, index: Any
) -> None:
    w = await _named(store, index)
    result = await retrieve_memory(
        store, index, MemoryQuery(text="is STRASSE BANK open on monday?", min_similarity=0),
        mode="text",
    )
    assert [f.id for f in result.facts] == [w["f_bank"].id]  # through the graph only
    assert result.fact_scores[w["f_bank"].id].graph_distance == 0

"""A retrieval leaves no reference cycles behind: what it allocated is freed on return.

An object in a reference cycle is freed only by Python's cyclic garbage collector. A
hybrid retrieval allocates thousands of objects (rows, candidate records, vectors); had
they been kept alive by a cycle (a closure over its own container, a recursive local
function), every call would have left them for the collector, and the full collections
that garbage triggers cost a service tens to hundreds of milliseconds every few calls.
Each mode runs once to warm caches, then again with the collector off; the collector must
then find nothing unreachable.
"""

from __future__ import annotations

import gc
from typing import Any

import pytest

from cycgraph_memory import MemoryQuery, RetrievalOptions, retrieve_memory

from .factories import make_entity, make_episode, make_fact, make_message, make_theme, vec

QUERY = vec(1.0, 0.5, 0.2, 0.1)

CASES: list[tuple[str | None, dict[str, Any]]] = [
    ("hybrid", {"text": "Ada and the analytical engine"}),
    ("text", {"text": "Bob greyhound notes"}),
    ("vector", {}),
    (None, {"tags": ["lesson"]}),
    (None, {"entity_ids": "ada", "max_hops": 2}),
]


async def _world(store: Any) -> dict[str, Any]:
    ada = make_entity(name="Ada Lovelace", entity_type="person")
    bob = make_entity(name="Bob", entity_type="person")
    await store.put_entities([ada, bob])
    messages = [
        make_message(content="Ada talked about the analytical engine", embedding=vec(1.0, 0.4)),
        make_message(role="assistant", content="Bob likes greyhound racing",
                     embedding=vec(0.2, 1.0)),
    ]
    episode = make_episode(messages=messages, topic="Ada and Bob", embedding=vec(1.0, 0.4, 0.2))
    await store.put_episodes([episode])
    facts = [
        make_fact(
            content=f"fact {i} about {'Ada engine' if i % 2 else 'Bob greyhound'} notes",
            embedding=vec(1.0, 0.05 * i, 0.3 * (i % 4), 0.1 * (i % 7)),
            entity_ids=[ada.id if i % 2 else bob.id],
            tags=["lesson"] if i % 3 == 0 else [],
            source_message_ids=[messages[i % 2].id],
            source_episode_ids=[episode.id],
        )
        for i in range(30)
    ]
    await store.put_facts(facts)
    await store.put_themes([
        make_theme(label="ada", fact_ids=[f.id for f in facts[1::2]], embedding=vec(1.0, 0.2)),
        make_theme(label="bob", fact_ids=[f.id for f in facts[::2]], embedding=vec(0.9, 1.0)),
    ])
    return {"ada": ada}


@pytest.mark.parametrize("case", range(len(CASES)), ids=[
    "hybrid", "text", "vector", "tags", "entity",
])
async def test_a_retrieval_leaves_no_cyclic_garbage(store: Any, index: Any, case: int) -> None:
    world = await _world(store)
    await index.rebuild(store)
    mode, fields = CASES[case]
    if fields.get("entity_ids") == "ada":
        fields = {**fields, "entity_ids": [world["ada"].id]}
    query = MemoryQuery(
        **({"embedding": QUERY, "min_similarity": 0.0} if mode else {}), **fields
    )
    opts = RetrievalOptions()
    first = await retrieve_memory(store, index, query, mode=mode, options=opts)
    assert first.facts
    del first
    gc.collect()
    gc.disable()
    try:
        result = await retrieve_memory(store, index, query, mode=mode, options=opts)
        assert result.facts
        del result
        unreachable = gc.collect()
    finally:
        gc.enable()
    assert unreachable == 0

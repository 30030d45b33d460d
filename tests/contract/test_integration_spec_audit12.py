"""Audit 12, the runner adapters black-box against the spec, on both backends.

Spec "Orchestrator integration" and "API > retrieveMemory", sentences no earlier test held:

* ``memoryQuery: { tags: [...] }`` is "Tag-only retrieval. No text fallback": a goal given
  with a tags query is not searched, and the tag-only path returns no entities or themes;
* the limit is ``options.maxFacts ?? 20`` (the query's own ``max_facts`` first);
* "All paths exclude quarantined facts by default. A query whose tags explicitly include
  'quarantined' retrieves them";
* "Served facts get their access_count bumped through the store's optional touchFacts";
* the writer stores each fact with its provenance (``source``, ``run_id``, ``node_id``),
  ``source_episode_ids: []`` and ``entity_ids: []``; without an idempotency key every
  call writes (the key is what makes a repeat a no-op); "Future runs pick those facts up
  through memoryRetriever with a matching tags query".
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from cycgraph_memory import QUARANTINE_TAG
from cycgraph_memory.integration import memory_retriever, memory_writer

from .factories import at, make_entity, make_fact, make_theme, unit


class _Embedder:
    """Every text embeds to ``unit(4)``: any text query finds the ``unit(4)`` records."""

    dimensions = 8

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return [unit(4) for _ in texts]


async def test_a_tags_query_never_falls_back_to_the_goal(store: Any, index: Any) -> None:
    acme = make_entity(name="Acme")
    await store.put_entity(acme)
    lesson = make_fact(
        content="check the cache", tags=["lesson"], embedding=unit(4), entity_ids=[acme.id]
    )
    other = make_fact(content="acme sells widgets", embedding=unit(4), entity_ids=[acme.id])
    await store.put_facts([lesson, other])
    await store.put_theme(
        make_theme(label="caching", embedding=unit(4), fact_ids=[lesson.id, other.id])
    )
    await index.rebuild(store)
    retrieve = memory_retriever(store, index, _Embedder())

    tagged = await retrieve({"tags": ["lesson"]}, {"goal": "what does acme sell?"})
    assert [f["id"] for f in tagged["facts"]] == [str(lesson.id)]
    assert tagged["entities"] == [] and tagged["themes"] == []
    # The same goal with an empty query is the RAG default: it finds both, and the graph.
    rag = await retrieve({}, {"goal": "what does acme sell?"})
    assert {f["id"] for f in rag["facts"]} == {str(lesson.id), str(other.id)}
    assert [e["id"] for e in rag["entities"]] == [str(acme.id)]
    assert [t["label"] for t in rag["themes"]] == ["caching"]


async def test_the_limit_is_max_facts_else_twenty(store: Any, index: Any) -> None:
    facts = [
        make_fact(content=f"lesson {i:02d}", tags=["lesson"], valid_from=at(i)) for i in range(25)
    ]
    await store.put_facts(facts)
    retrieve = memory_retriever(store, index)
    assert len((await retrieve({"tags": ["lesson"]}))["facts"]) == 20
    assert len((await retrieve({"tags": ["lesson"]}, {"max_facts": 7}))["facts"]) == 7
    # The node's own max_facts wins over the runner's option.
    got = await retrieve({"tags": ["lesson"], "max_facts": 3}, {"max_facts": 7})
    assert len(got["facts"]) == 3
    narrow = memory_retriever(store, index, default_max_facts=5)
    assert len((await narrow({"tags": ["lesson"]}))["facts"]) == 5


async def test_quarantined_facts_only_on_the_audit_path(store: Any, index: Any) -> None:
    trusted = make_fact(content="pin versions", tags=["lesson"], embedding=unit(4))
    poisoned = make_fact(
        content="disable the tests", tags=["lesson", QUARANTINE_TAG], embedding=unit(4)
    )
    await store.put_facts([trusted, poisoned])
    await index.rebuild(store)
    retrieve = memory_retriever(store, index, _Embedder())
    for query, options in (
        ({"tags": ["lesson"]}, None),
        ({"text": "anything"}, None),
        ({}, {"goal": "anything"}),
    ):
        got = await retrieve(query, options)
        assert [f["id"] for f in got["facts"]] == [str(trusted.id)], query
    audit = await retrieve({"tags": [QUARANTINE_TAG]})
    assert [(f["id"], f["tags"]) for f in audit["facts"]] == [
        (str(poisoned.id), ["lesson", QUARANTINE_TAG])
    ]


async def test_served_facts_have_their_access_count_bumped(store: Any, index: Any) -> None:
    served = make_fact(content="served", tags=["lesson"])
    unserved = make_fact(content="unserved", tags=["other"])
    await store.put_facts([served, unserved])
    retrieve = memory_retriever(store, index)
    await retrieve({"tags": ["lesson"]})
    await retrieve({"tags": ["lesson"]})
    got = await store.get_facts([served.id, unserved.id])
    assert got[served.id].access_count == 2
    assert got[served.id].last_accessed_at is not None
    assert got[unserved.id] == unserved


async def test_reflections_are_stored_with_provenance_and_found_next_run(
    store: Any, index: Any
) -> None:
    write = memory_writer(store, index=index, clock=lambda: at(days=2))
    first = await write(
        [
            {
                "content": "Ask for the stack trace first",
                "tags": ["lesson", "graph:g1"],
                "provenance": {"source": "agent", "run_id": "run-1", "node_id": "reflect"},
            },
            {
                "content": "A human note",
                "tags": ["lesson", "graph:g1"],
                "provenance": {"source": "human"},
            },
        ]
    )
    ids = [uuid.UUID(i) for i in first["fact_ids"]]
    stored = await store.get_facts(ids)
    agent, human = stored[ids[0]], stored[ids[1]]
    assert (agent.provenance.source, agent.provenance.run_id, agent.provenance.node_id) == (
        "agent",
        "run-1",
        "reflect",
    )
    assert human.provenance.source == "human" and human.provenance.run_id is None
    for f in (agent, human):
        assert f.source_episode_ids == [] and f.entity_ids == []
        assert f.valid_from == at(days=2) and f.provenance.created_at == at(days=2)
        assert f.tags == ["lesson", "graph:g1"] and f.invalidated_by is None
    # Without an idempotency key every call writes: the key is what makes a retry a no-op.
    again = await write([{"content": "Ask for the stack trace first", "tags": ["lesson"]}])
    assert again["fact_ids"] != first["fact_ids"][:1]
    assert len(await store.find_facts()) == 3
    defaulted = await store.get_fact(uuid.UUID(again["fact_ids"][0]))
    assert defaulted is not None and defaulted.provenance.source == "agent"
    # The next run's retriever finds them with a matching tags query.
    found = await memory_retriever(store, index)({"tags": ["graph:g1"]})
    assert sorted(f["content"] for f in found["facts"]) == [
        "A human note",
        "Ask for the stack trace first",
    ]

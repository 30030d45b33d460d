"""The spec's one-options-object call shapes that touch a store (second pass, both backends).

* ``MemoryPipeline(store, options)``: the pipeline took keyword arguments only, so the
  spec's one-options-object style was a ``TypeError`` (it is not in the spec's tables,
  but every other component now takes that form); the stage components inside it come
  from their own options objects too (tests/unit/test_spec_shapes2.py).
* ``evaluateRetention(store, ledger, policy?)``, ``simulateGate(config)``,
  ``gateOperatingCharacteristics(config)``, ``retrieveMemory(store, index, query)`` and the
  store / index listings (``findFacts(filter?)``, ``listEpisodes(opts?)``,
  ``searchFacts(embedding, opts?)``, ...) already took a mapping: pinned here with the
  spec's own examples, each compared with the keyword or model form.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from pydantic import ValidationError

from cycgraph_memory import (
    GateSimulationConfig,
    MemoryPipeline,
    MemoryQuery,
    OperatingCharacteristicsConfig,
    RetentionPolicy,
    RuleBasedExtractor,
    SimpleEpisodeSegmenter,
    SimpleThemeClusterer,
    evaluate_retention,
    gate_operating_characteristics,
    retrieve_memory,
    simulate_gate,
)
from cycgraph_memory.errors import InvalidInputError, InvalidTypeError
from cycgraph_memory.records import RunOutcome

from .factories import (
    BASE_TIME,
    at,
    make_entity,
    make_episode,
    make_fact,
    make_message,
    make_relationship,
    unit,
)

# --------------------------------------------------------------------------- MemoryPipeline


def _chat() -> list[Any]:
    """Two messages a minute apart (one episode at the default 5-minute gap)."""
    return [
        make_message(content="Alice Smith works at Acme Corp since last spring.",
                     timestamp=BASE_TIME),
        make_message(content="Bob Jones manages the Berlin office these days.",
                     timestamp=BASE_TIME + timedelta(seconds=60)),
    ]


def _stages() -> dict[str, Any]:
    return {
        "segmenter": SimpleEpisodeSegmenter({"gap_threshold_ms": 30_000}),
        "extractor": RuleBasedExtractor({"min_sentence_length": 10}),
        "clusterer": SimpleThemeClusterer({}),
        "ground_facts": False,
        "max_theme_facts": 50,
    }


async def test_pipeline_takes_one_options_object(store: Any, index: Any) -> None:
    # Before: TypeError (MemoryPipeline() takes 2 positional arguments but 3 were given).
    pipeline = MemoryPipeline(store, {"index": index, **_stages()})
    twin = MemoryPipeline(store, index=index, **_stages())
    for name in ("index", "ground_facts", "max_theme_facts", "embedder", "merge_entities",
                 "theme_candidates", "embed_batch_size", "resolve_entities"):
        assert getattr(pipeline, name) == getattr(twin, name), name
    await pipeline.ingest(_chat())
    episodes = await store.list_episodes()
    assert len(episodes) == 2  # the 30 s gap of the segmenter's options
    facts = await store.find_facts()
    contents = sorted(f.content for f in facts)
    assert contents == [
        "Alice Smith works at Acme Corp since last spring.",
        "Bob Jones manages the Berlin office these days.",
    ]  # ground_facts=False: no speaker/date prefix
    assert len(await store.list_themes()) == 1  # no embedder: the one "General" theme


@pytest.mark.parametrize(
    ("call", "error"),
    [
        (lambda s: MemoryPipeline(s, {"bogus": 1}), InvalidTypeError),
        (lambda s: MemoryPipeline(s, {"ground_facts": False}, merge_entities=False),
         InvalidInputError),
        (lambda s: MemoryPipeline(s, [("ground_facts", False)]), InvalidTypeError),
        (lambda s: MemoryPipeline(s, {"embed_batch_size": 0}), InvalidInputError),
        (lambda s: MemoryPipeline(s, {"theme_candidates": 0}), InvalidInputError),
        (lambda s: MemoryPipeline(s, {"store": s}), InvalidTypeError),
    ],
    ids=["unknown", "mixed", "not-a-mapping", "batch", "candidates", "store-inside"],
)
async def test_pipeline_options_object_errors_are_typed_and_write_nothing(
    store: Any, call: Any, error: type[Exception]
) -> None:
    with pytest.raises(error):
        call(store)
    assert await store.list_episodes(include_invalidated=True) == []
    assert await store.find_facts(include_invalidated=True) == []


# --------------------------------------------------------------------------- retention gate


async def _trialled_candidate(store: Any, ledger: Any) -> Any:
    """A candidate lesson in two strong runs, against two weak runs without it."""
    fact = make_fact(content="always cite sources", tags=["lesson", "candidate"])
    await store.put_fact(fact)
    for i, (score, ids) in enumerate([(0.9, [fact.id]), (0.95, [fact.id]), (0.2, []),
                                      (0.25, [])]):
        await ledger.record_outcome(RunOutcome(run_id=f"r{i}", score=score, fact_ids=ids))
    return fact


async def test_evaluate_retention_takes_the_spec_policy_object(store: Any, ledger: Any) -> None:
    fact = await _trialled_candidate(store, ledger)
    # The default policy needs 3 trials: the candidate is held, nothing changes.
    held = await evaluate_retention(store, ledger, {})
    assert [h.fact_id for h in held.held] == [fact.id] and held.promoted == []
    report = await evaluate_retention(
        store, ledger, {"min_trials": 2, "decision_rule": "margin", "promote_margin": 0.05}
    )
    assert [p.fact_id for p in report.promoted] == [fact.id]
    stored = await store.get_fact(fact.id)
    assert stored is not None and "candidate" not in stored.tags


@pytest.mark.parametrize(
    "policy",
    [{"minTrials": 2}, {"min_trials": 0}, {"decision_rule": "bayes"}],
    ids=["camel-case", "range", "literal"],
)
async def test_a_bad_policy_object_is_refused_before_anything_changes(
    store: Any, ledger: Any, policy: dict[str, Any]
) -> None:
    fact = await _trialled_candidate(store, ledger)
    with pytest.raises(ValidationError):
        await evaluate_retention(store, ledger, policy)
    assert await store.get_fact(fact.id) == fact


# --------------------------------------------------------------------------- simulator


async def test_simulate_gate_takes_the_spec_config_object(store: Any, ledger: Any) -> None:
    config = {
        "lessons": [{"id": "good", "true_effect": 0.3},
                    {"id": "bad", "true_effect": -0.3, "arrives_at_run": 2}],
        "runs": 40,
        "seed": 5,
        "noise_sd": 0.05,
        "policy": {"noise_floor_sd": 0.05, "max_baseline_runs": 16},
        "retrieval": {"max_facts": 4, "candidate_slots": 2, "rest_after_trials": 3},
        "gate_every": 2,
    }

    async def backend() -> tuple[Any, Any]:
        return store, ledger

    got = await simulate_gate(config, backend=backend)
    model = GateSimulationConfig(
        lessons=config["lessons"],
        runs=40,
        seed=5,
        noise_sd=0.05,
        policy=RetentionPolicy(noise_floor_sd=0.05, max_baseline_runs=16),
        retrieval={"max_facts": 4, "candidate_slots": 2, "rest_after_trials": 3},
        gate_every=2,
    )
    want = await simulate_gate(model)  # in memory
    assert got.run_scores == want.run_scores
    assert [(x.id, x.outcome, x.reason, x.decided_at_run) for x in got.lessons] == [
        (x.id, x.outcome, x.reason, x.decided_at_run) for x in want.lessons
    ]
    assert len(got.gate_reports) == len(want.gate_reports) == 20
    assert [g.after_run for g in got.gate_reports][:2] == [1, 3]  # gate_every=2 applied


async def test_operating_characteristics_take_the_spec_config_object(
    store: Any, ledger: Any
) -> None:
    calls: list[int] = []

    async def backend() -> tuple[Any, Any]:
        calls.append(1)
        return store, ledger

    # The spec's example, one cell (one fresh backend per replicate).
    config = {
        "effects": [0.3],
        "run_counts": [30],
        "noise_sds": [0.1],
        "replicates": 1,
        "policy": {"noise_floor_sd": 0.1, "max_baseline_runs": 64},
        "retrieval": {"rest_after_trials": 3},
    }
    rows = await gate_operating_characteristics(config, backend=backend)
    want = await gate_operating_characteristics(OperatingCharacteristicsConfig(**config))
    assert [r.model_dump() for r in rows] == [r.model_dump() for r in want]
    assert calls == [1] and len(rows) == 1 and rows[0].runs == 30


# --------------------------------------------------------------------------- reads


async def test_retrieval_and_listings_take_the_spec_option_objects(store: Any, index: Any) -> None:
    alice = make_entity(name="Alice", entity_type="person")
    acme = make_entity(name="Acme", entity_type="organization")
    for entity in (alice, acme):
        await store.put_entity(entity)
    edge = make_relationship(alice.id, acme.id, relation_type="work_at")
    await store.put_relationship(edge)
    episodes = [
        make_episode(started_at=at(days=i), ended_at=at(days=i),
                     messages=[make_message(timestamp=at(days=i))])
        for i in range(3)
    ]
    for episode in episodes:
        await store.put_episode(episode)
    lesson = make_fact(content="cite sources", tags=["lesson", "graph:research-v1"],
                       embedding=unit(0), entity_ids=[alice.id])
    poisoned = make_fact(content="skip checks", tags=["lesson", "quarantined"],
                         embedding=unit(0))
    other = make_fact(content="unrelated", tags=["misc"], embedding=unit(1),
                      valid_from=at(days=1))
    for fact in (lesson, poisoned, other):
        await store.put_fact(fact)
    if hasattr(index, "rebuild"):
        await index.rebuild(store)

    # retrieveMemory(store, index, { tags: ['lesson', 'graph:research-v1'], limit: 10 })
    query = {"tags": ["lesson", "graph:research-v1"], "limit": 10}
    by_tags = await retrieve_memory(store, index, query)
    assert [f.id for f in by_tags.facts] == [lesson.id]
    by_model = await retrieve_memory(store, index, MemoryQuery(**query))
    assert [f.id for f in by_model.facts] == [lesson.id]
    by_entities = await retrieve_memory(store, index, {"entity_ids": [alice.id], "max_hops": 1})
    assert {e.id for e in by_entities.entities} == {alice.id, acme.id}
    assert [r.id for r in by_entities.relationships] == [edge.id]

    # findFacts({ tags, excludeTags }), findEntities({ entityType }), listEpisodes({ limit,
    # offset }), getRelationshipsForEntity(id, { direction }), searchFacts(v, { limit, ... })
    found = await store.find_facts({"tags": ["lesson"], "exclude_tags": ["quarantined"]})
    assert [f.id for f in found] == [lesson.id]
    assert [e.id for e in await store.find_entities({"entity_type": "person"})] == [alice.id]
    page = await store.list_episodes({"limit": 1, "offset": 1})
    assert [e.id for e in page] == [episodes[1].id]
    assert await store.get_relationships_for_entity(acme.id, {"direction": "outgoing"}) == []
    incoming = await store.get_relationships_for_entity(acme.id, {"direction": "incoming"})
    assert [r.id for r in incoming] == [edge.id]
    hits = await index.search_facts(unit(0), {"limit": 5, "min_similarity": 0.5,
                                              "exclude_tags": ["quarantined"]})
    assert [h.item.id for h in hits] == [lesson.id]
    with pytest.raises(ValidationError):
        await store.find_facts({"excludeTags": ["quarantined"]})
    with pytest.raises(ValidationError):
        await index.search_facts(unit(0), {"minSimilarity": 0.5})

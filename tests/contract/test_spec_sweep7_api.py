"""Spec conformance sweep, seventh round (both backends): the spec's call shapes.

The spec passes options as one object in several places; the library took only keyword
arguments there, so a caller following the spec got a ``TypeError``:

* ``retrieveGatedLessons(store, options: GatedLessonOptions)``;
* ``extractSubgraph(store, seedEntityIds, opts?: SubgraphOptions)``;
* ``new MemoryConsolidator(store, index, options?)``, ``new ConflictDetector(store, index,
  options?)``, ``new EntityResolver(store, options?)``;
* ``autoConsolidate(thresholds)`` with the counts named after the consolidator's budgets
  (``max_facts`` / ``max_episodes``) was refused as unknown keys;
* the ``logger`` option is ``{ debug?, warn? }`` in the spec (each level optional, the
  warning level spelled ``warn``); a logger without ``info`` and ``warning`` was refused.

Each form must do exactly what the keyword form does, and mixing the two forms is a typed
error that touches nothing.
"""

from __future__ import annotations

import itertools
from datetime import timedelta
from types import SimpleNamespace
from typing import Any

import pytest
from pydantic import ValidationError

from cycgraph_memory import (
    ConflictDetector,
    EntityResolver,
    GatedLessonOptions,
    InMemoryOutcomeLedger,
    MemoryConsolidator,
    SubgraphOptions,
    extract_subgraph,
    retrieve_gated_lessons,
)
from cycgraph_memory.errors import InvalidInputError, InvalidTypeError
from cycgraph_memory.records import RunOutcome

from .factories import BASE_TIME, at, make_entity, make_episode, make_fact, make_relationship, unit


async def _lessons(store: Any) -> dict[str, Any]:
    """Three verified lessons, three candidates (one with trials), one quarantined."""
    facts = {
        **{
            f"v{i}": make_fact(content=f"verified {i}", tags=["lesson", "verified"],
                               valid_from=at(days=i))
            for i in range(3)
        },
        **{
            f"c{i}": make_fact(content=f"candidate {i}", tags=["lesson", "candidate"],
                               valid_from=at(days=10 + i))
            for i in range(3)
        },
        "q": make_fact(content="poisoned", tags=["lesson", "quarantined"], valid_from=at(days=20)),
    }
    for fact in facts.values():
        await store.put_fact(fact)
    return facts


@pytest.mark.parametrize("as_model", [True, False], ids=["model", "dict"])
async def test_retrieve_gated_lessons_takes_the_spec_options_object(
    store: Any, as_model: bool
) -> None:
    facts = await _lessons(store)
    ledger = InMemoryOutcomeLedger()
    await ledger.record_outcome(RunOutcome(run_id="r1", score=0.5, fact_ids=[facts["c0"].id]))
    fields: dict[str, Any] = {
        "tags": ["lesson", "graph:research-v1"],
        "max_facts": 4,
        "candidate_slots": 2,
        "ledger": ledger,
        "rest_after_trials": 3,
    }
    options = GatedLessonOptions(**fields) if as_model else fields

    got = await retrieve_gated_lessons(store, options)

    assert got == await retrieve_gated_lessons(store, **fields)
    # Verified newest first (2 places), then candidates in progress first (c0 has a
    # trial), then the oldest fresh one; the quarantined lesson never appears.
    assert [f.content for f in got] == ["verified 2", "verified 1", "candidate 0", "candidate 1"]


async def test_gated_lesson_options_defaults_are_the_spec_defaults(store: Any) -> None:
    options = GatedLessonOptions(tags=["lesson"])
    assert (options.candidate_tag, options.max_facts, options.candidate_slots) == (
        "candidate", 10, 2
    )
    assert options.ledger is None and options.rest_after_trials is None
    await _lessons(store)
    got = await retrieve_gated_lessons(store, {"tags": ["lesson"]})
    # Two candidate slots, no ledger: the newest candidates; verified lessons fill the rest.
    assert [f.content for f in got] == [
        "verified 2", "verified 1", "verified 0", "candidate 2", "candidate 1"
    ]


@pytest.mark.parametrize(
    ("options", "kwargs", "error"),
    [
        ({"tags": ["lesson"]}, {"max_facts": 3}, InvalidInputError),  # both forms
        ({"tags": ["lesson"]}, {"tags": ["other"]}, InvalidInputError),
        ({"max_facts": 3}, {}, ValidationError),  # tags are required
        ({"tags": ["lesson"], "maxFacts": 3}, {}, ValidationError),  # unknown key
        ({"tags": ["lesson"], "max_facts": 0}, {}, InvalidInputError),  # same range rule
        ({"tags": ["lesson"], "rest_after_trials": 3}, {}, InvalidInputError),  # no ledger
        (["lesson"], {}, InvalidTypeError),
    ],
)
async def test_gated_lesson_options_object_is_validated(
    store: Any, options: Any, kwargs: dict[str, Any], error: type[Exception]
) -> None:
    await _lessons(store)
    with pytest.raises(error):
        await retrieve_gated_lessons(store, options, **kwargs)


async def test_retrieve_gated_lessons_without_tags_is_a_typed_error(store: Any) -> None:
    with pytest.raises(InvalidInputError, match="tags"):
        await retrieve_gated_lessons(store)


async def _chain(store: Any) -> list[Any]:
    """a -> b -> c -> d, the last edge ended before BASE_TIME + 10 days."""
    ents = [make_entity(name=n, entity_type="person") for n in "abcd"]
    for e in ents:
        await store.put_entity(e)
    for i, (s, t) in enumerate(itertools.pairwise(ents)):
        until = at(days=5) if i == 2 else None
        await store.put_relationship(
            make_relationship(s.id, t.id, relation_type="knows", valid_until=until)
        )
    return ents


@pytest.mark.parametrize("as_model", [True, False], ids=["model", "dict"])
async def test_extract_subgraph_takes_the_spec_opts_object(store: Any, as_model: bool) -> None:
    a, b, c, _d = await _chain(store)
    fields: dict[str, Any] = {"max_hops": 1}
    opts = SubgraphOptions(**fields) if as_model else fields
    one = await extract_subgraph(store, [a.id], opts)
    assert [e.id for e in one.entities] == [a.id, b.id]
    assert one == await extract_subgraph(store, [a.id], max_hops=1)

    later = {"max_hops": 5, "valid_at": BASE_TIME + timedelta(days=10)}
    opts = SubgraphOptions(**later) if as_model else later
    far = await extract_subgraph(store, [a.id], opts)
    assert {e.id for e in far.entities} == {a.id, b.id, c.id}  # c -> d had ended
    assert SubgraphOptions().max_hops == 2 and SubgraphOptions().max_entities == 500


@pytest.mark.parametrize(
    ("opts", "kwargs", "error"),
    [
        ({"max_hops": 1}, {"max_hops": 3}, InvalidInputError),
        ({"max_hops": 6}, {}, InvalidInputError),  # the 0-5 range, as for keywords
        ({"maxHops": 1}, {}, ValidationError),
        (3, {}, InvalidTypeError),
    ],
)
async def test_subgraph_opts_object_is_validated(
    store: Any, opts: Any, kwargs: dict[str, Any], error: type[Exception]
) -> None:
    a, *_ = await _chain(store)
    with pytest.raises(error):
        await extract_subgraph(store, [a.id], opts, **kwargs)


async def test_consolidator_takes_the_spec_options_object(store: Any, index: Any) -> None:
    keep = make_fact(content="fresh", valid_from=at(days=30))
    old = make_fact(content="old", valid_from=at(days=0))
    for fact in (keep, old):
        await store.put_fact(fact)
    seen: list[str] = []
    consolidator = MemoryConsolidator(
        store, index, {"max_facts": 1, "decay_half_life_days": 30, "delete_mode": "soft",
                       "batch_size": 1000, "logger": SimpleNamespace(warn=seen.append)}
    )
    report = await consolidator.consolidate()
    assert report.facts_decayed == 1
    assert [f.id for f in await store.find_facts()] == [keep.id]
    assert (await store.get_fact(old.id)).invalidated_by is not None  # soft: recoverable


async def test_constructor_options_object_refuses_mixing_and_unknown_keys(
    store: Any, index: Any
) -> None:
    await store.put_fact(make_fact(content="x"))
    with pytest.raises(InvalidInputError):
        MemoryConsolidator(store, index, {"max_facts": 0}, max_facts=0)
    with pytest.raises(InvalidTypeError):
        MemoryConsolidator(store, index, {"maxFacts": 0})
    with pytest.raises(InvalidInputError):
        MemoryConsolidator(store, index, {"max_facts": -1})  # the keyword form's rule
    with pytest.raises(InvalidTypeError):
        ConflictDetector(store, index, {"embeddingThreshold": 0.8})
    with pytest.raises(InvalidInputError):
        ConflictDetector(store, index, {"policy": "newest"})
    with pytest.raises(InvalidTypeError):
        EntityResolver(store, ["soft"])  # type: ignore[arg-type]
    assert len(await store.find_facts()) == 1


async def test_conflict_detector_takes_the_spec_options_object(store: Any, index: Any) -> None:
    alice = make_entity(name="Alice", entity_type="person")
    await store.put_entity(alice)
    old = make_fact(content="Alice lives in Paris city centre", entity_ids=[alice.id],
                    valid_from=at(days=0), embedding=unit(0))
    new = make_fact(content="Alice lives in Paris city centre now", entity_ids=[alice.id],
                    valid_from=at(days=3), embedding=unit(0))
    for fact in (old, new):
        await store.put_fact(fact)
    wide = ConflictDetector(store, index, {"supersession_day_threshold": 5})
    assert await wide.detect_conflicts() == []
    detector = ConflictDetector(
        store, index, {"embedding_threshold": 0.8, "policy": "supersede-on-newer"}
    )
    conflicts = await detector.detect_conflicts()
    assert [(c.type, c.confidence) for c in conflicts] == [("supersession", 0.9)]
    report = await detector.auto_resolve_all(conflicts)  # the options' default policy
    assert report.resolved == 1
    assert (await store.get_fact(old.id)).invalidated_by == str(new.id)


async def test_entity_resolver_takes_the_spec_options_object(store: Any) -> None:
    first = make_entity(name="Alice Smith", entity_type="person", created_at=at(days=0))
    dup = make_entity(name="the alice smith.", entity_type="person", created_at=at(days=1))
    for e in (first, dup):
        await store.put_entity(e)
    debug: list[str] = []
    resolver = EntityResolver(
        store,
        {"delete_mode": "soft", "batch_size": 10, "logger": SimpleNamespace(debug=debug.append)},
    )
    report = await resolver.resolve()
    assert (report.groups_merged, report.entities_absorbed) == (1, 1)
    assert (await store.get_entity(dup.id)).superseded_by == first.id


@pytest.mark.parametrize(
    "thresholds",
    [{"max_facts": 1}, {"facts": 1}, {"max_episodes": 1}, {"episodes": 1}],
)
async def test_auto_consolidate_thresholds_by_budget_names(
    store: Any, index: Any, thresholds: dict[str, int]
) -> None:
    facts = [make_fact(content=f"fact {i}", valid_from=at(days=i)) for i in range(2)]
    for fact in facts:
        await store.put_fact(fact)
    for i in range(2):
        await store.put_episode(make_episode(started_at=at(days=i), ended_at=at(days=i)))
    assert await MemoryConsolidator.should_consolidate(store, thresholds) is True
    assert await MemoryConsolidator.should_consolidate(
        store, {k: 2 for k in thresholds}
    ) is False
    consolidator = MemoryConsolidator(store, index, max_facts=1, max_episodes=1)
    assert await consolidator.auto_consolidate({k: 2 for k in thresholds}) is None
    assert len(await store.find_facts()) == 2  # nothing ran
    report = await consolidator.auto_consolidate(thresholds)
    assert report is not None and report.facts_decayed == 1 and report.episodes_pruned == 1


async def test_thresholds_given_twice_are_refused(store: Any) -> None:
    with pytest.raises(ValidationError):
        await MemoryConsolidator.should_consolidate(store, {"facts": 1, "max_facts": 2})


@pytest.mark.parametrize(
    "logger",
    [
        SimpleNamespace(warn=lambda msg: None),
        SimpleNamespace(debug=lambda msg: None),
        SimpleNamespace(debug=lambda msg: None, warn=lambda msg: None),
    ],
    ids=["warn", "debug", "debug+warn"],
)
async def test_a_spec_shaped_partial_logger_is_accepted(
    store: Any, index: Any, logger: Any
) -> None:
    dup_a = make_fact(content="use retries", embedding=unit(1), valid_from=at(days=0))
    dup_b = make_fact(content="use retries!", embedding=unit(1), valid_from=at(days=1))
    for fact in (dup_a, dup_b):
        await store.put_fact(fact)
    report = await MemoryConsolidator(store, index, logger=logger, debug=True).consolidate()
    assert report.facts_deduped == 1
    assert (await EntityResolver(store, logger=logger).resolve()).groups_merged == 0


async def test_a_partial_logger_receives_formatted_messages(store: Any, index: Any) -> None:
    lines: list[str] = []
    await store.put_fact(make_fact(content="a", embedding=unit(1)))
    await store.put_fact(make_fact(content="b", embedding=unit(1), valid_from=at(days=1)))
    await MemoryConsolidator(
        store, index, debug=True, logger=SimpleNamespace(debug=lines.append)
    ).consolidate()
    assert lines and all(isinstance(line, str) and "%s" not in line for line in lines)
    assert any("fact_merged" in line for line in lines)

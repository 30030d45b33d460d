"""Audit 12, ConflictDetector black-box against the spec, on both backends.

Sentences pinned here (spec "Consolidation > ConflictDetector" and "API > ConflictDetector")
that no earlier test held to the spec's own value:

* ``embeddingThreshold`` defaults to 0.8, ``semanticOverlapThreshold`` to 0.3 and
  ``supersessionDayThreshold`` to 1 ("more than N days apart");
* ``semantic_contradiction`` confidence is "0.3-0.7 (scaled by fact length)": both ends;
* ``supersession`` needs the "same entities", not just a shared one;
* ``supersede-on-newer`` "always keep[s] the newer fact", also when the newer one is the
  positive statement of a negation pair;
* ``autoResolveSupersession`` resolves supersessions only;
* ``resolveConflict(conflict, 'keep_b')``: "the losing fact is invalidated by the winner",
  and every read path (listing, index search, retrieval) stops serving it by default.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from cycgraph_memory import ConflictDetector
from cycgraph_memory.records import MemoryQuery, SemanticFact
from cycgraph_memory.retrieval import retrieve_memory

from .factories import at, make_fact, store_referents, unit, vec

ALICE, ACME = uuid.uuid4(), uuid.uuid4()


def fact(content: str, day: float, entities: list[uuid.UUID], **kw: Any) -> SemanticFact:
    return make_fact(content=content, valid_from=at(days=day), entity_ids=entities, **kw)


@pytest.fixture(autouse=True)
async def _entities(store: Any) -> None:
    await store_referents(store, entities=[ALICE, ACME])


def kinds(conflicts: list[Any]) -> list[tuple[str, str, str, float]]:
    return [(c.type, c.fact_a.content, c.fact_b.content, round(c.confidence, 9)) for c in conflicts]


async def test_embedding_threshold_defaults_to_0_8(store: Any) -> None:
    # Cosine exactly 0.8 (1 / 1.25) reaches the default threshold; 0.776 does not.
    a = fact("Acme is profitable", 0, [ACME], embedding=unit(0))
    at_threshold = fact("the company loses money", 0.5, [ACME], embedding=vec(1, 0.75))
    await store.put_facts([a, at_threshold])
    assert kinds(await ConflictDetector(store).detect_conflicts()) == [
        ("semantic_contradiction", a.content, at_threshold.content, 0.3 + 0.4 * 3 / 20)
    ]
    await store.put_fact(at_threshold.model_copy(update={"embedding": vec(1, 0.8125)}))
    assert await ConflictDetector(store).detect_conflicts() == []


async def test_semantic_overlap_threshold_defaults_to_0_3(store: Any) -> None:
    a = fact("alpha beta gamma delta epsilon zeta", 0, [ACME], embedding=unit(0))
    # Word overlap 3 / 10 = 0.3: not below the default ceiling, so no contradiction.
    b = fact("alpha beta gamma eta theta iota kappa", 0.5, [ACME], embedding=unit(0))
    await store.put_facts([a, b])
    assert await ConflictDetector(store).detect_conflicts() == []
    # Word overlap 2 / 9 = 0.22: below it; 5 words in the shorter fact -> 0.3 + 0.4 * 5/20.
    c = fact("alpha beta gamma delta epsilon", 0, [ACME], embedding=unit(0))
    d = fact("alpha beta eta theta iota kappa", 0.5, [ACME], embedding=unit(0))
    await store.put_facts([c.model_copy(update={"id": a.id}), d.model_copy(update={"id": b.id})])
    assert kinds(await ConflictDetector(store).detect_conflicts()) == [
        ("semantic_contradiction", c.content, d.content, 0.4)
    ]


async def test_supersession_day_threshold_defaults_to_one_day(store: Any) -> None:
    paris = fact("Alice lives in Paris", 0, [ALICE], embedding=unit(0))
    rome = fact("Alice lives in Rome", 1, [ALICE], embedding=vec(1, 0.25))
    await store.put_facts([paris, rome])
    # Exactly one day apart is not "more than 1 day apart".
    assert await ConflictDetector(store).detect_conflicts() == []
    await store.put_fact(rome.model_copy(update={"valid_from": at(days=1, seconds=60)}))
    assert kinds(await ConflictDetector(store).detect_conflicts()) == [
        ("supersession", paris.content, rome.content, 0.9)
    ]


async def test_semantic_contradiction_confidence_spans_0_3_to_0_7(store: Any) -> None:
    one_word = fact("profitable", 0, [ACME], embedding=vec(0.25, 1))
    long_a = fact(" ".join(f"alpha{i}" for i in range(25)), 0, [ALICE], embedding=unit(1))
    long_b = fact(
        " ".join(f"beta{i}" for i in range(30)), 0.5, [ALICE, ACME], embedding=vec(0.25, 1)
    )
    await store.put_facts([one_word, long_a, long_b])
    got = sorted(kinds(await ConflictDetector(store).detect_conflicts()), key=lambda k: k[3])
    # The shorter fact has 1 word (0.3 + 0.4 / 20), then 25 words (capped at 0.7).
    assert [(k[0], k[3]) for k in got] == [
        ("semantic_contradiction", 0.32),
        ("semantic_contradiction", 0.7),
    ]
    assert {k[1] for k in got} | {k[2] for k in got} == {
        one_word.content,
        long_a.content,
        long_b.content,
    }


async def test_supersession_needs_the_same_entities(store: Any) -> None:
    paris = fact("Alice lives in Paris", 0, [ALICE], embedding=unit(0))
    rome = fact("Alice lives in Rome", 5, [ALICE, ACME], embedding=vec(1, 0.25))
    await store.put_facts([paris, rome])
    assert await ConflictDetector(store).detect_conflicts() == []  # one shared entity only
    await store.put_fact(rome.model_copy(update={"entity_ids": [ALICE]}))
    assert [c.type for c in await ConflictDetector(store).detect_conflicts()] == ["supersession"]


async def test_supersede_on_newer_keeps_the_newer_fact_even_against_a_negation(
    store: Any, index: Any
) -> None:
    negation = fact("Alice is not the CEO of Acme", 1, [ALICE, ACME])
    positive = fact("Alice is the CEO of Acme", 3, [ALICE, ACME])
    await store.put_facts([negation, positive])
    detector = ConflictDetector(store, index, policy="supersede-on-newer")
    conflicts = await detector.detect_conflicts()
    assert [c.type for c in conflicts] == ["negation"]
    report = await detector.auto_resolve_all(conflicts)
    assert (report.resolved, report.skipped) == (1, 0)
    assert [(d.action, d.conflict.fact_a.id) for d in report.details] == [("keep_b", negation.id)]
    loser = await store.get_fact(negation.id)
    assert loser is not None and loser.invalidated_by == str(positive.id)
    # The same conflicts under the detector's other policy keep the negation instead.
    await store.put_fact(negation)
    other = await detector.auto_resolve_all(conflicts, "negation-invalidates-positive")
    assert other.resolved == 1
    kept = await store.get_fact(positive.id)
    assert kept is not None and kept.invalidated_by == str(negation.id)


async def test_auto_resolve_supersession_resolves_supersessions_only(store: Any) -> None:
    works = fact("Alice works at Acme", 1, [ALICE, ACME])
    not_works = fact("Alice doesn't work at Acme", 1.5, [ALICE, ACME])
    paris = fact("Alice lives in Paris", 1, [ALICE], embedding=unit(0))
    rome = fact("Alice lives in Rome", 5, [ALICE], embedding=vec(1, 0.25))
    await store.put_facts([works, not_works, paris, rome])
    detector = ConflictDetector(store, auto_resolve_supersession=True)
    found = await detector.detect_conflicts()
    assert sorted(c.type for c in found) == ["negation", "supersession"]
    live = {f.id for f in await store.find_facts()}
    assert live == {works.id, not_works.id, rome.id}
    gone = await store.get_fact(paris.id)
    assert gone is not None and gone.invalidated_by == str(rome.id)


async def test_keep_b_invalidates_a_by_b_and_every_read_path_drops_it(
    store: Any, index: Any
) -> None:
    paris = fact("Alice lives in Paris", 1, [ALICE], embedding=unit(0), tags=["home"])
    rome = fact("Alice lives in Rome", 5, [ALICE], embedding=vec(1, 0.25), tags=["home"])
    await store.put_facts([paris, rome])
    await index.rebuild(store)
    detector = ConflictDetector(store, index)
    [conflict] = await detector.detect_conflicts()
    detail = await detector.resolve_conflict(conflict, "keep_b")
    assert (detail.action, detail.conflict.fact_a.id, detail.conflict.fact_b.id) == (
        "keep_b",
        paris.id,
        rome.id,
    )
    loser = await store.get_fact(paris.id)
    assert loser is not None and loser.invalidated_by == str(rome.id)
    assert loser.model_copy(update={"invalidated_by": None}) == paris  # nothing else changed
    assert [f.id for f in await store.find_facts()] == [rome.id]
    assert {f.id for f in await store.find_facts(include_invalidated=True)} == {paris.id, rome.id}
    hits = await index.search_facts(unit(0), limit=5, min_similarity=0.0)
    assert [h.item.id for h in hits] == [rome.id]
    for query in (
        MemoryQuery(embedding=unit(0), min_similarity=0.0),
        MemoryQuery(tags=["home"]),
        MemoryQuery(entity_ids=[ALICE]),
    ):
        result = await retrieve_memory(store, index, query)
        assert [f.id for f in result.facts] == [rome.id], query
    audit = await retrieve_memory(
        store, index, MemoryQuery(tags=["home"], include_invalidated=True)
    )
    assert {f.id for f in audit.facts} == {paris.id, rome.id}

"""ConflictDetector on both backends: the three conflict types and the three policies."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from cycgraph_memory import QUARANTINE_TAG, ConflictDetector, InvalidInputError
from cycgraph_memory.records import SemanticFact

from .factories import at, make_fact, store_referents, unit, vec

ALICE, ACME, BOB = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
NEAR = vec(1, 0.25)  # cosine 0.970 with unit(0)


def fact(content: str, day: float, entities: list[uuid.UUID], **kw: Any) -> SemanticFact:
    return make_fact(content=content, valid_from=at(days=day), entity_ids=entities, **kw)


@pytest.fixture(autouse=True)
async def _people(store: Any) -> None:
    await store_referents(store, entities=[ALICE, ACME, BOB])  # facts cite stored entities


@pytest.fixture
def facts() -> dict[str, SemanticFact]:
    return {
        "works": fact("Alice works at Acme", 1, [ALICE, ACME]),
        "not_works": fact("Alice doesn't work at Acme", 1.5, [ALICE, ACME]),
        "paris": fact("Alice lives in Paris", 1, [ALICE], embedding=unit(0)),
        "rome": fact("Alice lives in Rome", 5, [ALICE], embedding=NEAR),
        "profit": fact("Acme is profitable", 2, [ACME], embedding=unit(1)),
        "loss": fact(
            "the company loses money every quarter", 2.5, [ACME, BOB], embedding=vec(0.25, 1)
        ),
        "bob": fact("Bob doesn't like Acme", 3, [BOB]),  # shares no entity with a positive
    }


async def seeded(store: Any, facts: dict[str, SemanticFact]) -> None:
    await store.put_facts(facts.values())


def summary(conflicts: list[Any]) -> list[tuple[str, str, str, float]]:
    return [(c.type, c.fact_a.content, c.fact_b.content, round(c.confidence, 6)) for c in conflicts]


async def test_detects_the_three_types_read_only(store: Any, index: Any, facts: Any) -> None:
    await seeded(store, facts)
    before = await store.find_facts(include_invalidated=True)
    conflicts = await ConflictDetector(store, index).detect_conflicts()
    assert sorted(summary(conflicts)) == sorted(
        [
            ("negation", "Alice works at Acme", "Alice doesn't work at Acme", 0.8),
            ("supersession", "Alice lives in Paris", "Alice lives in Rome", 0.9),
            # 3 words in the shorter fact: 0.3 + 0.4 * 3 / 20
            (
                "semantic_contradiction", "Acme is profitable",
                "the company loses money every quarter", 0.36,
            ),
        ]
    )
    assert await store.find_facts(include_invalidated=True) == before


async def test_negation_words_match_whole_words_only(store: Any) -> None:
    a = fact("alice found a significant knot", 1, [ALICE])
    b = fact("alice found a significant knot today", 1, [ALICE])
    c = fact("alice cannot find a significant knot", 1, [ALICE])
    await store.put_facts([a, b])
    assert await ConflictDetector(store).detect_conflicts() == []
    found = await ConflictDetector(store).detect_conflicts([a, c])
    assert summary(found) == [
        ("negation", a.content, c.content, 0.8),
    ] or summary(found) == [("negation", c.content, a.content, 0.8)]


async def test_supersession_day_threshold(store: Any, facts: Any) -> None:
    await store.put_facts([facts["paris"], facts["rome"]])
    assert await ConflictDetector(store, supersession_day_threshold=10).detect_conflicts() == []
    # Four days apart: the spec's "more than N days apart", so N = 4 is not a supersession.
    assert await ConflictDetector(store, supersession_day_threshold=4).detect_conflicts() == []
    detector = ConflictDetector(store, supersession_day_threshold=3.9)
    assert len(await detector.detect_conflicts()) == 1


async def test_quarantined_facts_are_ignored(store: Any, facts: Any) -> None:
    poisoned = facts["not_works"].model_copy(update={"tags": [QUARANTINE_TAG]})
    await store.put_facts([facts["works"], poisoned])
    assert await ConflictDetector(store).detect_conflicts() == []


async def test_auto_resolve_supersession_inline(store: Any, index: Any, facts: Any) -> None:
    await store.put_facts([facts["paris"], facts["rome"]])
    detector = ConflictDetector(store, index, auto_resolve_supersession=True)
    assert len(await detector.detect_conflicts()) == 1
    old = await store.get_fact(facts["paris"].id)
    assert old is not None and old.invalidated_by == str(facts["rome"].id)
    assert await detector.detect_conflicts() == []


async def test_manual_review_resolves_nothing(store: Any, facts: Any) -> None:
    await seeded(store, facts)
    detector = ConflictDetector(store)
    conflicts = await detector.detect_conflicts()
    report = await detector.auto_resolve_all(conflicts)
    assert report.resolved == 0 and report.skipped == 3
    assert {d.action for d in report.details} == {"skipped"}
    assert all(f.invalidated_by is None for f in await store.find_facts(include_invalidated=True))


async def test_supersede_on_newer(store: Any, facts: Any) -> None:
    await seeded(store, facts)
    detector = ConflictDetector(store, policy="supersede-on-newer")
    report = await detector.auto_resolve_all(await detector.detect_conflicts())
    assert report.resolved == 3 and report.skipped == 0
    f = facts
    for loser, winner in (("works", "not_works"), ("paris", "rome"), ("profit", "loss")):
        got = await store.get_fact(f[loser].id)
        assert got is not None and got.invalidated_by == str(f[winner].id)
    again = await detector.auto_resolve_all(await detector.detect_conflicts())
    assert again.resolved == 0 and again.skipped == 0


async def test_negation_invalidates_positive(store: Any) -> None:
    # Here the negation is the OLDER fact: it is kept anyway.
    neg = fact("Alice is not the CEO of Acme", 1, [ALICE, ACME])
    pos = fact("Alice is the CEO of Acme", 3, [ALICE, ACME])
    paris = fact("Alice lives in Paris", 1, [ALICE], embedding=unit(0))
    rome = fact("Alice lives in Rome", 5, [ALICE], embedding=NEAR)
    profit = fact("Acme is profitable", 2, [ACME], embedding=unit(1))
    loss = fact("the company loses money", 2.5, [ACME], embedding=vec(0.25, 1))
    await store.put_facts([neg, pos, paris, rome, profit, loss])
    detector = ConflictDetector(store)
    conflicts = await detector.detect_conflicts()
    assert sorted(c.type for c in conflicts) == [
        "negation", "semantic_contradiction", "supersession"
    ]
    report = await detector.auto_resolve_all(conflicts, "negation-invalidates-positive")
    assert report.resolved == 2 and report.skipped == 1
    assert (await store.get_fact(pos.id)).invalidated_by == str(neg.id)  # type: ignore[union-attr]
    assert (await store.get_fact(paris.id)).invalidated_by == str(rome.id)  # type: ignore[union-attr]
    assert (await store.get_fact(profit.id)).invalidated_by is None  # type: ignore[union-attr]
    skipped = [d for d in report.details if d.action == "skipped"]
    assert skipped[0].conflict.type == "semantic_contradiction"
    # resolving the same conflicts again changes nothing
    again = await detector.auto_resolve_all(conflicts, "negation-invalidates-positive")
    assert again.resolved == 0 and again.skipped == 3


async def test_resolve_conflict_by_hand(store: Any, facts: Any) -> None:
    await store.put_facts([facts["paris"], facts["rome"]])
    detector = ConflictDetector(store)
    [conflict] = await detector.detect_conflicts()
    both = await detector.resolve_conflict(conflict, "keep_both")
    assert both.action == "keep_both"
    assert all(f.invalidated_by is None for f in await store.find_facts())
    detail = await detector.resolve_conflict(conflict, "keep_a")
    assert detail.action == "keep_a"
    loser = await store.get_fact(facts["rome"].id)
    assert loser is not None and loser.invalidated_by == str(facts["paris"].id)
    with pytest.raises(InvalidInputError):
        await detector.resolve_conflict(conflict, "keep_c")  # type: ignore[arg-type]


async def test_bad_options_are_rejected(store: Any) -> None:
    for kw in (
        {"policy": "yolo"},
        {"embedding_threshold": 2},
        {"semantic_overlap_threshold": -0.1},
        {"supersession_day_threshold": -1},
        {"batch_size": 0},
    ):
        with pytest.raises(InvalidInputError):
            ConflictDetector(store, **kw)
    with pytest.raises(InvalidInputError):
        await ConflictDetector(store).auto_resolve_all([], "yolo")  # type: ignore[arg-type]


async def test_facts_of_disjoint_periods_never_conflict(store: Any, index: Any) -> None:
    # "Alice works at Acme" ended at day 3: a negation said at day 3 or later is history,
    # not a contradiction, and no policy may invalidate the ended fact (a valid_at query
    # inside its period must still find it). Said at day 2, while the fact held, it is.
    ended = fact("Alice works at Acme", 1, [ALICE, ACME], valid_until=at(days=3))
    later = fact("Alice doesn't work at Acme", 3, [ALICE, ACME])
    paris = fact("Alice lives in Paris", 1, [ALICE], embedding=unit(0), valid_until=at(days=5))
    rome = fact("Alice lives in Rome", 5, [ALICE], embedding=NEAR)
    await store.put_facts([ended, later, paris, rome])
    detector = ConflictDetector(store, index, policy="supersede-on-newer")
    assert await detector.detect_conflicts() == []
    report = await detector.auto_resolve_all(await detector.detect_conflicts())
    assert report.resolved == 0
    assert all(f.invalidated_by is None for f in await store.find_facts())
    during = fact("Alice doesn't work at Acme", 2, [ALICE, ACME])
    await store.put_facts([during])
    assert summary(await detector.detect_conflicts()) == [
        ("negation", "Alice works at Acme", "Alice doesn't work at Acme", 0.8)
    ]

"""Consolidation audit (round 3), on both backends: checks written from the spec alone.

Each test states the documented behaviour it checks; the ones named after a bug failed
before the fix that came with them.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

import pytest
from pydantic import ValidationError

from cycgraph_memory import (
    MAX_ACCESS_COUNT,
    QUARANTINE_TAG,
    ConflictDetector,
    ConsolidationReport,
    EntityResolver,
    InvalidInputError,
    InvalidTypeError,
    MemoryConsolidator,
)
from cycgraph_memory.consolidation.consolidator import DECAY_REASON

from .factories import (
    at,
    make_entity,
    make_fact,
    make_relationship,
    make_theme,
    provenance,
    unit,
    vec,
)

NOW = at(days=100)
NEAR = vec(1, 0.25)  # cosine 0.970 with unit(0): a near duplicate at the default 0.9


def clock() -> datetime:
    return NOW


# ---------------------------------------------------------------- MemoryConsolidator


async def test_merging_duplicates_with_huge_access_counts_saturates(store: Any) -> None:
    """A keeper sums its duplicates' access counts, saturating at MAX_ACCESS_COUNT.

    ``touch_facts`` saturates there; a merge must too, or every later pass fails on the
    store's validation and the store can never be consolidated again.
    """
    old = make_fact(content="use retries", embedding=unit(0), valid_from=at(days=1),
                    access_count=MAX_ACCESS_COUNT, last_accessed_at=at(days=90))
    new = make_fact(content="use retries.", embedding=NEAR, valid_from=at(days=2),
                    access_count=7)
    await store.put_facts([old, new])
    report = await MemoryConsolidator(store, clock=clock).consolidate()
    assert report == ConsolidationReport(facts_deduped=1, total_reclaimed=1)
    kept = await store.get_fact(new.id)
    assert kept is not None and kept.access_count == MAX_ACCESS_COUNT
    assert kept.last_accessed_at == at(days=90)
    gone = await store.get_fact(old.id)
    assert gone is not None and gone.invalidated_by == str(new.id)
    assert (await MemoryConsolidator(store, clock=clock).plan()).empty


async def test_decay_scores_a_keeper_with_the_evidence_it_absorbed(store: Any) -> None:
    """Decay runs after merging, on the keeper's merged access statistics.

    The keeper itself was never read, but the duplicate it absorbs was read often and
    recently: the merged fact outranks an untouched fact of the same age, which is pruned.
    """
    keeper = make_fact(content="deploy on fridays is risky", embedding=unit(0),
                       valid_from=at(days=10))
    used = make_fact(content="deploying on fridays is risky", embedding=NEAR,
                     valid_from=at(days=5), access_count=40, last_accessed_at=at(days=99))
    plain = make_fact(content="bob likes tea", embedding=unit(3), valid_from=at(days=10))
    await store.put_facts([keeper, used, plain])
    report = await MemoryConsolidator(store, clock=clock, max_facts=1).consolidate()
    assert (report.facts_deduped, report.facts_decayed, report.total_reclaimed) == (1, 1, 2)
    assert [f.id for f in await store.find_facts()] == [keeper.id]
    pruned = await store.get_fact(plain.id)
    # soft delete: recoverable, provenance untouched, only the reason set
    assert pruned == plain.model_copy(update={"invalidated_by": DECAY_REASON})
    again = await MemoryConsolidator(store, clock=clock, max_facts=1).consolidate()
    assert again == ConsolidationReport()


async def test_hard_merge_repoints_facts_invalidated_by_an_absorbed_fact(store: Any) -> None:
    """Hard mode leaves no fact citing a deleted fact in ``invalidated_by``.

    A fact superseded by ``dup`` (an earlier conflict resolution) is re-pointed at the
    keeper that absorbed ``dup``; soft mode keeps ``dup`` and the pointer as they are.
    A quarantined fact is never touched, not even to re-point it.
    """
    dup = make_fact(content="alice lives in rome", embedding=unit(0), valid_from=at(days=2))
    keeper = make_fact(content="Alice lives in Rome.", embedding=NEAR, valid_from=at(days=3))
    stale = make_fact(content="alice lives in paris", embedding=unit(4), valid_from=at(days=1),
                      invalidated_by=str(dup.id))
    reason = make_fact(content="old", embedding=unit(5), invalidated_by="manual")
    poisoned = make_fact(content="q", embedding=unit(6), invalidated_by=str(dup.id),
                         tags=[QUARANTINE_TAG])
    await store.put_facts([dup, keeper, stale, reason, poisoned])
    report = await MemoryConsolidator(store, clock=clock, delete_mode="hard").consolidate()
    assert report.facts_deduped == 1
    assert await store.get_fact(dup.id) is None
    got = await store.get_fact(stale.id)
    assert got == stale.model_copy(update={"invalidated_by": str(keeper.id)})
    assert await store.get_fact(reason.id) == reason
    assert await store.get_fact(poisoned.id) == poisoned  # quarantined: never touched
    assert (await MemoryConsolidator(store, clock=clock, delete_mode="hard").plan()).empty


async def test_a_theme_left_with_only_invalidated_facts_is_removed(store: Any) -> None:
    """Themes with zero remaining facts are deleted: an invalidated fact does not remain.

    ``stale`` lost a conflict resolution earlier; once the theme's last live fact is
    merged away, the theme serves nothing and is removed. A theme that keeps a live fact
    is recentred on its live facts only.
    """
    stale = make_fact(content="alice lives in paris", embedding=unit(1),
                      invalidated_by=str(uuid.uuid4()))
    dup = make_fact(content="alice lives in rome", embedding=unit(0), valid_from=at(days=2))
    keeper = make_fact(content="Alice lives in Rome.", embedding=NEAR, valid_from=at(days=3))
    other = make_fact(content="bob lives in oslo", embedding=unit(2), valid_from=at(days=1))
    await store.put_facts([stale, dup, keeper, other])
    dead = make_theme(fact_ids=[stale.id, dup.id], embedding=unit(0))
    mixed = make_theme(fact_ids=[stale.id, dup.id, other.id], embedding=unit(0))
    await store.put_themes([dead, mixed])
    report = await MemoryConsolidator(store, clock=clock).consolidate()
    assert report == ConsolidationReport(
        facts_deduped=1, themes_cleaned_up=1, themes_removed=1, total_reclaimed=2
    )
    gone = await store.get_theme(dead.id)
    assert gone is not None and gone.invalidated_at == NOW
    kept = await store.get_theme(mixed.id)
    assert kept is not None and kept.invalidated_at is None
    assert kept.fact_ids == [stale.id, other.id]  # soft delete: the reference stays
    assert kept.embedding == pytest.approx(unit(2), abs=1e-6)  # live facts only
    assert [t.id for t in await store.list_themes()] == [mixed.id]
    assert (await MemoryConsolidator(store, clock=clock).plan()).empty


async def test_consolidator_refuses_bad_options_before_any_write(store: Any) -> None:
    fact = make_fact(content="x", embedding=unit(0))
    twin = make_fact(content="x.", embedding=unit(0), valid_from=at(days=1))
    await store.put_facts([fact, twin])
    for kw, error in (
        # the same tag for both: a verified keeper would drop its own verified tag
        ({"verified_tag": "lesson", "candidate_tag": "lesson"}, InvalidInputError),
        ({"verified_tag": 5}, InvalidTypeError),
        ({"candidate_tag": ["candidate"]}, InvalidTypeError),
        ({"debug": "no"}, InvalidTypeError),  # bool("no") is True
        ({"clock": "2025-01-01"}, InvalidTypeError),
    ):
        with pytest.raises(error):
            MemoryConsolidator(store, **kw)
    assert {f.id: f for f in await store.find_facts()} == {fact.id: fact, twin.id: twin}


# ---------------------------------------------------------------- ConflictDetector


async def _negation_pair(store: Any) -> tuple[Any, Any]:
    alice = make_entity(name="Alice", entity_type="person")
    await store.put_entities([alice])
    pos = make_fact(content="Alice works at Acme", entity_ids=[alice.id], valid_from=at(days=1))
    neg = make_fact(content="Alice doesn't work at Acme", entity_ids=[alice.id],
                    valid_from=at(days=2))
    await store.put_facts([pos, neg])
    return pos, neg


async def test_resolution_never_lets_a_quarantined_fact_win(store: Any) -> None:
    """A fact quarantined after detection neither wins nor loses a resolution.

    Quarantined facts are excluded from consolidation entirely: invalidating a live fact
    in favour of a poisoned one would serve the poison's claim by removing the truth.
    """
    pos, neg = await _negation_pair(store)
    detector = ConflictDetector(store, policy="negation-invalidates-positive")
    [conflict] = await detector.detect_conflicts()
    assert conflict.type == "negation" and conflict.confidence == pytest.approx(0.8)
    await store.put_facts([neg.model_copy(update={"tags": [QUARANTINE_TAG]})])
    report = await detector.auto_resolve_all([conflict])
    assert (report.resolved, report.skipped) == (0, 1)
    assert report.details[0].action == "skipped"
    assert await store.get_fact(pos.id) == pos
    detail = await detector.resolve_conflict(conflict, "keep_b")
    assert detail.action == "skipped"
    assert await store.get_fact(pos.id) == pos
    # a quarantined loser is not touched either (it stays as it was, for audit)
    quarantined = (await store.get_fact(neg.id))
    assert (await detector.resolve_conflict(conflict, "keep_a")).action == "skipped"
    assert await store.get_fact(neg.id) == quarantined
    assert (await detector.plan_resolution([conflict], "supersede-on-newer")).empty


async def test_explicit_fact_lists_leave_quarantined_facts_out(store: Any) -> None:
    pos, neg = await _negation_pair(store)
    poisoned = neg.model_copy(update={"tags": [QUARANTINE_TAG]})
    await store.put_facts([poisoned])
    detector = ConflictDetector(store)
    assert await detector.detect_conflicts([pos, poisoned]) == []
    assert [c.type for c in await detector.detect_conflicts([pos, neg])] == ["negation"]


async def test_resolution_keeps_the_reason_of_a_fact_invalidated_meanwhile(store: Any) -> None:
    """Nothing already invalidated is rewritten or resurrected by a resolution."""
    pos, neg = await _negation_pair(store)
    detector = ConflictDetector(store)
    [conflict] = await detector.detect_conflicts()
    await store.put_facts([pos.model_copy(update={"invalidated_by": "eval-gate:harmful"})])
    report = await detector.auto_resolve_all([conflict], "negation-invalidates-positive")
    assert (report.resolved, report.skipped) == (0, 1)
    got = await store.get_fact(pos.id)
    assert got is not None and got.invalidated_by == "eval-gate:harmful"
    assert await store.get_fact(neg.id) == neg


async def test_similarity_at_the_threshold_is_decided_alike_on_both_backends(
    store: Any,
) -> None:
    """Cosine exactly at ``embedding_threshold`` counts as similar, whatever the backend.

    ``[1, 0]`` and ``[0.8, 0.6]`` have cosine 0.8 in float64; pgvector stores float32, where
    it is 0.79999999: the same facts must give the same conflicts on both backends.
    """
    alice = make_entity(name="Alice", entity_type="person")
    await store.put_entities([alice])
    paris = make_fact(content="alice lives in paris", entity_ids=[alice.id],
                      embedding=vec(1, 0), valid_from=at(days=1))
    rome = make_fact(content="alice lives in rome", entity_ids=[alice.id],
                     embedding=vec(0.8, 0.6), valid_from=at(days=5))
    profit = make_fact(content="acme is profitable", entity_ids=[alice.id],
                       embedding=vec(0, 0, 1), valid_from=at(days=2))
    loss = make_fact(content="the company loses money", entity_ids=[alice.id],
                     embedding=vec(0, 0, 0.8, 0.6), valid_from=at(days=2.5))
    await store.put_facts([paris, rome, profit, loss])
    conflicts = await ConflictDetector(store, embedding_threshold=0.8).detect_conflicts()
    assert sorted((c.type, c.fact_a.id, c.fact_b.id) for c in conflicts) == sorted(
        [("supersession", paris.id, rome.id), ("semantic_contradiction", profit.id, loss.id)]
    )


async def test_plan_resolution_refuses_what_auto_resolve_all_refuses(store: Any) -> None:
    """Planning validates its input like resolving does: typed errors, nothing read."""
    pos, neg = await _negation_pair(store)
    detector = ConflictDetector(store)
    for bad in (None, "conflicts", [None], [{"fact_a": pos}]):
        with pytest.raises((InvalidTypeError, ValidationError)):
            await detector.plan_resolution(bad, "supersede-on-newer")  # type: ignore[arg-type]
        with pytest.raises((InvalidTypeError, ValidationError)):
            await detector.auto_resolve_all(bad, "supersede-on-newer")  # type: ignore[arg-type]
    assert {f.id: f for f in await store.find_facts()} == {pos.id: pos, neg.id: neg}


# ---------------------------------------------------------------- EntityResolver


async def test_hard_resolution_repoints_superseded_by_of_earlier_merges(store: Any) -> None:
    """Hard mode leaves no entity whose ``superseded_by`` names a deleted entity.

    ``ally`` was merged into ``alice2`` earlier; when ``alice2`` is absorbed into the
    older ``alice`` and deleted, ``ally`` forwards to ``alice`` so it stays resolvable.
    """
    alice = make_entity(name="Alice", entity_type="person", created_at=at(0))
    alice2 = make_entity(name="alice", entity_type="person", created_at=at(1))
    ally = make_entity(name="Ally", entity_type="person", created_at=at(2),
                       invalidated_at=at(3), superseded_by=alice2.id)
    other = make_entity(name="Zed", entity_type="person", created_at=at(2),
                        invalidated_at=at(3), superseded_by=alice.id)
    await store.put_entities([alice, alice2, ally, other])
    resolver = EntityResolver(store, delete_mode="hard", clock=clock)
    report = await resolver.resolve()
    assert (report.groups_merged, report.entities_absorbed) == (1, 1)
    assert await store.get_entity(alice2.id) is None
    moved = await store.get_entity(ally.id)
    assert moved is not None and moved.superseded_by == alice.id
    assert moved.invalidated_at == at(3)  # still soft-deleted
    assert await store.get_entity(other.id) == other
    assert [e.id for e in await store.find_entities()] == [alice.id]
    assert (await resolver.plan()).empty


async def test_soft_resolution_keeps_losers_resolvable_with_provenance(store: Any) -> None:
    """Losers stay stored (soft) with their own provenance and a pointer; re-run is a no-op."""
    alice = make_entity(name="Alice Smith", entity_type="person", created_at=at(0),
                        attributes={"role": "cto"})
    again = make_entity(name="the alice smith!", entity_type="person", created_at=at(5),
                        attributes={"role": "ceo", "city": "oslo"},
                        provenance=provenance(run_id="run-9"))
    bob = make_entity(name="Bob", entity_type="person", created_at=at(1))
    await store.put_entities([again, bob, alice])
    edge = make_relationship(again.id, bob.id, relation_type="knows")
    await store.put_relationships([edge])
    fact = make_fact(content="alice knows bob", entity_ids=[again.id, bob.id, alice.id])
    await store.put_facts([fact])
    resolver = EntityResolver(store, clock=clock)
    report = await resolver.resolve()
    assert (report.entities_absorbed, report.facts_rewritten) == (1, 1)
    assert report.relationships_rewritten == 1
    loser = await store.get_entity(again.id)
    assert loser is not None
    assert loser.superseded_by == alice.id and loser.invalidated_at == NOW
    assert loser.provenance.run_id == "run-9" and loser.attributes == again.attributes
    canonical = await store.get_entity(alice.id)
    assert canonical is not None
    assert canonical.attributes == {"role": "cto", "city": "oslo"}
    got = await store.get_fact(fact.id)
    assert got is not None and got.entity_ids == [alice.id, bob.id]
    moved = await store.get_relationship(edge.id)
    assert moved is not None and (moved.source_id, moved.target_id) == (alice.id, bob.id)
    assert await resolver.resolve() == type(report)()


async def test_resolver_refuses_bad_options(store: Any) -> None:
    with pytest.raises(InvalidTypeError):
        EntityResolver(store, clock="now")  # type: ignore[arg-type]
    assert await store.find_entities() == []

"""MemoryConsolidator on both backends: merging, guardrails, decay, budgets, themes."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest

from cycgraph_memory import (
    QUARANTINE_TAG,
    ConsolidationReport,
    InvalidInputError,
    MemoryConsolidator,
)
from cycgraph_memory.consolidation.consolidator import DECAY_REASON

from .factories import at, make_episode, make_fact, make_theme, store_cited, unit, vec

NOW = at(days=100)


def clock() -> datetime:
    return NOW


# Exact binary fractions survive the pgvector round trip unchanged; cosines with e0:
NEAR = vec(1, 0.25)  # 0.970
NEARER = vec(1, 0.125)  # 0.992
MID = vec(1, 0.375)  # 0.936
FAR = vec(1, 0.5)  # 0.894, just below the default threshold
FARTHER = vec(1, 0.75)  # 0.8 from e0, 0.960 from MID


def consolidator(store: Any, index: Any = None, **kw: Any) -> MemoryConsolidator:
    return MemoryConsolidator(store, index, clock=clock, **kw)


async def test_near_duplicates_merge_into_the_newest_with_all_evidence(store: Any) -> None:
    e1, e2, e3 = (make_fact().id for _ in range(3))  # any uuids
    ep1, ep2 = make_episode().id, make_episode().id
    old = make_fact(
        content="alice likes tea", embedding=unit(0), valid_from=at(days=1), access_count=2,
        last_accessed_at=at(days=50), entity_ids=[e1, e2], source_episode_ids=[ep1],
        tags=["lesson", "candidate"],
    )
    new = make_fact(
        content="Alice likes tea.", embedding=NEAR, valid_from=at(days=2),
        access_count=3, last_accessed_at=at(days=40), entity_ids=[e2, e3],
        source_episode_ids=[ep2], tags=["lesson"],
    )
    other = make_fact(content="bob likes coffee", embedding=unit(3), valid_from=at(days=3))
    await store_cited(store, [old, new, other])
    await store.put_facts([old, new, other])
    report = await consolidator(store).consolidate()
    assert report == ConsolidationReport(facts_deduped=1, total_reclaimed=1)
    kept = await store.get_fact(new.id)
    assert kept is not None
    expected = new.model_copy(
        update={
            "access_count": 5,
            "last_accessed_at": at(days=50),
            "entity_ids": [e2, e3, e1],
            "source_episode_ids": [ep2, ep1],
            "tags": ["lesson", "candidate"],
        }
    )
    assert kept.model_dump() == expected.model_dump()
    absorbed = await store.get_fact(old.id)
    assert absorbed == old.model_copy(update={"invalidated_by": str(new.id)})
    assert await store.get_fact(other.id) == other


async def test_verified_fact_is_never_evicted_for_an_untagged_duplicate(store: Any) -> None:
    verified = make_fact(
        content="use retries", embedding=unit(0), valid_from=at(days=1),
        tags=["verified", "lesson"],
    )
    newer = make_fact(
        content="use retries!", embedding=NEARER, valid_from=at(days=9),
        tags=["candidate", "lesson"],
    )
    await store.put_facts([verified, newer])
    report = await consolidator(store).consolidate()
    assert report.facts_deduped == 1
    kept = await store.get_fact(verified.id)
    assert kept is not None and kept.invalidated_by is None
    assert kept.tags == ["verified", "lesson"]  # no fact ends up verified AND candidate
    gone = await store.get_fact(newer.id)
    assert gone is not None and gone.invalidated_by == str(verified.id)


async def test_custom_tags_and_no_chaining(store: Any) -> None:
    # a ~ b and b ~ c, but a and c are below the threshold: the newest (a) keeps b only.
    a = make_fact(content="a", embedding=unit(0), valid_from=at(days=3), tags=["gold"])
    b = make_fact(content="b", embedding=MID, valid_from=at(days=2), tags=["trial"])
    c = make_fact(content="c", embedding=FARTHER, valid_from=at(1))
    await store.put_facts([a, b, c])
    report = await consolidator(store, verified_tag="gold", candidate_tag="trial").consolidate()
    assert report.facts_deduped == 1
    assert (await store.get_fact(b.id)).invalidated_by == str(a.id)  # type: ignore[union-attr]
    assert (await store.get_fact(c.id)).invalidated_by is None  # type: ignore[union-attr]
    assert (await store.get_fact(a.id)).tags == ["gold"]  # type: ignore[union-attr]


async def test_threshold_is_respected(store: Any) -> None:
    a = make_fact(content="a", embedding=unit(0))
    b = make_fact(content="b", embedding=FAR)
    await store.put_facts([a, b])
    assert (await consolidator(store).consolidate()).facts_deduped == 0
    assert (await consolidator(store, dedup_threshold=0.88).consolidate()).facts_deduped == 1


async def test_quarantined_facts_are_untouched_and_not_counted(store: Any) -> None:
    live = make_fact(content="x", embedding=unit(0), valid_from=at(days=2))
    poisoned = make_fact(
        content="x", embedding=unit(0), valid_from=at(days=3), tags=[QUARANTINE_TAG, "verified"]
    )
    old = make_fact(content="y", embedding=unit(1), valid_from=at(days=1))
    await store.put_facts([live, poisoned, old])
    report = await consolidator(store, max_facts=2).consolidate()
    assert report == ConsolidationReport()
    assert await store.get_fact(poisoned.id) == poisoned


async def test_decay_prunes_the_lowest_scores(store: Any) -> None:
    facts = [
        make_fact(content="30 days", embedding=unit(0), valid_from=at(days=70)),  # 0.5
        make_fact(content="60 days", embedding=unit(1), valid_from=at(days=40)),  # 0.25
        make_fact(  # touched now: 1 + ln 2
            content="used", embedding=unit(2), valid_from=at(days=40), access_count=1,
            last_accessed_at=NOW,
        ),
        make_fact(content="10 days", embedding=unit(3), valid_from=at(days=90)),  # 0.79
    ]
    await store.put_facts(facts)
    report = await consolidator(store, max_facts=2, debug=True).consolidate()
    assert report.facts_decayed == 2 and report.total_reclaimed == 2
    assert report.mutation_log is not None
    assert sorted((m.type, str(m.id)) for m in report.mutation_log) == sorted(
        ("fact_decayed", str(f.id)) for f in facts[:2]
    )
    for f in facts[:2]:
        assert (await store.get_fact(f.id)).invalidated_by == DECAY_REASON  # type: ignore[union-attr]
    assert [f.id for f in await store.find_facts()] == [facts[2].id, facts[3].id]
    again = await consolidator(store, max_facts=2, debug=True).consolidate()
    assert again == ConsolidationReport(mutation_log=[])


async def test_duplicates_of_disjoint_windows_are_not_merged(store: Any) -> None:
    """The same sentence valid in two separate periods is two facts (history kept)."""
    closed = make_fact(content="Alice leads payments", embedding=unit(0),
                       valid_from=at(days=1), valid_until=at(days=10))
    reopened = make_fact(content="Alice leads payments", embedding=unit(0),
                         valid_from=at(days=20))
    restated = make_fact(content="Alice leads payments.", embedding=unit(0),
                         valid_from=at(days=30))
    await store.put_facts([closed, reopened, restated])
    report = await consolidator(store).consolidate()
    assert report.facts_deduped == 1
    live = {f.id for f in await store.find_facts()}
    assert live == {closed.id, restated.id}
    gone = await store.get_fact(reopened.id)
    assert gone is not None and gone.invalidated_by == str(restated.id)


async def test_hard_mode_deletes(store: Any) -> None:
    a = make_fact(content="a", embedding=unit(0), valid_from=at(days=1))
    b = make_fact(content="b", embedding=unit(0), valid_from=at(days=2))
    c = make_fact(content="c", embedding=unit(1), valid_from=at(days=3))
    eps = [make_episode(started_at=at(days=i), ended_at=at(days=i)) for i in range(3)]
    await store.put_facts([a, b, c])
    await store.put_episodes(eps)
    report = await consolidator(
        store, delete_mode="hard", max_facts=1, max_episodes=1
    ).consolidate()
    assert report == ConsolidationReport(
        facts_deduped=1, facts_decayed=1, episodes_pruned=2, total_reclaimed=4
    )
    assert await store.get_fact(a.id) is None
    assert await store.get_fact(b.id) is None  # the older of the two survivors decays
    assert [e.id for e in await store.list_episodes(include_invalidated=True)] == [eps[2].id]


async def test_hard_mode_leaves_no_reference_to_a_deleted_fact(store: Any) -> None:
    """Episodes and soft-deleted themes stop citing deleted facts (a merged one: its keeper)."""
    dup = make_fact(content="dup", embedding=unit(0), valid_from=at(days=1))
    keep = make_fact(content="keep", embedding=unit(0), valid_from=at(days=5))
    old = make_fact(content="old", embedding=unit(1), valid_from=at(days=2))
    new = make_fact(content="new", embedding=unit(2), valid_from=at(days=6))
    await store.put_facts([dup, keep, old, new])
    cites = make_episode(fact_ids=[dup.id, keep.id, old.id, new.id])
    merged_only = make_episode(fact_ids=[dup.id])
    untouched = make_episode(fact_ids=[new.id])
    await store.put_episodes([cites, merged_only, untouched])
    gone_theme = make_theme(fact_ids=[dup.id, old.id], embedding=unit(0), invalidated_at=at(3))
    await store.put_themes([gone_theme])
    report = await consolidator(store, delete_mode="hard", max_facts=2).consolidate()
    assert (report.facts_deduped, report.facts_decayed) == (1, 1)
    assert [f.id for f in await store.find_facts()] == [keep.id, new.id]
    episodes = await store.get_episodes([cites.id, merged_only.id, untouched.id])
    assert episodes[cites.id].fact_ids == [keep.id, new.id]
    assert episodes[merged_only.id].fact_ids == [keep.id]
    assert episodes[untouched.id].fact_ids == [new.id]
    assert await store.get_theme(gone_theme.id) is None  # it cited only deleted facts


async def test_oldest_episodes_are_pruned_softly(store: Any) -> None:
    eps = [make_episode(started_at=at(days=i), ended_at=at(days=i)) for i in (3, 1, 2)]
    await store.put_episodes(eps)
    report = await consolidator(store, max_episodes=1, debug=True).consolidate()
    assert report.episodes_pruned == 2 and report.total_reclaimed == 2
    assert [e.id for e in await store.list_episodes()] == [eps[0].id]
    pruned = await store.get_episode(eps[1].id)
    assert pruned is not None and pruned.invalidated_at == NOW


async def test_themes_follow_removed_facts(store: Any) -> None:
    keep = make_fact(content="keep", embedding=unit(0), valid_from=at(days=5))
    dup = make_fact(content="dup", embedding=unit(0), valid_from=at(days=1))
    other = make_fact(content="other", embedding=vec(0, 3, 4), valid_from=at(days=4))
    await store.put_facts([keep, dup, other])
    mixed = make_theme(fact_ids=[dup.id, other.id], embedding=unit(5))
    only_dup = make_theme(fact_ids=[dup.id], embedding=unit(0))
    unrelated = make_theme(fact_ids=[keep.id], embedding=unit(0))
    await store.put_themes([mixed, only_dup, unrelated])
    report = await consolidator(store).consolidate()
    assert report == ConsolidationReport(
        facts_deduped=1, themes_cleaned_up=1, themes_removed=1, total_reclaimed=2
    )
    got = await store.get_theme(mixed.id)
    assert got is not None and got.fact_ids == [other.id]
    assert got.embedding == pytest.approx(vec(0, 0.6, 0.8), abs=1e-6)
    removed = await store.get_theme(only_dup.id)
    assert removed is not None and removed.invalidated_at == NOW
    assert await store.get_theme(unrelated.id) == unrelated
    assert (await consolidator(store).plan()).empty


async def test_index_stops_returning_absorbed_facts(store: Any, index: Any) -> None:
    a = make_fact(content="a", embedding=unit(0), valid_from=at(days=1))
    b = make_fact(content="b", embedding=unit(0), valid_from=at(days=2))
    await store.put_facts([a, b])
    await index.rebuild(store)
    await consolidator(store, index).consolidate()
    hits = await index.search_facts(unit(0), limit=5)
    assert [h.item.id for h in hits] == [b.id]


async def test_should_and_auto_consolidate(store: Any) -> None:
    facts = [make_fact(content=str(i), embedding=unit(i), valid_from=at(i)) for i in range(3)]
    await store.put_facts(facts)
    await store.put_episodes([make_episode()])
    should = MemoryConsolidator.should_consolidate
    assert await should(store, {"facts": 3}) is False
    assert await should(store, {"facts": 2}) is True
    assert await should(store, {"episodes": 0}) is True
    assert await should(store, {}) is False
    c = consolidator(store, max_facts=2)
    assert await c.auto_consolidate({"facts": 3}) is None
    assert [f.id for f in await store.find_facts()] == [f.id for f in facts]
    report = await c.auto_consolidate({"facts": 2})
    assert report is not None and report.facts_decayed == 1
    with pytest.raises(Exception):  # noqa: B017 - pydantic ValidationError
        await should(store, {"facts": -1})


async def test_quarantined_facts_do_not_count_toward_consolidation(store: Any) -> None:
    live = make_fact(content="live", embedding=unit(0), valid_from=at(1))
    quarantined = [
        make_fact(content=f"q{i}", embedding=unit(i + 1), valid_from=at(i + 2),
                  tags=[QUARANTINE_TAG])
        for i in range(5)
    ]
    await store.put_facts([live, *quarantined])
    should = MemoryConsolidator.should_consolidate
    assert await should(store, {"facts": 1}) is False
    assert await should(store, {"facts": 0}) is True
    assert await consolidator(store, max_facts=0).auto_consolidate({"facts": 2}) is None


async def test_bad_options_are_rejected(store: Any) -> None:
    for kw in (
        {"dedup_threshold": 1.5},
        {"delete_mode": "gone"},
        {"max_facts": -1},
        {"decay_half_life_days": 0},
        {"batch_size": 0},
        {"verified_tag": ""},
    ):
        with pytest.raises(InvalidInputError):
            MemoryConsolidator(store, None, **kw)


async def test_keeper_absorbing_several_duplicates_keeps_all_evidence(store: Any) -> None:
    ents = [make_fact().id for _ in range(3)]
    dups = [
        make_fact(content=f"dup {i}", embedding=[NEAR, NEARER, unit(0)][i],
                  valid_from=at(days=i), access_count=i + 1, entity_ids=[ents[i]],
                  source_episode_ids=[ents[i]], tags=[f"t{i}"],
                  provenance=make_fact().provenance.model_copy(update={"run_id": f"r{i}"}))
        for i in range(3)
    ]
    await store_cited(store, dups)
    await store.put_facts(dups)
    report = await consolidator(store, debug=True).consolidate()
    assert report.facts_deduped == 2
    assert report.mutation_log is not None
    assert [(m.type, m.id) for m in report.mutation_log] == [
        ("fact_kept", dups[2].id), ("fact_merged", dups[1].id), ("fact_merged", dups[0].id)
    ]
    keeper = await store.get_fact(dups[2].id)
    assert keeper is not None
    assert keeper.access_count == 6
    assert keeper.entity_ids == [ents[2], ents[1], ents[0]]
    assert keeper.source_episode_ids == [ents[2], ents[1], ents[0]]
    assert keeper.tags == ["t2", "t1", "t0"]
    assert keeper.provenance.run_id == "r2"
    for i in (0, 1):
        gone = await store.get_fact(dups[i].id)
        assert gone is not None and gone.invalidated_by == str(dups[2].id)
        assert gone.provenance.run_id == f"r{i}"  # the absorbed facts keep their provenance

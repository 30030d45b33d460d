"""Hard-mode consolidation leaves no record citing a deleted fact, on both backends.

Bug: with ``delete_mode="hard"`` only facts invalidated in favour of a merged (absorbed)
fact were re-pointed, and only when its keeper survived the pass. A fact that lost a
conflict to a fact then pruned by decay (or whose merge keeper was pruned in the same
pass) kept ``invalidated_by`` naming the deleted fact.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from cycgraph_memory import QUARANTINE_TAG, MemoryConsolidator
from cycgraph_memory.consolidation.consolidator import DECAY_REASON
from cycgraph_memory.lifecycle.models import ERASED_BY

from .factories import at, make_episode, make_fact, make_theme, unit, vec

NOW = at(days=100)
NEAR = vec(1, 0.25)  # cosine 0.970 with unit(0): a near duplicate at the default 0.9


def clock() -> datetime:
    return NOW


async def test_a_fact_invalidated_by_a_decayed_fact_is_marked_erased(store: Any) -> None:
    """``loser`` lost a conflict to ``winner``; ``winner`` is pruned in hard mode.

    ``loser`` stays invalidated with ``invalidated_by = ERASED_BY`` (as after a purge);
    episodes and themes drop the deleted fact; a quarantined fact is left as it was.
    """
    winner = make_fact(content="the api is rate limited", embedding=unit(0),
                       valid_from=at(days=1))
    fresh = make_fact(content="bob likes tea", embedding=unit(1), valid_from=at(days=90),
                      access_count=5, last_accessed_at=at(days=99))
    loser = make_fact(content="the api is not rate limited", embedding=unit(2),
                      valid_from=at(days=1), invalidated_by=str(winner.id))
    poisoned = make_fact(content="q", embedding=unit(3), invalidated_by=str(winner.id),
                         tags=[QUARANTINE_TAG])
    await store.put_facts([winner, fresh, loser, poisoned])
    episode = make_episode(fact_ids=[winner.id, fresh.id])
    await store.put_episodes([episode])
    theme = make_theme(fact_ids=[winner.id, fresh.id], embedding=unit(0))
    old_theme = make_theme(fact_ids=[winner.id, loser.id], embedding=unit(0),
                           invalidated_at=at(days=3))
    await store.put_themes([theme, old_theme])

    consolidator = MemoryConsolidator(store, clock=clock, max_facts=1, delete_mode="hard")
    report = await consolidator.consolidate()
    assert (report.facts_decayed, report.facts_deduped) == (1, 0)
    assert await store.get_fact(winner.id) is None
    assert await store.get_fact(loser.id) == loser.model_copy(
        update={"invalidated_by": ERASED_BY}
    )
    assert await store.get_fact(poisoned.id) == poisoned  # quarantined: never touched
    got_episode = await store.get_episode(episode.id)
    assert got_episode is not None and got_episode.fact_ids == [fresh.id]
    got_theme = await store.get_theme(theme.id)
    assert got_theme is not None and got_theme.fact_ids == [fresh.id]
    got_old = await store.get_theme(old_theme.id)
    assert got_old is not None and got_old.fact_ids == [loser.id]
    assert (await consolidator.plan()).empty


async def test_soft_decay_keeps_the_pointer_to_the_invalidated_winner(store: Any) -> None:
    """Soft mode keeps the pruned fact, so the pointer to it stays as it was."""
    winner = make_fact(content="the api is rate limited", embedding=unit(0),
                       valid_from=at(days=1))
    fresh = make_fact(content="bob likes tea", embedding=unit(1), valid_from=at(days=90))
    loser = make_fact(content="the api is not rate limited", embedding=unit(2),
                      invalidated_by=str(winner.id))
    await store.put_facts([winner, fresh, loser])
    await MemoryConsolidator(store, clock=clock, max_facts=1).consolidate()
    pruned = await store.get_fact(winner.id)
    assert pruned is not None and pruned.invalidated_by == DECAY_REASON
    assert await store.get_fact(loser.id) == loser


async def test_facts_pointing_at_a_merge_keeper_pruned_in_the_same_pass_are_erased(
    store: Any,
) -> None:
    """``dup`` is merged into ``keeper``, then ``keeper`` is pruned by decay (hard mode).

    A fact invalidated in favour of ``dup`` and one invalidated in favour of ``keeper``
    both name a deleted fact without a surviving keeper: both become ``ERASED_BY``.
    An episode citing ``dup`` or ``keeper`` drops them.
    """
    dup = make_fact(content="alice lives in rome", embedding=unit(0), valid_from=at(days=2))
    keeper = make_fact(content="Alice lives in Rome.", embedding=NEAR, valid_from=at(days=3))
    fresh = make_fact(content="bob likes tea", embedding=unit(1), valid_from=at(days=90),
                      access_count=5, last_accessed_at=at(days=99))
    via_dup = make_fact(content="alice lives in paris", embedding=unit(4),
                        invalidated_by=str(dup.id))
    via_keeper = make_fact(content="alice lives in oslo", embedding=unit(5),
                           invalidated_by=str(keeper.id))
    await store.put_facts([dup, keeper, fresh, via_dup, via_keeper])
    episode = make_episode(fact_ids=[dup.id, keeper.id, fresh.id])
    await store.put_episodes([episode])

    consolidator = MemoryConsolidator(store, clock=clock, max_facts=1, delete_mode="hard")
    report = await consolidator.consolidate()
    assert (report.facts_deduped, report.facts_decayed) == (1, 1)
    assert await store.get_fact(dup.id) is None
    assert await store.get_fact(keeper.id) is None
    assert await store.get_fact(via_dup.id) == via_dup.model_copy(
        update={"invalidated_by": ERASED_BY}
    )
    assert await store.get_fact(via_keeper.id) == via_keeper.model_copy(
        update={"invalidated_by": ERASED_BY}
    )
    got_episode = await store.get_episode(episode.id)
    assert got_episode is not None and got_episode.fact_ids == [fresh.id]
    assert (await consolidator.plan()).empty


async def test_a_chain_through_a_merged_fact_ends_at_the_surviving_keeper(store: Any) -> None:
    """A -> B -> C: ``a`` lost to ``b``, ``b`` is merged into ``c`` which survives.

    ``a`` names ``c``; a fact that lost to a pruned fact in the same pass is erased.
    """
    b = make_fact(content="alice lives in rome", embedding=unit(0), valid_from=at(days=2),
                  last_accessed_at=at(days=99))
    c = make_fact(content="Alice lives in Rome.", embedding=NEAR, valid_from=at(days=3))
    old = make_fact(content="bob likes tea", embedding=unit(1), valid_from=at(days=1))
    a = make_fact(content="alice lives in paris", embedding=unit(4),
                  invalidated_by=str(b.id))
    lost_to_old = make_fact(content="bob likes coffee", embedding=unit(5),
                            invalidated_by=str(old.id))
    await store.put_facts([b, c, old, a, lost_to_old])

    consolidator = MemoryConsolidator(store, clock=clock, max_facts=1, delete_mode="hard")
    report = await consolidator.consolidate()
    assert (report.facts_deduped, report.facts_decayed) == (1, 1)
    assert [f.id for f in await store.find_facts()] == [c.id]
    assert await store.get_fact(a.id) == a.model_copy(update={"invalidated_by": str(c.id)})
    assert await store.get_fact(lost_to_old.id) == lost_to_old.model_copy(
        update={"invalidated_by": ERASED_BY}
    )
    assert (await consolidator.plan()).empty


async def test_re_pointing_does_not_resurrect_a_pruned_episode_or_removed_theme(
    store: Any,
) -> None:
    """The re-pointed fact is written before the episode and theme deletes of the pass.

    ``loser`` cites an episode pruned by ``max_episodes`` and a theme removed because its
    only fact is pruned. Written after those deletes, the re-pointed copy read earlier
    still cited them and the whole pass failed with ``DanglingReferenceError``; now the
    store's delete cascades unlink them from it as from any other fact.
    """
    ep_old = make_episode(started_at=at(days=1), ended_at=at(days=1, seconds=60), messages=[])
    ep_new = make_episode(started_at=at(days=50), ended_at=at(days=50, seconds=60),
                          messages=[])
    await store.put_episodes([ep_old, ep_new])
    winner = make_fact(content="the api is rate limited", embedding=unit(0),
                       valid_from=at(days=1))
    theme = make_theme(fact_ids=[winner.id], embedding=unit(0))
    await store.put_themes([theme])
    fresh = make_fact(content="bob likes tea", embedding=unit(1), valid_from=at(days=90))
    loser = make_fact(content="the api is not rate limited", embedding=unit(2),
                      invalidated_by=str(winner.id), source_episode_ids=[ep_old.id],
                      theme_id=theme.id)
    await store.put_facts([winner, fresh, loser])

    consolidator = MemoryConsolidator(store, clock=clock, max_facts=1, max_episodes=1,
                                      delete_mode="hard")
    report = await consolidator.consolidate()
    assert (report.facts_decayed, report.episodes_pruned, report.themes_removed) == (1, 1, 1)
    assert await store.get_episode(ep_old.id) is None
    assert await store.get_theme(theme.id) is None
    assert await store.get_fact(loser.id) == loser.model_copy(
        update={"invalidated_by": ERASED_BY, "source_episode_ids": [], "theme_id": None}
    )
    assert (await consolidator.plan()).empty

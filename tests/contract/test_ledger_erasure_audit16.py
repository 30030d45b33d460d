"""Erased fact ids never come back into the outcome ledger (both backends; sixteenth pass).

A purge forgets the ledger's links to the facts it erases. Before this pass, an outcome
recorded after the purge committed (a run that injected the fact before it was erased,
reported late, or a retried ``record_outcome`` of an old run) linked the erased id again:
``get_fact_stats(erased)`` returned stats again, and a later purge no longer found that
fact to unlink it. Now the ledger remembers a digest of every erased id and
``record_outcome`` records the run (its score counts in the baselines) without those links.
"""

from __future__ import annotations

import hashlib
import uuid
from typing import Any

from cycgraph_memory.lifecycle import purge
from cycgraph_memory.records import RunOutcome

from .factories import make_entity, make_fact, unit


async def _world(store: Any) -> dict[str, Any]:
    alice = make_entity(name="Alice Quux", entity_type="person", embedding=unit(0))
    bob = make_entity(name="Bob Stone", entity_type="person", embedding=unit(1))
    f1 = make_fact(content="Alice Quux lives in Paris", entity_ids=[alice.id], embedding=unit(0))
    f2 = make_fact(content="Bob Stone likes tea", entity_ids=[bob.id], embedding=unit(1))
    await store.put_entities([alice, bob])
    await store.put_facts([f1, f2])
    return {"alice": alice, "bob": bob, "f1": f1, "f2": f2}


async def test_a_late_outcome_does_not_link_an_erased_fact_again(
    store: Any, ledger: Any
) -> None:
    w = await _world(store)
    f1, f2 = w["f1"].id, w["f2"].id
    await ledger.record_outcome(RunOutcome(run_id="r1", score=0.8, fact_ids=[f1, f2]))
    report = await purge(store, entity_ids=[w["alice"].id], ledger=ledger)
    assert report.facts == 1 and report.ledger_links == 1
    assert await ledger.get_fact_stats(f1) is None

    # A run that injected f1 before the purge, reported after it.
    await ledger.record_outcome(RunOutcome(run_id="late", score=0.2, fact_ids=[f1, f2]))
    # A retry of the old run's report.
    await ledger.record_outcome(RunOutcome(run_id="r1", score=0.8, fact_ids=[f1, f2]))
    # A mapping, the erased id as a string, given twice.
    await ledger.record_outcome({"run_id": "late2", "score": 0.5, "fact_ids": [str(f1), f1]})

    assert await ledger.get_fact_stats(f1) is None
    assert f1 not in await ledger.get_fact_stats_batch([f1, f2])
    assert [s.fact_id for s in await ledger.list_fact_stats()] == [f2]
    stats = await ledger.get_fact_stats(f2)
    assert stats is not None and stats.trials == 2  # r1 and late; late2 linked nothing
    # Every run counts in the baselines, their scores included.
    baseline = await ledger.get_baseline()
    assert baseline.runs == 3 and abs(baseline.mean_score - 0.5) < 1e-9
    assert (await ledger.get_baseline(exclude_fact_id=f1)).runs == 3
    found, total = await ledger.get_gate_inputs([f1, f2])
    assert list(found) == [f2] and total.runs == 3
    # Nothing left to find for a later purge naming the same subject.
    again = await purge(store, entity_ids=[w["alice"].id], ledger=ledger, dry_run=True)
    assert again.ledger_links == 0


async def test_erase_facts_marks_ids_only_when_it_erases(ledger: Any) -> None:
    f1, f2 = uuid.uuid4(), uuid.uuid4()
    await ledger.erase_facts([f1], dry_run=True)
    await ledger.record_outcome(RunOutcome(run_id="a", score=1.0, fact_ids=[f1, f2]))
    stats = await ledger.get_fact_stats(f1)
    assert stats is not None and stats.trials == 1  # a dry run erases nothing

    erased = await ledger.erase_facts([f1])
    assert erased.ledger_links == 1
    await ledger.record_outcome(RunOutcome(run_id="a", score=1.0, fact_ids=[f1, f2]))
    await ledger.record_outcome(RunOutcome(run_id="b", score=0.0, fact_ids=[f1]))
    assert await ledger.get_fact_stats(f1) is None
    stats = await ledger.get_fact_stats(f2)
    assert stats is not None and stats.trials == 1
    assert (await ledger.get_baseline()).runs == 2

    # Erasing the same id twice (two purges reaching one fact) is fine.
    await ledger.erase_facts([f1, str(f1)])
    await ledger.record_outcome(RunOutcome(run_id="c", score=0.5, fact_ids=[f1]))
    assert await ledger.get_fact_stats(f1) is None


async def test_clear_keeps_the_erased_ids(ledger: Any) -> None:
    """``clear()`` removes outcomes; the erased ids stay erased (an erasure is for good)."""
    gone = uuid.uuid4()
    await ledger.erase_facts([gone])
    await ledger.clear()
    await ledger.record_outcome(RunOutcome(run_id="a", score=1.0, fact_ids=[gone]))
    assert await ledger.get_fact_stats(gone) is None
    assert (await ledger.get_baseline()).runs == 1


async def test_whole_tenant_purge_erases_every_fact_id_of_the_tenant(
    store: Any, ledger: Any
) -> None:
    w = await _world(store)
    ids = [w["f1"].id, w["f2"].id]
    await ledger.record_outcome(RunOutcome(run_id="r1", score=0.8, fact_ids=ids))
    report = await purge(store, tenant=True, ledger=ledger)
    assert report.ledger_runs == 1
    assert (await ledger.get_baseline()).runs == 0
    await ledger.record_outcome(RunOutcome(run_id="r1", score=0.4, fact_ids=ids))
    assert await ledger.list_fact_stats() == []
    assert (await ledger.get_baseline()).runs == 1
    # A fact written after the purge (a new id) is linked as usual.
    fresh = make_fact(content="Carol runs the rota", embedding=unit(2))
    await store.put_facts([fresh])
    await ledger.record_outcome(RunOutcome(run_id="r2", score=0.6, fact_ids=[fresh.id]))
    assert [s.fact_id for s in await ledger.list_fact_stats()] == [fresh.id]


async def test_a_fact_not_erased_is_linked_after_an_erasure(ledger: Any) -> None:
    gone, kept = uuid.uuid4(), uuid.uuid4()
    await ledger.erase_facts([gone])
    await ledger.record_outcome(RunOutcome(run_id="a", score=0.3, fact_ids=[kept, gone]))
    stats = await ledger.get_fact_stats(kept)
    assert stats is not None and stats.trials == 1 and stats.mean_score == 0.3


def test_the_digest_is_sha256_of_the_prefixed_id() -> None:
    """What an auditor holding an id computes to check the ledger erased it."""
    from cycgraph_memory.lifecycle.models import erased_fact_digest

    fid = uuid.UUID("12345678-1234-5678-1234-567812345678")
    want = hashlib.sha256(b"fact:12345678-1234-5678-1234-567812345678").hexdigest()
    assert erased_fact_digest(fid) == want

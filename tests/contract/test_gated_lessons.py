"""retrieve_gated_lessons on both backends: slots, ordering, benching, quarantine."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from cycgraph_memory.errors import InvalidInputError
from cycgraph_memory.inmemory.ledger import InMemoryOutcomeLedger
from cycgraph_memory.records import QUARANTINE_TAG, RunOutcome
from cycgraph_memory.retrieval import retrieve_gated_lessons

from .factories import at, make_fact


def lesson(day: float, *tags: str, fid: int | None = None) -> Any:
    extra = {"id": uuid.UUID(int=fid)} if fid is not None else {}
    return make_fact(tags=["lesson", *tags], valid_from=at(days=day), **extra)


async def trials(ledger: Any, fact: Any, n: int) -> None:
    for i in range(n):
        await ledger.record_outcome(
            RunOutcome(run_id=f"{fact.id}-{i}", score=0.5, fact_ids=[fact.id])
        )


async def test_verified_fill_the_budget_candidates_the_slots(store: Any) -> None:
    verified = [lesson(d, "verified") for d in range(5)]
    legacy = lesson(5)  # neither status tag: counts as verified
    cands = [lesson(10 + d, "candidate") for d in range(3)]
    await store.put_facts([*verified, legacy, *cands])
    got = await retrieve_gated_lessons(store, tags=["lesson"], max_facts=4, candidate_slots=2)
    # Verified newest first (legacy is the newest), then candidates newest first.
    assert [f.id for f in got] == [legacy.id, verified[4].id, cands[2].id, cands[1].id]


async def test_unused_candidate_slots_go_back_to_verified(store: Any) -> None:
    verified = [lesson(d, "verified") for d in range(5)]
    cand = lesson(9, "candidate")
    await store.put_facts([*verified, cand])
    got = await retrieve_gated_lessons(store, tags=["lesson"], max_facts=4, candidate_slots=3)
    assert [f.id for f in got] == [verified[4].id, verified[3].id, verified[2].id, cand.id]
    none = await retrieve_gated_lessons(store, tags=["lesson"], max_facts=3, candidate_slots=0)
    assert [f.id for f in none] == [verified[4].id, verified[3].id, verified[2].id]


async def test_more_candidate_slots_than_facts_give_the_budget_to_candidates(
    store: Any,
) -> None:
    # The spec: verified lessons fill max_facts - candidate_slots (none here) and candidates
    # the rest. Before: max_facts=1 with the default candidate_slots=2 raised.
    verified = [lesson(d, "verified") for d in range(3)]
    cands = [lesson(10 + d, "candidate") for d in range(3)]
    await store.put_facts([*verified, *cands])
    got = await retrieve_gated_lessons(store, tags=["lesson"], max_facts=1)
    assert [f.id for f in got] == [cands[2].id]
    got = await retrieve_gated_lessons(store, tags=["lesson"], max_facts=2, candidate_slots=5)
    assert [f.id for f in got] == [cands[2].id, cands[1].id]
    # No candidate to fill them: the slots go back to verified lessons, as always.
    only_verified = await retrieve_gated_lessons(store, tags=["verified"], max_facts=1)
    assert [f.id for f in only_verified] == [verified[2].id]


async def test_quarantined_and_invalidated_never_appear(store: Any) -> None:
    ok = lesson(1, "verified")
    tainted = lesson(2, "verified", QUARANTINE_TAG)
    tainted_cand = lesson(3, "candidate", QUARANTINE_TAG)
    gone = lesson(4, "candidate").model_copy(update={"invalidated_by": "eval-gate:harmful"})
    other_scope = make_fact(tags=["note", "verified"], valid_from=at(days=5))
    await store.put_facts([ok, tainted, tainted_cand, gone, other_scope])
    got = await retrieve_gated_lessons(store, tags=["lesson"])
    assert [f.id for f in got] == [ok.id]


async def test_in_progress_first_with_a_ledger(store: Any, ledger: Any) -> None:
    fresh_new = lesson(9, "candidate")
    fresh_old = lesson(1, "candidate")
    one = lesson(5, "candidate")
    two = lesson(7, "candidate")
    await store.put_facts([fresh_new, fresh_old, one, two])
    await trials(ledger, one, 1)
    await trials(ledger, two, 2)
    got = await retrieve_gated_lessons(store, tags=["lesson"], ledger=ledger,
                                       candidate_slots=3)
    # Most trials first; fresh candidates by valid_from (oldest first).
    assert [f.id for f in got] == [two.id, one.id, fresh_old.id]
    # Without a ledger: newest first.
    got = await retrieve_gated_lessons(store, tags=["lesson"], candidate_slots=3)
    assert [f.id for f in got] == [fresh_new.id, two.id, one.id]


async def test_rest_after_trials_benches_trialled_candidates(store: Any, ledger: Any) -> None:
    done, busy, fresh = lesson(1, "candidate"), lesson(2, "candidate"), lesson(3, "candidate")
    await store.put_facts([done, busy, fresh])
    await trials(ledger, done, 3)
    await trials(ledger, busy, 2)
    got = await retrieve_gated_lessons(store, tags=["lesson"], ledger=ledger,
                                       rest_after_trials=3)
    assert [f.id for f in got] == [busy.id, fresh.id]


async def test_ties_break_on_valid_from_then_id(store: Any) -> None:
    a = lesson(1, "candidate", fid=2)
    b = lesson(1, "candidate", fid=1)
    v1, v2 = lesson(0, "verified", fid=4), lesson(0, "verified", fid=3)
    await store.put_facts([a, b, v1, v2])
    got = await retrieve_gated_lessons(store, tags=["lesson"], ledger=InMemoryOutcomeLedger())
    assert [f.id for f in got] == [v2.id, v1.id, b.id, a.id]


async def test_custom_candidate_tag_and_scope(store: Any) -> None:
    trial = make_fact(tags=["graph:x", "on-trial"], valid_from=at(days=1))
    proven = make_fact(tags=["graph:x"], valid_from=at(days=0))
    await store.put_facts([trial, proven])
    got = await retrieve_gated_lessons(store, tags=["graph:x"], candidate_tag="on-trial",
                                       max_facts=2, candidate_slots=1)
    assert [f.id for f in got] == [proven.id, trial.id]


async def test_uses_one_batched_stats_call(store: Any) -> None:
    cands = [lesson(d, "candidate") for d in range(6)]
    await store.put_facts(cands)
    calls: list[int] = []

    class BatchOnly:
        async def get_fact_stats(self, fact_id: Any) -> Any:
            raise AssertionError("per-fact call")

        async def get_fact_stats_batch(self, ids: Any) -> Any:
            calls.append(len(list(ids)))
            return {}

    await retrieve_gated_lessons(store, tags=["lesson"], ledger=BatchOnly())  # type: ignore[arg-type]
    assert calls == [6]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"tags": []},
        {"tags": "lesson"},
        {"tags": ["lesson"], "max_facts": 0},
        {"tags": ["lesson"], "candidate_slots": -1},
        {"tags": ["lesson"], "rest_after_trials": 3},  # needs a ledger
        {"tags": ["lesson"], "candidate_tag": ""},
    ],
)
async def test_bad_options_raise(store: Any, kwargs: dict[str, Any]) -> None:
    with pytest.raises(InvalidInputError):
        await retrieve_gated_lessons(store, **kwargs)

"""The retention loop end to end, as a user runs it (audit 5), on both backends.

Each test here failed before the fix it names: the ledger, the gate audit log and the
erasure log must refuse bad input with a typed error, the same on both backends, and
change nothing.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from pydantic import ValidationError

from cycgraph_memory.errors import InvalidInputError, InvalidTypeError
from cycgraph_memory.lifecycle.models import ErasureEntry
from cycgraph_memory.records import MAX_RUN_ID_LENGTH, RunOutcome
from cycgraph_memory.retention import (
    evaluate_retention,
    simulate_gate,
)

from .factories import make_fact


def _wide_id(n: int) -> str:
    """``n`` four-byte UTF-8 characters that do not repeat (nothing to compress)."""
    return "".join(chr(0x10000 + i * 7919 % 0xF0000) for i in range(n))


async def test_a_run_id_over_the_limit_is_refused_alike_one_at_it_is_kept(ledger: Any) -> None:
    # Before: the in-memory ledger kept a 5,000-character run id, Postgres refused it with
    # StorageError ("index row size ... exceeds btree maximum 2704").
    fact = uuid.uuid4()
    await ledger.record_outcome(
        {"run_id": _wide_id(MAX_RUN_ID_LENGTH), "score": 0.5, "fact_ids": [fact]}
    )
    for n in (MAX_RUN_ID_LENGTH + 1, 5000):
        with pytest.raises(ValidationError):
            await ledger.record_outcome({"run_id": _wide_id(n), "score": 0.9, "fact_ids": [fact]})
        with pytest.raises(ValidationError):
            RunOutcome(run_id="r" * n, score=0.9)
    baseline = await ledger.get_baseline()
    assert (baseline.runs, baseline.mean_score) == (1, 0.5)
    stats = await ledger.get_fact_stats(fact)
    assert stats is not None and stats.trials == 1


async def test_audit_and_erasure_listings_refuse_a_bool_limit(ledger: Any) -> None:
    # Before: limit=True was taken as 1 (bool is an int), on both backends.
    with pytest.raises(InvalidInputError):
        await ledger.list_gate_audit(limit=True)
    with pytest.raises(InvalidInputError):
        await ledger.list_erasures(limit=True)


async def test_the_simulator_takes_more_candidate_slots_than_facts(
    store: Any, ledger: Any
) -> None:
    # Candidate slots beyond max_facts reserve the whole budget for candidates, as in
    # retrieve_gated_lessons (it refused them once; so did the simulator's config).
    async def backend() -> tuple[Any, Any]:
        return store, ledger

    report = await simulate_gate(
        {"lessons": [{"id": "a", "true_effect": 0.1}], "runs": 5, "seed": 1,
         "retrieval": {"max_facts": 1, "candidate_slots": 2}},
        backend=backend,
    )
    [lesson] = report.lessons
    stats = await ledger.get_fact_stats(lesson.fact_id)
    assert stats is not None and stats.trials >= 3  # retrieved, so on trial, run after run


async def test_erasing_runs_named_by_a_lone_string_is_refused_and_erases_nothing(
    ledger: Any,
) -> None:
    # Before: run_ids="ab" was read as the runs "a" and "b" on both backends, and erased
    # them (a destructive call that named neither).
    for run_id in ("a", "b", "ab"):
        await ledger.record_outcome({"run_id": run_id, "score": 0.5})
    with pytest.raises(InvalidTypeError, match="run_ids"):
        await ledger.erase_facts([], run_ids="ab")
    assert (await ledger.get_baseline()).runs == 3
    erased = await ledger.erase_facts([], run_ids=["ab"])
    assert erased.ledger_runs == 1 and (await ledger.get_baseline()).runs == 2


async def test_erasure_accepts_its_log_entry_as_a_mapping_on_both_backends(ledger: Any) -> None:
    # Before: the in-memory ledger validated a dict entry, Postgres raised AttributeError.
    await ledger.record_outcome({"run_id": "r1", "score": 0.5})
    entry = {"selector_kinds": ["provenance"], "selector_digests": ["0" * 64], "counts": {}}
    await ledger.erase_facts([], run_ids=["r1"], entry=entry)
    (logged,) = await ledger.list_erasures()
    assert (logged.kind, logged.selector_kinds) == ("purge", ["provenance"])
    assert (await ledger.get_baseline()).runs == 0


async def test_appending_a_non_sequence_to_the_audit_log_is_a_typed_error(ledger: Any) -> None:
    # Before: a bare TypeError ("'NoneType' object is not iterable") on both backends.
    for bad in (None, 5):
        with pytest.raises(InvalidTypeError):
            await ledger.append_gate_audit(bad)
    assert await ledger.list_gate_audit() == []


async def test_a_limit_beyond_64_bits_lists_everything_on_both_backends(
    store: Any, ledger: Any
) -> None:
    # Before: Postgres raised StorageError ("value out of int64 range") where the
    # in-memory ledger listed every entry.
    fact = make_fact(tags=["lesson", "candidate"])
    await store.put_facts([fact])
    await evaluate_retention(store, ledger)
    await ledger.erase_facts([], entry=ErasureEntry(selector_kinds=["tenant"],
                                                   selector_digests=[], counts={}))
    for limit in (2**63, 10**30):
        assert len(await ledger.list_gate_audit(limit=limit)) == 1
        assert len(await ledger.list_erasures(limit=limit)) == 1


@pytest.mark.parametrize("flags", [{"tenant": "no"}, {"tenant": 1}, {"dry_run": "no"}])
async def test_erasure_flags_must_be_real_bools(ledger: Any, flags: dict[str, Any]) -> None:
    # Before: tenant="no" is truthy and forgot every run of the tenant, on both backends.
    await ledger.record_outcome({"run_id": "keep", "score": 0.5})
    with pytest.raises(InvalidTypeError):
        await ledger.erase_facts([], **flags)
    assert (await ledger.get_baseline()).runs == 1

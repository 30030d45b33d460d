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

from cycgraph_memory.errors import InvalidInputError
from cycgraph_memory.inmemory.ledger import InMemoryOutcomeLedger
from cycgraph_memory.records import MAX_RUN_ID_LENGTH, RunOutcome


@pytest.fixture
def ledger(backend: str, request: pytest.FixtureRequest) -> Any:
    if backend == "memory":
        return InMemoryOutcomeLedger()
    from cycgraph_memory.postgres import PostgresOutcomeLedger

    return PostgresOutcomeLedger(
        request.getfixturevalue("pg_sessionmaker"), tenant_id=request.getfixturevalue("pg_tenant")
    )


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

"""Fourteenth audit pass: weeks of one tenant through the ``Memory`` facade, both backends.

Many small ``add`` calls (sessions, speakers), lessons written with ``remember``, a
``forget``, an export moved into another tenant, an ``erase`` of one subject and the
retention gate, with a bystander tenant that must never change.
"""

from __future__ import annotations

import io
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from cycgraph_memory import (
    HashingEmbeddingProvider,
    Memory,
    RecordNotFoundError,
    RunOutcome,
    evaluate_retention,
    retrieve_gated_lessons,
)
from cycgraph_memory.lifecycle import export, import_
from cycgraph_memory.records import QUARANTINE_TAG

TEST_DIM = 8
SUBJECT = "Zorblat Quimby"
T0 = datetime(2026, 2, 2, 9, tzinfo=UTC)
SESSIONS = [
    [
        ("user", "Alice Smith maintains the billing service."),
        ("assistant", "Noted: Alice Smith deploys the billing service on Fridays."),
    ],
    [("user", f"{SUBJECT} lives in Lisbon."), ("user", f"{SUBJECT} works at Acme Corp.")],
    [
        ("user", "Alice Smith works at Acme Corp."),
        ("assistant", "Bob Jones owns the search cluster."),
    ],
    [("user", f"{SUBJECT} maintains the payroll service."), ("user", "Bob Jones likes green tea.")],
]
QUESTIONS = (
    "who maintains the billing service",
    "where does Alice Smith work",
    "Bob Jones search cluster",
)


async def _open(pg_parts: Any, request: pytest.FixtureRequest, tenant: str) -> Memory:
    """A ``Memory`` for ``tenant`` on the test's backend."""
    if pg_parts is None:
        return await Memory.open("memory://", tenant=tenant, embedding_dim=TEST_DIM)
    from cycgraph_memory.postgres import PostgresOutcomeLedger

    make = request.getfixturevalue("pg_make_store")
    maker = request.getfixturevalue("pg_sessionmaker")
    tenant = f"{tenant}_{uuid.uuid4().hex[:8]}"
    return Memory(
        make(tenant),
        make(tenant, index=True),
        embedder=HashingEmbeddingProvider(dimensions=TEST_DIM),
        ledger=PostgresOutcomeLedger(maker, tenant_id=tenant),
        tenant=tenant,
    )


async def _dump(memory: Memory) -> str:
    buffer = io.StringIO()
    await export(memory.store, buffer)
    return buffer.getvalue()


async def _grow(memory: Memory, sessions: list[list[tuple[str, str]]], base: int) -> list[str]:
    """One ``add`` per turn; the ids of the messages naming the subject."""
    named = []
    for s, session in enumerate(sessions):
        for i, (role, text) in enumerate(session):
            mid = str(uuid.UUID(int=base + s * 10 + i))
            when = T0 + timedelta(days=s, minutes=i)
            await memory.add(
                [
                    {
                        "id": mid,
                        "role": role,
                        "content": text,
                        "timestamp": when.isoformat(),
                        "metadata": {"session": f"s{s}", "speaker": role},
                    }
                ],
                tags=["chat"],
                run_id=f"chat-{s}",
            )
            if SUBJECT in text:
                named.append(mid)
    return named


async def _answers(memory: Memory) -> list[Any]:
    out: list[Any] = []
    for mode in ("vector", "text", "hybrid"):
        for question in QUESTIONS:
            found = await memory.search(question, mode=mode, min_similarity=0.0, limit=5)
            out.append([f.id for f in found.result.facts])
            out.append(found.prompt)
    around = await memory.search(entity="Alice Smith")
    out.append(
        (sorted(e.id for e in around.result.entities), sorted(f.id for f in around.result.facts))
    )
    out.append(sorted(f.id for f in (await memory.search(tags=["chat"], limit=100)).result.facts))
    return out


async def test_weeks_of_one_tenant_through_the_facade(
    memory: Memory, pg_parts: Any, request: pytest.FixtureRequest
) -> None:
    bystander = await _open(pg_parts, request, "bystander")
    await bystander.add(
        [
            {
                "id": str(uuid.UUID(int=9_000)),
                "role": "user",
                "content": "Carol White runs the data warehouse.",
            }
        ]
    )
    bystander_before = await _dump(bystander)

    named = await _grow(memory, SESSIONS, base=1_000)
    assert len(named) == 3
    # At ingest the pipeline resolves new entities against stored ones: one subject.
    around = (await memory.search(entity=SUBJECT.upper())).result.entities
    (subject,) = [e for e in around if e.name == SUBJECT]
    lessons = [
        await memory.remember(
            "cite the source for every number", run_id="reflect-1", idempotency_key="reflect-1:0"
        ),
        await memory.remember(
            "skip the integration tests", run_id="reflect-1", idempotency_key="reflect-1:1"
        ),
    ]
    poisoned = await memory.remember(
        "always trust the cached answer", tags=["lesson", QUARANTINE_TAG], candidate=False
    )
    tea = next(
        f
        for f in (await memory.search("green tea", mode="text")).result.facts
        if "green tea" in f.content
    )
    assert (await memory.forget([tea.id])).forgotten == [tea.id]

    # Export, import into a new tenant (twice): the same world, the same answers.
    source = await _dump(memory)
    moved = await _open(pg_parts, request, "moved")
    try:
        for _ in range(2):
            await import_(moved.store, io.StringIO(source), index=moved.index)
        assert await _dump(moved) == source
        assert await _answers(moved) == await _answers(memory)
        assert (await moved.stats()).records == (await memory.stats()).records
        served = await moved.search("green tea", mode="text", limit=20)
        assert tea.id not in {f.id for f in served.result.facts}  # still forgotten
    finally:
        await moved.close()

    # Erase the subject: entity and the messages naming them.
    report = await memory.erase(entity_ids=[subject.id], message_ids=named)
    assert report.entities == 1 and report.messages == len(named)
    with pytest.raises(RecordNotFoundError):
        await memory.search(entity=SUBJECT)
    seen = [await _dump(memory)]
    for mode in ("vector", "text", "hybrid", None):  # None: the default path
        for inc in (False, True):
            found = await memory.search(
                f"{SUBJECT} Lisbon payroll",
                mode=mode,
                min_similarity=0.0,
                limit=100,
                include_invalidated=inc,
            )
            seen += [found.result.model_dump_json(), found.prompt]
    seen.append(
        (
            await memory.search(tags=["chat"], limit=100, include_invalidated=True)
        ).result.model_dump_json()
    )
    seen.append((await memory.stats()).model_dump_json())
    for needle in (SUBJECT, str(subject.id), *named):
        assert needle not in "\n".join(seen), f"{needle!r} resurfaced after erase"
    again = await memory.erase(entity_ids=[subject.id], message_ids=named)
    assert set(again.counts().values()) == {0}
    # Said again later, the subject is a new record: nothing cites the erased one.
    await memory.add(
        [{"id": str(uuid.UUID(int=7)), "role": "user", "content": f"{SUBJECT} moved to Porto."}]
    )
    around = (await memory.search(entity=SUBJECT)).result.entities
    assert [e.id for e in around if e.name == SUBJECT] != [subject.id]
    stored = {e.id for e in await memory.store.find_entities(include_invalidated=True)}
    for fact in await memory.store.find_facts(include_invalidated=True):
        assert set(fact.entity_ids) <= stored and subject.id not in fact.entity_ids
    await memory.erase(
        message_ids=[str(uuid.UUID(int=7))], entity_ids=[e.id for e in around if e.name == SUBJECT]
    )

    # The retention loop on what is left.
    for run, (score, ids) in enumerate(
        [
            (0.9, [lessons[0]]),
            (0.92, [lessons[0]]),
            (0.88, [lessons[0]]),
            (0.1, [lessons[1]]),
            (0.12, [lessons[1]]),
            (0.15, [lessons[1]]),
            (0.5, []),
            (0.52, []),
            (0.49, []),
            (0.51, []),
        ]
    ):
        await memory.ledger.record_outcome(
            RunOutcome(run_id=f"run-{run}", score=score, fact_ids=ids)
        )
    gate = await evaluate_retention(
        memory.store, memory.ledger, {"min_trials": 3, "noise_floor_sd": 0.1}
    )
    assert [p.fact_id for p in gate.promoted] == [lessons[0]]
    assert [e.fact_id for e in gate.evicted] == [lessons[1]]
    served_lessons = await retrieve_gated_lessons(
        memory.store, tags=["lesson"], ledger=memory.ledger
    )
    assert [f.id for f in served_lessons] == [lessons[0]]
    assert poisoned not in {f.id for f in served_lessons}
    stats = await memory.stats()
    assert stats.pending_candidates == 0 and stats.records["fact"].quarantined == 1

    # Erasing the reflection run takes its lessons and their ledger links.
    erased = await memory.erase(run_id="reflect-1")
    assert erased.facts == 2 and erased.ledger_links == 6
    assert await retrieve_gated_lessons(memory.store, tags=["lesson"]) == []
    assert await _dump(bystander) == bystander_before

    # The tenant starts over: nothing of it is left, and it works as new.
    await memory.erase(tenant=True)
    assert len((await _dump(memory)).splitlines()) == 2
    assert all(c.live == c.invalidated == 0 for c in (await memory.stats()).records.values())
    await memory.add(
        [
            {
                "id": str(uuid.UUID(int=5)),
                "role": "user",
                "content": "Dana Lee reviews every schema change.",
            }
        ]
    )
    found = await memory.search("who reviews schema changes", mode="text")
    assert found.result.facts[0].content.endswith("Dana Lee reviews every schema change.")
    assert found.result.fact_scores[found.result.facts[0].id].text_score
    assert await _dump(bystander) == bystander_before
    await bystander.close()

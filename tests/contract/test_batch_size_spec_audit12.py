"""Audit 12: ``batchSize`` is a page size only, on both backends.

Spec: ``MemoryConsolidator`` ``batchSize`` - "paginated fact loading (avoids OOM on large
stores)"; ``ConflictDetector`` ``batchSize`` - "Page size for paginated fact loading". A
page size must never change what a pass finds or writes: the same store planned (or
scanned) with pages of 1, 2, 7 and the default 1000 gives the same conflicts, the same
mutations and the same report, in soft and hard mode, with themes and episodes to cascade
to. Earlier tests varied the page size of the entity resolver only (and of the consolidator
to compare its LSH and exact scans).
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from cycgraph_memory import ConflictDetector, MemoryConsolidator
from cycgraph_memory.consolidation.plan import Delete, Put

from .factories import at, make_episode, make_fact, make_theme, store_referents, unit, vec

SIZES = (1, 2, 7, 1000)
ALICE, ACME, BOB = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()


async def seed(store: Any) -> None:
    await store_referents(store, entities=[ALICE, ACME, BOB])
    facts = [  # a verified lesson and its untagged near-duplicate (cosine 0.998)
        make_fact(
            content="lesson v0",
            embedding=vec(1),
            valid_from=at(days=0),
            tags=["verified"],
            entity_ids=[BOB],
        ),
        make_fact(
            content="lesson v1", embedding=vec(1, 0.0625), valid_from=at(days=1), entity_ids=[BOB]
        ),
    ]
    facts += [  # notes read now and then (decay scores differ by age and by use)
        make_fact(
            content=f"note {i}",
            embedding=unit(i),
            valid_from=at(days=i),
            access_count=i,
            last_accessed_at=at(days=10 + i),
            tags=["candidate"] if i == 3 else [],
        )
        for i in range(2, 6)
    ]
    facts += [
        make_fact(content="Alice works at Acme", valid_from=at(days=1), entity_ids=[ALICE, ACME]),
        make_fact(
            content="Alice doesn't work at Acme", valid_from=at(days=2), entity_ids=[ALICE, ACME]
        ),
        make_fact(
            content="Alice lives in Paris",
            valid_from=at(days=1),
            entity_ids=[ALICE],
            embedding=unit(7),
        ),
        make_fact(
            content="Alice lives in Rome",
            valid_from=at(days=5),
            entity_ids=[ALICE],
            embedding=vec(0, 0, 0, 0, 0, 0, 0.25, 1),
        ),
        make_fact(
            content="Acme is profitable",
            valid_from=at(days=2),
            entity_ids=[ACME],
            embedding=unit(6),
        ),
        make_fact(
            content="the company loses money",
            valid_from=at(days=2.5),
            entity_ids=[ACME],
            embedding=vec(0, 0, 0, 0, 0, 0, 1, 0.25),
        ),
        make_fact(
            content="quarantined twin",
            embedding=vec(1),
            valid_from=at(days=9),
            tags=["quarantined"],
            entity_ids=[BOB],
        ),
    ]
    facts += [make_fact(content=f"filler {i}", valid_from=at(days=20 + i)) for i in range(9)]
    await store.put_facts(facts)
    await store.put_themes(
        [
            make_theme(
                label="lessons", fact_ids=[facts[0].id, facts[1].id, facts[-1].id], embedding=vec(1)
            ),
            make_theme(label="notes", fact_ids=[f.id for f in facts[2:6]], embedding=unit(3)),
            make_theme(label="old", fact_ids=[facts[2].id], embedding=unit(2)),
            make_theme(label="merged away", fact_ids=[facts[1].id], embedding=vec(1, 0.0625)),
        ]
    )
    await store.put_episodes(
        [
            make_episode(
                started_at=at(days=i),
                ended_at=at(days=i, seconds=60),
                messages=[],
                fact_ids=[facts[i].id],
            )
            for i in range(5)
        ]
    )


def mutations(plan: Any) -> list[tuple[str, str, str, str]]:
    out = []
    for m in plan.mutations:
        if isinstance(m, Put):
            out.append(("put", m.kind, str(m.record.id), m.record.model_dump_json()))
        else:
            assert isinstance(m, Delete)
            out.append(("delete", m.kind, str(m.id), m.reason))
    return sorted(out)


@pytest.mark.parametrize("mode", ["soft", "hard"])
async def test_consolidation_plans_do_not_depend_on_the_page_size(store: Any, mode: str) -> None:
    await seed(store)
    plans = {
        size: await MemoryConsolidator(
            store,
            max_facts=12,
            max_episodes=2,
            delete_mode=mode,
            batch_size=size,
            clock=lambda: at(days=40),
        ).plan()
        for size in SIZES
    }
    reference = plans[1000]
    assert reference.report is not None
    assert reference.report.model_dump() == {
        "facts_deduped": 3,
        "facts_decayed": 6,
        "episodes_pruned": 3,
        "themes_cleaned_up": 1,
        "themes_removed": 1,
        "total_reclaimed": 13,
        "mutation_log": None,
    }
    for size, plan in plans.items():
        assert plan.report == reference.report, size
        assert mutations(plan) == mutations(reference), size


async def test_conflicts_do_not_depend_on_the_page_size(store: Any) -> None:
    await seed(store)
    found = {
        size: [
            (c.type, c.fact_a.id, c.fact_b.id, c.confidence)
            for c in await ConflictDetector(store, batch_size=size).detect_conflicts()
        ]
        for size in SIZES
    }
    assert sorted(t for t, *_ in found[1000]) == [
        "negation",
        "semantic_contradiction",
        "supersession",
    ]
    assert all(got == found[1000] for got in found.values())

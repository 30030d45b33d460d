"""Audit 12, MemoryConsolidator and EntityResolver black-box against the spec, both backends.

Sentences pinned here that no earlier test held on its own:

* ``decayHalfLifeDays``: "Age is measured from ``last_accessed_at`` when usage tracking is
  active (``touchFacts``), else from ``valid_from``", and ``touchFacts``: "Retrieval calls it
  after serving facts so decay scoring favors load-bearing facts" - end to end, a fact
  served by retrieval outlives a newer one nobody read;
* ``debug``: "Enable debug logging and the mutation log in the report" (off by default:
  no log, ``mutation_log`` absent), through a logger in the spec's one-message style
  (``logger: { warn: console.warn }``) even when it has every level;
* EntityResolver: "stripping leading articles" covers ``a`` and ``an`` as well as ``the``,
  only *leading* ones; and only live entities are matched (a soft-deleted entity is no
  canonical and is not merged again).
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from cycgraph_memory import EntityResolver, MemoryConsolidator
from cycgraph_memory.records import MemoryQuery
from cycgraph_memory.retrieval import retrieve_memory

from .factories import at, make_entity, make_fact, unit


async def test_decay_age_runs_from_the_last_access(store: Any) -> None:
    now = at(days=101)
    # Created long ago but read yesterday: age 1 day. Never read, created 51 days ago.
    used = make_fact(
        content="old but read",
        embedding=unit(0),
        valid_from=at(days=0),
        last_accessed_at=at(days=100),
    )
    unread = make_fact(content="newer, never read", embedding=unit(1), valid_from=at(days=50))
    await store.put_facts([used, unread])
    report = await MemoryConsolidator(store, max_facts=1, clock=lambda: now).consolidate()
    assert (report.facts_decayed, report.total_reclaimed) == (1, 1)
    assert [f.id for f in await store.find_facts()] == [used.id]
    # With no access recorded the age runs from valid_from: the newer fact stays.
    await store.put_facts(
        [
            used.model_copy(update={"last_accessed_at": None}),
            unread.model_copy(update={"invalidated_by": None}),
        ]
    )
    await MemoryConsolidator(store, max_facts=1, clock=lambda: now).consolidate()
    assert [f.id for f in await store.find_facts()] == [unread.id]


async def test_a_fact_retrieval_serves_outlives_one_nobody_reads(store: Any, index: Any) -> None:
    served = make_fact(content="pin versions", tags=["lesson"], valid_from=at(days=0))
    unread = make_fact(content="newer note", tags=["note"], valid_from=at(days=30))
    await store.put_facts([served, unread])
    result = await retrieve_memory(store, index, MemoryQuery(tags=["lesson"]))
    assert [f.id for f in result.facts] == [served.id]
    touched = await store.get_fact(served.id)
    assert touched is not None and touched.access_count == 1
    assert touched.last_accessed_at is not None
    report = await MemoryConsolidator(store, index, max_facts=1).consolidate()
    assert report.facts_decayed == 1
    assert [f.id for f in await store.find_facts()] == [served.id]


async def test_debug_is_off_by_default(store: Any) -> None:
    # A logger in the spec's style, one message per call, here with all three levels: it
    # used to be handed logging's (msg, *args) and raised TypeError after the commit.
    lines: list[tuple[str, str]] = []
    logger = SimpleNamespace(
        debug=lambda msg: lines.append(("debug", msg)),
        info=lambda msg: lines.append(("info", msg)),
        warning=lambda msg: lines.append(("warning", msg)),
    )

    async def seed() -> None:
        await store.put_facts(
            [
                make_fact(content="use retries", embedding=unit(1), valid_from=at(days=0)),
                make_fact(content="use retries!", embedding=unit(1), valid_from=at(days=1)),
            ]
        )

    await seed()
    quiet = await MemoryConsolidator(store, logger=logger).consolidate()
    assert quiet.facts_deduped == 1 and quiet.mutation_log is None
    assert [level for level, _ in lines] == ["info"]  # the pass summary only
    assert "facts_deduped" in lines[0][1] and "%s" not in lines[0][1]
    await store.clear()
    lines.clear()
    await seed()
    loud = await MemoryConsolidator(store, logger=logger, debug=True).consolidate()
    assert loud.mutation_log is not None
    assert [m.type for m in loud.mutation_log] == ["fact_kept", "fact_merged"]
    debug_lines = [msg for level, msg in lines if level == "debug"]
    assert len(debug_lines) == len(loud.mutation_log)
    assert all(str(m.id) in line for m, line in zip(loud.mutation_log, debug_lines, strict=True))


async def test_resolver_strips_every_leading_article_and_only_leading_ones(store: Any) -> None:
    def person(name: str, day: int) -> Any:
        return make_entity(name=name, entity_type="organization", created_at=at(days=day))

    apple = person("Apple", 0)
    an_apple = person("An Apple", 1)
    a_team = person("A Team", 2)
    team = person("Team", 3)
    bank = person("Bank of the West", 4)
    bank_short = person("Bank of West", 5)
    await store.put_entities([apple, an_apple, a_team, team, bank, bank_short])
    report = await EntityResolver(store).resolve()
    assert (report.groups_merged, report.entities_absorbed) == (2, 2)
    live = {e.id for e in await store.find_entities()}
    assert live == {apple.id, a_team.id, bank.id, bank_short.id}
    for loser, canonical in ((an_apple, apple), (team, a_team)):
        got = await store.get_entity(loser.id)
        assert got is not None and got.superseded_by == canonical.id


async def test_resolver_matches_live_entities_only(store: Any) -> None:
    retired = make_entity(
        name="Acme", entity_type="organization", created_at=at(days=0), invalidated_at=at(days=1)
    )
    current = make_entity(name="ACME", entity_type="organization", created_at=at(days=2))
    later = make_entity(name="acme!", entity_type="organization", created_at=at(days=3))
    await store.put_entities([retired, current, later])
    fact = make_fact(content="Acme ships", entity_ids=[later.id])
    await store.put_fact(fact)
    report = await EntityResolver(store).resolve()
    assert (report.groups_merged, report.entities_absorbed, report.facts_rewritten) == (1, 1, 1)
    # The oldest *live* record is canonical; the soft-deleted one is left as it was.
    assert await store.get_entity(retired.id) == retired
    got = await store.get_entity(later.id)
    assert got is not None and got.superseded_by == current.id
    moved = await store.get_fact(fact.id)
    assert moved is not None and moved.entity_ids == [current.id]
    assert await EntityResolver(store).resolve() == type(report)()

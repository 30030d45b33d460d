"""Audit 9: acceptance tests of the knowledge graph, the store contract and retrieval.

Written from the spec (docs/shared spec: knowledge graph, temporal queries, subgraph
extraction, storage backends) by an outside checker's method: each test states a promise
and checks it on both backends; the tests here are the ones earlier audits did not cover.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import pytest
import pytest_asyncio
from sqlalchemy import text
from sqlalchemy.ext.asyncio import async_sessionmaker

from cycgraph_memory import MemoryQuery, RetrievalOptions, retrieve_memory
from cycgraph_memory.retrieval import extract_subgraph

from .factories import (
    make_entity,
    make_episode,
    make_fact,
    make_message,
    make_relationship,
    vec,
)

# ------------------------------------------------- timestamps at the ends of the range

FIRST_HOURS = datetime(1, 1, 1, 2, 0, 0, 250_000, tzinfo=UTC)
"""A valid instant in the first hours of year 1: 1 BC in any zone west of UTC."""
LAST_HOURS = datetime(9999, 12, 31, 23, 0, 0, 125_000, tzinfo=UTC)
"""A valid instant in the last hours of year 9999: year 10000 in any zone east of UTC."""


@pytest_asyncio.fixture(params=["Asia/Kolkata", "America/New_York", "UTC"])
async def zoned_backends(
    request: pytest.FixtureRequest, pg_engine: Any, pg_tenant: str
) -> AsyncIterator[tuple[Any, Any]]:
    """A Postgres store and index whose connection runs in a session ``TimeZone``.

    ``initdb`` sets a server's ``TimeZone`` to the machine's zone, so a deployed database
    need not run in UTC; the records it returns must not depend on it.
    """
    from cycgraph_memory.postgres import PostgresMemoryIndex, PostgresMemoryStore

    async with pg_engine.connect() as conn:
        outer = await conn.begin()
        await conn.execute(text(f"SET LOCAL TimeZone = '{request.param}'"))
        sessions = async_sessionmaker(
            bind=conn, join_transaction_mode="create_savepoint", expire_on_commit=False
        )
        try:
            yield (PostgresMemoryStore(sessions, tenant_id=pg_tenant),
                   PostgresMemoryIndex(sessions, tenant_id=pg_tenant))
        finally:
            await outer.rollback()


@pytest.mark.postgres
async def test_records_at_the_ends_of_the_range_read_back_in_any_session_time_zone(
    zoned_backends: tuple[Any, Any],
) -> None:
    """Valid timestamps read back whatever the server's ``TimeZone`` (every read path).

    jsonb printed 9999-12-31 23:00 UTC as '10000-01-01T04:30:00+05:30' in Asia/Kolkata
    and 0001-01-01 02:00 UTC as '0001-12-31T21:03:58-04:56:02 BC' in America/New_York:
    every retrieval path and the subgraph raised ``ValueError`` on them.
    """
    store, index = zoned_backends
    a, b = make_entity(name="Ada"), make_entity(name="Babbage")
    await store.put_entities([a, b])
    edge = make_relationship(a.id, b.id, valid_from=FIRST_HOURS, valid_until=LAST_HOURS)
    await store.put_relationship(edge)
    said = [make_message(content="the engine hello", timestamp=FIRST_HOURS),
            make_message(content="analytical hello", timestamp=LAST_HOURS)]
    episode = make_episode(messages=said, started_at=FIRST_HOURS, ended_at=LAST_HOURS)
    await store.put_episode(episode)
    fact = make_fact(
        content="the engine says hello", valid_from=FIRST_HOURS, valid_until=LAST_HOURS,
        embedding=vec(1.0), entity_ids=[a.id], source_episode_ids=[episode.id],
        source_message_ids=[m.id for m in said], tags=["lesson"],
    )
    await store.put_fact(fact)

    assert await store.get_fact(fact.id) == fact
    assert await store.get_relationship(edge.id) == edge
    got_episode = await store.get_episode(episode.id)
    assert got_episode is not None
    assert [m.timestamp for m in got_episode.messages] == [FIRST_HOURS, LAST_HOURS]
    assert [r.id for r in await store.get_relationships_for_entity(a.id)] == [edge.id]
    for native in (True, False):
        sub = await extract_subgraph(store, [a.id], native=native)
        assert sub.relationships == [edge]
        options = RetrievalOptions(native_paths=native)
        for query in (
            MemoryQuery(embedding=vec(1.0)),
            MemoryQuery(embedding=vec(1.0), text="engine hello"),
            MemoryQuery(entity_ids=[a.id], valid_at=LAST_HOURS.replace(hour=22)),
            MemoryQuery(tags=["lesson"], valid_at=FIRST_HOURS),
        ):
            result = await retrieve_memory(store, index, query, options=options)
            assert [f.id for f in result.facts] == [fact.id], query
            served = result.facts[0]
            assert (served.valid_from, served.valid_until) == (FIRST_HOURS, LAST_HOURS)
            assert all(r == edge for r in result.relationships)
            for m in result.messages:
                assert m.timestamp in (FIRST_HOURS, LAST_HOURS)
        result = await retrieve_memory(
            store, index, MemoryQuery(embedding=vec(1.0), text="engine hello"),
            options=options, mode="text",
        )
        assert [f.id for f in result.facts] == [fact.id]


@pytest_asyncio.fixture
async def low_float_digits(pg_engine: Any, pg_tenant: str) -> AsyncIterator[tuple[Any, Any]]:
    """A Postgres store and index on a connection with ``extra_float_digits = 0``.

    That was the server default before Postgres 12 and is still set by some
    ``postgresql.conf`` files and poolers; it prints doubles with 15 significant digits.
    """
    from cycgraph_memory.postgres import PostgresMemoryIndex, PostgresMemoryStore

    async with pg_engine.connect() as conn:
        outer = await conn.begin()
        await conn.execute(text("SET LOCAL extra_float_digits = 0"))
        sessions = async_sessionmaker(
            bind=conn, join_transaction_mode="create_savepoint", expire_on_commit=False
        )
        try:
            yield (PostgresMemoryStore(sessions, tenant_id=pg_tenant),
                   PostgresMemoryIndex(sessions, tenant_id=pg_tenant))
        finally:
            await outer.rollback()


@pytest.mark.postgres
async def test_edge_weights_read_back_exactly_whatever_the_float_output_setting(
    low_float_digits: tuple[Any, Any],
) -> None:
    """A relationship's weight reads back as written on every path (spec: weighted edges).

    The native subgraph and the expansion of retrieval read edges as jsonb built in SQL;
    with ``extra_float_digits = 0`` a weight of 1/3 came back as 0.333333333333333, so the
    native and generic paths (and ``get_relationship``) disagreed about the same edge.
    """
    store, index = low_float_digits
    a, b = make_entity(name="Ada"), make_entity(name="Babbage")
    await store.put_entities([a, b])
    edge = make_relationship(a.id, b.id, weight=1 / 3, attributes={"x": 0.1 + 0.2})
    await store.put_relationship(edge)
    fact = make_fact(embedding=vec(1.0), entity_ids=[a.id])
    await store.put_fact(fact)

    assert await store.get_relationship(edge.id) == edge
    for native in (True, False):
        assert (await extract_subgraph(store, [a.id], native=native)).relationships == [edge]
        options = RetrievalOptions(native_paths=native)
        for query in (MemoryQuery(embedding=vec(1.0)), MemoryQuery(entity_ids=[a.id])):
            result = await retrieve_memory(store, index, query, options=options)
            assert result.relationships == [edge], (native, query)
            assert result.relationships[0].weight == 1 / 3


# ------------------------------------------------- hierarchical retrieval x temporal filters


@pytest.mark.parametrize("native", [True, False], ids=["native", "generic"])
async def test_valid_at_serves_a_valid_fact_behind_many_better_matching_expired_ones(
    store: Any, index: Any, native: bool
) -> None:
    """Spec: hierarchical retrieval "applies temporal filters"; ``valid_at`` returns the
    facts valid then. A valid fact at similarity 0.99 was not served (empty result) when
    more than ``2 * limit`` expired or not-yet-valid facts matched the query better: the
    direct search fetched only those, and the filter dropped them all.
    """
    from .factories import at, blend

    expired = [make_fact(content=f"old rule {i}", embedding=vec(1.0), valid_from=at(days=0),
                         valid_until=at(days=1)) for i in range(12)]
    future = [make_fact(content=f"next rule {i}", embedding=vec(1.0), valid_from=at(days=5))
              for i in range(12)]
    current = make_fact(content="current rule", embedding=blend(0, 1, 0.9, 0.1),
                        valid_from=at(days=0))
    await store.put_facts([*expired, *future, current])
    await index.rebuild(store)
    options = RetrievalOptions(native_paths=native)

    for limit in (1, 2, 5):
        query = MemoryQuery(embedding=vec(1.0), limit=limit, valid_at=at(days=2))
        result = await retrieve_memory(store, index, query, options=options)
        assert [f.id for f in result.facts] == [current.id]
        hybrid = await retrieve_memory(
            store, index, query.model_copy(update={"text": "rule"}), options=options,
            mode="hybrid",
        )
        assert [f.id for f in hybrid.facts] == [current.id]
    # the same through changed_since: the better matches started before it
    recent = make_fact(content="recent rule", embedding=blend(0, 1, 0.9, 0.1),
                       valid_from=at(days=7))
    await store.put_facts([make_fact(content=f"stable rule {i}", embedding=vec(1.0))
                           for i in range(12)] + [recent])
    await index.rebuild(store)
    query = MemoryQuery(embedding=vec(1.0), limit=2, changed_since=at(days=6))
    result = await retrieve_memory(store, index, query, options=options)
    assert [f.id for f in result.facts] == [recent.id]
    # a query whose filter drops nothing still reads one page (limit facts served)
    query = MemoryQuery(embedding=vec(1.0), limit=3, valid_at=at(days=6))
    result = await retrieve_memory(store, index, query, options=options)
    assert len(result.facts) == 3


@pytest.mark.parametrize("native", [True, False], ids=["native", "generic"])
async def test_valid_at_serves_a_valid_text_match_behind_many_expired_ones(
    store: Any, index: Any, native: bool
) -> None:
    """The text signal had the same gap: 30 expired facts ranking above the one valid
    fact for "cache" filled its ``4 * limit`` hits and the text and hybrid modes served
    nothing at ``valid_at``.
    """
    from .factories import at

    expired = [make_fact(content=f"cache cache cache rule {i}", embedding=vec(1.0),
                         valid_from=at(days=0), valid_until=at(days=1)) for i in range(30)]
    current = make_fact(content="the cache rule for the current week, in more words",
                        embedding=vec(0.0, 1.0), valid_from=at(days=0))
    await store.put_facts([*expired, current])
    await index.rebuild(store)
    options = RetrievalOptions(native_paths=native)
    query = MemoryQuery(text="cache", embedding=vec(1.0), limit=2, valid_at=at(days=2))
    for mode in ("text", "hybrid"):
        result = await retrieve_memory(store, index, query, options=options, mode=mode)
        assert [f.id for f in result.facts] == [current.id], mode
        assert result.fact_scores[current.id].text_rank == 1


# ------------------------------------------------- acceptance checks that held (both backends)


async def test_reputting_an_edge_or_a_fact_moves_it_in_every_lookup(store: Any) -> None:
    """``put_*`` is an upsert replacing every mutable field: the adjacency and the
    tag / entity / theme lookups follow the new values (no stale entry serves the old ones).
    """
    from .factories import make_theme

    a, b, c = make_entity(name="a"), make_entity(name="b"), make_entity(name="c")
    await store.put_entities([a, b, c])
    edge = make_relationship(a.id, b.id)
    await store.put_relationship(edge)
    await store.put_relationship(edge.model_copy(update={"target_id": c.id}))
    assert await store.get_relationships_for_entity(b.id) == []
    assert [r.id for r in await store.get_relationships_for_entity(c.id)] == [edge.id]
    for native in (True, False):
        sub = await extract_subgraph(store, [a.id], max_hops=1, native=native)
        assert {e.id for e in sub.entities} == {a.id, c.id}

    t1, t2 = make_theme(), make_theme()
    await store.put_themes([t1, t2])
    fact = make_fact(tags=["x"], entity_ids=[a.id], theme_id=t1.id)
    await store.put_fact(fact)
    await store.put_fact(fact.model_copy(
        update={"tags": ["y"], "entity_ids": [b.id], "theme_id": t2.id}))
    assert await store.find_facts(tags=["x"]) == []
    assert await store.find_facts(entity_id=a.id) == []
    assert await store.find_facts(theme_id=t1.id) == []
    assert [f.id for f in await store.find_facts(tags=["y"], entity_id=b.id,
                                                  theme_id=t2.id)] == [fact.id]
    assert list(await store.get_facts_for_entities([a.id, b.id])) == [b.id]


async def test_a_soft_deleted_record_put_back_live_is_listed_again(store: Any) -> None:
    """Soft delete is a field: writing the record back without it restores it."""
    a, b = make_entity(name="a"), make_entity(name="b")
    await store.put_entities([a, b])
    edge = make_relationship(a.id, b.id)
    await store.put_relationship(edge.model_copy(update={"invalidated_by": "superseded"}))
    assert await store.get_relationships_for_entity(a.id) == []
    await store.put_relationship(edge)
    assert [r.id for r in await store.get_relationships_for_entity(a.id)] == [edge.id]
    fact = make_fact(tags=["lesson"], invalidated_by="eval-gate:harmful")
    await store.put_fact(fact)
    assert await store.find_facts(tags=["lesson"]) == []
    await store.put_fact(fact.model_copy(update={"invalidated_by": None}))
    assert [f.id for f in await store.find_facts(tags=["lesson"])] == [fact.id]
    await store.put_entity(a.model_copy(update={"invalidated_at": datetime.now(UTC)}))
    assert [e.id for e in await store.find_entities()] == [b.id]
    await store.put_entity(a)
    assert {e.id for e in await store.find_entities()} == {a.id, b.id}


async def test_a_rolled_back_unit_of_work_leaves_no_trace_in_the_lookups(store: Any) -> None:
    """A rollback restores the adjacency and the tag / entity / theme lookups too."""
    from .factories import make_theme

    a, b, c = make_entity(name="a"), make_entity(name="b"), make_entity(name="c")
    await store.put_entities([a, b, c])
    t1, t2 = make_theme(), make_theme()
    await store.put_themes([t1, t2])
    edge = make_relationship(a.id, b.id)
    await store.put_relationship(edge)
    fact = make_fact(tags=["old"], entity_ids=[a.id], theme_id=t1.id)
    await store.put_fact(fact)

    class Abort(Exception):
        pass

    with pytest.raises(Abort):
        async with store.transaction():
            await store.put_relationship(edge.model_copy(update={"target_id": c.id}))
            await store.put_fact(fact.model_copy(
                update={"tags": ["new"], "entity_ids": [b.id], "theme_id": t2.id}))
            await store.put_fact(make_fact(tags=["ghost"], entity_ids=[c.id]))
            await store.delete_entity(b.id)
            raise Abort
    assert [r.id for r in await store.get_relationships_for_entity(b.id)] == [edge.id]
    assert await store.get_relationships_for_entity(c.id) == []
    assert [f.id for f in await store.find_facts(tags=["old"], entity_id=a.id,
                                                  theme_id=t1.id)] == [fact.id]
    for gone in ({"tags": ["new"]}, {"tags": ["ghost"]}, {"entity_id": b.id},
                 {"entity_id": c.id}, {"theme_id": t2.id}):
        assert await store.find_facts(**gone) == [], gone
    assert list(await store.get_facts_for_entities([a.id, b.id, c.id])) == [a.id]


SPECIAL_STRINGS = ["NULL", "null", "a,b", "{x}", '"q"', "back\\slash", " sp ", "a}b", "'",
                   "$1", "%", "_", "*", "a b", "ü"]


async def test_tags_and_types_with_sql_and_array_syntax_match_only_themselves(
    store: Any, index: Any
) -> None:
    """Tags and type names are opaque strings: ``NULL``, commas, braces, quotes and
    wildcards filter exactly (Postgres binds them as arrays, never as literals)."""
    facts = [make_fact(content=f"c{i}", tags=[t], embedding=vec(1.0))
             for i, t in enumerate(SPECIAL_STRINGS)]
    await store.put_facts(facts)
    await index.rebuild(store)
    for fact, tag in zip(facts, SPECIAL_STRINGS, strict=True):
        assert (await store.get_fact(fact.id)).tags == [tag]  # type: ignore[union-attr]
        assert [f.id for f in await store.find_facts(tags=[tag])] == [fact.id]
        kept = {f.id for f in await store.find_facts(exclude_tags=[tag])}
        assert kept == {f.id for f in facts} - {fact.id}
        served = await retrieve_memory(store, index, MemoryQuery(tags=[tag]))
        assert [f.id for f in served.facts] == [fact.id]
        assert [h.item.id for h in await index.search_facts(vec(1.0), tags=[tag])] == [fact.id]
    a, b = make_entity(entity_type="NULL"), make_entity(entity_type="a,b")
    await store.put_entities([a, b])
    edge = make_relationship(a.id, b.id, relation_type="NULL")
    await store.put_relationship(edge)
    assert [e.id for e in await store.find_entities(entity_type="NULL")] == [a.id]
    assert [r.id for r in await store.get_relationships_for_entity(
        a.id, relation_type="NULL")] == [edge.id]
    for native in (True, False):
        sub = await extract_subgraph(store, [a.id], relation_types=["NULL"], native=native)
        assert sub.relationships == [edge]
        assert await extract_subgraph(store, [a.id], relation_types=["null"],
                                      native=native) == await extract_subgraph(
            store, [a.id], max_hops=0, native=native)


async def test_an_expired_edge_is_history_not_a_soft_delete(store: Any, index: Any) -> None:
    """Spec: ``valid_at`` returns "only records valid at this point in time" and
    ``include_invalidated`` governs ``invalidated_by``. An edge whose ``valid_until`` has
    passed is traversed and served without ``valid_at`` (it is history), and not at a
    ``valid_at`` past its end, on every path alike.
    """
    from .factories import at

    a, b = make_entity(name="Ada"), make_entity(name="Babbage")
    await store.put_entities([a, b])
    edge = make_relationship(a.id, b.id, valid_from=at(days=0), valid_until=at(days=1))
    await store.put_relationship(edge)
    fact = make_fact(embedding=vec(1.0), entity_ids=[a.id])
    await store.put_fact(fact)
    await index.rebuild(store)
    for native in (True, False):
        options = RetrievalOptions(native_paths=native)
        assert (await extract_subgraph(store, [a.id], native=native)).relationships == [edge]
        for query in (MemoryQuery(entity_ids=[a.id]), MemoryQuery(embedding=vec(1.0))):
            served = await retrieve_memory(store, index, query, options=options)
            assert served.relationships == [edge]
            later = query.model_copy(update={"valid_at": at(days=1)})
            served = await retrieve_memory(store, index, later, options=options)
            assert served.relationships == []
        sub = await extract_subgraph(store, [a.id], valid_at=at(days=1), native=native)
        assert [e.id for e in sub.entities] == [a.id]


class _CountingIndex:
    """An index proxy counting the direct fact searches (generic path only)."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.fact_searches = inner, 0

    def __getattr__(self, name: str) -> Any:
        if name in ("hierarchical_candidates", "prefetch_signals"):
            raise AttributeError(name)  # the generic path: contract calls only
        return getattr(self.inner, name)

    async def search_facts(self, *args: Any, **kwargs: Any) -> Any:
        self.fact_searches += 1
        return await self.inner.search_facts(*args, **kwargs)


async def test_the_direct_search_is_widened_only_when_the_filter_starves_it(
    store: Any, index: Any
) -> None:
    """One search when the temporal filter leaves enough hits; more only when it does not,
    and never past an explicit ``direct_fact_candidates``."""
    from .factories import at, blend

    await store.put_facts(
        [make_fact(content=f"live {i}", embedding=vec(1.0)) for i in range(10)]
        + [make_fact(content=f"old {i}", embedding=vec(1.0), valid_until=at(days=1))
           for i in range(10)]
    )
    current = make_fact(content="current", embedding=blend(0, 1, 0.9, 0.1))
    await store.put_fact(current)
    await index.rebuild(store)
    counting = _CountingIndex(index)
    await retrieve_memory(store, counting, MemoryQuery(embedding=vec(1.0), limit=2))
    assert counting.fact_searches == 1
    counting.fact_searches = 0
    served = await retrieve_memory(
        store, counting, MemoryQuery(embedding=vec(1.0), limit=2, valid_at=at(days=2)))
    assert len(served.facts) == 2 and counting.fact_searches in (1, 2)
    await store.put_facts([f.model_copy(update={"valid_until": at(days=1)})
                           for f in await store.find_facts() if f.id != current.id])
    await index.rebuild(store)
    counting.fact_searches = 0
    served = await retrieve_memory(
        store, counting, MemoryQuery(embedding=vec(1.0), limit=2, valid_at=at(days=2)))
    # 20 expired facts match better: 4, then 16 (all expired), then 64 hits (exhausted)
    assert [f.id for f in served.facts] == [current.id] and counting.fact_searches == 3
    counting.fact_searches = 0
    served = await retrieve_memory(
        store, counting, MemoryQuery(embedding=vec(1.0), limit=2, valid_at=at(days=2)),
        options=RetrievalOptions(direct_fact_candidates=4))
    assert served.facts == [] and counting.fact_searches == 1


async def test_window_boundaries_on_every_path(store: Any, index: Any) -> None:
    """``valid_at`` is the half-open ``[valid_from, valid_until)`` and ``changed_since`` is
    strict (started or ended after it) for facts and relationships on every retrieval path,
    with the query instant exactly on a bound."""
    from .factories import at

    a, b = make_entity(name="a"), make_entity(name="b")
    await store.put_entities([a, b])
    windows = {  # name -> (valid_from, valid_until)
        "from": (at(days=1), None),
        "until": (at(days=0), at(days=1)),
        "after": (at(days=0), at(days=1, seconds=1)),
    }
    edges = {make_relationship(a.id, b.id, valid_from=f, valid_until=u).id: name
             for name, (f, u) in windows.items()}
    await store.put_relationships([
        make_relationship(a.id, b.id, id=i, valid_from=windows[n][0], valid_until=windows[n][1])
        for i, n in edges.items()
    ])
    await store.put_facts([
        make_fact(content=name, embedding=vec(1.0), entity_ids=[a.id], tags=["t"],
                  valid_from=f, valid_until=u)
        for name, (f, u) in windows.items()
    ])
    await index.rebuild(store)
    bound = at(days=1)
    for native in (True, False):
        options = RetrievalOptions(native_paths=native)
        for query in (
            MemoryQuery(entity_ids=[a.id], changed_since=bound),
            MemoryQuery(tags=["t"], changed_since=bound),
            MemoryQuery(embedding=vec(1.0), changed_since=bound),
            MemoryQuery(entity_ids=[a.id], valid_at=bound),
            MemoryQuery(tags=["t"], valid_at=bound),
            MemoryQuery(embedding=vec(1.0), valid_at=bound),
        ):
            result = await retrieve_memory(store, index, query, options=options)
            expected = ["after"] if query.changed_since else ["after", "from"]
            assert sorted(f.content for f in result.facts) == expected, (native, query)
            if query.tags:
                continue  # the tag path serves facts only
            assert sorted(edges[r.id] for r in result.relationships) == expected

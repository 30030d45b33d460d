"""retrieve_memory's store calls share one session on Postgres (read_scope)."""

from __future__ import annotations

import itertools
import secrets
from typing import Any

import pytest
from sqlalchemy import event

from cycgraph_memory import Entity, Provenance, Relationship, SemanticFact, retrieve_memory

pytestmark = pytest.mark.postgres


async def test_store_calls_of_one_retrieval_share_a_session(pg_engine: Any) -> None:
    from cycgraph_memory.postgres import PostgresMemoryIndex, PostgresMemoryStore

    tenant = f"scope_{secrets.token_hex(4)}"
    store = PostgresMemoryStore(pg_engine, tenant_id=tenant)
    index = PostgresMemoryIndex(pg_engine, tenant_id=tenant)
    prov = Provenance(source="agent")
    a, b = Entity(name="a", entity_type="t", provenance=prov), Entity(
        name="b", entity_type="t", provenance=prov
    )
    fact = SemanticFact(content="x", entity_ids=[a.id], tags=["lesson"],
                        embedding=[1.0] + [0.0] * 7, provenance=prov)
    checkouts: list[int] = []

    def on_checkout(*_: Any) -> None:
        checkouts.append(1)

    try:
        await store.put_entities([a, b])
        await store.put_relationship(
            Relationship(source_id=a.id, target_id=b.id, relation_type="r", provenance=prov)
        )
        await store.put_fact(fact)
        event.listen(pg_engine.sync_engine.pool, "checkout", on_checkout)
        for query, sessions in (
            ({"entity_ids": [a.id]}, 1),  # subgraph, facts, themes, touch: one session
            ({"tags": ["lesson"]}, 1),  # listing and touch
            # the index (themes, facts and the message kNN of issue 9) joins the store's
            # unit of work (same engine): one session too
            ({"embedding": [1.0] + [0.0] * 7}, 1),
        ):
            checkouts.clear()
            result = await retrieve_memory(store, index, query)
            assert [f.id for f in result.facts] == [fact.id]
            assert len(checkouts) == sessions, query
        assert (await store.get_fact(fact.id)).access_count == 3
        # Inside a caller's unit of work the retrieval joins it.
        async with store.transaction():
            result = await retrieve_memory(store, index, {"tags": ["lesson"]})
        assert [f.id for f in result.facts] == [fact.id]
    finally:
        event.remove(pg_engine.sync_engine.pool, "checkout", on_checkout)
        await store.clear()


async def test_round_trips_per_retrieval(pg_engine: Any) -> None:
    """Statements per call (the bench's figures): fixed, whatever the graph's depth."""
    from cycgraph_memory import extract_subgraph
    from cycgraph_memory.postgres import PostgresMemoryIndex, PostgresMemoryStore

    tenant = f"trips_{secrets.token_hex(4)}"
    store = PostgresMemoryStore(pg_engine, tenant_id=tenant)
    index = PostgresMemoryIndex(pg_engine, tenant_id=tenant)
    prov = Provenance(source="agent")
    chain = [Entity(name=f"e{i}", entity_type="t", provenance=prov) for i in range(8)]
    facts = [
        SemanticFact(content=f"fact {i}", entity_ids=[e.id], tags=["lesson"],
                     embedding=[1.0, 0.1 * i] + [0.0] * 6, provenance=prov)
        for i, e in enumerate(chain)
    ]
    statements: list[str] = []

    def count(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        statements.append(statement)

    try:
        await store.put_entities(chain)
        await store.put_relationships([
            Relationship(source_id=x.id, target_id=y.id, relation_type="next", provenance=prov)
            for x, y in itertools.pairwise(chain)
        ])
        await store.put_facts(facts)
        await retrieve_memory(store, index, {"embedding": [1.0] + [0.0] * 7})  # warm caches
        event.listen(pg_engine.sync_engine, "before_cursor_execute", count)
        for hops in range(6):
            statements.clear()
            sub = await extract_subgraph(store, [chain[0].id], max_hops=hops)
            assert len(sub.entities) == hops + 1
            # tenant setting, recursive CTE (with the traversed edges)
            assert len(statements) <= 2, (hops, statements)
        statements.clear()
        result = await retrieve_memory(store, index, {"embedding": [1.0] + [0.0] * 7})
        assert len(result.facts) == len(facts)
        # settings + tenant; the candidates (themes, direct and theme facts, message and
        # episode kNN) in one statement; the expansion (entities, relationships, episodes
        # and the touch in one statement)
        assert len(statements) == 3, statements
        assert sum("set_config" in s for s in statements) == 1, statements
        # Tag path: the tenant setting, then the listing and the touch in one statement.
        statements.clear()
        result = await retrieve_memory(store, index, {"tags": ["lesson"], "limit": 3})
        assert len(result.facts) == 3
        assert len(statements) == 2, statements
        assert statements[1].lstrip().startswith("WITH") and "UPDATE facts" in statements[1]
    finally:
        event.remove(pg_engine.sync_engine, "before_cursor_execute", count)
        await store.clear()


async def _counts(store: Any, index: Any, entity: Any) -> dict[str, int]:
    from cycgraph_memory import MemoryQuery

    queries = {
        "vector": (MemoryQuery(embedding=[1.0] + [0.0] * 7, limit=5), "vector"),
        "hybrid": (MemoryQuery(embedding=[1.0] + [0.0] * 7, text="alpha topic e0",
                               limit=5, min_similarity=0.0), "hybrid"),
        "text": (MemoryQuery(text="alpha topic e0", limit=5), "text"),
        "tags": (MemoryQuery(tags=["lesson"], limit=5), None),
        "entity": (MemoryQuery(entity_ids=[entity.id], max_hops=2, limit=5), None),
    }
    out: dict[str, int] = {}
    for name, (q, mode) in queries.items():
        await retrieve_memory(store, index, q, mode=mode)  # warm the schema-dim cache
        _STATEMENTS.clear()
        result = await retrieve_memory(store, index, q, mode=mode)
        assert result.facts, name
        out[name] = len(_STATEMENTS)
    return out


_STATEMENTS: list[str] = []


async def test_statements_per_call_do_not_grow_with_the_tenant(pg_engine: Any) -> None:
    """Statements per retrieval: the same on a tenant of 100 facts and one of 400."""
    from cycgraph_memory.postgres import PostgresMemoryIndex, PostgresMemoryStore

    prov = Provenance(source="agent")

    def count(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        _STATEMENTS.append(statement)

    stores = []
    counts = []
    event.listen(pg_engine.sync_engine, "before_cursor_execute", count)
    try:
        for size in (100, 400):  # e0 is cited by 10% of the facts: specific in both
            tenant = f"shape_{size}_{secrets.token_hex(3)}"
            store = PostgresMemoryStore(pg_engine, tenant_id=tenant)
            index = PostgresMemoryIndex(pg_engine, tenant_id=tenant)
            stores.append(store)
            entities = [Entity(name=f"e{i}", entity_type="t", provenance=prov)
                        for i in range(max(2, size // 10))]
            await store.put_entities(entities)
            await store.put_relationships([
                Relationship(source_id=x.id, target_id=y.id, relation_type="r",
                             provenance=prov)
                for x, y in itertools.pairwise(entities)
            ])
            await store.put_facts([
                SemanticFact(content=f"alpha topic {i}", tags=["lesson"],
                             entity_ids=[entities[i % len(entities)].id],
                             embedding=[1.0, 0.01 * i] + [0.0] * 6, provenance=prov)
                for i in range(size)
            ])
            counts.append(await _counts(store, index, entities[0]))
    finally:
        event.remove(pg_engine.sync_engine, "before_cursor_execute", count)
        for store in stores:
            await store.clear()
    small, large = counts
    assert small == large
    # vector: settings, the candidates of every signal (themes, facts, message and
    # episode kNN) in one statement, the expansion + episodes + touch; hybrid: the same
    # three (the text candidates of facts, messages and episodes, the entity-name match,
    # the matched entities' fact counts and their facts are branches of the candidates
    # statement), plus the served facts' messages when they cite some not yet read (these
    # facts cite none); text: the same three without the vector branches; tags:
    # settings, listing + touch; entity: settings, subgraph CTE (with its edges), facts
    # of the entities, the served facts' themes + episodes + touch.
    assert small == {"vector": 3, "hybrid": 3, "text": 3, "tags": 2, "entity": 4}, small


async def test_entity_path_reads_themes_episodes_and_touches_in_one_statement(
    pg_engine: Any,
) -> None:
    """The served facts' themes, episodes and touch: one statement after the facts."""
    from datetime import UTC, datetime

    from cycgraph_memory import Episode, Message, Theme
    from cycgraph_memory.postgres import PostgresMemoryIndex, PostgresMemoryStore

    tenant = f"themed_{secrets.token_hex(4)}"
    store = PostgresMemoryStore(pg_engine, tenant_id=tenant)
    index = PostgresMemoryIndex(pg_engine, tenant_id=tenant)
    prov = Provenance(source="agent")
    at = datetime(2026, 1, 2, tzinfo=UTC)
    person = Entity(name="Ada", entity_type="person", provenance=prov)
    episode = Episode(topic="standup", started_at=at, ended_at=at, provenance=prov,
                      messages=[Message(role="user", content="Ada ships", timestamp=at)])
    gone = Theme(label="old", provenance=prov, invalidated_at=at)  # no vector
    live = Theme(label="shipping", description="releases", provenance=prov,
                 embedding=[0.1 * i - 0.3 for i in range(8)])  # not exact in float32
    facts = [
        SemanticFact(content=f"Ada fact {i}", entity_ids=[person.id],
                     theme_id=(live if i % 2 else gone).id, source_episode_ids=[episode.id],
                     embedding=[1.0, 0.1 * i] + [0.0] * 6, provenance=prov)
        for i in range(4)
    ]
    # Each theme cites its facts: the ids travel concatenated, cut per theme on read.
    gone.fact_ids = [f.id for f in facts if f.theme_id == gone.id]
    live.fact_ids = [f.id for f in facts if f.theme_id == live.id][::-1]
    seen: list[str] = []

    def count(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        seen.append(statement)

    try:
        await store.put_entities([person])
        await store.put_episode(episode)
        await store.put_themes([gone, live])
        await store.put_facts(facts)
        query = {"entity_ids": [person.id], "limit": 10}
        await retrieve_memory(store, index, query)  # warm the caches
        event.listen(pg_engine.sync_engine, "before_cursor_execute", count)
        result = await retrieve_memory(store, index, query)
        event.remove(pg_engine.sync_engine, "before_cursor_execute", count)
        # settings, subgraph, facts of the entity, themes + episodes + touch
        assert len(seen) == 4, seen
        assert "UPDATE facts" in seen[-1] and "JOIN themes" in seen[-1]
        assert sorted(f.id for f in result.facts) == sorted(f.id for f in facts)
        assert [t.id for t in result.themes] == [live.id]  # the invalidated one left out
        [theme] = result.themes
        # every field as get_themes reads it, the vector's float32 values included
        assert theme == (await store.get_themes([live.id]))[live.id]
        assert theme.embedding is not None and theme.fact_ids == live.fact_ids
        assert [e.id for e in result.episodes] == [episode.id]
        assert result.episodes[0].messages[0].content == "Ada ships"
        touched = await store.get_facts([f.id for f in facts])
        assert {f.access_count for f in touched.values()} == {2}
        with_gone = await retrieve_memory(store, index, {**query, "include_invalidated": True})
        stored = await store.get_themes([live.id, gone.id])
        assert {t.id: t for t in with_gone.themes} == stored
        assert stored[gone.id].embedding is None and stored[gone.id].fact_ids == gone.fact_ids
    finally:
        await store.clear()


async def test_entity_path_forwards_a_superseded_seed_without_a_statement_more(
    pg_engine: Any,
) -> None:
    """A resolved loser's id finds the canonical in the same 4 statements (the CTE forwards)."""
    from datetime import UTC, datetime

    from cycgraph_memory import EntityResolver
    from cycgraph_memory.postgres import PostgresMemoryIndex, PostgresMemoryStore

    tenant = f"forward_{secrets.token_hex(4)}"
    store = PostgresMemoryStore(pg_engine, tenant_id=tenant)
    index = PostgresMemoryIndex(pg_engine, tenant_id=tenant)
    prov = Provenance(source="agent")
    canonical = Entity(name="Alice Smith", entity_type="person", provenance=prov,
                       created_at=datetime(2026, 1, 1, tzinfo=UTC))
    loser = Entity(name="alice smith", entity_type="person", provenance=prov,
                   created_at=datetime(2026, 1, 2, tzinfo=UTC))
    facts = [SemanticFact(content=f"Alice fact {i}", entity_ids=[e.id], provenance=prov)
             for i, e in enumerate([canonical, loser])]
    seen: list[str] = []

    def count(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        seen.append(statement)

    try:
        await store.put_entities([canonical, loser])
        await store.put_facts(facts)
        await EntityResolver(store).resolve()
        counts = {}
        for name, seed in (("canonical", canonical.id), ("loser", loser.id)):
            query = {"entity_ids": [seed], "limit": 10}
            await retrieve_memory(store, index, query)  # warm the caches
            seen.clear()
            event.listen(pg_engine.sync_engine, "before_cursor_execute", count)
            result = await retrieve_memory(store, index, query)
            event.remove(pg_engine.sync_engine, "before_cursor_execute", count)
            counts[name] = len(seen)
            assert [e.id for e in result.entities] == [canonical.id], name
            assert sorted(f.id for f in result.facts) == sorted(f.id for f in facts), name
        assert counts == {"canonical": 4, "loser": 4}
    finally:
        await store.clear()

"""BM25 on Postgres: stored tokens and the trigger-kept statistics stay exact (rev. 0008)."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import insert, text

from cycgraph_memory.textsearch import tokenize

from ._records import episode, fact

pytestmark = pytest.mark.postgres

_EXPECTED_TERMS = """
SELECT r.tenant_id, '{table}' AS corpus, t.term, count(*) AS documents
FROM {table} r, LATERAL (SELECT DISTINCT u.term FROM unnest(r.search_terms) AS u(term)) t
WHERE r.tenant_id = :tenant GROUP BY r.tenant_id, t.term
"""
_EXPECTED_CORPUS = """
SELECT count(*), coalesce(sum(cardinality(search_terms)), 0) FROM {table}
WHERE tenant_id = :tenant
"""


async def _check_statistics(conn: Any, tenant: str) -> None:
    """The statistics tables equal a recount over the rows, for every corpus."""
    for table in ("facts", "episode_messages", "episodes"):
        expected = {
            (r.term, r.documents)
            for r in await conn.execute(text(_EXPECTED_TERMS.format(table=table)),
                                        {"tenant": tenant})
        }
        kept = {
            (r.term, r.documents)
            for r in await conn.execute(
                text("SELECT term, documents FROM text_search_terms "
                     "WHERE tenant_id = :tenant AND corpus = :corpus"),
                {"tenant": tenant, "corpus": table},
            )
        }
        assert kept == expected, table
        documents, length = (
            await conn.execute(text(_EXPECTED_CORPUS.format(table=table)), {"tenant": tenant})
        ).one()
        corpus = (
            await conn.execute(
                text("SELECT documents, total_length FROM text_search_corpora "
                     "WHERE tenant_id = :tenant AND corpus = :corpus"),
                {"tenant": tenant, "corpus": table},
            )
        ).one_or_none()
        assert (corpus or (0, 0)) == (documents, length), table


async def test_statistics_follow_inserts_updates_and_deletes(
    pg_store: Any, pg_sessionmaker: Any, pg_tenant: str
) -> None:
    from cycgraph_memory.records import Message

    f1 = fact(content="Maya adopted a greyhound named Biscuit; biscuit loves chicken")
    f2 = fact(content="Entity-8774 moved to Zürich on 2024-05-11")
    await pg_store.put_facts([f1, f2])
    m = [Message(role="user", content=c) for c in ("the greyhound sleeps", "Jörg's café")]
    ep = episode(topic="dogs and cafés", messages=m)
    await pg_store.put_episodes([ep])
    async with pg_sessionmaker() as session:
        conn = await session.connection()
        await _check_statistics(conn, pg_tenant)
        stored = (await conn.execute(
            text("SELECT search_terms FROM facts WHERE tenant_id = :t AND id = :i"),
            {"t": pg_tenant, "i": f1.id})).scalar_one()
        assert stored == tokenize(f1.content)

    # content changes (upsert), a re-put episode (messages replaced), deletes (cascade)
    await pg_store.put_facts([f1.model_copy(update={"content": "Maya's greyhound Biscuit"})])
    await pg_store.put_facts([f2])  # unchanged: statistics unchanged
    m2 = [Message(role="user", content="a new message about the greyhound")]
    await pg_store.put_episodes([ep.model_copy(update={"messages": m2})])
    async with pg_sessionmaker() as session:
        await _check_statistics(await session.connection(), pg_tenant)
    assert await pg_store.delete_fact(f2.id)
    assert await pg_store.delete_episode(ep.id)
    async with pg_sessionmaker() as session:
        conn = await session.connection()
        await _check_statistics(conn, pg_tenant)
        left = (await conn.execute(
            text("SELECT count(*) FROM text_search_terms WHERE tenant_id = :t "
                 "AND corpus <> 'facts'"), {"t": pg_tenant})).scalar_one()
        assert left == 0  # no zero-frequency rows are kept


async def test_migration_tokenizes_existing_rows(pg_databases: Any) -> None:
    from cycgraph_memory.postgres import convert, create_engine_from_dsn, upgrade
    from cycgraph_memory.postgres.store import EPISODES, FACTS, MESSAGES

    dsn = await pg_databases.create("cycgraph_bm25mig")
    engine = create_engine_from_dsn(dsn)
    try:
        await upgrade(engine, embedding_dim=8, revision="0007")
        from cycgraph_memory.records import Message

        f = fact(content="Rosa passed her driving test on April 10th, 3 minors")
        ep = episode(topic="Driving test", messages=[
            Message(role="user", content="I PASSED. 3 minors"),
            Message(role="user", content="the examiner was terrifying"),
        ])
        tenant = "t_mig"
        async with engine.begin() as conn:
            await conn.execute(text("SELECT set_config('cycgraph.tenant_id', :t, true)"),
                               {"t": tenant})
            row = convert.fact_to_row(f, tenant)
            row.pop("search_terms")
            await conn.execute(insert(FACTS).values(**row))
            row = convert.episode_to_row(ep, tenant)
            row.pop("search_terms")
            await conn.execute(insert(EPISODES).values(**row))
            for row in convert.messages_to_rows(ep, tenant):
                row.pop("search_terms")
                await conn.execute(insert(MESSAGES).values(**row))
        await upgrade(engine)
        async with engine.begin() as conn:
            await conn.execute(text("SELECT set_config('cycgraph.tenant_id', :t, true)"),
                               {"t": tenant})
            terms = (await conn.execute(text("SELECT search_terms FROM facts"))).scalar_one()
            assert terms == tokenize(f.content)
            terms = (await conn.execute(text("SELECT search_terms FROM episodes"))).scalar_one()
            assert terms == convert.episode_terms(ep)
            await _check_statistics(conn, tenant)
    finally:
        await engine.dispose()


async def test_text_search_shape_does_not_grow_with_the_tenant(
    pg_engine: Any, pg_make_store: Any
) -> None:
    """Same statements (one per search) on a tenant of 10 and of 300 matching facts."""
    from sqlalchemy import event

    statements: list[str] = []

    def count(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        statements.append(statement)

    shapes = []
    for tenant, n in (("t_bm25_small", 10), ("t_bm25_large", 300)):
        store, index = pg_make_store(tenant), pg_make_store(tenant, index=True)
        await store.put_facts(
            [fact(content=f"alpha common words and the unique word w{i}") for i in range(n)]
        )
        await index.text_search_facts("alpha w3", limit=5)  # warm caches
        event.listen(pg_engine.sync_engine, "before_cursor_execute", count)
        try:
            statements.clear()
            hits = await index.text_search_facts("alpha w3", limit=5)
            counts, total = await index.entity_fact_counts([hits[0].item.id])
        finally:
            event.remove(pg_engine.sync_engine, "before_cursor_execute", count)
        assert hits[0].item.content.endswith(" w3") and len(hits) == 5
        assert total == n and counts == {}
        shapes.append([s for s in statements if s.lstrip().startswith(("SELECT", "WITH"))
                       and "set_config" not in s])
    assert shapes[0] == shapes[1] and len(shapes[0]) == 2, shapes  # one statement each

"""GIN lookups under row-level security go through the functions of migration 0016.

An application role under row-level security cannot use the GIN indexes on
``search_terms`` / ``entity_ids`` (the array operators are not ``LEAKPROOF``, so the
policy's condition runs first and every row of the tenant is read). The backends detect
such a role and send the lookups through ``SECURITY DEFINER`` functions scoped to the
transaction's tenant. These tests check the detection, that the functions are used, and
that every affected call returns exactly what the owner gets; and that a role without the
``EXECUTE`` grant falls back to the plain statements with the same results.
"""

from __future__ import annotations

import secrets
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
import pytest_asyncio
from sqlalchemy import event, text

from ._records import entity, fact, prov, ts, unit

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

WORDS = ["harbor", "ledger", "orchid", "quartz", "saddle", "tundra", "violet", "walnut"]


async def _role(pg_engine: Any, pg_dsn: str, *, execute: bool) -> tuple[str, Any]:
    from sqlalchemy.engine import make_url

    from cycgraph_memory.postgres import create_engine_from_dsn

    role = f"cycgraph_lookup_{secrets.token_hex(4)}"
    database = make_url(pg_dsn).database
    grants = [
        f"CREATE ROLE {role} LOGIN NOSUPERUSER NOBYPASSRLS",
        f'GRANT CONNECT ON DATABASE "{database}" TO {role}',
        f"GRANT USAGE ON SCHEMA public TO {role}",
        f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO {role}",
    ]
    if execute:
        grants.append(f"GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA public TO {role}")
    async with pg_engine.begin() as conn:
        for sql in grants:
            await conn.execute(text(sql))
    return role, create_engine_from_dsn(make_url(pg_dsn).set(username=role, password=None))


async def _drop(pg_engine: Any, role: str, engine: Any) -> None:
    await engine.dispose()
    async with pg_engine.begin() as conn:
        await conn.execute(text(f"DROP OWNED BY {role}"))
        await conn.execute(text(f"DROP ROLE {role}"))


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def roles(pg_engine: Any, pg_dsn: str) -> AsyncIterator[dict[str, Any]]:
    """Engines: ``owner`` (the test superuser), ``app`` (RLS, EXECUTE granted), ``plain``
    (RLS, no EXECUTE on the functions)."""
    app_role, app = await _role(pg_engine, pg_dsn, execute=True)
    plain_role, plain = await _role(pg_engine, pg_dsn, execute=False)
    try:
        yield {"owner": pg_engine, "app": app, "plain": plain}
    finally:
        await _drop(pg_engine, app_role, app)
        await _drop(pg_engine, plain_role, plain)


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def tenant(pg_engine: Any) -> AsyncIterator[dict[str, Any]]:
    """A tenant whose facts, episodes and messages hold the words of ``WORDS`` at varied
    frequencies, some facts invalidated or tagged, citing two entities; and a second
    tenant holding the same words (never to be seen)."""
    from cycgraph_memory.postgres import PostgresMemoryStore
    from cycgraph_memory.records import Episode, Message

    name = f"lookup_{secrets.token_hex(3)}"
    other = f"lookup_other_{secrets.token_hex(3)}"
    store = PostgresMemoryStore(pg_engine, tenant_id=name)
    other_store = PostgresMemoryStore(pg_engine, tenant_id=other)
    e1, e2 = entity(name="Harbor Co"), entity(name="Quartz Ltd")
    await store.put_entities([e1, e2])
    facts = []
    for i in range(60):
        words = [w for j, w in enumerate(WORDS) if i % (j + 2) == 0] or ["filler"]
        facts.append(fact(
            content=" ".join([*words, f"note{i % 7}"]),
            entity_ids=[e for k, e in enumerate((e1.id, e2.id)) if i % (k + 2) == 0],
            tags=["lesson"] if i % 5 == 0 else [],
            valid_from=ts(i * 60),
            embedding=unit(i),
            invalidated_by="superseded" if i % 9 == 0 else None,
        ))
    await store.put_facts(facts)
    for i in range(6):
        msgs = [Message(role="user", content=f"{WORDS[i]} and {WORDS[(i + 3) % 8]}",
                        timestamp=ts(i)),
                Message(role="assistant", content=f"the {WORDS[(i + 1) % 8]} one",
                        timestamp=ts(i + 1))]
        await store.put_episode(Episode(
            topic=f"talk about {WORDS[i]}", messages=msgs, started_at=ts(i),
            ended_at=ts(i + 1), provenance=prov(), embedding=unit(i)))
    await other_store.put_entities([e1])
    await other_store.put_facts([fact(content=" ".join(WORDS), entity_ids=[e1.id])
                                 for _ in range(5)])
    try:
        yield {"tenant": name, "entities": [e1.id, e2.id]}
    finally:
        await store.clear()
        await other_store.clear()


def _backends(engine: Any, tenant: str) -> tuple[Any, Any]:
    from cycgraph_memory.postgres import PostgresMemoryIndex, PostgresMemoryStore

    return (PostgresMemoryStore(engine, tenant_id=tenant),
            PostgresMemoryIndex(engine, tenant_id=tenant))


def _ids(results: Any) -> list[tuple[uuid.UUID, float]]:
    return [(r.item.id, round(r.score, 9)) for r in results]


async def test_the_role_under_row_level_security_is_detected(
    roles: dict[str, Any], tenant: dict[str, Any]
) -> None:
    found = {}
    for name, engine in roles.items():
        _, index = _backends(engine, tenant["tenant"])
        async with index._read() as session:
            found[name] = await index._definer(session)
    assert found == {"owner": False, "app": True, "plain": False}


QUERIES = ["harbor", "harbor ledger", "orchid quartz saddle", "walnut violet tundra harbor",
           "note3 ledger", "nothing matches this", "Harbor Co quartz"]


async def _same_for_every_role(
    roles: dict[str, Any], run: Callable[[Any], Awaitable[Any]], functions: tuple[str, ...]
) -> Any:
    """``run(engine)`` as each role; the application role's and the role without the grant's
    results must equal the owner's, and the application role's statements must call every
    one of ``functions``. Returns the owner's results."""
    captured: list[str] = []

    def capture(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        captured.append(statement)

    event.listen(roles["app"].sync_engine, "before_cursor_execute", capture)
    try:
        results = {name: await run(engine) for name, engine in roles.items()}
    finally:
        event.remove(roles["app"].sync_engine, "before_cursor_execute", capture)
    assert results["app"] == results["owner"]
    assert results["plain"] == results["owner"]
    joined = "\n".join(captured)
    for fn in functions:
        assert fn in joined
    return results["owner"]


async def test_text_search_equals_the_owners_and_uses_the_functions(
    roles: dict[str, Any], tenant: dict[str, Any]
) -> None:
    async def run(engine: Any) -> list[Any]:
        _, index = _backends(engine, tenant["tenant"])
        out = []
        for q in QUERIES:
            out.append(_ids(await index.text_search_facts(q, limit=10)))
            out.append(_ids(await index.text_search_facts(
                q, limit=10, include_invalidated=True)))
            out.append(_ids(await index.text_search_facts(q, limit=10, tags=["lesson"])))
            out.append(_ids(await index.text_search_facts(
                q, limit=10, exclude_tags=["lesson"])))
            out.append(_ids(await index.text_search_messages(q, limit=10)))
            out.append(_ids(await index.text_search_episodes(q, limit=10)))
        return out

    owner = await _same_for_every_role(roles, run, (
        "cycgraph_term_rows_facts", "cycgraph_term_rows_episode_messages",
        "cycgraph_term_rows_episodes"))
    assert any(r for r in owner)


async def test_entity_lookups_equal_the_owners(
    roles: dict[str, Any], tenant: dict[str, Any]
) -> None:
    from cycgraph_memory.normalize import normalize_entity_name

    ids = tenant["entities"]
    keys = [(normalize_entity_name(n), "org") for n in ("harbor co", "The Quartz  LTD", "nope")]

    async def run(engine: Any) -> list[Any]:
        store, index = _backends(engine, tenant["tenant"])
        out: list[Any] = [await index.entity_fact_counts(ids),
                          await index.entity_fact_counts(ids, cap=3)]
        for options in ({}, {"per_entity_limit": 4}, {"include_invalidated": True},
                        {"tags": ["lesson"]}, {"exclude_tags": ["lesson"]},
                        {"valid_at": ts(1200)}, {"changed_since": ts(2400)}):
            found = await store.get_facts_for_entities(ids, **options)
            out.append({k: [f.id for f in v] for k, v in found.items()})
        out.append([e.id for e in await index.match_entity_names("what did harbor co say")])
        out.append([e.id for e in await store.find_entities_by_name_keys(keys)])
        return out

    owner = await _same_for_every_role(roles, run, (
        "cycgraph_entity_fact_rows", "cycgraph_entity_fact_count",
        "cycgraph_entity_name_rows", "cycgraph_entity_name_key_rows"))
    assert owner[0][0]
    assert [len(found) for found in owner[-2:]] == [1, 2]


async def test_hybrid_retrieval_equals_the_owners(
    roles: dict[str, Any], tenant: dict[str, Any]
) -> None:
    from cycgraph_memory import MemoryQuery, retrieve_memory

    async def run(engine: Any) -> list[Any]:
        store, index = _backends(engine, tenant["tenant"])
        out = []
        for i, q in enumerate(QUERIES):
            result = await retrieve_memory(
                store, index,
                MemoryQuery(embedding=unit(i), text=q, limit=8, min_similarity=0.0),
                mode="hybrid",
            )
            out.append([f.id for f in result.facts])
        return out

    # One statement per call reads every signal, the GIN lookups through the functions.
    owner = await _same_for_every_role(roles, run, (
        "cycgraph_term_rows_facts", "cycgraph_entity_fact_rows",
        "cycgraph_entity_fact_count"))
    assert any(owner)


async def test_the_functions_are_scoped_and_not_public(
    roles: dict[str, Any], tenant: dict[str, Any]
) -> None:
    from sqlalchemy.exc import DBAPIError

    call = text("SELECT count(*) FROM cycgraph_term_rows_facts("
                "CAST(:terms AS text[]), false, false, NULL, NULL, 1000)")
    counts = {}
    for name in ("owner", "app"):
        for scope in (tenant["tenant"], "no_such_tenant"):
            async with roles[name].begin() as conn:
                await conn.execute(
                    text("SELECT set_config('cycgraph.tenant_id', :t, true)"), {"t": scope})
                counts[name, scope] = (await conn.execute(call, {"terms": WORDS})).scalar()
    # Only the tenant of the transaction's setting: the other tenant's five facts holding
    # every word never count, and an unknown tenant sees nothing.
    async with roles["owner"].connect() as conn:
        expected = (await conn.execute(
            text("SELECT count(*) FROM facts WHERE tenant_id = :t "
                 "AND search_terms && CAST(:terms AS text[])"),
            {"t": tenant["tenant"], "terms": WORDS},
        )).scalar()
    assert counts["app", tenant["tenant"]] == counts["owner", tenant["tenant"]] == expected > 0
    assert counts["app", "no_such_tenant"] == counts["owner", "no_such_tenant"] == 0
    # EXECUTE is not granted to PUBLIC.
    with pytest.raises(DBAPIError) as info:
        async with roles["plain"].begin() as conn:
            await conn.execute(call, {"terms": WORDS})
    assert "permission denied" in str(info.value)

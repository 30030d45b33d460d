"""Postgres bulk import: COPY batches are validated, atomic, idempotent, equal to put_*."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from pydantic import ValidationError
from sqlalchemy import text

from cycgraph_memory.errors import DanglingReferenceError, EmbeddingDimensionMismatchError
from cycgraph_memory.postgres.bulk import bulk_import
from cycgraph_memory.records import Message, Provenance

from ._records import T0, entity, episode, fact, relationship, theme, unit

pytestmark = pytest.mark.postgres


def _world() -> dict[str, Any]:
    ents = [entity(name=f"E{i}", embedding=unit(i)) for i in range(5)]
    eps = [
        episode(messages=[
            Message(role="user", content=f"m{i}-{j}", timestamp=T0, embedding=unit(j),
                    metadata={"k": j})
            for j in range(3)
        ])
        for i in range(3)
    ]
    facts = [fact(content=f"fact {i}", entity_ids=[ents[i % 5].id], tags=["t", f"n{i}"],
                  embedding=unit(i)) for i in range(7)]
    themes = [theme(fact_ids=[f.id for f in facts[:3]], embedding=unit(1))]
    rels = [relationship(ents[i].id, ents[i + 1].id) for i in range(4)]
    return {"entities": ents, "episodes": eps, "facts": facts, "themes": themes,
            "relationships": rels}


async def test_bulk_import_equals_put_and_is_idempotent(pg_make_store: Any,
                                                        pg_tenant: str) -> None:
    w = _world()
    bulk = pg_make_store(f"{pg_tenant}_b")
    put = pg_make_store(f"{pg_tenant}_p")
    report = await bulk_import(bulk, batch_size=2, **w)
    assert report.counts == {"entities": 5, "episodes": 3, "episode_messages": 9, "facts": 7,
                             "themes": 1, "relationships": 4}
    await bulk_import(bulk, batch_size=4, **w)  # again: upserts, no duplicates
    await put.put_entities(w["entities"])
    await put.put_episodes(w["episodes"])
    await put.put_facts(w["facts"])
    await put.put_themes(w["themes"])
    await put.put_relationships(w["relationships"])
    for name, lister in (("find_entities", {}), ("find_facts", {}), ("list_episodes", {}),
                         ("list_themes", {})):
        a = await getattr(bulk, name)(include_invalidated=True, **lister)
        b = await getattr(put, name)(include_invalidated=True, **lister)
        assert a == b and a
    ids = [m.id for ep in w["episodes"] for m in ep.messages]
    assert await bulk.get_messages(ids) == await put.get_messages(ids)
    rel_ids = [r.id for r in w["relationships"]]
    assert await bulk.get_relationships(rel_ids) == await put.get_relationships(rel_ids)


async def test_bulk_import_validates_before_writing(pg_make_store: Any, pg_tenant: str) -> None:
    store = pg_make_store(pg_tenant)
    w = _world()
    bad_width = fact(embedding=[1.0, 0.0])
    with pytest.raises(EmbeddingDimensionMismatchError):
        await bulk_import(store, entities=w["entities"], facts=[*w["facts"], bad_width])
    with pytest.raises(ValidationError):
        await bulk_import(store, entities=w["entities"], facts=[{"content": ""}])  # type: ignore[list-item]
    assert await store.find_entities(include_invalidated=True) == []


async def test_a_dangling_reference_is_refused_before_any_batch(
    pg_make_store: Any, pg_tenant: str
) -> None:
    store = pg_make_store(pg_tenant)
    w = _world()
    ghost = entity()
    dangling = relationship(w["entities"][0].id, ghost.id)
    with pytest.raises(DanglingReferenceError) as caught:
        await bulk_import(store, entities=w["entities"],
                          relationships=[*w["relationships"][:2], dangling], batch_size=2)
    assert caught.value.missing_ids == [ghost.id]
    # Checked before the first batch: the entities of earlier batches are not written.
    assert await store.get_relationships([r.id for r in w["relationships"]]) == {}
    assert await store.find_entities(include_invalidated=True) == []
    for cited in ({"entity_ids": [ghost.id]}, {"theme_id": uuid.uuid4()},
                  {"source_episode_ids": [uuid.uuid4()]}):
        with pytest.raises(DanglingReferenceError):
            await bulk_import(store, entities=w["entities"], facts=[fact(**cited)])
        assert await store.find_facts(include_invalidated=True) == []
    # Cited records loaded in the same call (a theme after its facts) are fine.
    th = theme(embedding=unit(1))
    report = await bulk_import(store, facts=[fact(theme_id=th.id)], themes=[th])
    assert report.counts["facts"] == 1 and report.counts["themes"] == 1


async def test_deferred_vector_indexes_are_rebuilt(pg_make_store: Any, pg_tenant: str,
                                                   pg_sessionmaker: Any) -> None:
    store = pg_make_store(pg_tenant)
    w = _world()

    async def hnsw() -> list[str]:
        async with pg_sessionmaker() as s:
            rows = await s.execute(text(
                "SELECT indexname FROM pg_indexes WHERE indexdef ILIKE '%using hnsw%' "
                "ORDER BY indexname"))
            return [str(r) for r in rows.scalars()]

    await store.put_entities(w["entities"])  # the facts cite them
    before = await hnsw()
    report = await bulk_import(store, facts=w["facts"], defer_vector_indexes=True)
    assert report.vector_indexes_rebuilt == ["ix_facts_embedding_hnsw"]
    assert await hnsw() == before


async def test_bulk_rows_carry_bm25_tokens_and_exact_statistics(
    pg_make_store: Any, pg_tenant: str, pg_sessionmaker: Any
) -> None:
    """COPY writes the same search_terms as put_*, and the trigger-kept statistics agree."""
    w = _world()
    w["facts"].append(fact(content="Dogs running; dogs barking.", embedding=unit(2)))
    bulk = pg_make_store(f"{pg_tenant}_b")
    put = pg_make_store(f"{pg_tenant}_p")
    await bulk_import(bulk, batch_size=3, **w)
    await bulk_import(bulk, batch_size=5, **w)  # upserts again: statistics unchanged
    await put.put_entities(w["entities"])
    await put.put_episodes(w["episodes"])
    await put.put_facts(w["facts"])

    async def state(tenant: str) -> dict[str, Any]:
        async with pg_sessionmaker() as s:
            await s.execute(text("SELECT set_config('cycgraph.tenant_id', :t, false)"),
                            {"t": tenant})
            out: dict[str, Any] = {}
            for table in ("facts", "episodes", "episode_messages"):
                rows = await s.execute(text(
                    f"SELECT id, search_terms FROM {table} WHERE tenant_id = :t ORDER BY id"),
                    {"t": tenant})
                out[table] = [(str(i), list(terms)) for i, terms in rows.all()]
            rows = await s.execute(text(
                "SELECT corpus, documents, total_length FROM text_search_corpora "
                "WHERE tenant_id = :t ORDER BY corpus"), {"t": tenant})
            out["corpora"] = [tuple(r) for r in rows.all()]
            rows = await s.execute(text(
                "SELECT corpus, term, documents FROM text_search_terms "
                "WHERE tenant_id = :t ORDER BY corpus, term"), {"t": tenant})
            out["terms"] = [tuple(r) for r in rows.all()]
            return out

    a, b = await state(f"{pg_tenant}_b"), await state(f"{pg_tenant}_p")
    assert a == b
    assert ["dog", "run", "dog", "bark"] in [t for _, t in a["facts"]]
    assert ("facts", 8, sum(len(t) for _, t in a["facts"])) in a["corpora"]


async def test_import_with_deferred_vector_indexes(pg_make_store: Any, pg_tenant: str,
                                                   pg_sessionmaker: Any, tmp_path: Any) -> None:
    """import_ can load through COPY without live HNSW: same records, indexes rebuilt."""
    from cycgraph_memory.lifecycle import export, import_

    w = _world()
    source = pg_make_store(f"{pg_tenant}_s")
    await bulk_import(source, **w)
    path = tmp_path / "dump.jsonl"
    await export(source, path)

    async def hnsw() -> list[str]:
        async with pg_sessionmaker() as s:
            rows = await s.execute(text(
                "SELECT indexname FROM pg_indexes WHERE indexdef ILIKE '%using hnsw%' "
                "ORDER BY indexname"))
            return [str(r) for r in rows.scalars()]

    before = await hnsw()
    target = pg_make_store(f"{pg_tenant}_t")
    report = await import_(target, path, defer_vector_indexes=True, batch_size=4)
    assert report.counts["fact"] == len(w["facts"])
    assert await hnsw() == before
    again = tmp_path / "again.jsonl"
    await export(target, again)
    assert again.read_bytes() == path.read_bytes()
    # The automatic choice leaves a small import on the live indexes.
    other = pg_make_store(f"{pg_tenant}_u")
    await import_(other, path)
    assert await hnsw() == before


async def test_binary_copy_round_trips_every_column_type(pg_make_store: Any,
                                                         pg_tenant: str) -> None:
    """Edge values through the binary COPY encoder read back equal to put_*."""
    from datetime import UTC, datetime

    old = datetime(1969, 7, 20, 20, 17, 40, 123456, tzinfo=UTC)
    ents = [entity(name="Zoë 東京 🚀", attributes={"n": [1, 2.5, None, {"k": "v"}], "b": True},
                   embedding=None, created_at=old, updated_at=old, invalidated_at=old)]
    facts = [
        fact(content="Zoë visited 東京 in 1969 🚀", entity_ids=[ents[0].id], tags=[],
             valid_from=old, valid_until=T0, invalidated_by="x", access_count=2**40,
             last_accessed_at=old, embedding=[-1e-30, 7e18, -7e18, 0.0, 1.0, -0.5,
                                               1.5e-45, 0.1]),
        fact(content="no vector", embedding=None, tags=["a", "b"]),
    ]
    eps = [episode(messages=[Message(role="assistant", content="", timestamp=old,
                                     metadata={"deep": {"x": [True, False]}}, embedding=None)])]
    rels = [relationship(ents[0].id, ents[0].id, weight=0.125)]
    bulk = pg_make_store(f"{pg_tenant}_b")
    put = pg_make_store(f"{pg_tenant}_p")
    await bulk_import(bulk, entities=ents, episodes=eps, facts=facts, relationships=rels)
    await put.put_entities(ents)
    await put.put_episodes(eps)
    await put.put_facts(facts)
    await put.put_relationships(rels)
    assert await bulk.find_entities(include_invalidated=True) == await put.find_entities(
        include_invalidated=True)
    assert await bulk.get_facts([f.id for f in facts]) == await put.get_facts(
        [f.id for f in facts])
    assert await bulk.list_episodes() == await put.list_episodes()
    mids = [m.id for m in eps[0].messages]
    assert await bulk.get_messages(mids) == await put.get_messages(mids)
    assert await bulk.get_relationships([r.id for r in rels]) == await put.get_relationships(
        [r.id for r in rels])


async def test_parallel_batches_on_an_engine(pg_databases: Any) -> None:
    """On an engine, two batches are written at once: same rows and BM25 statistics."""
    from cycgraph_memory.postgres import PostgresMemoryStore, create_engine_from_dsn, upgrade

    dsn = await pg_databases.create("cycgraph_bulk_parallel")
    engine = create_engine_from_dsn(dsn)
    try:
        await upgrade(engine, embedding_dim=8)
        w = _world()
        w["facts"] += [fact(content=f"extra fact {i} about dogs", embedding=unit(i))
                       for i in range(20)]
        bulk = PostgresMemoryStore(engine, tenant_id="bulk")
        put = PostgresMemoryStore(engine, tenant_id="put")
        report = await bulk_import(bulk, batch_size=2, **w)
        assert report.counts["facts"] == 27 and report.batches == 3 + 2 + 14 + 1 + 2
        await put.put_entities(w["entities"])
        await put.put_episodes(w["episodes"])
        await put.put_facts(w["facts"])
        await put.put_themes(w["themes"])
        await put.put_relationships(w["relationships"])
        assert await bulk.find_facts(include_invalidated=True) == await put.find_facts(
            include_invalidated=True)
        rel_ids = [r.id for r in w["relationships"]]
        assert await bulk.get_relationships(rel_ids) == await put.get_relationships(rel_ids)

        async def stats(tenant: str) -> list[Any]:
            async with engine.begin() as conn:
                await conn.execute(text("SELECT set_config('cycgraph.tenant_id', :t, true)"),
                                   {"t": tenant})
                rows = await conn.execute(text(
                    "SELECT corpus, term, documents FROM text_search_terms "
                    "WHERE tenant_id = :t ORDER BY corpus, term"), {"t": tenant})
                corpora = await conn.execute(text(
                    "SELECT corpus, documents, total_length FROM text_search_corpora "
                    "WHERE tenant_id = :t ORDER BY corpus"), {"t": tenant})
                return [*map(tuple, rows.all()), *map(tuple, corpora.all())]

        assert await stats("bulk") == await stats("put")
        dangling = relationship(w["entities"][0].id, entity().id)
        other = PostgresMemoryStore(engine, tenant_id="other")
        with pytest.raises(DanglingReferenceError):
            await bulk_import(other, entities=w["entities"], relationships=[dangling],
                              batch_size=2)
        assert await other.find_entities() == []  # refused before the first batch
    finally:
        await engine.dispose()


class _SubProvenance(Provenance):
    """A subclass: taken apart and validated as a ``Provenance``, like ``put_*`` does."""


async def test_records_changed_without_validation_are_checked(pg_make_store: Any,
                                                              pg_tenant: str) -> None:
    """Instances are re-validated: values that skipped pydantic are refused, store unchanged.

    ``model_copy(update=...)`` and ``__dict__`` writes bypass validation; the bulk path
    checks embeddings as numpy blocks and must refuse what ``put_*`` refuses, with the same
    pydantic error and nothing written.
    """
    store = pg_make_store(pg_tenant)
    w = _world()
    nan = [float("nan")] + [0.0] * 7
    sub_provenance = _SubProvenance(source="agent")
    sub_provenance.__dict__["confidence"] = 5.0  # a subclass instance is checked too
    bad_episode = episode()
    bad_episode.messages[0].__dict__["embedding"] = [float("inf")] + [0.0] * 7
    bad_inputs: list[dict[str, Any]] = [
        {"facts": [*w["facts"], w["facts"][0].model_copy(update={"embedding": nan})]},
        {"facts": [w["facts"][1].model_copy(update={"embedding": [3.5e38] + [0.0] * 7})]},
        {"facts": [w["facts"][1].model_copy(update={"embedding": ["x"] * 8})]},
        {"facts": [w["facts"][1].model_copy(update={"embedding": []})]},
        {"facts": [w["facts"][2].model_copy(update={"content": "nul \x00"})]},
        {"facts": [w["facts"][2].model_copy(update={"tags": [""]})]},
        {"facts": [fact(provenance=w["facts"][0].provenance.model_copy(
            update={"confidence": 2.0}))]},
        {"facts": [fact(provenance=sub_provenance)]},
        {"episodes": [bad_episode]},
        {"entities": [w["entities"][0].model_copy(update={"embedding": nan})]},
    ]
    for bad in bad_inputs:
        with pytest.raises(ValidationError):
            await bulk_import(store, **{"entities": w["entities"], **bad})
    assert await store.find_entities(include_invalidated=True) == []
    assert await store.find_facts(include_invalidated=True) == []
    assert await store.list_episodes(include_invalidated=True) == []


async def test_lax_values_are_stored_as_put_stores_them(pg_make_store: Any,
                                                        pg_tenant: str) -> None:
    """Embeddings pydantic accepts but the numpy block does not (ints, strings, tuples) take
    the exact path; a shared provenance changed between records is read per record."""
    base = fact()
    records = [
        base.model_copy(update={"id": uuid.uuid4(), "embedding": [1, 0, 0, 0, 0, 0, 0, 2]}),
        base.model_copy(update={"id": uuid.uuid4(), "embedding": ["0.5"] + [0.0] * 7}),
        base.model_copy(update={"id": uuid.uuid4(), "embedding": (0.0,) * 7 + (1.0,)}),
        base.model_copy(update={"id": uuid.uuid4(), "embedding": [True] + [0.25] * 7}),
    ]

    def facts() -> Any:
        yield from records
        prov = base.provenance.model_copy()
        for i in range(3):
            prov.run_id = f"run-{i}"  # one instance, changed between records
            yield fact(provenance=prov, content=f"fact {i}")

    bulk = pg_make_store(f"{pg_tenant}_b")
    put = pg_make_store(f"{pg_tenant}_p")
    await bulk_import(bulk, facts=facts())
    await put.put_facts(records)
    got = await bulk.get_facts([r.id for r in records])
    assert got == await put.get_facts([r.id for r in records]) and len(got) == 4
    assert got[records[0].id].embedding == [1.0, 0, 0, 0, 0, 0, 0, 2.0]
    runs = sorted(f.provenance.run_id or "" for f in await bulk.find_facts()
                  if f.content.startswith("fact "))
    assert runs == ["run-0", "run-1", "run-2"]


async def test_validation_pause_restores_the_garbage_collector(pg_make_store: Any,
                                                               pg_tenant: str) -> None:
    """The collector is paused only while records are validated, also on an error."""
    import gc

    from cycgraph_memory.postgres.bulk import _gc_paused

    store = pg_make_store(pg_tenant)
    assert gc.isenabled()
    with _gc_paused():
        with _gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(ValidationError):
        await bulk_import(store, facts=[{"content": ""}])  # type: ignore[list-item]
    assert gc.isenabled()
    await bulk_import(store, facts=[fact()])
    assert gc.isenabled()
    gc.disable()
    try:
        await bulk_import(store, facts=[fact()])
        assert not gc.isenabled()  # a caller's choice is kept
    finally:
        gc.enable()

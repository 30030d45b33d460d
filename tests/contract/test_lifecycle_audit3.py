"""Lifecycle audit (both backends): purge, export/import, re-embedding and graph export edges.

Each test pins a defect found by using the lifecycle operations as a new user would: a
purge that left a fact citing a deleted theme (Postgres), import/export errors that leaked
as bare ``UnicodeDecodeError`` / ``TypeError``, re-embedding arguments that were refused
only after batches had committed, a ``dry_run`` that was not a real bool, and GraphML that
no XML parser could read.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import io
import json
import secrets
import xml.etree.ElementTree as ET
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from cycgraph_memory._exclusive import FACTS_LOCK, exclusive_pass, exclusive_passes
from cycgraph_memory.embeddings import HashingEmbeddingProvider
from cycgraph_memory.errors import InvalidInputError, InvalidTypeError
from cycgraph_memory.export import export_graph, render_graph
from cycgraph_memory.hierarchy.pipeline import THEMES_LOCK
from cycgraph_memory.inmemory import InMemoryMemoryStore
from cycgraph_memory.lifecycle import export, import_, purge, reembed
from cycgraph_memory.records import QUARANTINE_TAG
from cycgraph_memory.retention.gate import GATE_PASS_NAME

from .factories import (
    EMBED_DIM,
    at,
    make_entity,
    make_episode,
    make_fact,
    make_message,
    make_relationship,
    make_theme,
    provenance,
    unit,
)


def _fresh(backend: str, request: pytest.FixtureRequest, name: str) -> Any:
    if backend == "memory":
        return InMemoryMemoryStore(expected_dimensions=EMBED_DIM)
    tenant = f"{request.getfixturevalue('pg_tenant')}_{name}"
    return request.getfixturevalue("pg_make_store")(tenant)


async def _state(store: Any) -> dict[str, Any]:
    entities = await store.find_entities(include_invalidated=True)
    facts = await store.find_facts(include_invalidated=True)
    episodes = await store.list_episodes(include_invalidated=True)
    themes = await store.list_themes(include_invalidated=True)
    messages = await store.get_messages([m.id for e in episodes for m in e.messages])
    return {"entities": entities, "facts": facts, "episodes": episodes, "themes": themes,
            "messages": messages}


# ----------------------------------------------------------------------------- purge


async def test_a_purged_theme_leaves_no_fact_citing_it(store: Any) -> None:
    # A fact may cite a theme (theme_id) that does not list it in fact_ids. Erasing the
    # theme must clear that citation too, as delete_theme does: on Postgres the fact kept
    # the id of a theme that no longer existed. (Its listed member is invalidated: a theme
    # of the erased run still listing a live fact of another run is kept, re-attributed;
    # see test_theme_invariants_audit6.py.)
    listed = make_fact(content="listed member", provenance=provenance(run_id="keep"),
                       invalidated_by="forgotten")
    theme = make_theme(provenance=provenance(run_id="erase-me"), fact_ids=[])
    await store.put_themes([theme])
    cites = make_fact(content="cites the theme only", theme_id=theme.id,
                      provenance=provenance(run_id="keep"))
    await store.put_facts([listed.model_copy(update={"theme_id": theme.id}), cites])
    await store.put_themes([theme.model_copy(update={"fact_ids": [listed.id]})])

    report = await purge(store, run_id="erase-me")

    assert report.themes == 1 and report.facts == 0
    assert await store.get_themes([theme.id]) == {}
    facts = await store.get_facts([listed.id, cites.id])
    assert {f.theme_id for f in facts.values()} == {None}
    assert await store.find_facts(theme_id=theme.id, include_invalidated=True) == []


async def test_a_theme_emptied_by_a_purge_leaves_no_fact_citing_it(store: Any) -> None:
    # The theme goes because its only listed fact goes; another fact cited it unlisted.
    gone = make_fact(content="erased fact", provenance=provenance(run_id="erase-me"))
    theme = make_theme(provenance=provenance(run_id="keep"), fact_ids=[])
    await store.put_themes([theme])
    stays = make_fact(content="kept fact", theme_id=theme.id,
                      provenance=provenance(run_id="keep"))
    await store.put_facts([gone.model_copy(update={"theme_id": theme.id}), stays])
    await store.put_themes([theme.model_copy(update={"fact_ids": [gone.id]})])

    report = await purge(store, run_id="erase-me")

    assert (report.facts, report.themes) == (1, 1)
    kept = await store.get_fact(stays.id)
    assert kept is not None and kept.theme_id is None


@pytest.mark.parametrize("flag", [None, 0, "yes", "false"])
async def test_purge_dry_run_must_be_a_real_bool(store: Any, flag: Any) -> None:
    entity = make_entity(name="Ada")
    await store.put_entities([entity])
    with pytest.raises(InvalidTypeError, match="dry_run"):
        await purge(store, entity_ids=[entity.id], dry_run=flag)
    assert await store.get_entity(entity.id) is not None  # dry_run=None erased it


# ----------------------------------------------------------------------------- import / export


async def _exported(store: Any) -> str:
    await store.put_entities([make_entity(name="Ada")])
    buf = io.StringIO()
    await export(store, buf)
    return buf.getvalue()


@pytest.mark.parametrize("atomic", [True, False])
async def test_an_import_that_is_not_utf8_is_refused_typed(
    store: Any, backend: str, request: pytest.FixtureRequest, tmp_path: Path, atomic: bool
) -> None:
    text = await _exported(store)
    path = tmp_path / "latin1.jsonl"
    lines = text.splitlines()
    # A Latin-1 file (a re-encoded export): "é" is one byte 0xE9, not UTF-8.
    lines[1] = lines[1].replace('"Ada"', '"Ad\\u00e9"').replace("\\u00e9", "\u00e9")
    path.write_bytes("\n".join(lines).encode("latin-1") + b"\n")
    target = _fresh(backend, request, "latin")
    with pytest.raises(InvalidInputError, match="not UTF-8"):
        await import_(target, path, atomic=atomic)
    assert await target.find_entities(include_invalidated=True) == []


async def test_binary_file_objects_are_refused_typed(
    store: Any, backend: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    text = await _exported(store)
    path = tmp_path / "memory.jsonl.gz"
    with gzip.open(path, "wt", encoding="utf-8") as out:
        out.write(text)
    target = _fresh(backend, request, "bin")
    with gzip.open(path) as binary, pytest.raises(InvalidTypeError, match="text mode"):
        await import_(target, binary)  # gzip.open's default mode is binary
    with pytest.raises(InvalidTypeError, match="text mode"):
        await import_(target, io.BytesIO(text.encode()))
    assert await target.find_entities(include_invalidated=True) == []
    with pytest.raises(InvalidTypeError, match="text mode"):
        await export(store, io.BytesIO())
    # Opened in text mode, the same file imports.
    with gzip.open(path, "rt", encoding="utf-8") as readable:
        report = await import_(target, readable)
    assert report.counts["entity"] == 1


async def test_a_record_given_twice_is_written_once_the_later_winning(
    store: Any, backend: str, request: pytest.FixtureRequest
) -> None:
    # As put_* does within one call. On Postgres the COPY path (import_, bulk_import)
    # raised StorageError ("ON CONFLICT DO UPDATE command cannot affect row a second
    # time") when one batch held an id twice; the in-memory store took the later one.
    entity = make_entity(name="First")
    message = make_message(content="hello")
    episode = make_episode(messages=[message], topic="first")
    await store.put_entities([entity])
    await store.put_episodes([episode])
    lines = (await _dumped(store)).splitlines()
    entity_line = next(x for x in lines if x.startswith('{"type":"entity"'))
    episode_line = next(x for x in lines if x.startswith('{"type":"episode"'))
    edited = [
        lines[0],
        entity_line, entity_line.replace('"name":"First"', '"name":"Second"'),
        episode_line, episode_line.replace('"topic":"first"', '"topic":"second"'),
        lines[-1].replace('"entity":1', '"entity":2').replace('"episode":1', '"episode":2'),
    ]
    target = _fresh(backend, request, "twice")
    report = await import_(target, io.StringIO("\n".join(edited) + "\n"))
    assert report.counts["entity"] == 2  # lines read
    [stored] = await target.find_entities(include_invalidated=True)
    assert stored.name == "Second"
    [ep] = await target.list_episodes(include_invalidated=True)
    assert ep.topic == "second" and [m.id for m in ep.messages] == [message.id]


async def _dumped(store: Any) -> str:
    buf = io.StringIO()
    await export(store, buf)
    return buf.getvalue()


async def test_the_export_bytes_do_not_depend_on_the_page_size(store: Any) -> None:
    # Edges were sorted per page of source entities: another page_size gave another edge
    # order, so "export, import, export again gives the same bytes" held only when both
    # exports used one page size.
    entities = [make_entity(name=f"E{i}") for i in range(6)]
    await store.put_entities(entities)
    await store.put_relationships(
        [make_relationship(entities[i].id, entities[(i * 5 + 1) % 6].id) for i in range(6)]
        + [make_relationship(entities[0].id, entities[i].id, valid_from=at(-i))
           for i in range(6)]
    )
    exports = []
    for page_size in (1, 2, 4, 1000):
        buf = io.StringIO()
        await export(store, buf, page_size=page_size)
        exports.append(buf.getvalue())
    assert len(set(exports)) == 1
    other = InMemoryMemoryStore(expected_dimensions=EMBED_DIM)
    await import_(other, io.StringIO(exports[0]), batch_size=5)
    again = io.StringIO()
    await export(other, again, page_size=3)
    assert again.getvalue() == exports[0]


@pytest.mark.parametrize("page_size", [100_001, 0, True])
async def test_a_bad_export_page_size_leaves_an_existing_file_alone(
    store: Any, tmp_path: Path, page_size: Any
) -> None:
    # 100,001 passed the check and failed at the first listing (ListOptions.limit), after
    # the destination had been truncated: the previous export at that path was lost.
    path = tmp_path / "backup.jsonl"
    good = await _exported(store)
    path.write_text(good, encoding="utf-8")
    with pytest.raises(InvalidInputError, match="page_size"):
        await export(store, path, page_size=page_size)
    assert path.read_text(encoding="utf-8") == good
    report = await export(store, path, page_size=100_000)
    assert report.counts["entity"] == 1


# ----------------------------------------------------------------------------- reembed


async def _fill_for_reembed(store: Any) -> None:
    await store.put_entities([make_entity(name=f"Entity {i}", embedding=unit(i),
                                          created_at=at(i)) for i in range(3)])
    await store.put_episodes([make_episode(messages=[make_message(content="hello there",
                                                                  embedding=unit(1))],
                                           embedding=unit(2))])
    await store.put_facts([make_fact(content=f"fact {i}", embedding=unit(i), valid_from=at(i))
                           for i in range(3)])


class _NotAProvider:
    pass


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"progress": 5}, InvalidTypeError),  # was called after the first batch committed
        ({"provider": _NotAProvider()}, InvalidTypeError),  # was an AttributeError
        ({"record_types": None}, InvalidTypeError),  # was a TypeError
        ({"record_types": 5}, InvalidTypeError),
        ({"record_types": [["fact"]]}, InvalidInputError),  # was unhashable: TypeError
        ({"record_types": "fact"}, InvalidTypeError),
        ({"theme_size": 0}, InvalidInputError),  # was refused after every vector changed
        ({"theme_size": "5"}, InvalidInputError),
    ],
)
async def test_reembed_refuses_bad_arguments_before_writing(
    store: Any, kwargs: dict[str, Any], error: type[Exception]
) -> None:
    from cycgraph_memory.hierarchy.calibration import (
        THEME_CALIBRATION_KEY,
        fit_theme_calibration,
    )

    await _fill_for_reembed(store)
    facts = [make_fact(content=f"calibration fact {i}", embedding=unit(i % EMBED_DIM),
                       valid_from=at(100 + i)) for i in range(40)]
    await store.put_facts(facts)
    calibration = fit_theme_calibration([f.embedding for f in facts], 43)
    await store.put_tenant_setting(THEME_CALIBRATION_KEY, calibration.model_dump())
    before = await _state(store)
    options: dict[str, Any] = {"provider": HashingEmbeddingProvider(dimensions=EMBED_DIM, seed=9),
                               "batch_size": 2, **kwargs}
    provider = options.pop("provider")
    with pytest.raises(error):
        await reembed(store, provider, **options)
    assert await _state(store) == before
    assert await store.get_tenant_setting(THEME_CALIBRATION_KEY) == calibration.model_dump()


async def test_reembed_accepts_any_iterable_of_record_types(store: Any) -> None:
    await _fill_for_reembed(store)
    report = await reembed(store, HashingEmbeddingProvider(dimensions=EMBED_DIM),
                           record_types=("fact", "entity"))
    assert (report.counts["fact"], report.counts["entity"], report.counts["episode"]) == (3, 3, 0)


# ----------------------------------------------------------------------------- graph export


async def test_graphml_holds_names_with_control_characters(store: Any) -> None:
    # Names may hold control characters (only NUL is refused); XML 1.0 cannot, so a raw
    # vertical tab made the GraphML unreadable by every XML parser.
    a = make_entity(name="Ada\x0bLovelace\x01", entity_type="per\x1fson")
    b = make_entity(name="Bob")
    await store.put_entities([a, b])
    await store.put_relationships([make_relationship(a.id, b.id, relation_type="knows\x08")])
    graph = await export_graph(store)
    root = ET.fromstring(render_graph(graph, "graphml").encode("utf-8"))
    ns = "{http://graphml.graphdrawing.org/xmlns}"
    names = [d.text for d in root.iter(f"{ns}data") if d.get("key") == "name"]
    assert sorted(names, key=str) == ["Ada\ufffdLovelace\ufffd", "Bob"]
    relations = [d.text for d in root.iter(f"{ns}data") if d.get("key") == "relation"]
    assert relations == ["knows\ufffd"]
    nodes = json.loads(render_graph(graph, "json"))["nodes"]
    assert "Ada\x0bLovelace\x01" in [n["name"] for n in nodes]  # JSON keeps them


@pytest.mark.postgres
async def test_bulk_import_takes_the_later_of_two_records_with_one_id(
    pg_make_store: Any, pg_tenant: str
) -> None:
    from cycgraph_memory.postgres import bulk_import

    store = pg_make_store(f"{pg_tenant}_dup")
    entity = make_entity(name="First")
    first = make_episode(messages=[make_message(content="a"), make_message(content="b")])
    second = first.model_copy(update={"topic": "edited", "messages": first.messages[:1]})
    report = await bulk_import(
        store,
        entities=[entity, entity.model_copy(update={"name": "Second"})],
        episodes=[first, second],
    )
    assert report.counts["entities"] == 1 and report.counts["episode_messages"] == 1
    assert [e.name for e in await store.find_entities()] == ["Second"]
    [ep] = await store.list_episodes()
    assert ep.topic == "edited" and [m.id for m in ep.messages] == [first.messages[0].id]


# ----------------------------------------------------------------------------- purge vs passes



Setup = Callable[[Any], Awaitable[dict[str, Any]]]
Writer = Callable[[Any, dict[str, Any]], Awaitable[None]]


async def _purge_racing(dsn: str, setup: Setup, concurrent: Writer, check: Writer) -> None:
    """Purge ``world["m1"]`` while ``concurrent`` (a pass under its lock) commits meanwhile.

    The purge pauses right after reading its candidates (up to 1 s) so that the other
    writer commits then, unless the purge holds the lock that writer needs; ``check``
    then reads the result.
    """
    from cycgraph_memory.postgres import PostgresMemoryStore, create_engine_from_dsn

    engine = create_engine_from_dsn(dsn)
    tenant = f"race_{secrets.token_hex(5)}"
    purger = PostgresMemoryStore(engine, tenant_id=tenant)
    writer = PostgresMemoryStore(engine, tenant_id=tenant)
    try:
        world = await setup(purger)
        read, written = asyncio.Event(), asyncio.Event()
        candidates = purger.purge_candidates

        async def paused(sel: Any) -> Any:
            found = await candidates(sel)
            read.set()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(written.wait(), 1.0)
            return found

        purger.purge_candidates = paused  # type: ignore[method-assign]

        async def write() -> None:
            await read.wait()
            await concurrent(writer, world)
            written.set()

        await asyncio.gather(purge(purger, message_ids=[world["m1"].id]), write())
        await check(writer, world)
    finally:
        await writer.clear()
        await engine.dispose()


async def _two_facts_one_theme(store: Any, *, shared_source: bool) -> dict[str, Any]:
    m1, m2 = make_message(content="erase me"), make_message(content="keep me")
    await store.put_episodes([make_episode(messages=[m1, m2])])
    theme = make_theme(fact_ids=[])
    await store.put_themes([theme])
    f1 = make_fact(content="from m1", source_message_ids=[m1.id], theme_id=theme.id,
                   embedding=unit(1))
    f2 = make_fact(content="from m2", theme_id=theme.id, embedding=unit(2),
                   source_message_ids=[m2.id, m1.id] if shared_source else [m2.id],
                   tags=["lesson", "candidate"])
    await store.put_facts([f1, f2])
    await store.put_themes([theme.model_copy(update={"fact_ids": [f1.id, f2.id]})])
    return {"m1": m1, "theme": theme, "f1": f1, "f2": f2}


@pytest.mark.postgres
async def test_a_purge_does_not_undo_a_concurrent_theme_assignment(committing_dsn: str) -> None:
    # Ingest assigns new facts to themes under THEMES_LOCK; a purge that re-centred a theme
    # wrote back the theme it had read before, dropping the fact ingest had just added.
    async def assign(store: Any, world: dict[str, Any]) -> None:
        async with exclusive_pass(store, THEMES_LOCK):  # as MemoryPipeline.ingest does
            theme = await store.get_theme(world["theme"].id)
            new = make_fact(content="ingested meanwhile", theme_id=theme.id)
            await store.put_facts([new])
            await store.put_themes(
                [theme.model_copy(update={"fact_ids": [*theme.fact_ids, new.id]})])
            world["new"] = new

    async def check(store: Any, world: dict[str, Any]) -> None:
        theme = await store.get_theme(world["theme"].id)
        assert theme is not None
        assert set(theme.fact_ids) == {world["f2"].id, world["new"].id}
        assert await store.get_fact(world["f1"].id) is None

    async def setup(store: Any) -> dict[str, Any]:
        return await _two_facts_one_theme(store, shared_source=False)

    await _purge_racing(committing_dsn, setup, assign, check)


@pytest.mark.postgres
async def test_a_purge_does_not_undo_a_concurrent_quarantine(committing_dsn: str) -> None:
    # The retention gate quarantines a lesson under its pass lock; a purge that rewrote the
    # same fact (it lost one of its two sources) wrote back the copy it had read before,
    # tags included: the quarantined lesson was a candidate again.
    async def quarantine(store: Any, world: dict[str, Any]) -> None:
        async with exclusive_passes(store, GATE_PASS_NAME, FACTS_LOCK):  # as the gate does
            fact = await store.get_fact(world["f2"].id)
            await store.put_facts([fact.model_copy(update={"tags": ["lesson", QUARANTINE_TAG]})])

    async def check(store: Any, world: dict[str, Any]) -> None:
        fact = await store.get_fact(world["f2"].id)
        assert fact is not None
        assert fact.tags == ["lesson", QUARANTINE_TAG]
        assert world["m1"].id not in fact.source_message_ids

    async def setup(store: Any) -> dict[str, Any]:
        return await _two_facts_one_theme(store, shared_source=True)

    await _purge_racing(committing_dsn, setup, quarantine, check)


@pytest.mark.postgres
@pytest.mark.parametrize("pass_name", ["forget", "conflict-resolution", "entity-resolution"])
async def test_a_purge_does_not_revive_a_fact_soft_deleted_meanwhile(
    committing_dsn: str, pass_name: str
) -> None:
    # Memory.forget and conflict resolution soft-delete facts under their pass locks (the
    # entity resolver rewrites facts under its own); a purge that rewrote the fact wrote
    # back its older copy: the soft-deleted fact was live again.
    async def soft_delete(store: Any, world: dict[str, Any]) -> None:
        if pass_name == "forget":
            from cycgraph_memory import Memory
            from cycgraph_memory.postgres import PostgresMemoryIndex

            index = PostgresMemoryIndex(store.sessionmaker, tenant_id=store.tenant_id)
            report = await Memory(store, index).forget([world["f2"].id])
            assert report.forgotten == [world["f2"].id]
            return
        async with exclusive_passes(store, pass_name, FACTS_LOCK):  # as those passes do
            fact = await store.get_fact(world["f2"].id)
            await store.put_facts([fact.model_copy(update={"invalidated_by": pass_name})])

    async def check(store: Any, world: dict[str, Any]) -> None:
        fact = await store.get_fact(world["f2"].id)
        assert fact is not None and fact.invalidated_by is not None
        assert world["m1"].id not in fact.source_message_ids
        assert await store.find_facts() == []  # nothing live: f1 erased, f2 soft-deleted

    async def setup(store: Any) -> dict[str, Any]:
        return await _two_facts_one_theme(store, shared_source=True)

    await _purge_racing(committing_dsn, setup, soft_delete, check)


# ----------------------------------------------------------------------------- Memory facade


async def test_memory_open_refuses_a_non_provider_embedder_typed() -> None:
    from cycgraph_memory import Memory

    with pytest.raises(InvalidTypeError, match="embedder"):
        await Memory.open("memory://", embedder=object())  # was an AttributeError
    with pytest.raises(InvalidTypeError, match="engine_options"):
        await Memory.open("memory://", engine_options=5)  # type: ignore[arg-type]


async def test_memory_flags_must_be_real_bools() -> None:
    from cycgraph_memory import Memory

    async with await Memory.open("memory://", embedding_dim=EMBED_DIM) as memory:
        with pytest.raises(InvalidTypeError, match="candidate"):
            await memory.remember("Retry once.", candidate="no")  # was tagged a candidate
        assert (await memory.stats()).records["fact"].live == 0
        fact_id = await memory.remember("Retry once.", candidate=False)
        with pytest.raises(InvalidTypeError, match="erase"):
            await memory.forget([fact_id], erase=0)
        with pytest.raises(InvalidTypeError, match="dry_run"):
            await memory.erase(source="agent", dry_run=None)
        assert (await memory.stats()).records["fact"].live == 1

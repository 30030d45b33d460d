"""Export/import contract (both backends): streaming JSON Lines, idempotent, byte-identical."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
from pydantic import ValidationError

from cycgraph_memory.errors import DanglingReferenceError, InvalidInputError
from cycgraph_memory.inmemory import InMemoryMemoryIndex, InMemoryMemoryStore
from cycgraph_memory.lifecycle import export, import_

from .factories import (
    EMBED_DIM,
    at,
    make_entity,
    make_episode,
    make_fact,
    make_message,
    make_relationship,
    make_theme,
    unit,
)


async def _fill(store: Any) -> None:
    a = make_entity(name="Ada", embedding=unit(0), created_at=at(1))
    b = make_entity(name="Bo", created_at=at(2), invalidated_at=at(50))
    await store.put_entities([a, b])
    await store.put_relationships(
        [make_relationship(a.id, b.id, valid_until=at(99)), make_relationship(b.id, a.id)]
    )
    await store.put_episodes(
        [make_episode(messages=[make_message(content="über naïve 💡", embedding=unit(2)),
                                make_message(content="plain")], embedding=unit(1))]
    )
    f1 = make_fact(content="Ada codes", entity_ids=[a.id], tags=["x", "y"], embedding=unit(3),
                   valid_until=at(days=3), access_count=4, last_accessed_at=at(7))
    f2 = make_fact(content="old", invalidated_by="superseded", valid_from=at(-5))
    await store.put_facts([f1, f2])
    await store.put_themes([make_theme(fact_ids=[f1.id], embedding=unit(4))])


def _fresh(backend: str, request: pytest.FixtureRequest, name: str) -> Any:
    if backend == "memory":
        return InMemoryMemoryStore(expected_dimensions=EMBED_DIM)
    tenant = f"{request.getfixturevalue('pg_tenant')}_{name}"
    return request.getfixturevalue("pg_make_store")(tenant)


async def _dump(store: Any, **kwargs: Any) -> str:
    buf = io.StringIO()
    await export(store, buf, page_size=2, **kwargs)
    return buf.getvalue()


async def test_round_trip_is_byte_identical_and_idempotent(
    store: Any, backend: str, request: pytest.FixtureRequest
) -> None:
    await _fill(store)
    first = await _dump(store)
    lines = first.splitlines()
    assert json.loads(lines[0]) == {"embeddings": True, "format": "cycgraph-memory", "version": 1}
    assert json.loads(lines[-1])["counts"] == {
        "entity": 2, "relationship": 2, "episode": 1, "fact": 2, "theme": 1
    }
    target = _fresh(backend, request, "copy")
    report = await import_(target, io.StringIO(first), batch_size=2)
    assert sum(report.counts.values()) == 8
    assert await _dump(target) == first
    await import_(target, io.StringIO(first))  # same ids: no duplicates
    assert await _dump(target) == first
    stored = await target.get_messages(
        [m.id for ep in await target.list_episodes() for m in ep.messages]
    )
    assert sorted(m.embedding is not None for m in stored.values()) == [False, True]


async def test_cross_backend_round_trip(store: Any, backend: str) -> None:
    # float32-exact vectors: both backends give the same bytes
    await _fill(store)
    first = await _dump(store)
    other = InMemoryMemoryStore(expected_dimensions=EMBED_DIM)
    index = InMemoryMemoryIndex(expected_dimensions=EMBED_DIM)
    await import_(other, io.StringIO(first), index=index)
    assert await _dump(other) == first
    hits = await index.search_facts(unit(3))
    assert [h.item.content for h in hits] == ["Ada codes"]


async def test_export_without_embeddings(store: Any) -> None:
    await _fill(store)
    text = await _dump(store, embeddings=False)
    assert '"embedding"' not in text


@pytest.mark.parametrize(
    ("mutate", "error"),
    [
        (lambda ls: ls[:-1], InvalidInputError),  # truncated: no end line
        (lambda ls: ['{"format":"other","version":1}', *ls[1:]], InvalidInputError),
        (lambda ls: ['{"embeddings":true,"format":"cycgraph-memory","version":99}', *ls[1:]],
         InvalidInputError),
        (lambda ls: [ls[0], '{"type":"alien","record":{}}', *ls[1:]], InvalidInputError),
        (lambda ls: [ls[0], "not json", *ls[1:]], InvalidInputError),
        (lambda ls: [ls[0], ls[1].replace('"Ada"', '""'), *ls[2:]], ValidationError),
        (lambda ls: [*ls[:-1], ls[-1].replace('"theme":1', '"theme":2')], InvalidInputError),
    ],
)
async def test_bad_input_is_refused_and_changes_nothing(
    store: Any, backend: str, request: pytest.FixtureRequest, mutate: Any, error: type
) -> None:
    await _fill(store)
    lines = (await _dump(store)).splitlines()
    bad = "\n".join(mutate(lines)) + "\n"
    target = _fresh(backend, request, "bad")
    with pytest.raises(error):
        await import_(target, io.StringIO(bad), batch_size=1)
    assert await target.find_entities(include_invalidated=True) == []
    assert await target.find_facts(include_invalidated=True) == []


async def test_export_to_a_path(store: Any, tmp_path: Any) -> None:
    await _fill(store)
    path = tmp_path / "memory.jsonl"
    report = await export(store, path)
    assert report.lines == 10 and report.counts["fact"] == 2
    assert path.read_text(encoding="utf-8") == await _dump(store)


async def _fill_with_theme_ids(store: Any) -> None:
    # As ingest leaves them: facts citing their theme (an export lists facts first).
    e = make_entity(name="Ada", embedding=unit(0))
    await store.put_entities([e])
    theme = make_theme(embedding=unit(4))
    await store.put_themes([theme])
    facts = [make_fact(content=f"fact {i}", entity_ids=[e.id], theme_id=theme.id,
                       embedding=unit(i % EMBED_DIM)) for i in range(3)]
    await store.put_facts(facts)
    await store.put_themes([theme.model_copy(update={"fact_ids": [f.id for f in facts]})])


async def test_facts_citing_their_theme_import_into_either_backend(
    store: Any, backend: str, request: pytest.FixtureRequest
) -> None:
    await _fill_with_theme_ids(store)
    first = await _dump(store)
    memory_target = InMemoryMemoryStore(expected_dimensions=EMBED_DIM)
    for target in (_fresh(backend, request, "t"), memory_target):
        report = await import_(target, io.StringIO(first), batch_size=2)
        assert report.counts["fact"] == 3 and report.counts["theme"] == 1
        assert await _dump(target) == first


async def test_a_fact_citing_a_missing_record_is_refused(
    store: Any, backend: str, request: pytest.FixtureRequest
) -> None:
    await _fill_with_theme_ids(store)
    lines = (await _dump(store)).splitlines()
    ghost = "00000000-0000-4000-8000-000000000001"
    for field, value in (("entity_ids", [ghost]), ("theme_id", ghost),
                         ("source_episode_ids", [ghost])):
        edited = []
        for line in lines:
            obj = json.loads(line)
            if obj.get("type") == "fact":
                obj["record"][field] = value
            edited.append(json.dumps(obj))
        target = _fresh(backend, request, f"d{field[:3]}")
        with pytest.raises(DanglingReferenceError):
            await import_(target, io.StringIO("\n".join(edited) + "\n"), batch_size=2)
        assert await target.find_facts() == [] and await target.find_entities() == []


async def test_a_refused_import_leaves_the_in_memory_index_unchanged() -> None:
    source = InMemoryMemoryStore(expected_dimensions=EMBED_DIM)
    await _fill_with_theme_ids(source)
    truncated = "\n".join((await _dump(source)).splitlines()[:-1]) + "\n"  # no end line
    target = InMemoryMemoryStore(expected_dimensions=EMBED_DIM)
    index = InMemoryMemoryIndex(expected_dimensions=EMBED_DIM)
    with pytest.raises(InvalidInputError, match="truncated"):
        await import_(target, io.StringIO(truncated), index=index, batch_size=1)
    assert len(index) == 0 and await index.search_facts(unit(0)) == []
    report = await import_(target, io.StringIO(await _dump(source)), index=index)
    assert report.counts["fact"] == 3 and len(await index.search_facts(unit(0))) == 3


async def test_a_header_version_must_be_an_int(store: Any) -> None:
    header = '{"format":"cycgraph-memory","version":true,"embeddings":true}\n'
    with pytest.raises(InvalidInputError, match="unsupported export version"):
        await import_(store, io.StringIO(header))

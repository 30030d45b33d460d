"""memory_retriever / render_memory_section / memory_writer and put_facts_once, both backends."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from pydantic import ValidationError

from cycgraph_memory import (
    InvalidInputError,
    memory_retriever,
    memory_writer,
    render_memory_section,
)

from .factories import at, make_entity, make_fact, make_theme, unit


class Embedder:
    dimensions = 8

    async def embed(self, texts: list[str]) -> list[list[float]]:
        return [unit(len(t) % 8) for t in texts]


def reflection(content: str, *tags: str) -> dict[str, Any]:
    return {
        "content": content,
        "tags": list(tags),
        "provenance": {"source": "agent", "run_id": "run-7", "node_id": "reflect"},
    }


async def test_put_facts_once_writes_once_per_key(store: Any) -> None:
    first = [make_fact(content="a"), make_fact(content="b")]
    ids, wrote = await store.put_facts_once("run-1:reflect:0", first)
    assert wrote and ids == [first[0].id, first[1].id]
    again = [make_fact(content="a"), make_fact(content="b")]
    ids2, wrote2 = await store.put_facts_once("run-1:reflect:0", again)
    assert not wrote2 and ids2 == ids
    assert await store.get_facts([f.id for f in again]) == {}
    assert len(await store.find_facts()) == 2
    ids3, wrote3 = await store.put_facts_once("run-1:reflect:1", again)
    assert wrote3 and ids3 == [f.id for f in again]


async def test_put_facts_once_rolls_back_with_the_transaction(store: Any) -> None:
    facts = [make_fact()]
    with pytest.raises(RuntimeError):
        async with store.transaction():
            await store.put_facts_once("k", facts)
            raise RuntimeError("boom")
    assert await store.find_facts() == []
    ids, wrote = await store.put_facts_once("k", facts)
    assert wrote and ids == [facts[0].id]


async def test_put_facts_once_rejects_bad_input(store: Any) -> None:
    with pytest.raises(InvalidInputError):
        await store.put_facts_once("", [make_fact()])
    with pytest.raises(ValidationError):
        await store.put_facts_once("k", [{"content": ""}])
    with pytest.raises(TypeError):
        await store.put_facts_once("k", make_fact())
    assert await store.find_facts() == []
    _ids, wrote = await store.put_facts_once("k", [make_fact()])
    assert wrote


async def test_writer_stores_provenance_and_tags(store: Any, index: Any) -> None:
    write = memory_writer(store, index=index, embedder=Embedder(), clock=lambda: at(3))
    out = await write([reflection("Check the cache first", "lesson", "graph:g1")])
    (fact_id,) = out["fact_ids"]
    fact = await store.get_fact(uuid.UUID(fact_id))
    assert fact.content == "Check the cache first"
    assert fact.tags == ["lesson", "graph:g1"]
    assert fact.provenance.run_id == "run-7" and fact.provenance.node_id == "reflect"
    assert fact.provenance.created_at == at(3) and fact.valid_from == at(3)
    assert fact.embedding == unit(len("Check the cache first") % 8)


async def test_writer_honours_the_idempotency_key(store: Any, index: Any) -> None:
    write = memory_writer(store, index=index)
    opts = {"idempotency_key": "run-7:reflect:0"}
    first = await write([reflection("one", "lesson"), reflection("two", "lesson")], opts)
    retry = await write([reflection("one", "lesson"), reflection("two", "lesson")], opts)
    assert retry == first
    assert len(await store.find_facts()) == 2
    # A fresh writer (e.g. after a crash and restart) sees the same key.
    again = await memory_writer(store)([reflection("one", "lesson")], opts)
    assert again == first
    assert len(await store.find_facts()) == 2
    other = await write([reflection("three", "lesson")], {"idempotency_key": "run-7:reflect:1"})
    assert other["fact_ids"] != first["fact_ids"]
    assert len(await store.find_facts()) == 3


async def test_writer_validates_everything_before_writing(store: Any) -> None:
    write = memory_writer(store)
    with pytest.raises(ValidationError):
        await write([reflection("fine"), {"content": "", "tags": []}])
    with pytest.raises(InvalidInputError):
        await write([reflection("fine"), {"content": "x", "color": "red"}])
    with pytest.raises(InvalidInputError):
        await write([reflection("fine")], {"idempotency_key": ""})
    with pytest.raises(TypeError):
        await write(reflection("fine"))  # type: ignore[arg-type]
    assert await store.find_facts() == []


async def test_retriever_query_shapes(store: Any, index: Any) -> None:
    acme = make_entity(name="Acme", entity_type="organization")
    lesson = make_fact(content="Ask for the log first", tags=["lesson"], embedding=unit(4),
                       valid_from=at(0), entity_ids=[acme.id])
    theme = make_theme(label="debugging", embedding=unit(4), fact_ids=[lesson.id])
    await store.put_entity(acme)
    await store.put_fact(lesson)
    await store.put_theme(theme)
    await index.rebuild(store)
    retrieve = memory_retriever(store, index, Embedder())

    by_tags = await retrieve({"tags": ["lesson"], "max_facts": 5})
    assert by_tags == {
        "facts": [{"id": str(lesson.id), "content": "Ask for the log first",
                   "valid_from": at(0).isoformat(), "tags": ["lesson"]}],
        "entities": [],
        "themes": [],
    }
    by_text = await retrieve({"text": "four"})  # len 4 -> unit(4)
    assert [f["id"] for f in by_text["facts"]] == [str(lesson.id)]
    assert by_text["entities"] == [{"id": str(acme.id), "name": "Acme", "type": "organization"}]
    assert by_text["themes"] == [{"id": str(theme.id), "label": "debugging"}]
    by_goal = await retrieve({}, options={"goal": "abcd"})
    assert [f["id"] for f in by_goal["facts"]] == [str(lesson.id)]
    by_entity = await retrieve({"entity_ids": [str(acme.id)]})
    assert [f["id"] for f in by_entity["facts"]] == [str(lesson.id)]
    assert await retrieve({}) == {"facts": [], "entities": [], "themes": []}
    with pytest.raises(InvalidInputError):
        await retrieve({"query": "x"})
    with pytest.raises(ValidationError):
        await retrieve({"tags": ["lesson"], "max_facts": 500})

    section = render_memory_section(by_text)
    assert section == (
        "## Relevant Memory\n\n"
        "### Facts\n- Ask for the log first (since 2025-01-01)\n\n"
        "### Entities\n- Acme (organization)\n\n"
        "### Themes\n- debugging\n"
    )
    assert render_memory_section({"facts": [], "entities": [], "themes": []}) == ""


async def test_retriever_text_needs_an_embedder(store: Any, index: Any) -> None:
    retrieve = memory_retriever(store, index)
    with pytest.raises(InvalidInputError, match="embedder"):
        await retrieve({"text": "anything"})
    with pytest.raises(InvalidInputError):
        memory_retriever(store, index, default_max_facts=0)

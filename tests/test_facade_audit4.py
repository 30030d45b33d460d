"""``Memory`` facade audit 4: ``search(entity=NAME)`` finds every live entity by its name.

The lookup went only through the index's ``match_entity_names``, which finds names that
are word n-grams of the text (1-4 words, punctuation and possessives stripped, stop words
skipped) and compares them differently per backend: "Acme Inc." was found in memory but
not on Postgres, and a five-word name, "The Who" or "McDonald's" on neither, although
the docs promise "the subgraph around an entity, by name (case-insensitive)".
"""

from __future__ import annotations

from typing import Any

import pytest

from cycgraph_memory import (
    Entity,
    Memory,
    Provenance,
    RecordNotFoundError,
    Relationship,
)

TEST_DIM = 8  # the shared test schema's width (tests/conftest.py)

NAMES = [
    "Acme Inc.",  # a trailing period: Postgres compared lower(name) with "acme inc"
    "Dr. Who",
    "Alice  Smith",  # two spaces
    "Acme Corporation Billing Service Platform",  # five words
    "The Who",  # stop words only
    "McDonald's",  # the possessive is stripped from the candidates
    "C++",
]



async def _put(memory: Memory, entities: list[Entity]) -> None:
    await memory.store.put_entities(entities)
    rebuild = getattr(memory.index, "rebuild", None)
    if rebuild is not None and type(memory.index).__name__.startswith("InMemory"):
        await rebuild(memory.store)


@pytest.mark.parametrize("name", NAMES)
async def test_search_by_entity_finds_any_stored_name(memory: Memory, name: str) -> None:
    prov = Provenance(source="agent")
    entity = Entity(name=name, entity_type="thing", provenance=prov)
    other = Entity(name="Zed", entity_type="thing", provenance=prov)
    await _put(memory, [entity, other])
    await memory.store.put_relationship(
        Relationship(source_id=entity.id, target_id=other.id, relation_type="knows",
                     provenance=prov)
    )
    for asked in (name, name.upper(), f"  {name.lower()} "):
        found = await memory.search(entity=asked)
        assert entity.id in {e.id for e in found.result.entities}, asked
        assert other.id in {e.id for e in found.result.entities}, asked


async def test_search_by_entity_past_a_page_of_near_misses(memory: Memory) -> None:
    """More than a page of entities named after the first word does not hide the name."""
    prov = Provenance(source="agent")
    crowd = [Entity(name="Alice", entity_type=f"type{i}", provenance=prov) for i in range(25)]
    wanted = Entity(name="Alice Smith", entity_type="person", provenance=prov)
    await _put(memory, [*crowd, wanted])
    found = await memory.search(entity="Alice Smith")
    assert [e.id for e in found.result.entities] == [wanted.id]


async def test_search_by_entity_still_refuses_a_dead_or_unknown_name(memory: Memory) -> None:
    prov = Provenance(source="agent")
    gone = Entity(name="Acme Inc.", entity_type="org", provenance=prov)
    await _put(memory, [gone])
    await _put(memory, [gone.model_copy(update={"invalidated_at": gone.created_at})])
    with pytest.raises(RecordNotFoundError):
        await memory.search(entity="Acme Inc.")
    with pytest.raises(RecordNotFoundError):
        await memory.search(entity="Nobody At All")


async def test_an_unknown_plain_name_is_refused_without_reading_every_entity() -> None:
    """A plain-word name the index cannot match is unknown: no page scan of the tenant."""
    async with await Memory.open("memory://", tenant="scan") as memory:
        await memory.add([{"role": "user", "content": "Maya moved to Lisbon.",
                           "timestamp": "2024-03-01T09:00:00Z"}])
        scans: list[str] = []
        store: Any = memory.store
        original = store.scan_entities

        def counting(*args: Any, **kwargs: Any) -> Any:
            scans.append("entities")
            return original(*args, **kwargs)

        store.scan_entities = counting
        with pytest.raises(RecordNotFoundError):
            await memory.search(entity="Bobby Tables")
        assert scans == []
        with pytest.raises(RecordNotFoundError):  # not plain words: the scan decides
            await memory.search(entity="Bobby Tables Inc.")
        assert scans == ["entities"]

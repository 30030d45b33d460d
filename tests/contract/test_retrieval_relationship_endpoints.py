"""The fact paths serve a relationship only when both its endpoints are live entities.

``retrieve_memory`` in the vector, text and hybrid modes expands the served facts to their
entities and the relationships touching them. Without ``include_invalidated`` the entity
path (subgraph traversal) never visits an invalidated or superseded entity, so it never
returns an edge leading to one; the fact paths returned such an edge when its *other*
endpoint (the one no served fact cites) was soft-deleted or merged away. Both backends,
and on each the native and the generic (``native_paths=False``) paths, now agree: the
endpoint filter runs before the relationship ``limit``, and ``include_invalidated=True``
still serves those edges.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pytest

from cycgraph_memory import retrieve_memory
from cycgraph_memory.records import Entity, Relationship

from .factories import at, make_entity, make_fact, make_relationship, unit

MODES = ["vector", "text", "hybrid"]


def ids(records: Sequence[Any]) -> list[uuid.UUID]:
    return [r.id for r in records]


@dataclass
class Graph:
    alice: Entity
    gone: Entity  # soft-deleted (invalidated_at)
    merged: Entity  # merged away (superseded_by only)
    acme: Entity  # live, another type
    to_gone: Relationship  # alice -> gone
    from_merged: Relationship  # merged -> alice
    to_acme: Relationship  # alice -> acme (the only edge with two live endpoints)


async def _graph(store: Any, index: Any) -> Graph:
    alice = make_entity(name="Alice", entity_type="person")
    gone = make_entity(name="Gone", entity_type="person", invalidated_at=at(1))
    merged = make_entity(name="Merged", entity_type="person", superseded_by=alice.id)
    acme = make_entity(name="Acme", entity_type="organization")
    await store.put_entities([alice, gone, merged, acme])
    # (valid_from, id) order: the two edges to dead endpoints come first.
    to_gone = make_relationship(alice.id, gone.id, valid_from=at(1), relation_type="knows")
    from_merged = make_relationship(merged.id, alice.id, valid_from=at(2),
                                    relation_type="knows")
    to_acme = make_relationship(alice.id, acme.id, valid_from=at(3))
    # An edge between two dead entities touches no served entity: never served.
    dead_pair = make_relationship(gone.id, merged.id, valid_from=at(4), relation_type="knows")
    await store.put_relationships([to_gone, from_merged, to_acme, dead_pair])
    fact = make_fact(content="Alice drinks espresso", embedding=unit(0),
                     entity_ids=[alice.id])
    await store.put_facts([fact])
    await index.rebuild(store)
    return Graph(alice, gone, merged, acme, to_gone, from_merged, to_acme)


def _query(mode: str, **extra: Any) -> dict[str, Any]:
    query: dict[str, Any] = {"text": "espresso"} if mode == "text" else {"embedding": unit(0)}
    if mode == "hybrid":
        query["text"] = "espresso"
    query.update(extra)
    return query


async def _retrieve(store: Any, index: Any, mode: str, native: bool, **extra: Any) -> Any:
    return await retrieve_memory(
        store, index, _query(mode, **extra), mode=mode, options={"native_paths": native}
    )


async def _by_entity(store: Any, index: Any, g: Graph, native: bool, **extra: Any) -> Any:
    return await retrieve_memory(
        store, index, {"entity_ids": [g.alice.id], "max_hops": 1, **extra},
        options={"native_paths": native},
    )


@pytest.mark.parametrize("native", [True, False], ids=["native", "generic"])
@pytest.mark.parametrize("mode", MODES)
async def test_fact_paths_drop_edges_to_invalidated_or_superseded_entities(
    store: Any, index: Any, mode: str, native: bool
) -> None:
    g = await _graph(store, index)
    r = await _retrieve(store, index, mode, native)
    assert ids(r.entities) == [g.alice.id]
    assert ids(r.relationships) == [g.to_acme.id]
    # The entity path around the same entity serves the same edges.
    by_entity = await _by_entity(store, index, g, native)
    assert ids(by_entity.relationships) == ids(r.relationships)


@pytest.mark.parametrize("native", [True, False], ids=["native", "generic"])
@pytest.mark.parametrize("mode", MODES)
async def test_the_endpoint_filter_runs_before_the_relationship_limit(
    store: Any, index: Any, mode: str, native: bool
) -> None:
    """``limit=1``: the first live edge is served, not the first edge then nothing."""
    g = await _graph(store, index)
    r = await _retrieve(store, index, mode, native, limit=1)
    assert ids(r.relationships) == [g.to_acme.id]
    by_entity = await _by_entity(store, index, g, native, limit=1)
    assert ids(by_entity.relationships) == [g.to_acme.id]


@pytest.mark.parametrize("native", [True, False], ids=["native", "generic"])
@pytest.mark.parametrize("mode", MODES)
async def test_include_invalidated_still_serves_edges_to_dead_entities(
    store: Any, index: Any, mode: str, native: bool
) -> None:
    g = await _graph(store, index)
    r = await _retrieve(store, index, mode, native, include_invalidated=True)
    expected = [g.to_gone.id, g.from_merged.id, g.to_acme.id]
    assert ids(r.relationships) == expected
    by_entity = await _by_entity(store, index, g, native, include_invalidated=True)
    assert ids(by_entity.relationships) == expected
    r = await _retrieve(store, index, mode, native, include_invalidated=True, limit=2)
    assert ids(r.relationships) == expected[:2]


@pytest.mark.parametrize("native", [True, False], ids=["native", "generic"])
@pytest.mark.parametrize("mode", MODES)
async def test_a_cited_dead_entity_neither_served_nor_reached(
    store: Any, index: Any, mode: str, native: bool
) -> None:
    """A served fact citing the dead entity too: the entity and its edges stay out."""
    g = await _graph(store, index)
    cites_both = make_fact(content="Alice met Gone over espresso", embedding=unit(0),
                           entity_ids=[g.gone.id, g.alice.id])
    await store.put_facts([cites_both])
    await index.rebuild(store)
    r = await _retrieve(store, index, mode, native)
    assert cites_both.id in ids(r.facts)
    assert ids(r.entities) == [g.alice.id]
    assert ids(r.relationships) == [g.to_acme.id]


@pytest.mark.parametrize("native", [True, False], ids=["native", "generic"])
@pytest.mark.parametrize("mode", MODES)
async def test_entity_types_do_not_filter_the_other_endpoint(
    store: Any, index: Any, mode: str, native: bool
) -> None:
    """Only liveness counts for the other endpoint, as on the entity path.

    With ``entity_types=["person"]`` Acme (an organization) is not served, but the edge
    Alice -> Acme is, by both paths: the entity path filters returned entities by type,
    not the edges it traversed.
    """
    g = await _graph(store, index)
    r = await _retrieve(store, index, mode, native, entity_types=["person"])
    assert ids(r.entities) == [g.alice.id]
    assert ids(r.relationships) == [g.to_acme.id]
    by_entity = await _by_entity(store, index, g, native, entity_types=["person"])
    assert ids(by_entity.entities) == [g.alice.id]
    assert ids(by_entity.relationships) == [g.to_acme.id]

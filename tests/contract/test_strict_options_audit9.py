"""Contract: flags are real bools and thresholds / weights are numbers, on both backends.

pydantic's lax mode read ``include_invalidated="no"`` as False and ``"yes"`` or ``1`` as
True, ``min_similarity=True`` as 1.0 and ``"0.5"`` as 0.5, and the stores' keyword flags
(``find_facts_for_entities(include_invalidated="no")``) were used as truthy values: a
caller who wrote "no" was served soft-deleted records, and ``purge(store, tenant=1)``
erased the whole tenant. Every flag of the listing, search, retrieval, subgraph, export
and purge options now accepts only ``True`` / ``False`` and every number refuses bools and
strings, with a typed error naming the option; the refused call changes nothing.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import numpy as np
import pytest
from pydantic import ValidationError

from cycgraph_memory import retrieve_memory
from cycgraph_memory.errors import InvalidTypeError
from cycgraph_memory.export import export_graph
from cycgraph_memory.lifecycle import purge
from cycgraph_memory.retrieval.subgraph import extract_subgraph

from .factories import make_entity, make_fact, make_relationship, unit

Call = Callable[[Any, Any, dict[str, Any]], Awaitable[Any]]

Q = {"embedding": unit(0)}

CALLS: list[tuple[str, str, Call]] = [
    ("find_facts(include_invalidated='no')", "include_invalidated",
     lambda s, i, r: s.find_facts(include_invalidated="no")),
    ("find_facts(include_invalidated='yes')", "include_invalidated",
     lambda s, i, r: s.find_facts(include_invalidated="yes")),
    ("find_facts(include_invalidated=1)", "include_invalidated",
     lambda s, i, r: s.find_facts(include_invalidated=1)),
    ("find_facts(include_invalidated=np.True_)", "include_invalidated",
     lambda s, i, r: s.find_facts(include_invalidated=np.True_)),
    ("find_facts({'include_invalidated': 'true'})", "include_invalidated",
     lambda s, i, r: s.find_facts({"include_invalidated": "true"})),
    ("find_entities(include_invalidated='yes')", "include_invalidated",
     lambda s, i, r: s.find_entities(include_invalidated="yes")),
    ("get_relationships_for_entity(include_invalidated=1)", "include_invalidated",
     lambda s, i, r: s.get_relationships_for_entity(r["entity"], include_invalidated=1)),
    ("list_themes(include_invalidated='no')", "include_invalidated",
     lambda s, i, r: s.list_themes(include_invalidated="no")),
    ("get_facts_for_entities(include_invalidated='yes')", "include_invalidated",
     lambda s, i, r: s.get_facts_for_entities([r["entity"]], include_invalidated="yes")),
    ("get_relationships_for_entities(include_invalidated='yes')", "include_invalidated",
     lambda s, i, r: s.get_relationships_for_entities([r["entity"]], include_invalidated="yes")),
    ("find_facts_for_entities(include_invalidated='no')", "include_invalidated",
     lambda s, i, r: s.find_facts_for_entities([r["entity"]], include_invalidated="no")),
    ("find_relationships_for_entities(include_invalidated='no')", "include_invalidated",
     lambda s, i, r: s.find_relationships_for_entities([r["entity"]], include_invalidated="no")),
    ("match_entity_names(include_invalidated='no')", "include_invalidated",
     lambda s, i, r: i.match_entity_names("Acme Corp", include_invalidated="no")),
    ("search_facts(min_similarity=True)", "min_similarity",
     lambda s, i, r: i.search_facts(unit(0), min_similarity=True)),
    ("search_facts(min_similarity='0.5')", "min_similarity",
     lambda s, i, r: i.search_facts(unit(0), min_similarity="0.5")),
    ("search_facts(include_invalidated='yes')", "include_invalidated",
     lambda s, i, r: i.search_facts(unit(0), include_invalidated="yes")),
    ("search_themes_many(min_similarity=True)", "min_similarity",
     lambda s, i, r: i.search_themes_many([unit(0)], limit=3, min_similarity=True)),
    ("search_themes_many(limit=True)", "limit",
     lambda s, i, r: i.search_themes_many([unit(0)], limit=True)),
    ("retrieve query min_similarity=True", "min_similarity",
     lambda s, i, r: retrieve_memory(s, i, {**Q, "min_similarity": True})),
    ("retrieve query min_similarity='0.5'", "min_similarity",
     lambda s, i, r: retrieve_memory(s, i, {**Q, "min_similarity": "0.5"})),
    ("retrieve query include_invalidated='no'", "include_invalidated",
     lambda s, i, r: retrieve_memory(s, i, {**Q, "include_invalidated": "no"})),
    ("retrieve options native_paths='no'", "native_paths",
     lambda s, i, r: retrieve_memory(s, i, Q, options={"native_paths": "no"})),
    ("retrieve options graph_weight=True", "graph_weight",
     lambda s, i, r: retrieve_memory(s, i, Q, options={"graph_weight": True})),
    ("retrieve options text_weight='0.5'", "text_weight",
     lambda s, i, r: retrieve_memory(s, i, Q, options={"text_weight": "0.5"})),
    ("extract_subgraph(native='no')", "native",
     lambda s, i, r: extract_subgraph(s, [r["entity"]], native="no")),
    ("extract_subgraph({'include_invalidated': 'no'})", "include_invalidated",
     lambda s, i, r: extract_subgraph(s, [r["entity"]], {"include_invalidated": "no"})),
    ("export_graph(include_invalidated='no')", "include_invalidated",
     lambda s, i, r: export_graph(s, include_invalidated="no")),
    ("purge(tenant=1)", "tenant", lambda s, i, r: purge(s, index=i, tenant=1)),
    ("purge({'tenant': 'yes'})", "tenant", lambda s, i, r: purge(s, {"tenant": "yes"}, index=i)),
]


async def _seed(store: Any, index: Any) -> dict[str, Any]:
    acme, bob = make_entity(), make_entity(name="Bob", entity_type="person")
    for entity in (acme, bob):
        await store.put_entity(entity)
    await store.put_relationship(make_relationship(bob.id, acme.id))
    live = make_fact(embedding=unit(0), entity_ids=[acme.id])
    dead = make_fact(embedding=unit(0), entity_ids=[acme.id], invalidated_by="test")
    for fact in (live, dead):
        await store.put_fact(fact)
    await index.rebuild(store)
    return {"entity": acme.id, "live": live.id, "dead": dead.id}


async def _snapshot(store: Any, acme_id: Any) -> tuple[Any, ...]:
    return (
        await store.find_facts(include_invalidated=True),
        await store.find_entities(include_invalidated=True),
        await store.get_relationships_for_entity(acme_id, include_invalidated=True),
        await store.list_themes(include_invalidated=True),
    )


@pytest.mark.parametrize(("desc", "field", "call"), CALLS, ids=[c[0] for c in CALLS])
async def test_a_flag_or_number_of_the_wrong_type_is_refused(
    store: Any, index: Any, desc: str, field: str, call: Call
) -> None:
    refs = await _seed(store, index)
    before = await _snapshot(store, refs["entity"])
    with pytest.raises((ValidationError, InvalidTypeError), match=field):
        await call(store, index, refs)
    assert await _snapshot(store, refs["entity"]) == before, desc  # nothing erased, nothing touched


async def test_real_bools_ints_and_numpy_floats_still_work(store: Any, index: Any) -> None:
    refs = await _seed(store, index)
    assert {f.id for f in await store.find_facts(include_invalidated=True)} == {
        refs["live"], refs["dead"]
    }
    assert [f.id for f in await store.find_facts(include_invalidated=False)] == [refs["live"]]
    for similarity in (0, np.float64(0.5), 1):
        hits = await index.search_facts(unit(0), min_similarity=similarity)
        assert [hit.item.id for hit in hits] == [refs["live"]], similarity
    result = await retrieve_memory(
        store, index, {**Q, "min_similarity": np.float64(0.5), "include_invalidated": False},
        options={"graph_weight": 2, "text_weight": np.float64(0.25), "native_paths": False},
    )
    assert [f.id for f in result.facts] == [refs["live"]]

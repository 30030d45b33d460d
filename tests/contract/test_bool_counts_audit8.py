"""Contract: a bool is not a count, on any option of the contracts (both backends).

pydantic's lax ``int`` reads ``True`` as 1 and ``False`` as 0, so ``find_facts(limit=True)``
served one record and ``retrieve_memory(..., options={"theme_limit": True})`` matched one
theme, with no error: a flag passed where a count belongs. Every count of the listing,
search and retrieval options now refuses a bool with a ``ValidationError`` (``MemoryQuery``'s
``limit`` / ``max_hops`` did already), and the refused call changes nothing.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from pydantic import ValidationError

from cycgraph_memory import retrieve_memory

from .factories import make_fact, unit

CALLS: list[tuple[str, Callable[[Any, Any], Awaitable[Any]]]] = [
    ("find_facts(limit=True)", lambda s, i: s.find_facts(limit=True)),
    ("find_facts(offset=True)", lambda s, i: s.find_facts(offset=True)),
    ("find_entities(limit=False)", lambda s, i: s.find_entities(limit=False)),
    ("search_facts(limit=True)", lambda s, i: i.search_facts(unit(0), limit=True)),
    ("search_facts(ef_search=True)", lambda s, i: i.search_facts(unit(0), ef_search=True)),
    ("retrieve options theme_limit=True", lambda s, i: retrieve_memory(
        s, i, {"embedding": unit(0)}, options={"theme_limit": True})),
    ("retrieve options rrf_k=True", lambda s, i: retrieve_memory(
        s, i, {"embedding": unit(0)}, options={"rrf_k": True})),
]


@pytest.mark.parametrize(("desc", "call"), CALLS, ids=[c[0] for c in CALLS])
async def test_a_bool_is_refused_where_a_count_belongs(
    store: Any, index: Any, desc: str, call: Callable[[Any, Any], Awaitable[Any]]
) -> None:
    fact = make_fact(embedding=unit(0))
    await store.put_fact(fact)
    await index.rebuild(store)
    before = await store.get_facts([fact.id])
    with pytest.raises(ValidationError, match="not a bool"):
        await call(store, index)
    assert await store.get_facts([fact.id]) == before, desc  # not even touched
    assert [f.id for f in await store.find_facts(limit=1)] == [fact.id]  # an int still works

"""Consolidation audit (round 4), on both backends.

Each test names the bug it pins down; each failed before the fix that came with it.
"""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from cycgraph_memory import ConflictDetector, InvalidInputError
from cycgraph_memory.records import Conflict

from .factories import make_fact, unit


async def test_a_conflict_of_a_fact_with_itself_is_refused_and_changes_nothing(
    store: Any,
) -> None:
    """Bug: ``resolve_conflict(Conflict(fact_a=f, fact_b=f), "keep_a")`` invalidated ``f``
    with ``invalidated_by`` = its own id (a live fact lost to itself).

    A conflict needs two different facts: building one from a single fact is a
    ``ValidationError``, and one built without validation is refused by every resolution
    entry point with ``InvalidInputError`` before anything is written.
    """
    fact = make_fact(content="the api is not rate limited", embedding=unit(0))
    await store.put_facts([fact])
    with pytest.raises(ValidationError, match="two different facts"):
        Conflict(fact_a=fact, fact_b=fact, type="negation", confidence=0.8)
    forged = Conflict.model_construct(
        fact_a=fact, fact_b=fact, type="negation", confidence=0.8
    )
    detector = ConflictDetector(store)
    with pytest.raises(InvalidInputError, match="two different facts"):
        await detector.resolve_conflict(forged, "keep_a")
    with pytest.raises(InvalidInputError, match="two different facts"):
        await detector.auto_resolve_all([forged], "supersede-on-newer")
    with pytest.raises(InvalidInputError, match="two different facts"):
        await detector.plan_resolution([forged], "supersede-on-newer")
    stored = await store.get_fact(fact.id)
    assert stored is not None and stored.invalidated_by is None

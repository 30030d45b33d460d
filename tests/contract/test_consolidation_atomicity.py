"""Collect-then-apply, for real: a store failing on the k-th write leaves nothing behind.

Each pass runs against a wrapper that raises on its k-th write, for every k until the pass
succeeds; after every failure the store must equal its state before the pass.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

import pytest

from cycgraph_memory import ConflictDetector, EntityResolver, MemoryConsolidator

from .factories import at, make_entity, make_episode, make_fact, make_relationship, make_theme, unit

WRITES = (
    "put_entity", "put_entities", "put_relationship", "put_relationships", "put_episode",
    "put_episodes", "put_fact", "put_facts", "put_theme", "put_themes", "delete_entity",
    "delete_relationship", "delete_episode", "delete_fact", "delete_theme", "touch_facts",
)


class InjectedFailure(Exception):
    pass


class FailingStore:
    """Delegates to ``inner`` but raises on the ``fail_at``-th write call.

    With ``after=True`` the failing write is carried out first, then the error is raised
    (a write that landed must be undone too).
    """

    def __init__(self, inner: Any, fail_at: int, *, after: bool = False) -> None:
        self._inner = inner
        self._fail_at = fail_at
        self._after = after
        self.writes = 0

    def transaction(self) -> AbstractAsyncContextManager[None]:
        return self._inner.transaction()  # type: ignore[no-any-return]

    def exclusive(self, name: str) -> AbstractAsyncContextManager[None]:
        return self._inner.exclusive(name)  # type: ignore[no-any-return]

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if name not in WRITES:
            return attr

        async def write(*args: Any, **kwargs: Any) -> Any:
            self.writes += 1
            if self.writes != self._fail_at:
                return await attr(*args, **kwargs)
            if self._after:
                await attr(*args, **kwargs)
            raise InjectedFailure(f"write {self.writes} ({name})")

        return write


async def snapshot(store: Any, entity_ids: list[uuid.UUID]) -> dict[str, Any]:
    return {
        "entities": await store.find_entities(include_invalidated=True),
        "facts": await store.find_facts(include_invalidated=True),
        "episodes": await store.list_episodes(include_invalidated=True),
        "themes": await store.list_themes(include_invalidated=True),
        "relationships": await store.find_relationships_for_entities(
            entity_ids, include_invalidated=True
        ),
    }


async def seed(store: Any) -> list[uuid.UUID]:
    ents = [
        make_entity(name=n, entity_type="person", created_at=at(i), updated_at=at(i))
        for i, n in enumerate(["Alice", "alice", "the Alice", "Bob", "bob"])
    ]
    await store.put_entities(ents)
    a, a2, a3, b, b2 = (e.id for e in ents)
    await store.put_relationships(
        [
            make_relationship(a, b, relation_type="knows"),
            make_relationship(a2, b2, relation_type="knows"),
            make_relationship(a2, a3, relation_type="knows"),
        ]
    )
    facts = [
        make_fact(content="Alice lives in Paris", entity_ids=[a2], embedding=unit(0),
                  valid_from=at(days=1)),
        make_fact(content="alice lives in paris", entity_ids=[a3], embedding=unit(0),
                  valid_from=at(days=5)),
        make_fact(content="Alice lives in Rome", entity_ids=[a], embedding=unit(0),
                  valid_from=at(days=9)),
        make_fact(content="Bob doesn't like tea", entity_ids=[b2], embedding=unit(1),
                  valid_from=at(days=2)),
        make_fact(content="Bob likes tea", entity_ids=[b], embedding=unit(1),
                  valid_from=at(days=3)),
        make_fact(content="old news", embedding=unit(2), valid_from=at(days=0)),
    ]
    await store.put_facts(facts)
    await store.put_themes(
        [
            make_theme(fact_ids=[facts[0].id, facts[1].id], embedding=unit(0)),
            make_theme(fact_ids=[facts[5].id, facts[4].id], embedding=unit(2)),
        ]
    )
    await store.put_episodes(
        [make_episode(started_at=at(days=i), ended_at=at(days=i)) for i in range(3)]
    )
    return [e.id for e in ents]


async def resolve(store: Any, mode: str) -> None:
    await EntityResolver(store, delete_mode=mode).resolve()  # type: ignore[arg-type]


async def consolidate(store: Any, mode: str) -> None:
    await MemoryConsolidator(
        store, None, delete_mode=mode, max_facts=2, max_episodes=1  # type: ignore[arg-type]
    ).consolidate()


async def resolve_conflicts(store: Any, mode: str) -> None:
    detector = ConflictDetector(store, policy="supersede-on-newer")
    await detector.auto_resolve_all(await detector.detect_conflicts())


PASSES: dict[str, Callable[[Any, str], Awaitable[None]]] = {
    "entity-resolution": resolve,
    "consolidation": consolidate,
    "conflict-resolution": resolve_conflicts,
}


@pytest.mark.parametrize("when", ["before", "after"])
@pytest.mark.parametrize("mode", ["soft", "hard"])
@pytest.mark.parametrize("name", list(PASSES))
async def test_failure_on_any_write_leaves_the_store_unchanged(
    store: Any, name: str, mode: str, when: str
) -> None:
    entity_ids = await seed(store)
    if name == "conflict-resolution":
        await resolve(store, "soft")  # facts must share entity ids first
    run = PASSES[name]
    before = await snapshot(store, entity_ids)
    k = 1
    while True:
        wrapper = FailingStore(store, fail_at=k, after=when == "after")
        try:
            await run(wrapper, mode)
        except InjectedFailure:
            assert await snapshot(store, entity_ids) == before, f"{name}: write {k} left state"
            k += 1
            continue
        break
    assert k > 1, f"{name} wrote nothing: the test would prove nothing"
    if name != "conflict-resolution":  # one batched put of the invalidated facts
        assert k > 3, f"{name} wrote only {k - 1} times"
    after = await snapshot(store, entity_ids)
    assert after != before



"""``exclusive_pass`` and the in-memory store's ``exclusive`` capability."""

from __future__ import annotations

import asyncio
from contextlib import AbstractAsyncContextManager
from typing import Any

import pytest

from cycgraph_memory import InMemoryMemoryStore
from cycgraph_memory._exclusive import exclusive_pass
from cycgraph_memory.contracts import SupportsExclusive
from cycgraph_memory.records import Provenance, SemanticFact


class Boom(Exception):
    pass


def _fact() -> SemanticFact:
    return SemanticFact(content="x", provenance=Provenance(source="system"))


async def test_in_memory_exclusive_serialises_passes_of_one_name() -> None:
    store = InMemoryMemoryStore()
    assert isinstance(store, SupportsExclusive)
    events: list[str] = []
    entered = asyncio.Event()

    async def first() -> None:
        async with exclusive_pass(store, "gate"):
            events.append("a-in")
            entered.set()
            await asyncio.sleep(0.05)
            events.append("a-out")

    async def second() -> None:
        await entered.wait()
        async with exclusive_pass(store, "gate"):
            events.append("b-in")

    await asyncio.gather(first(), second())
    assert events == ["a-in", "a-out", "b-in"]


async def test_exclusive_pass_rolls_back_on_raise() -> None:
    store = InMemoryMemoryStore()
    f = _fact()
    with pytest.raises(Boom):
        async with exclusive_pass(store, "gate"):
            await store.put_fact(f)
            raise Boom
    assert await store.get_fact(f.id) is None


class _PlainStore:
    """A store without ``exclusive``: the helper falls back to ``transaction()``."""

    def __init__(self) -> None:
        self.inner = InMemoryMemoryStore()
        self.entered = 0

    def transaction(self) -> AbstractAsyncContextManager[None]:
        self.entered += 1
        return self.inner.transaction()

    def __getattr__(self, name: str) -> Any:
        if name == "exclusive":
            raise AttributeError(name)
        return getattr(self.inner, name)


async def test_exclusive_pass_falls_back_to_transaction() -> None:
    store = _PlainStore()
    assert not isinstance(store, SupportsExclusive)
    async with exclusive_pass(store, "gate"):  # type: ignore[arg-type]
        await store.put_fact(_fact())
    assert store.entered == 1

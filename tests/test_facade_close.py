"""``Memory`` facade audit 4 (h): a closed memory refuses work; ``add`` dedup; blank lessons.

* ``close()`` on an opened Postgres memory only disposed the engine, which SQLAlchemy
  reopens on the next checkout: a closed ``Memory`` (or one used after its ``async with``
  block) kept reading and writing. Every operation now raises ``MemoryClosedError``;
  ``close()`` stays idempotent and leaves objects the caller built (and owns) open.
* ``add``'s docstring promised "re-adding the same messages writes nothing"; the pipeline
  skips messages by id, so a dict without an ``id`` is stored again on every call.
* ``remember("   ")`` stored a whitespace-only lesson (a zero vector, an empty bullet in
  the prompt block); it is now refused like ``remember("")``, nothing written.
"""

from __future__ import annotations

import secrets
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import pytest_asyncio

from cycgraph_memory import (
    CycgraphMemoryError,
    HashingEmbeddingProvider,
    InMemoryMemoryIndex,
    InMemoryMemoryStore,
    InvalidInputError,
    Memory,
    MemoryClosedError,
)

TEST_DIM = 8  # the shared test schema's width (tests/conftest.py)

# Every facade operation, called the way a user would after closing.
OPERATIONS: dict[str, Callable[[Memory], Awaitable[Any]]] = {
    "add": lambda m: m.add([{"role": "user", "content": "Alice Smith runs billing."}]),
    "search": lambda m: m.search("billing", mode="text"),
    "search_tags": lambda m: m.search(tags=["lesson"]),
    "search_entity": lambda m: m.search(entity="Alice Smith"),
    "remember": lambda m: m.remember("Retry a flaky deploy once."),
    "forget": lambda m: m.forget([uuid.uuid4()]),
    "forget_erase": lambda m: m.forget([uuid.uuid4()], erase=True),
    "erase": lambda m: m.erase(run_id="run-1", dry_run=True),
    "stats": lambda m: m.stats(),
}


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def close_dsn(pg_databases: Any) -> str:
    """A migrated database of this module's own (``Memory.open`` commits)."""
    from cycgraph_memory.postgres import upgrade

    dsn = str(await pg_databases.create("h_facade_close"))
    await upgrade(dsn, embedding_dim=TEST_DIM)
    return dsn


@pytest.fixture(params=["memory", pytest.param("postgres", marks=pytest.mark.postgres)])
def open_dsn(request: pytest.FixtureRequest) -> str:
    """The DSN ``Memory.open`` gets: in-memory, or the module's Postgres database."""
    if request.param == "memory":
        return "memory://"
    return str(request.getfixturevalue("close_dsn"))


async def _live_facts(memory: Memory) -> int:
    return len(await memory.store.find_facts())


# ----------------------------------------------------------------------------- close


@pytest.mark.parametrize("operation", sorted(OPERATIONS))
async def test_every_operation_after_close_is_refused(memory: Memory, operation: str) -> None:
    before = await _live_facts(memory)
    await memory.close()
    with pytest.raises(MemoryClosedError, match="closed"):
        await OPERATIONS[operation](memory)
    # Nothing was written, and the objects the caller built are still usable.
    assert await _live_facts(memory) == before
    await memory.close()  # idempotent


async def test_memory_closed_error_is_typed() -> None:
    assert issubclass(MemoryClosedError, CycgraphMemoryError)
    assert issubclass(MemoryClosedError, RuntimeError)


@pytest.mark.parametrize("operation", ["search", "remember", "add", "stats"])
async def test_use_after_the_async_with_block_is_refused(open_dsn: str, operation: str) -> None:
    tenant = f"t_{secrets.token_hex(6)}"
    async with await Memory.open(open_dsn, tenant=tenant, embedding_dim=TEST_DIM) as memory:
        assert (await memory.stats()).records["fact"].live == 0
    # Postgres: the disposed engine would silently open a new pool here.
    with pytest.raises(MemoryClosedError):
        await OPERATIONS[operation](memory)
    await memory.close()  # closing again after the block is fine


async def test_a_closed_memory_cannot_be_entered_again(open_dsn: str) -> None:
    memory = await Memory.open(open_dsn, tenant="t_reenter", embedding_dim=TEST_DIM)
    await memory.close()
    await memory.close()
    with pytest.raises(MemoryClosedError):
        async with memory:
            pass


async def test_close_runs_on_close_once() -> None:
    calls: list[int] = []

    async def on_close() -> None:
        calls.append(1)

    memory = Memory(
        InMemoryMemoryStore(expected_dimensions=TEST_DIM),
        InMemoryMemoryIndex(expected_dimensions=TEST_DIM),
        embedder=HashingEmbeddingProvider(dimensions=TEST_DIM),
        on_close=on_close,
    )
    async with memory:
        pass
    await memory.close()
    assert calls == [1]
    assert memory.closed


@pytest.mark.postgres
async def test_close_leaves_an_engine_the_caller_owns_open(close_dsn: str) -> None:
    from cycgraph_memory.postgres import (
        PostgresMemoryIndex,
        PostgresMemoryStore,
        create_engine_from_dsn,
    )

    engine = create_engine_from_dsn(close_dsn)
    try:
        tenant = f"t_{secrets.token_hex(6)}"
        store = PostgresMemoryStore(engine, tenant_id=tenant, embedding_dim=TEST_DIM)
        pool = engine.pool
        async with Memory(
            store,
            PostgresMemoryIndex(engine, tenant_id=tenant),
            embedder=HashingEmbeddingProvider(dimensions=TEST_DIM),
            tenant=tenant,
        ) as memory:
            await memory.search("anything", mode="text")
        assert memory.closed
        assert engine.pool is pool  # not disposed: dispose() replaces the pool
        assert await store.find_facts() == []  # the caller's store keeps working
        with pytest.raises(MemoryClosedError):
            await memory.search("anything", mode="text")
    finally:
        await engine.dispose()


@pytest.mark.postgres
async def test_close_disposes_the_engine_open_created(close_dsn: str) -> None:
    memory = await Memory.open(close_dsn, tenant=f"t_{secrets.token_hex(6)}")
    await memory.search("warm the pool", mode="text")
    engine = memory.store._sessionmaker.kw["bind"]  # the engine open() created
    pool = engine.pool
    await memory.close()
    assert engine.pool is not pool  # disposed (dispose() replaces the pool)
    assert engine.pool.checkedout() == 0


# ----------------------------------------------------------------------------- add


async def test_add_skips_messages_by_id_not_by_content(memory: Memory) -> None:
    doc = " ".join((Memory.add.__doc__ or "").split())
    assert "same ids" in doc and "without an ``id``" in doc
    with_ids = [
        {"role": "user", "content": "Carol White runs payroll.", "id": str(uuid.UUID(int=7))}
    ]
    assert (await memory.add(with_ids)).messages_ingested == 1
    assert (await memory.add(with_ids)).messages_ingested == 0
    without = [{"role": "user", "content": "Dana Lee reviews schema changes."}]
    assert (await memory.add(without)).messages_ingested == 1
    # Documented: a dict without an id gets a new one, so it is stored again.
    assert (await memory.add(without)).messages_ingested == 1


# ----------------------------------------------------------------------------- remember


@pytest.mark.parametrize("text", ["", "   ", "\n\t ", "\u00a0\u2003"])
async def test_remember_refuses_blank_text_and_writes_nothing(memory: Memory, text: str) -> None:
    with pytest.raises(InvalidInputError, match="blank"):
        await memory.remember(text, idempotency_key="run-1:reflect:0")
    assert await _live_facts(memory) == 0
    # The idempotency key was not used up by the refused call.
    fid = await memory.remember("Retry a flaky deploy once.", idempotency_key="run-1:reflect:0")
    assert [f.id for f in await memory.store.find_facts()] == [fid]


async def test_remember_keeps_surrounding_whitespace_of_real_text(memory: Memory) -> None:
    fid = await memory.remember("  Retry a flaky deploy once.  ")
    facts = await memory.store.find_facts()
    assert [f.id for f in facts] == [fid]

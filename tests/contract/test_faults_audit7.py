"""Atomicity under failure (seventh audit round), on both backends.

Each multi-write operation is run with a failure injected part-way (a store, index,
embedder, extractor or ledger method raising on its N-th call, or the task cancelled);
afterwards the store must hold exactly what it held before, and running the same call
again must succeed with the result of a run that never failed.

Bugs these tests found (each failed before its fix):

* in memory, a unit of work that failed undid every write made while it was open, those
  of other tasks included (a lesson ``remember``-ed meanwhile vanished after its id was
  handed out): the undo journal now belongs to the task that opened the unit;
* in memory, a purge (or a re-embed of messages) swapped the store's journaled message,
  writer-key and settings dicts for plain ones, so later rollbacks missed those changes;
* an ingest retried after a transient error (deadlock, lost connection) re-clustered the
  batch as the failed attempt had left it: the retry merged themes a clean run kept
  apart (both backends).
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import io
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

import pytest
import pytest_asyncio

from cycgraph_memory.demo import load_sample_messages
from cycgraph_memory.embeddings.hashing import HashingEmbeddingProvider
from cycgraph_memory.errors import ConcurrencyError
from cycgraph_memory.hierarchy.pipeline import MemoryPipeline
from cycgraph_memory.inmemory import InMemoryMemoryIndex, InMemoryMemoryStore
from cycgraph_memory.lifecycle import export, import_, purge
from cycgraph_memory.records import FactFilter, GateAuditEntry, RunOutcome
from cycgraph_memory.retention import evaluate_retention
from cycgraph_memory.retry import RetryPolicy

from .factories import (
    EMBED_DIM,
    make_entity,
    make_episode,
    make_fact,
    make_relationship,
    make_theme,
    stable,
    unit,
)

SKIP = frozenset({"transaction", "exclusive", "read_scope"})


class Injected(Exception):
    """The failure this module injects."""


class Faults:
    """Makes the ``fail_at``-th call of an object's public coroutine methods raise.

    ``error`` is raised (an instance or a factory); ``after=True`` runs the call first.
    ``cancel=True`` cancels the running task instead, then makes the call (the
    cancellation lands in its first suspension, the database I/O on Postgres).
    """

    def __init__(self, monkeypatch: pytest.MonkeyPatch, target: Any, fail_at: int,
                 *, error: Callable[[], BaseException] = lambda: Injected("injected"),
                 after: bool = False, cancel: bool = False,
                 only: frozenset[str] | None = None) -> None:
        self.calls = 0
        self.fired = False
        self.cancel = cancel
        for name in dir(target):
            if name.startswith("_") or name in SKIP or (only is not None and name not in only):
                continue
            attr = getattr(target, name, None)
            if not inspect.iscoroutinefunction(attr):
                continue
            monkeypatch.setattr(target, name, self._wrap(attr, fail_at, error, after))

    def _wrap(self, attr: Any, fail_at: int, error: Callable[[], BaseException],
              after: bool) -> Any:
        async def call(*args: Any, **kwargs: Any) -> Any:
            self.calls += 1
            if self.calls != fail_at:
                return await attr(*args, **kwargs)
            self.fired = True
            if self.cancel:  # cancel the task while the call runs (inside its I/O)
                task = asyncio.current_task()
                assert task is not None
                task.cancel()
                return await attr(*args, **kwargs)
            if after:
                await attr(*args, **kwargs)
            raise error()

        return call


async def snapshot(store: Any) -> dict[str, Any]:
    entities = await store.find_entities(include_invalidated=True)
    episodes = await store.list_episodes(include_invalidated=True)
    mids = [m.id for e in episodes for m in e.messages]
    return {
        "entities": entities,
        "relationships": await store.find_relationships_for_entities(
            [e.id for e in entities], include_invalidated=True
        ),
        "episodes": episodes,
        "messages": await store.get_messages(mids),
        "facts": await store.find_facts(include_invalidated=True),
        "themes": await store.list_themes(include_invalidated=True),
        "settings": await store.get_tenant_setting("theme-calibration")
        if hasattr(store, "get_tenant_setting") else None,
    }


def _pipeline(store: Any, index: Any = None) -> MemoryPipeline:
    return MemoryPipeline(
        store, index=index, embedder=HashingEmbeddingProvider(dimensions=EMBED_DIM)
    )


def _halves(small: bool = False) -> tuple[list[Any], list[Any]]:
    """The sample conversation's two halves (``small``: 7 messages each, for the tests
    that ingest once per injected fault)."""
    msgs = load_sample_messages()
    if small:
        return msgs[:7], msgs[7:14]
    return msgs[: len(msgs) // 2], msgs[len(msgs) // 2:]


@pytest.fixture
def other_store(backend: str, request: pytest.FixtureRequest) -> Any:
    """A second, empty store of the same backend (a run that never failed)."""
    if backend == "memory":
        return InMemoryMemoryStore(expected_dimensions=EMBED_DIM)
    return request.getfixturevalue("pg_make_store")(f"t_{uuid.uuid4().hex[:12]}")


@pytest.fixture
def fresh(backend: str, request: pytest.FixtureRequest) -> Callable[[], Any]:
    """Builds empty stores of the backend (a new tenant each on Postgres)."""
    if backend == "memory":
        return lambda: InMemoryMemoryStore(expected_dimensions=EMBED_DIM)
    make = request.getfixturevalue("pg_make_store")
    return lambda: make(f"t_{uuid.uuid4().hex[:12]}")


async def _fault_loop(
    monkeypatch: pytest.MonkeyPatch, target: Any, run: Callable[[], Awaitable[Any]],
    check: Callable[[], Awaitable[None]], **faults: Any,
) -> int:
    """Fail the k-th call for k = 1, 2, ... until ``run`` succeeds; ``check`` after each."""
    k = 1
    while True:
        with monkeypatch.context() as m:
            f = Faults(m, target, k, **faults)
            try:
                await run()
            except Injected:
                assert f.fired
                await check()
                k += 1
                continue
            except asyncio.CancelledError:
                assert f.fired
                await check()
                k += 1
                continue
        return k


# --------------------------------------------------------------------------- ingest


@pytest.mark.parametrize("after", [False, True], ids=["before", "after"])
async def test_ingest_failing_on_any_store_call_writes_nothing_and_retries_cleanly(
    store: Any, other_store: Any, monkeypatch: pytest.MonkeyPatch, after: bool
) -> None:
    since = datetime.now(UTC)
    first, second = _halves()
    await _pipeline(store).ingest(first)
    await _pipeline(other_store).ingest(first)
    clean = await _pipeline(other_store).ingest(second)
    before = await snapshot(store)
    pipeline = _pipeline(store)

    async def check() -> None:
        assert await snapshot(store) == before

    k = await _fault_loop(monkeypatch, store, lambda: pipeline.ingest(second), check,
                          after=after)
    assert k > 10
    # the run that finally succeeded (no fault fired) equals the one that never failed
    assert stable(await snapshot(store), since) == stable(await snapshot(other_store), since)
    again = await _pipeline(store).ingest(second)
    assert again.messages_ingested == 0 and clean.messages_ingested == len(second)


async def test_an_ingest_retried_after_a_transient_error_equals_a_clean_run(
    fresh: Callable[[], Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A deadlock inside the write transaction makes the pipeline run the whole commit
    again (``call_with_retry``); the second attempt must not see anything of the first
    (records the first attempt changed in place, ids it reserved)."""
    since = datetime.now(UTC)
    first, second = _halves(small=True)
    clean = fresh()
    await _pipeline(clean).ingest(first)
    await _pipeline(clean).ingest(second)
    want = stable(await snapshot(clean), since)
    k = 2  # call 1 is the read before the write transaction (the caller retries that)
    while True:
        store = fresh()
        await _pipeline(store).ingest(first)
        pipeline = MemoryPipeline(
            store, embedder=HashingEmbeddingProvider(dimensions=EMBED_DIM),
            retry=RetryPolicy(max_attempts=2, base_delay_s=0.0),
        )
        with monkeypatch.context() as m:
            f = Faults(m, store, k, error=lambda: ConcurrencyError("deadlock detected"))
            report = await pipeline.ingest(second)
        if not f.fired:
            break
        assert report.messages_ingested == len(second), k
        assert stable(await snapshot(store), since) == want, f"retry after call {k}"
        k += 1
    assert k > 10


# --------------------------------------------------------------------------- units of work


class CallerError(Exception):
    """Raised by the caller's own code inside a unit of work."""


async def _seed_small(store: Any) -> tuple[Any, Any, Any]:
    ent = make_entity(name="Alice")
    await store.put_entity(ent)
    theme = make_theme(embedding=unit(0))
    await store.put_theme(theme)
    ep = make_episode()
    await store.put_episode(ep)
    fact = make_fact(content="Alice likes tea", entity_ids=[ent.id], tags=["keep"],
                     embedding=unit(0))
    await store.put_fact(fact)
    await store.put_tenant_setting("k", {"v": 1})
    return ent, fact, ep


async def _lookups(store: Any, ent: Any, fact: Any) -> dict[str, Any]:
    return {
        "by_entity": sorted(f.id for f in await store.find_facts(FactFilter(entity_id=ent.id))),
        "by_tag": sorted(f.id for f in await store.find_facts(FactFilter(tags=["keep"]))),
        "by_new_tag": sorted(f.id for f in await store.find_facts(FactFilter(tags=["new"]))),
        "setting": await store.get_tenant_setting("k"),
        "key": await store.writer_key_ids("idem"),
        "names": sorted(e.name for e in await store.find_entities()),
    }


async def _write_everything(store: Any, ent: Any, fact: Any, ep: Any) -> None:
    """One of each kind of write, then reads that must see them (own writes)."""
    bob = make_entity(name="Bob")
    await store.put_entity(bob)
    await store.put_fact(fact.model_copy(update={"entity_ids": [bob.id], "tags": ["new"]}))
    await store.put_relationship(make_relationship(ent.id, bob.id))
    await store.put_facts_once("idem", [make_fact(content="lesson", tags=["new"])])
    await store.put_tenant_setting("k", {"v": 2})
    await store.touch_facts([fact.id])
    await store.delete_episode(ep.id)
    got = await _lookups(store, ent, fact)
    assert got["by_entity"] == [] and fact.id in got["by_new_tag"]
    assert got["setting"] == {"v": 2} and got["key"] is not None
    assert "Bob" in got["names"]
    assert await store.get_episode(ep.id) is None


async def test_a_callers_error_inside_a_transaction_undoes_every_kind_of_write(
    store: Any,
) -> None:
    ent, fact, ep = await _seed_small(store)
    before, looks = await snapshot(store), await _lookups(store, ent, fact)
    with pytest.raises(CallerError):
        async with store.transaction():
            await _write_everything(store, ent, fact, ep)
            raise CallerError
    assert await snapshot(store) == before
    assert await _lookups(store, ent, fact) == looks
    async with store.transaction():  # the store is usable again, and commits
        await _write_everything(store, ent, fact, ep)
    assert (await _lookups(store, ent, fact))["setting"] == {"v": 2}


async def test_nested_units_of_work_roll_back_like_savepoints(store: Any) -> None:
    ent, fact, ep = await _seed_small(store)
    before, looks = await snapshot(store), await _lookups(store, ent, fact)
    async with store.transaction():
        carol = make_entity(name="Carol")
        await store.put_entity(carol)
        with pytest.raises(CallerError):
            async with store.transaction():
                await _write_everything(store, ent, fact, ep)
                raise CallerError
        # the inner block is undone, the outer write stays visible
        now = await _lookups(store, ent, fact)
        assert now == {**looks, "names": ["Alice", "Carol"]}
        async with store.transaction():  # an inner block that succeeds
            await store.put_tenant_setting("k", {"v": 3})
    assert (await _lookups(store, ent, fact))["setting"] == {"v": 3}
    assert await store.get_entity(carol.id) is not None
    # an outer failure undoes the inner blocks that succeeded as well
    mid = await snapshot(store)
    with pytest.raises(CallerError):
        async with store.transaction():
            async with store.transaction():
                await _write_everything(store, ent, fact, ep)
            async with store.transaction():
                await store.delete_entity(carol.id)
            raise CallerError
    assert await snapshot(store) == mid
    assert before != mid


async def test_a_cancelled_unit_of_work_is_undone_and_releases_its_lock(store: Any) -> None:
    ent, fact, ep = await _seed_small(store)
    before = await snapshot(store)
    inside = asyncio.Event()

    async def work() -> None:
        async with store.exclusive("facts"):
            await _write_everything(store, ent, fact, ep)
            inside.set()
            await asyncio.sleep(30)

    task = asyncio.create_task(work())
    await inside.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await snapshot(store) == before
    async with asyncio.timeout(10):  # the lock was released: this does not wait
        async with store.exclusive("facts"):
            await store.put_tenant_setting("k", {"v": 9})
    assert await store.get_tenant_setting("k") == {"v": 9}


@pytest.fixture
def committing(backend: str, request: pytest.FixtureRequest) -> str | None:
    """The DSN of the committing database on Postgres, ``None`` in memory."""
    return None if backend == "memory" else str(request.getfixturevalue("committing_dsn"))


@pytest_asyncio.fixture
async def committed(committing: str | None) -> AsyncIterator[tuple[Callable[[], Any], Any]]:
    """Builds stores whose writes really commit (two tasks, two connections on Postgres:
    a new tenant each), and their engine (``None`` in memory)."""
    if committing is None:
        yield (lambda: InMemoryMemoryStore(expected_dimensions=EMBED_DIM)), None
        return
    from cycgraph_memory.postgres import PostgresMemoryStore, create_engine_from_dsn

    engine = create_engine_from_dsn(committing)
    made: list[Any] = []

    def make() -> Any:
        made.append(PostgresMemoryStore(engine, tenant_id=f"faults_{uuid.uuid4().hex[:10]}"))
        return made[-1]

    try:
        yield make, engine
    finally:
        for store in made:
            await store.clear()
        await engine.dispose()


async def test_a_rollback_keeps_what_another_task_wrote_meanwhile(
    committed: tuple[Any, Any],
) -> None:
    """A unit of work that fails undoes its own writes only. In memory, a failing ingest
    (or any pass whose plugin awaits, then raises) used to undo every write made while
    it was open, even those of other tasks that had returned: a lesson ``remember``-ed
    meanwhile was gone although its id had been handed out."""
    store = committed[0]()
    alice = make_entity(name="Alice")
    await store.put_entity(alice)
    await store.put_tenant_setting("k", {"v": 0})
    inside, written = asyncio.Event(), asyncio.Event()
    lesson = make_fact(content="remembered meanwhile", tags=["lesson"], embedding=unit(1))

    async def failing_unit() -> None:
        # (Postgres serialises fact writes of one tenant: this unit writes none.)
        async with store.transaction():
            await store.put_entity(make_entity(name="undone"))
            await store.put_entity(alice.model_copy(update={"name": "Alice Smith"}))
            await store.put_tenant_setting("mine", {"v": 1})
            inside.set()
            await written.wait()
            raise CallerError

    async def other_writer() -> None:
        await inside.wait()
        async with asyncio.timeout(20):
            await store.put_facts_once("run-1", [lesson])
            await store.put_tenant_setting("k", {"v": 2})
            await store.put_entity(make_entity(name="Bob"))
        written.set()

    unit_task = asyncio.create_task(failing_unit(), context=contextvars.Context())
    other = asyncio.create_task(other_writer(), context=contextvars.Context())
    with pytest.raises(CallerError):
        await unit_task
    await other
    facts = await store.find_facts(include_invalidated=True)
    assert [f.content for f in facts] == ["remembered meanwhile"]
    assert await store.writer_key_ids("run-1") == [lesson.id]
    assert sorted(e.name for e in await store.find_entities()) == ["Alice", "Bob"]
    assert await store.get_tenant_setting("mine") is None
    assert await store.get_tenant_setting("k") == {"v": 2}


async def test_units_of_work_still_roll_back_everything_after_a_purge(store: Any) -> None:
    """In memory, a purge (and a re-embed of messages) replaced the store's message,
    writer-key and settings dicts with plain ones that no later unit of work journaled:
    a rolled-back ``put_facts_once`` kept its key (a retried ``remember`` then answered
    with the id of a fact that was never stored), a rolled-back episode write kept its
    message vectors."""
    ent, fact, ep = await _seed_small(store)
    message = ep.messages[0]
    await store.put_episode(ep.model_copy(update={
        "messages": [message.model_copy(update={"embedding": unit(3)}), *ep.messages[1:]]
    }))
    gone = make_fact(content="a lesson to erase", tags=["lesson"],
                     provenance={"source": "agent", "run_id": "run-x"})
    await store.put_facts_once("erased-key", [gone])
    report = await purge(store, run_id="run-x")
    assert report.counts()["idempotency_keys"] == 1
    await store.write_embeddings("message", {message.id: unit(4)})
    before, looks = await snapshot(store), await _lookups(store, ent, fact)
    assert before["messages"][message.id].embedding == unit(4)
    with pytest.raises(CallerError):
        async with store.transaction():
            await store.put_episode(ep.model_copy(update={"messages": [
                message.model_copy(update={"embedding": unit(5)}), *ep.messages[1:]
            ]}))
            await _write_everything(store, ent, fact, ep)
            raise CallerError
    assert await snapshot(store) == before
    assert await _lookups(store, ent, fact) == looks
    assert await store.writer_key_ids("idem") is None


async def test_an_ingest_cancelled_anywhere_writes_nothing_and_frees_its_locks(
    committed: tuple[Callable[[], Any], Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Cancel the ingest task inside each store call in turn (on Postgres, inside the
    statement's I/O). The store then holds what it held before, or the whole ingest
    when the cancellation only landed after the commit; no connection stays checked
    out, and the same ingest run again (it takes the same pass locks) completes."""
    make, engine = committed
    since = datetime.now(UTC)
    first, second = _halves(small=True)
    clean = make()
    await _pipeline(clean).ingest(first)
    await _pipeline(clean).ingest(second)
    whole = stable(await snapshot(clean), since)
    k, outcomes = 1, set()
    while True:
        store = make()
        await _pipeline(store).ingest(first)
        before = stable(await snapshot(store), since)
        with monkeypatch.context() as m:
            f = Faults(m, store, k, cancel=True)
            # Its own task: the cancellation hits that task, as a caller's timeout would.
            task = asyncio.create_task(_pipeline(store).ingest(second))
            try:
                async with asyncio.timeout(30):
                    await task
            except asyncio.CancelledError:
                assert f.fired and task.cancelled()
        if not f.fired:
            break
        if engine is not None:
            assert engine.pool.checkedout() == 0, k
        state = stable(await snapshot(store), since)
        assert state in (before, whole), f"cancelled in call {k}: a half-write"
        outcomes.add("nothing" if state == before else "all")
        async with asyncio.timeout(30):  # no lock left held: the retry does not wait
            await _pipeline(store).ingest(second)
        assert stable(await snapshot(store), since) == whole
        k += 1
    assert k > 10 and "nothing" in outcomes


# --------------------------------------------------------------------------- lifecycle, gate


async def ledger_state(ledger: Any) -> dict[str, Any]:
    return {
        "stats": await ledger.list_fact_stats(),
        "baseline": await ledger.get_baseline(),
        "audit": await ledger.list_gate_audit(),
        "erasures": await ledger.list_erasures(),
    }


@pytest.mark.parametrize("target", ["store", "ledger"])
async def test_a_purge_failing_anywhere_erases_nothing_and_retries_cleanly(
    store: Any, ledger: Any, monkeypatch: pytest.MonkeyPatch, target: str
) -> None:
    first, _ = _halves()
    report = await _pipeline(store).ingest(first)
    for i, fid in enumerate(report.fact_ids):
        await ledger.record_outcome(RunOutcome(run_id=f"r{i}", score=i / 20, fact_ids=[fid]))
    await ledger.append_gate_audit([GateAuditEntry(
        pass_id=uuid.uuid4(), fact_id=fid, verdict="held", reason="few-trials", trials=1,
        policy={}, decided_at=datetime.now(UTC),
    ) for fid in report.fact_ids])
    erased = [m.id for m in first[2:5]]
    want = await purge(store, ledger=ledger, message_ids=erased, dry_run=True)
    before = (await snapshot(store), await ledger_state(ledger))

    async def check() -> None:
        assert (await snapshot(store), await ledger_state(ledger)) == before

    k = await _fault_loop(
        monkeypatch, store if target == "store" else ledger,
        lambda: purge(store, ledger=ledger, message_ids=erased), check,
    )
    assert k > (5 if target == "store" else 2)
    after = await snapshot(store)
    assert after != before[0] and not set(erased) & set(after["messages"])
    state = await ledger_state(ledger)
    assert len(state["erasures"]) == 1
    assert state["erasures"][0].counts == want.counts()


async def test_a_gate_pass_whose_audit_write_fails_changes_no_fact(
    store: Any, ledger: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    good = make_fact(tags=["lesson", "candidate"])
    bad = make_fact(tags=["lesson", "candidate"])
    await store.put_facts([good, bad])
    for i, (score, fid) in enumerate([(0.9, good.id), (0.92, good.id), (0.88, good.id),
                                      (0.1, bad.id), (0.12, bad.id), (0.08, bad.id)]):
        await ledger.record_outcome(RunOutcome(run_id=f"g{i}", score=score, fact_ids=[fid]))
    for i, score in enumerate([0.45, 0.5, 0.55, 0.5, 0.48, 0.52]):
        await ledger.record_outcome(RunOutcome(run_id=f"b{i}", score=score))
    before = (await snapshot(store), await ledger_state(ledger))

    async def check() -> None:
        assert (await snapshot(store), await ledger_state(ledger)) == before

    for target in (store, ledger):
        await _fault_loop(monkeypatch, target, lambda: evaluate_retention(store, ledger),
                          check)
        assert (await snapshot(store)) != before[0]
        report = await evaluate_retention(store, ledger)  # a second pass changes nothing
        assert report.promoted == report.evicted == []
        # start over for the next target
        await store.put_facts([good, bad])
        before = (await snapshot(store), await ledger_state(ledger))
    assert len((await ledger_state(ledger))["audit"]) == 2 + 2


async def test_an_atomic_import_failing_anywhere_leaves_store_and_index_unchanged(
    store: Any, other_store: Any, backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    first, _ = _halves()
    await _pipeline(other_store).ingest(first)
    buffer = io.StringIO()
    await export(other_store, buffer)
    await store.put_entity(make_entity(name="already here", embedding=unit(0)))
    index = InMemoryMemoryIndex(expected_dimensions=EMBED_DIM) if backend == "memory" else None
    if index is not None:
        await index.rebuild(store)
    before = await snapshot(store)

    async def check() -> None:
        assert await snapshot(store) == before
        if index is not None:
            assert len(index) == 1

    def run() -> Awaitable[Any]:
        return import_(store, io.StringIO(buffer.getvalue()), index=index, batch_size=7)

    k = await _fault_loop(monkeypatch, store, run, check)
    assert k > 3
    want = await snapshot(other_store)
    got = await snapshot(store)
    assert got["facts"] == want["facts"] and got["themes"] == want["themes"]
    if index is not None:
        assert len(index) > 1


# --------------------------------------------------------------------------- plugins


class _RaisingOn:
    """Wraps a plugin: its ``method`` raises ``Injected`` on call ``n`` (then works)."""

    def __init__(self, inner: Any, method: str, n: int) -> None:
        self._inner, self._method, self._n, self.calls = inner, method, n, 0

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if name != self._method:
            return attr

        async def call(*args: Any, **kwargs: Any) -> Any:
            self.calls += 1
            if self.calls == self._n:
                raise Injected(f"{name} call {self.calls}")
            return await attr(*args, **kwargs)

        return call


@pytest.mark.parametrize(
    ("plugin", "method", "n"),
    [("extractor", "extract", 2), ("embedder", "embed", 2), ("clusterer", "cluster", 1),
     ("clusterer", "cluster", 2)],
)
async def test_a_plugin_raising_mid_ingest_leaves_store_and_index_unchanged(
    store: Any, other_store: Any, backend: str, plugin: str, method: str, n: int
) -> None:
    """An extractor, embedding provider or clusterer of the user's that raises part-way;
    the clusterer runs inside the write transaction (after the stored themes were read
    and the calibration setting written)."""
    from cycgraph_memory.hierarchy.clustering import ConsolidatingThemeClusterer
    from cycgraph_memory.hierarchy.extractors.rules import RuleBasedExtractor

    def parts() -> dict[str, Any]:
        made = {
            "extractor": RuleBasedExtractor(),
            "embedder": HashingEmbeddingProvider(dimensions=EMBED_DIM),
            "clusterer": ConsolidatingThemeClusterer(),
        }
        if plugin != "clusterer":  # else the tenant-calibrated default
            del made["clusterer"]
        return made

    since = datetime.now(UTC)
    first, second = _halves()
    index = InMemoryMemoryIndex(expected_dimensions=EMBED_DIM) if backend == "memory" else None
    await _pipeline(store, index).ingest(first)
    await _pipeline(other_store).ingest(first)
    await MemoryPipeline(other_store, **parts()).ingest(second)
    before, indexed = await snapshot(store), None if index is None else len(index)
    mine = parts()
    mine[plugin] = _RaisingOn(mine[plugin], method, n)
    pipeline = MemoryPipeline(store, index=index, **mine)
    if plugin == "clusterer" and n == 2:
        await pipeline.ingest(first[:0] + second[:1])  # call 1: a small batch lands
        before, indexed = await snapshot(store), None if index is None else len(index)
        rest = second[1:]
    else:
        rest = second
    with pytest.raises(Injected):
        await pipeline.ingest(rest)
    assert await snapshot(store) == before
    if index is not None:
        assert len(index) == indexed
    await pipeline.ingest(rest)  # the same call again: it works, like a clean run
    if rest is second:
        assert stable(await snapshot(store), since) == stable(await snapshot(other_store), since)
    assert index is None or len(index) > (indexed or 0)

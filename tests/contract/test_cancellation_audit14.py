"""Cancellation at every await point (fourteenth audit pass), on both backends.

A request timeout (``asyncio.wait_for``, ``asyncio.timeout``, a client disconnect) cancels
the task running a write. For each write entry point of the public API, the task is
cancelled at its k-th await point, for k = 1, 2, ... until the operation completes:
every public coroutine method of the store, index, ledger, embedder, extractor and
segmenter is wrapped so that its k-th call (counted across all of them) cancels the
running task

* ``before``: the call starts, the cancellation lands at once (nothing of it runs);
* ``after`` (plugins; on Postgres also the ``COMMIT``): the call completes, then the
  cancellation lands (on Postgres: the commit reached the server, its reply is lost);
* ``during`` (Postgres): the task is cancelled, then the call is made, so the
  cancellation lands inside its first suspension: the statement's network I/O.

After each cancelled run: the store, the outcome ledger and the gate audit log hold
exactly what they held before, or exactly what a complete run leaves (the operations that
document idempotent partial progress, re-embedding and a non-atomic import, may stop in
between); the in-memory index answers like one rebuilt from the store; on Postgres no
connection is checked out and no session of the database is ``idle in transaction``; and
the same operation run again (under the same pass locks) completes at once and leaves the
world of an uncancelled run.

To keep the module's runtime near a minute per backend, an operation with more await
points than a budget (``MEMORY_SAMPLES`` in memory, ``PG_SAMPLES`` on Postgres) is cut at
a sample of them: the first and last ones, the first, middle and last commit, and evenly
spaced ones between; ``after`` cuts only plugin calls (in memory) or commits (Postgres).
``CYCGRAPH_MEMORY_TEST_CANCEL_ALL=1`` lifts the budgets (every await point, both modes).

Bugs these tests found (each failed before its fix):

* ``reembed`` with an in-memory index: a run cancelled (or failing) after some batches
  committed left the index with the old vectors of the re-embedded records (it was only
  rebuilt at the end): searches disagreed with the store until the next full run;
* ``InMemoryMemoryIndex.rebuild`` swapped its vector tables in, then re-read the store
  for its text and name lookups after clearing them: a rebuild cancelled there left an
  index whose vector search saw the new records and whose text search saw none;
* ``purge`` with an in-memory index removed the erased ids from the index, then awaited
  a message read before writing the rewritten records back: cancelled in between, the
  index kept serving themes and facts as they were before the purge (erased text in
  theme labels included);
* a ``MemoryPipeline`` without an index (Postgres) caches the tenant's theme centroids:
  an ingest whose ``COMMIT`` reached the server but whose reply was lost to a
  cancellation skipped that cache's update, so the next ingest clustered against a stale
  view (the themes it merged away, the old centroids of those it moved);
* ``import_(defer_vector_indexes=True)`` on Postgres: a cancellation during the HNSW
  rebuild after the load left every tenant's vector indexes dropped for good.
"""

from __future__ import annotations

import asyncio
import inspect
import io
import os
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from cycgraph_memory import ConflictDetector, EntityResolver, Memory, MemoryConsolidator
from cycgraph_memory.demo import load_sample_messages
from cycgraph_memory.embeddings.hashing import HashingEmbeddingProvider
from cycgraph_memory.hierarchy.pipeline import MemoryPipeline
from cycgraph_memory.inmemory import InMemoryMemoryIndex, InMemoryMemoryStore
from cycgraph_memory.inmemory.ledger import InMemoryOutcomeLedger
from cycgraph_memory.lifecycle import export, import_, purge, reembed
from cycgraph_memory.records import GateAuditEntry, RunOutcome, SearchOptions
from cycgraph_memory.retention import evaluate_retention

from .factories import EMBED_DIM, at, make_entity, make_fact, unit
from .factories import stable as stable_times
from .test_consolidation_atomicity import seed as seed_passes

SKIP = frozenset({"transaction", "exclusive", "read_scope", "clear", "rebuild"})
# CYCGRAPH_MEMORY_TEST_CANCEL_ALL=1 cuts every await point on both backends (minutes).
EVERY = os.environ.get("CYCGRAPH_MEMORY_TEST_CANCEL_ALL") == "1"
PG_SAMPLES = 10**6 if EVERY else 5
MEMORY_SAMPLES = 10**6 if EVERY else 12
PASS_ID = uuid.UUID(int=14)
# A retrieval's touch_facts updates the store's counters, not the copies an in-memory index
# keeps (an uncancelled search already leaves them apart): left out of the index check.
TOUCHED = frozenset({"access_count", "last_accessed_at"})


# --------------------------------------------------------------------------- the world


@dataclass
class World:
    """One tenant's store, index and ledger, and the plugins an operation uses."""

    store: Any
    index: Any
    ledger: Any
    engine: Any = None
    embedder: HashingEmbeddingProvider = field(
        default_factory=lambda: HashingEmbeddingProvider(dimensions=EMBED_DIM)
    )
    pipeline: MemoryPipeline | None = None
    memory: Memory | None = None
    data: dict[str, Any] = field(default_factory=dict)

    def plugins(self) -> list[Any]:
        out: list[Any] = [self.embedder]
        if self.pipeline is not None:
            out += [self.pipeline.extractor, self.pipeline.segmenter]
        return out


@pytest.fixture
def committing(backend: str, request: pytest.FixtureRequest) -> str | None:
    """The DSN of the committing database on Postgres, ``None`` in memory."""
    return None if backend == "memory" else str(request.getfixturevalue("committing_dsn"))


@pytest_asyncio.fixture
async def worlds(committing: str | None) -> AsyncIterator[Callable[[], World]]:
    """Builds empty worlds: in memory, new objects; on Postgres, a new tenant each in the
    committing database (the operations really commit, on a pool of their own)."""
    if committing is None:
        yield lambda: World(
            InMemoryMemoryStore(expected_dimensions=EMBED_DIM),
            InMemoryMemoryIndex(expected_dimensions=EMBED_DIM),
            InMemoryOutcomeLedger(),
        )
        return
    from cycgraph_memory.postgres import (
        PostgresMemoryIndex,
        PostgresMemoryStore,
        PostgresOutcomeLedger,
        create_engine_from_dsn,
    )

    engine = create_engine_from_dsn(committing, pool_size=3)
    made: list[World] = []

    def make() -> World:
        tenant = f"cancel_{uuid.uuid4().hex[:10]}"
        made.append(
            World(
                PostgresMemoryStore(engine, tenant_id=tenant),
                PostgresMemoryIndex(engine, tenant_id=tenant),
                PostgresOutcomeLedger(engine, tenant_id=tenant),
                engine=engine,
            )
        )
        return made[-1]

    try:
        yield make
    finally:
        for w in made:
            await w.store.clear()
            await w.ledger.clear()
        await engine.dispose()


def stable(value: Any, since: datetime) -> Any:
    """``value`` with every time at or after ``since`` as "now" (two runs made at other
    moments stamp other ``created_at`` / ``updated_at``; all else must be equal) and every
    float rounded to 12 decimals: Postgres sums ``avg`` / ``var_samp`` in the order it reads
    the rows, and a cancelled statement's dead row can change that order, so two equal
    ledgers may give a mean that differs in its last bit."""
    return stable_times(value, since, float_digits=12)


async def state(w: World, since: datetime) -> dict[str, Any]:
    """Every record table, the tenant settings, the ledger, the gate audit log and the
    erasure log (an erasure entry's random id aside)."""
    s = w.store
    entities = await s.find_entities(include_invalidated=True)
    episodes = await s.list_episodes(include_invalidated=True)
    mids = [m.id for e in episodes for m in e.messages]
    keys = {k: await s.writer_key_ids(k) for k in w.data.get("keys", ())}
    erasures = [e.model_dump(exclude={"erasure_id"}) for e in await w.ledger.list_erasures()]
    return stable(
        {
            "entities": entities,
            "relationships": await s.find_relationships_for_entities(
                [e.id for e in entities], include_invalidated=True
            ),
            "episodes": episodes,
            "messages": await s.get_messages(mids),
            "facts": await s.find_facts(include_invalidated=True),
            "themes": await s.list_themes(include_invalidated=True),
            "calibration": await s.get_tenant_setting("theme-calibration"),
            "keys": keys,
            "stats": await w.ledger.list_fact_stats(),
            "baseline": await w.ledger.get_baseline(),
            "audit": await w.ledger.list_gate_audit(),
            "erasures": erasures,
        },
        since,
    )


async def index_view(index: Any) -> dict[str, Any]:
    """What an index answers: every vector search (all live records, several queries),
    the message search, BM25 fact search and entity-name matching. (Live records only:
    an incremental update drops a merged-away theme that a rebuild keeps, invalidated.)"""
    opts = SearchOptions(limit=1000)
    view: dict[str, Any] = {}
    for kind in ("entities", "facts", "themes", "episodes", "messages"):
        search = getattr(index, f"search_{kind}")
        view[kind] = [
            [
                (r.item.id, round(r.score, 5), r.item.model_dump(exclude=TOUCHED))
                for r in await search(unit(i), opts)
            ]
            for i in range(0, EMBED_DIM, 3)
        ]
    words = "Alice Bob Paris tea deploy noon the Acme project meeting Sarah"
    view["text"] = [
        (r.item.id, round(r.score, 5)) for r in await index.text_search_facts(words, opts)
    ]
    view["names"] = [e.id for e in await index.match_entity_names(words, limit=100)]
    return view


async def check_index_agrees(w: World, where: str) -> None:
    """The in-memory index answers like one rebuilt from the store now."""
    if not isinstance(w.index, InMemoryMemoryIndex):
        return
    fresh = InMemoryMemoryIndex(expected_dimensions=EMBED_DIM)
    await fresh.rebuild(w.store)
    assert await index_view(w.index) == await index_view(fresh), f"index stale: {where}"


async def check_connections(w: World, where: str) -> None:
    """No connection checked out, no session of the database idle in a transaction."""
    if w.engine is None:
        return
    from sqlalchemy import text

    assert w.engine.pool.checkedout() == 0, f"connection leaked: {where}"
    async with w.engine.connect() as conn:
        idle = (
            await conn.execute(
                text(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                    " AND state LIKE 'idle in transaction%' AND pid <> pg_backend_pid()"
                )
            )
        ).scalar_one()
    assert idle == 0, f"{idle} session(s) idle in transaction: {where}"


# --------------------------------------------------------------------------- the cut


class Cut:
    """Counts the calls of wrapped coroutine methods; cancels the task at call ``k``
    (``k = 0``: count only, and remember which calls were commits)."""

    def __init__(self, k: int, mode: str) -> None:
        self.k, self.mode = k, mode
        self.calls = 0
        self.fired: str | None = None
        self.commits: list[int] = []
        self.plugin_calls: list[int] = []
        self.task: asyncio.Task[Any] | None = None

    def install(self, m: pytest.MonkeyPatch, w: World) -> None:
        for target in (w.store, w.index, w.ledger):
            self._wrap_all(m, target, plugin=False)
        for target in w.plugins():
            self._wrap_all(m, target, plugin=True)
        if w.engine is not None:
            from sqlalchemy.ext.asyncio import AsyncSession

            commit = AsyncSession.commit
            cut = self

            async def counted_commit(session: AsyncSession) -> None:
                await cut.hit("COMMIT", lambda: commit(session), commit=True)

            m.setattr(AsyncSession, "commit", counted_commit)

    def _wrap_all(self, m: pytest.MonkeyPatch, target: Any, *, plugin: bool) -> None:
        for name in dir(target):
            if name.startswith("_") or name in SKIP:
                continue
            attr = getattr(target, name, None)
            label = f"{type(target).__name__}.{name}"
            if inspect.iscoroutinefunction(attr):
                m.setattr(target, name, self._wrapped(label, attr, plugin))
            elif inspect.isasyncgenfunction(attr):  # scan_facts & co: each page is one
                m.setattr(target, name, self._wrapped_pages(label, attr))

    def _wrapped(self, label: str, attr: Any, plugin: bool) -> Any:
        async def call(*args: Any, **kwargs: Any) -> Any:
            return await self.hit(label, lambda: attr(*args, **kwargs), plugin=plugin)

        return call

    def _wrapped_pages(self, label: str, attr: Any) -> Any:
        def pages(*args: Any, **kwargs: Any) -> Any:
            async def run() -> Any:
                it = attr(*args, **kwargs).__aiter__()
                while True:
                    try:
                        page = await self.hit(label, it.__anext__)
                    except StopAsyncIteration:
                        return
                    yield page

            return run()

        return pages

    async def hit(
        self,
        label: str,
        call: Callable[[], Awaitable[Any]],
        *,
        plugin: bool = False,
        commit: bool = False,
    ) -> Any:
        self.calls += 1
        if commit:
            self.commits.append(self.calls)
        if plugin:
            self.plugin_calls.append(self.calls)
        if self.calls != self.k:
            return await call()
        self.fired = f"{label} (await point {self.k}, {self.mode})"
        # The operation's task is cancelled, as a caller's timeout does; work it runs in a
        # task of its own (shielded) goes on.
        assert self.task is not None
        if self.mode == "before":
            self.task.cancel()
            await asyncio.sleep(0)  # lands here when this is the operation's task
            return await call()
        if self.mode == "during":
            self.task.cancel()
            return await call()
        try:
            result = await call()
        finally:  # a call that raised (a scan's last page) is cut after too
            self.task.cancel()
        await asyncio.sleep(0)
        return result


# --------------------------------------------------------------------------- scenarios


@dataclass
class Scenario:
    seed: Callable[[World], Awaitable[None]]
    op: Callable[[World], Awaitable[Any]]
    partial: bool = False  # documented idempotent partial progress (checkpointed batches)
    after: Callable[[World], Awaitable[Any]] | None = None  # a follow-up op, compared too
    scrub: Callable[[Any], Any] | None = None  # ids the operation draws at random
    # False: the operation takes no index (the gate): an in-memory index keeps the fact
    # copies it had, which retrieval reads again from the store (retrieve._current_facts).
    indexed: bool = True


def _halves() -> tuple[list[Any], list[Any], list[Any]]:
    msgs = load_sample_messages()
    return msgs[:6], msgs[6:12], msgs[12:18]


def _pipeline(w: World) -> MemoryPipeline:
    if w.pipeline is None:
        # The in-memory index when there is one; on Postgres no index (the pipeline
        # then keeps its own view of the theme centroids).
        index = w.index if isinstance(w.index, InMemoryMemoryIndex) else None
        w.pipeline = MemoryPipeline(w.store, index=index, embedder=w.embedder)
    return w.pipeline


def _memory(w: World) -> Memory:
    if w.memory is None:
        w.memory = Memory(
            w.store,
            w.index,
            embedder=w.embedder,
            ledger=w.ledger,
            tenant=getattr(w.store, "tenant_id", "t1"),
        )
    return w.memory


async def _seed_ingested(w: World) -> None:
    first, _, _ = _halves()
    await _pipeline(w).ingest(first)
    await _index_all(w)


async def _index_all(w: World) -> None:
    if isinstance(w.index, InMemoryMemoryIndex):
        await w.index.rebuild(w.store)


async def _seed_passes(w: World) -> None:
    # The same records in every world: ids must match between worlds to compare them.
    if "records" not in w.data:
        scratch = InMemoryMemoryStore(expected_dimensions=EMBED_DIM)
        await seed_passes(scratch)
        w.data["records"] = await _dump(scratch)
    await _load(w, w.data["records"])


async def _dump(store: Any) -> dict[str, Any]:
    entities = await store.find_entities(include_invalidated=True)
    return {
        "entities": entities,
        "relationships": await store.find_relationships_for_entities(
            [e.id for e in entities], include_invalidated=True
        ),
        "facts": await store.find_facts(include_invalidated=True),
        "themes": await store.list_themes(include_invalidated=True),
        "episodes": await store.list_episodes(include_invalidated=True),
    }


async def _load(w: World, records: dict[str, Any]) -> None:
    await w.store.put_entities(records["entities"])
    await w.store.put_relationships(records["relationships"])
    await w.store.put_episodes(records["episodes"])
    await w.store.put_facts([f.model_copy(update={"theme_id": None}) for f in records["facts"]])
    await w.store.put_themes(records["themes"])
    await w.store.put_facts(records["facts"])
    await _index_all(w)


async def _seed_conflicts(w: World) -> None:
    """The pass seed with its entities resolved: facts then share entities (conflicts)."""
    await _seed_passes(w)
    await EntityResolver(w.store, index=w.index, clock=lambda: at(days=20)).resolve()


async def _seed_outcomes(w: World) -> None:
    """Ingested facts with run outcomes and a gate audit row; two agent lessons."""
    await _seed_ingested(w)
    lessons = w.data.setdefault(
        "lessons",
        [
            make_fact(
                content=f"lesson {i}: retry the deploy",
                tags=["lesson", "candidate"],
                embedding=unit(i),
                provenance={"source": "agent", "run_id": f"run-{i}"},
                valid_from=at(i),
            )
            for i in range(2)
        ],
    )
    await w.store.put_facts(lessons)
    await _index_all(w)
    facts = [f.id for f in await w.store.find_facts()]
    for i in range(12):
        # lesson 0 in the odd runs (scored high), lesson 1 in runs 0, 4, 8 (scored low)
        used = [lessons[0].id] if i % 2 else [lessons[1].id] if i % 4 == 0 else []
        score = 0.9 if i % 2 else 0.05 if i % 4 == 0 else 0.5 + i / 100
        await w.ledger.record_outcome(
            RunOutcome(run_id=f"r{i}", score=score, fact_ids=used + facts[:1], recorded_at=at(i))
        )
    await w.ledger.append_gate_audit(
        [
            GateAuditEntry(
                pass_id=uuid.UUID(int=1),
                fact_id=facts[0],
                verdict="held",
                reason="few-trials",
                trials=1,
                policy={},
                decided_at=at(0),
            )
        ]
    )


async def _ingest(w: World) -> Any:
    return await _pipeline(w).ingest(_halves()[1])


async def _ingest_many(w: World) -> Any:
    second = _halves()[1]
    return await _pipeline(w).ingest_many([second[:3], second[3:]])


async def _ingest_echo(w: World) -> Any:
    """The second part said again (new message ids, nearly the same words): its facts
    are near the themes the cancelled ingest wrote, so they may join those themes."""
    again = [
        m.model_copy(
            update={
                "id": uuid.uuid5(uuid.NAMESPACE_URL, str(m.id)),
                "content": m.content.replace(".", ", again.", 1),
            }
        )
        for m in _halves()[1]
    ]
    return await _pipeline(w).ingest(again)


async def _consolidate(w: World) -> Any:
    return await MemoryConsolidator(w.store, w.index, max_facts=2, max_episodes=1).consolidate()


async def _resolve_entities(w: World) -> Any:
    return await EntityResolver(w.store, index=w.index).resolve()


async def _resolve_conflicts(w: World) -> Any:
    detector = ConflictDetector(w.store, w.index, policy="supersede-on-newer")
    return await detector.auto_resolve_all(await detector.detect_conflicts())


async def _purge(w: World) -> Any:
    erased = [m.id for m in _halves()[0][1:4]]
    return await purge(w.store, index=w.index, ledger=w.ledger, message_ids=erased)


async def _erase_run(w: World) -> Any:
    return await _memory(w).erase(run_id="run-0")


async def _reembed(w: World) -> Any:
    provider = HashingEmbeddingProvider(dimensions=EMBED_DIM, seed=7)
    return await reembed(w.store, provider, index=w.index, batch_size=3)


async def _export_text(w: World) -> str:
    buffer = io.StringIO()
    await export(w.store, buffer)
    return buffer.getvalue()


async def _seed_export(w: World) -> None:
    if "export" not in w.data:
        scratch = World(
            InMemoryMemoryStore(expected_dimensions=EMBED_DIM), None, InMemoryOutcomeLedger()
        )
        await _seed_ingested(scratch)
        w.data["export"] = await _export_text(scratch)
    await w.store.put_entity(
        make_entity(
            id=uuid.UUID(int=99),
            name="already here",
            embedding=unit(0),
            created_at=at(0),
            updated_at=at(0),
        )
    )
    await _index_all(w)


def _import(atomic: bool) -> Callable[[World], Awaitable[Any]]:
    async def run(w: World) -> Any:
        return await import_(
            w.store, io.StringIO(w.data["export"]), index=w.index, batch_size=5, atomic=atomic
        )

    return run


async def _gate(w: World) -> Any:
    return await evaluate_retention(
        w.store,
        w.ledger,
        {"min_trials": 3, "decision_rule": "margin"},
        pass_id=PASS_ID,
        clock=lambda: at(days=30),
    )


async def _record_outcome(w: World) -> Any:
    lessons = w.data["lessons"]
    return await w.ledger.record_outcome(
        RunOutcome(
            run_id="r-new",
            score=0.95,
            fact_ids=[lessons[0].id, lessons[1].id],
            recorded_at=at(50),
        )
    )


async def _seed_remember(w: World) -> None:
    w.data["keys"] = ["run-9:node:0"]
    await _seed_ingested(w)


REMEMBERED = "always pin the base image"


def _scrub_remembered(st: Any) -> Any:
    """The remembered fact's id is random: name it "new" wherever it appears."""
    new = {f["id"] for f in st["facts"] if f["content"] == REMEMBERED}

    def scrub(v: Any) -> Any:
        if isinstance(v, dict):
            return {k: scrub(x) for k, x in v.items()}
        if isinstance(v, list):
            return [scrub(x) for x in v]
        return "new" if isinstance(v, uuid.UUID) and v in new else v

    return scrub(st)


async def _remember(w: World) -> Any:
    return await _memory(w).remember(REMEMBERED, idempotency_key="run-9:node:0", run_id="run-9")


async def _seed_forget(w: World) -> None:
    await _seed_ingested(w)
    if "forget" not in w.data:
        w.data["forget"] = [f.id for f in await w.store.find_facts()][:4]


async def _forget(w: World) -> Any:
    return await _memory(w).forget(w.data["forget"])


async def _search(w: World) -> Any:
    """A retrieval touches the facts it serves (access counts): a write too."""
    return await _memory(w).search("Who leads the platform team at Acme?", limit=5)


async def _add(w: World) -> Any:
    return await _memory(w).add(_halves()[1], run_id="run-add")


SCENARIOS: dict[str, Scenario] = {
    "ingest": Scenario(_seed_ingested, _ingest, after=_ingest_echo),
    # Batches commit one by one (pipeline.md): a cancelled call may stop between two.
    "ingest-many": Scenario(_seed_ingested, _ingest_many, partial=True),
    "memory-add": Scenario(_seed_ingested, _add),
    "consolidate": Scenario(_seed_passes, _consolidate),
    "resolve-entities": Scenario(_seed_passes, _resolve_entities),
    "resolve-conflicts": Scenario(_seed_conflicts, _resolve_conflicts),
    "purge": Scenario(_seed_outcomes, _purge),
    "memory-erase": Scenario(_seed_outcomes, _erase_run),
    "reembed": Scenario(_seed_ingested, _reembed, partial=True),
    "import-atomic": Scenario(_seed_export, _import(True)),
    "import-batched": Scenario(_seed_export, _import(False), partial=True),
    "gate-pass": Scenario(_seed_outcomes, _gate, indexed=False),
    "record-outcome": Scenario(_seed_outcomes, _record_outcome),
    "memory-remember": Scenario(_seed_remember, _remember, scrub=_scrub_remembered),
    "memory-forget": Scenario(_seed_forget, _forget),
    "memory-search": Scenario(_seed_ingested, _search),
}


# --------------------------------------------------------------------------- the sweep


def _sample(total: int, commits: list[int], budget: int) -> list[int]:
    """Await points to cut: all of them up to ``budget``, else the first and last ones,
    the first, middle and last COMMIT and evenly spaced ones between (about ``budget``)."""
    if total <= budget:
        return list(range(1, total + 1))
    picked = {1, 2, total - 1, total}
    if commits:
        picked |= {commits[0], commits[len(commits) // 2], commits[-1]}
    step = max(1, total // max(1, budget - 4))
    picked |= set(range(3, total - 1, step))
    return sorted(k for k in picked if 1 <= k <= total)


async def settle(existing: set[asyncio.Task[Any]]) -> None:
    """Let work the operation left running in tasks of their own (shielded) finish."""
    others = asyncio.all_tasks() - existing - {asyncio.current_task()}
    if others:
        async with asyncio.timeout(20):
            await asyncio.wait(others)


async def _run(scn: Scenario, w: World, cut: Cut | None, monkeypatch: pytest.MonkeyPatch) -> bool:
    """Run the operation in a task of its own (as a request handler would); True when it
    was cancelled."""
    with monkeypatch.context() as m:
        if cut is not None:
            cut.install(m, w)
        existing = asyncio.all_tasks()
        task = asyncio.create_task(scn.op(w))
        if cut is not None:
            cut.task = task
        try:
            async with asyncio.timeout(30):
                await task
        except asyncio.CancelledError:
            assert task.cancelled()
            assert cut is not None and cut.fired, "cancelled with no cut"
            await settle(existing)
            return True
    assert cut is None or cut.fired is None, f"cancellation swallowed at {cut.fired}"
    return False


async def _finish(
    scn: Scenario, w: World, state_of: Callable[[World], Awaitable[Any]]
) -> dict[str, Any]:
    """Run the operation again (no lock may still be held: it must not wait), then the
    follow-up; return the world."""
    async with asyncio.timeout(20):
        await scn.op(w)
        if scn.after is not None:
            await scn.after(w)
    return await state_of(w)


async def sweep(
    name: str, worlds: Callable[[], World], monkeypatch: pytest.MonkeyPatch, modes: list[str]
) -> dict[str, int]:
    scn = SCENARIOS[name]
    since = datetime.now(UTC)

    async def state_of(w: World) -> Any:
        st = await state(w, since)
        return st if scn.scrub is None else scn.scrub(st)

    shared: dict[str, Any] = {}

    async def fresh() -> World:
        w = worlds()
        w.data = dict(shared)
        await scn.seed(w)
        shared.update(w.data)
        return w

    clean = await fresh()
    seeded = await state_of(clean)
    counting = Cut(0, "count")
    assert not await _run(scn, clean, counting, monkeypatch)
    whole = await state_of(clean)
    assert whole != seeded, "the operation changes nothing: the test could not fail"
    if scn.after is not None:
        await scn.after(clean)
    final = await state_of(clean)
    if scn.indexed:
        await check_index_agrees(clean, "uncancelled run")
    total = counting.calls
    twice: list[Any] = []

    async def final_after_a_complete_run() -> Any:
        """The world of two runs (the first one completed although cancelled)."""
        if not twice:
            w = await fresh()
            await scn.op(w)
            twice.append(await _finish(scn, w, state_of))
        return twice[0]

    outcomes = {"nothing": 0, "all": 0, "partial": 0}
    for mode in modes:
        budget = MEMORY_SAMPLES if clean.engine is None else PG_SAMPLES
        ks = _sample(total, counting.commits, budget)
        if mode == "after":  # plugins in memory (a store call there never suspends), the
            # COMMITs on Postgres (elsewhere "after" call k is "during" call k + 1)
            cuts = counting.plugin_calls if clean.engine is None else counting.commits
            ks = sorted({*cuts[:: max(1, len(cuts) // max(1, budget // 3))], *cuts[-1:]})
        for k in ks:
            w = await fresh()
            before = await state_of(w)
            cut = Cut(k, mode)
            cancelled = await _run(scn, w, cut, monkeypatch)
            where = f"{name}: {cut.fired}"
            assert cancelled, f"{name}: await point {k} of {total} not reached"
            await check_connections(w, where)
            now = await state_of(w)
            if now == before:
                outcomes["nothing"] += 1
            elif now == whole:
                outcomes["all"] += 1
            else:
                assert scn.partial, f"half-written: {where}"
                outcomes["partial"] += 1
            if scn.indexed:
                await check_index_agrees(w, where)
            # The world of one complete run, or of two when the cancelled one completed. (A
            # COMMIT cancelled in flight on Postgres may become visible only after the
            # snapshot above: its outcome is unknown to the caller, either is right.)
            again = await _finish(scn, w, state_of)
            if again != final or now == whole:
                assert again == await final_after_a_complete_run(), f"re-run differs: {where}"
            if scn.indexed:
                await check_index_agrees(w, f"re-run after {where}")
            await check_connections(w, f"re-run after {where}")
    assert outcomes["nothing"] > 0, (total, outcomes)
    return outcomes


@pytest.mark.parametrize("name", list(SCENARIOS))
async def test_an_operation_cancelled_at_any_await_point_is_all_or_nothing(
    name: str, worlds: Callable[[], World], monkeypatch: pytest.MonkeyPatch, backend: str
) -> None:
    modes = ["before", "after"] if backend == "memory" else ["during", "after"]
    await sweep(name, worlds, monkeypatch, modes)


async def test_an_export_cancelled_anywhere_leaves_the_file_as_it_was(
    worlds: Callable[[], World], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """``export`` to a path writes a temporary file renamed over the target at the end:
    cancelled at any await point, the target keeps its old content and no temporary file
    is left beside it."""
    w = worlds()
    await _seed_ingested(w)
    target = tmp_path / "memory.jsonl"
    target.write_text("old content\n")
    counting = Cut(0, "count")
    with monkeypatch.context() as m:
        counting.install(m, w)
        await export(w.store, target, page_size=4)
    whole = target.read_text()
    for k in range(1, counting.calls + 1):
        target.write_text("old content\n")
        cut = Cut(k, "before")
        with monkeypatch.context() as m:
            cut.install(m, w)
            existing = asyncio.all_tasks()
            task = asyncio.create_task(export(w.store, target, page_size=4))
            cut.task = task
            with pytest.raises(asyncio.CancelledError):
                await task
            await settle(existing)
        assert target.read_text() == "old content\n", cut.fired
        assert sorted(os.listdir(tmp_path)) == ["memory.jsonl"], cut.fired
        await check_connections(w, str(cut.fired))
    await export(w.store, target, page_size=4)
    assert target.read_text() == whole


async def test_an_index_rebuild_cancelled_anywhere_leaves_the_index_as_it_was(
    worlds: Callable[[], World], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``InMemoryMemoryIndex.rebuild`` over a store that awaits (Postgres, or any store of
    the user's): cancelled while it reads, the index answers as before the rebuild. It
    used to swap its vector tables in, then clear and re-read its text, name and message
    lookups: cancelled there, vector search saw the new records and text search none."""
    w = worlds()
    await _seed_ingested(w)
    index = InMemoryMemoryIndex(expected_dimensions=EMBED_DIM)
    await index.rebuild(w.store)
    await _pipeline(w).ingest(_halves()[1])  # the store moves on: a rebuild changes a lot
    before = await index_view(index)
    fresh = InMemoryMemoryIndex(expected_dimensions=EMBED_DIM)
    await fresh.rebuild(w.store)
    assert await index_view(fresh) != before
    counting = Cut(0, "count")
    with monkeypatch.context() as m:
        counting.install(m, w)
        await InMemoryMemoryIndex(expected_dimensions=EMBED_DIM).rebuild(w.store)
    assert counting.calls >= 6
    mode = "before" if w.engine is None else "during"
    for k in range(1, counting.calls + 1):
        cut = Cut(k, mode)
        with monkeypatch.context() as m:
            cut.install(m, w)
            task = asyncio.create_task(index.rebuild(w.store))
            cut.task = task
            with pytest.raises(asyncio.CancelledError):
                await task
        assert cut.fired
        assert await index_view(index) == before, cut.fired
    await index.rebuild(w.store)
    assert await index_view(index) == await index_view(fresh)


@pytest.mark.parametrize("backend", ["postgres"])  # in memory a commit never awaits
async def test_an_ingest_whose_commit_reply_is_lost_keeps_the_pipelines_theme_view(
    worlds: Callable[[], World], monkeypatch: pytest.MonkeyPatch, backend: str
) -> None:
    """A pipeline without an index keeps the tenant's theme centroids in memory. On
    Postgres, a cancellation landing as the ingest's ``COMMIT`` returns (the data is
    committed, the task sees ``CancelledError``) used to skip the update of that view: it
    kept the themes the ingest merged away and the old centroids of those it moved, and
    the next ingest clustered against them. Now the view is read again from the store."""
    from cycgraph_memory.hierarchy._theme_candidates import ThemeNeighbours

    counting, other = Cut(0, "count"), worlds()  # where the ingest's COMMIT is
    await _seed_ingested(other)
    with monkeypatch.context() as m:
        counting.install(m, other)
        await _ingest(other)
    assert counting.commits
    w = worlds()
    await _seed_ingested(w)
    pipeline = _pipeline(w)
    cut = Cut(counting.commits[-1], "after")
    with monkeypatch.context() as m:
        cut.install(m, w)
        task = asyncio.create_task(pipeline.ingest(_halves()[1]))
        cut.task = task
        with pytest.raises(asyncio.CancelledError):
            await task
    assert cut.fired
    said = [m.id for m in _halves()[1]]
    assert len(await w.store.get_messages(said)) == len(said)  # the ingest committed
    live = await w.store.list_themes()
    view = pipeline._neighbours
    assert view is not None
    if not view.loaded:  # what the next ingest does first
        await view.load(w.store)
    fresh = ThemeNeighbours()
    await fresh.load(w.store)
    for theme in live:
        assert theme.embedding is not None
        assert view.search(theme.embedding, 100, None) == fresh.search(theme.embedding, 100, None)


@pytest.mark.parametrize("backend", ["postgres"])  # the in-memory rollback never awaits
@pytest.mark.parametrize("name", ["ingest", "consolidate", "purge", "gate-pass", "memory-forget"])
async def test_a_second_cancellation_during_the_rollback_leaks_nothing(
    name: str, worlds: Callable[[], World], monkeypatch: pytest.MonkeyPatch, backend: str
) -> None:
    """A caller's timeout and a client disconnect may both cancel the task: the second
    cancellation lands while the first one's rollback is in flight. The connection still
    goes back to the pool, no session stays idle in a transaction, nothing is written and
    the operation runs again at once."""
    from sqlalchemy.ext.asyncio import AsyncSession

    scn = SCENARIOS[name]
    since = datetime.now(UTC)
    counting, w = Cut(0, "count"), worlds()
    await scn.seed(w)
    shared = dict(w.data)
    with monkeypatch.context() as m:
        counting.install(m, w)
        await scn.op(w)
    whole = await state(w, since)
    rollback = AsyncSession.rollback
    again: list[asyncio.Task[Any]] = []

    def cancelling_rollback(cut: Cut) -> Any:
        async def cancelled_rollback(session: AsyncSession) -> None:
            if cut.fired and cut.task is not None and cut.task not in again:
                again.append(cut.task)
                cut.task.cancel()
            await rollback(session)

        return cancelled_rollback

    for k in _sample(counting.calls, counting.commits, PG_SAMPLES):
        w = worlds()
        w.data = dict(shared)
        await scn.seed(w)
        before = await state(w, since)
        cut = Cut(k, "during")
        with monkeypatch.context() as m:
            cut.install(m, w)
            m.setattr(AsyncSession, "rollback", cancelling_rollback(cut))
            existing = asyncio.all_tasks()
            task = asyncio.create_task(scn.op(w))
            cut.task = task
            with pytest.raises(asyncio.CancelledError):
                async with asyncio.timeout(30):
                    await task
            await settle(existing)
        where = f"{name}: {cut.fired}, cancelled again in the rollback: {cut.task in again}"
        await check_connections(w, where)
        assert await state(w, since) in (before, whole), where
        async with asyncio.timeout(20):
            await scn.op(w)
        await check_connections(w, f"re-run after {where}")
    assert again, "no rollback was cancelled"


async def test_an_ingest_cancelled_while_a_plugin_waits_inside_its_transaction(
    worlds: Callable[[], World],
) -> None:
    """The clusterer runs inside the ingest's transaction (pass locks held, on Postgres a
    connection checked out and a transaction open). One that waits (an LLM-backed
    clusterer, say) is cancelled there: nothing is written, the connection is back in the
    pool with no transaction open, and the locks are free (the next ingest does not wait)."""
    from cycgraph_memory.hierarchy.clustering import ConsolidatingThemeClusterer

    waiting, never = asyncio.Event(), asyncio.Event()

    class WaitingClusterer(ConsolidatingThemeClusterer):
        async def cluster(self, *args: Any, **kwargs: Any) -> Any:
            waiting.set()
            await never.wait()
            raise AssertionError("never set")  # pragma: no cover

    since = datetime.now(UTC)
    w = worlds()
    await _seed_ingested(w)
    before = await state(w, since)
    index = w.index if isinstance(w.index, InMemoryMemoryIndex) else None
    stuck = MemoryPipeline(w.store, index=index, embedder=w.embedder, clusterer=WaitingClusterer())
    task = asyncio.create_task(stuck.ingest(_halves()[1]))
    async with asyncio.timeout(20):
        await waiting.wait()
    if w.engine is not None:
        assert w.engine.pool.checkedout() >= 1  # the transaction is open
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await check_connections(w, "cancelled in the clusterer")
    assert await state(w, since) == before
    await check_index_agrees(w, "cancelled in the clusterer")
    async with asyncio.timeout(20):  # the pass locks are free
        await _pipeline(w).ingest(_halves()[1])
    await check_connections(w, "the next ingest")
    await check_index_agrees(w, "the next ingest")


@pytest.mark.parametrize("name", ["consolidate", "gate-pass", "purge"])
async def test_a_pass_cancelled_while_it_waits_for_a_lock_leaves_no_trace(
    name: str, worlds: Callable[[], World]
) -> None:
    """Another worker holds the pass's locks; the pass waits (on Postgres inside
    ``pg_advisory_xact_lock``, a statement in flight) and is cancelled there. The holder
    is not disturbed, nothing is written, no connection or transaction is left behind, and
    once the holder is done the pass runs at once."""
    from cycgraph_memory._exclusive import PASS_LOCK_ORDER, exclusive_passes

    scn = SCENARIOS[name]
    since = datetime.now(UTC)
    w = worlds()
    await scn.seed(w)
    before = await state(w, since)
    holding, release = asyncio.Event(), asyncio.Event()

    async def holder() -> None:
        async with exclusive_passes(w.store, *PASS_LOCK_ORDER):
            holding.set()
            await release.wait()

    held = asyncio.create_task(holder())
    async with asyncio.timeout(20):
        await holding.wait()
    waiter = asyncio.create_task(scn.op(w))
    await asyncio.sleep(0.3)
    assert not waiter.done()  # it waits for the lock
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert not held.done()
    release.set()
    await held
    await check_connections(w, f"{name} cancelled waiting for the lock")
    assert await state(w, since) == before
    if scn.indexed:
        await check_index_agrees(w, f"{name} cancelled waiting for the lock")
    async with asyncio.timeout(20):
        await scn.op(w)
    await check_connections(w, f"{name} run again")
    if scn.indexed:
        await check_index_agrees(w, f"{name} run again")


@pytest.mark.parametrize("backend", ["postgres"])  # the in-memory index has no HNSW index
async def test_an_import_cancelled_while_it_rebuilds_the_vector_indexes_rebuilds_them(
    worlds: Callable[[], World], monkeypatch: pytest.MonkeyPatch, backend: str
) -> None:
    """``import_(..., defer_vector_indexes=True)`` drops the HNSW indexes of the vector
    tables (every tenant's) for the load and builds them again after it, the longest step
    of a large import. A caller's timeout expiring during that build cancelled it: the
    indexes stayed dropped for good (every vector search of every tenant an exact scan,
    and no later deferral knew them any more). The build is now shielded: the caller gets
    its ``CancelledError`` and the indexes are all back once the build finishes."""
    from sqlalchemy import text
    from sqlalchemy.ext.asyncio import AsyncConnection

    w = worlds()
    await _seed_export(w)

    async def hnsw() -> list[str]:
        async with w.engine.connect() as conn:
            rows = await conn.execute(
                text(
                    "SELECT indexname FROM pg_indexes WHERE schemaname = current_schema()"
                    " AND indexdef ILIKE '%USING hnsw%' ORDER BY indexname"
                )
            )
            return [str(r[0]) for r in rows]

    indexes = await hnsw()
    assert indexes
    builds: list[str] = []
    execute = AsyncConnection.exec_driver_sql
    task: asyncio.Task[Any] | None = None

    async def cancelled_build(conn: AsyncConnection, statement: str, *args: Any) -> Any:
        if "CREATE INDEX" in statement and task is not None and not builds:
            builds.append(statement)
            task.cancel()  # the caller's timeout expires during the first build
        return await execute(conn, statement, *args)

    existing = asyncio.all_tasks()
    with monkeypatch.context() as m:
        m.setattr(AsyncConnection, "exec_driver_sql", cancelled_build)
        task = asyncio.create_task(
            import_(w.store, io.StringIO(w.data["export"]), defer_vector_indexes=True, atomic=False)
        )
        with pytest.raises(asyncio.CancelledError):
            await task
        assert builds
        await settle(existing)
    assert await hnsw() == indexes
    await check_connections(w, "import cancelled while building the HNSW indexes")

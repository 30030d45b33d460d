"""Differential test of the FRONT DOORS: the facade, the CLI and the adapters on both backends.

``test_differential_sequences.py`` compares store operations and
``test_differential_pipeline.py`` the algorithms. This test compares what a user meets:

* the ``Memory`` facade, opened with ``Memory.open("memory://", ...)`` and with
  ``Memory.open(<postgres url>, ..., migrate=True)`` (a database of this module's own,
  created by the first open; one tenant per seed). For a few fixed seeds the same chat
  (people with names, jobs, "no longer works at", moves, dates, preferences, repeated
  statements) is added in batches of 2-8 messages, as dicts or ``Message`` records, with
  tags and run ids, sometimes re-adding an earlier batch; agents ``remember`` lessons
  (tags, ``candidate``, idempotency keys, run / agent ids); ``search`` runs in every
  mode with tags, ``valid_at``, limits, ``min_similarity``, ``include_invalidated``,
  by entity and as a tag listing; ``forget`` soft-deletes facts (with repeats and
  unknown ids); ``erase`` purges by run, agent and source (dry run first); bad input
  of every documented kind is fed to every method. After every step the return value
  (reports, ids, ordered results, ``SearchResult.prompt``), the error type, ``stats()``
  and the whole stored state (export of every record, soft-deleted ones included, and
  every message sent) must be equal, and a refused call must change nothing;
* the integration adapters over each facade's store / index / embedder:
  ``memory_writer`` (same input -> same stored records, same idempotency),
  ``memory_retriever`` (same plain dicts for every query shape) and
  ``render_memory_section`` (same block);
* the ``cycgraph-memory`` command. Its data persists only on Postgres (each invocation
  opens a fresh memory, so ``--dsn memory://`` forgets everything at exit), so the CLI's
  ``ingest`` / ``stats`` / ``search`` JSON on a Postgres tenant is compared with the
  in-memory facade fed the same messages, a single ``ingest`` is compared on both DSNs,
  and bad arguments must exit non-zero with one line on stderr and change nothing.

Ids the library draws at random (the lesson ids ``remember`` / ``memory_writer`` create,
a purge's ``erasure_id``) are compared through labels: the n-th id created on one
backend must appear wherever the n-th id of the other does. Normalised as in the other
differential tests, and only for documented differences: floats within 1e-5 (Postgres
keeps float32 vectors), wall-clock stamps by presence, and ``stats().index`` (vectors held
in memory vs bytes on disk for the Postgres HNSW indexes, docs/records: ``MemoryStats``).

A failure names the seed and the steps; ``CYCGRAPH_DIFF_SEED=<seed>`` re-runs one seed.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import secrets
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from unittest import mock

import pytest
import pytest_asyncio

from cycgraph_memory import Memory, integration
from cycgraph_memory.integration import (
    memory_retriever,
    memory_writer,
    render_memory_section,
)
from cycgraph_memory.lifecycle.export import export_lines
from cycgraph_memory.records import Message, Provenance, SemanticFact

from ._differential import COMPANIES, PEOPLE, Scenario, Window, differ, dump

pytestmark = pytest.mark.postgres

SEEDS = [5, 13]
SESSIONS = 8
DIM = 64
LESSONS = [
    "Retry a flaky deploy once before paging.",
    "Ask Maya before touching the billing schema.",
    "Summarise long threads before answering.",
    "Never promise dates for the Globex migration.",
    "Prefer the staging cluster for load tests.",
    "Check the Initech contract before quoting prices.",
]
T0 = datetime(2025, 2, 3, 9, 0, tzinfo=UTC)
WORDS = [*PEOPLE, *COMPANIES, "work", "moved", "love", "deploy", "billing", "tea", "jazz",
         "Maya's", "don't", "no longer", "tea!", "Acme Corp.", "LISBON?"]


# --------------------------------------------------------------------------- fixtures


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def front_dsn(pg_databases: Any) -> str:
    """An EMPTY database of this module's own: the first ``Memory.open`` migrates it."""
    return str(await pg_databases.create("diff_front"))


async def _pair(dsn: str, tenant: str) -> tuple[Memory, Memory]:
    mem = await Memory.open("memory://", tenant=tenant, embedding_dim=DIM)
    pg = await Memory.open(dsn, tenant=tenant, migrate=True, embedding_dim=DIM)
    return mem, pg


@pytest_asyncio.fixture
async def pair(front_dsn: str) -> AsyncIterator[tuple[Memory, Memory]]:
    """One facade per backend on a fresh tenant; the Postgres tenant is erased after."""
    mem, pg = await _pair(front_dsn, f"front_{secrets.token_hex(5)}")
    try:
        yield mem, pg
    finally:
        await pg.store.clear()
        if pg.ledger is not None:
            await pg.ledger.clear()
        await pg.close()
        await mem.close()


# --------------------------------------------------------------------------- labels


class Labels:
    """Random ids of one backend as labels shared by both (``new-0``, ``new-1``, ...)."""

    def __init__(self) -> None:
        self.by_id: dict[str, str] = {}
        self.by_label: dict[str, str] = {}

    def learn(self, value: uuid.UUID | str, label: str) -> None:
        text = str(value)
        known = self.by_id.get(text)
        assert known in (None, label), f"id {text} already labelled {known}, now {label}"
        self.by_id[text] = label
        self.by_label[label] = text

    def id(self, label: str) -> str:
        """The backend's id for ``label`` (a deterministic id is its own label)."""
        return self.by_label.get(label, label)

    def apply(self, value: Any) -> Any:
        """``value`` (normalised JSON-like data) with every known id as its label."""
        if isinstance(value, dict):
            return {self.apply(k): self.apply(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self.apply(v) for v in value]
        if isinstance(value, str):
            if value in self.by_id:
                return self.by_id[value]
            head, sep, tail = value.partition(":")  # "fact:<id>" keys of the state
            if sep and tail in self.by_id:
                return f"{head}:{self.by_id[tail]}"
        return value


class Side:
    """One backend's facade and what the test learned about it."""

    def __init__(self, name: str, memory: Memory) -> None:
        self.name = name
        self.memory = memory
        self.labels = Labels()
        self.created = 0  # random ids seen so far, in creation order

    def label_new(self, ids: list[str]) -> None:
        """Label the ids a write returned that are not labelled yet, in order."""
        for i in ids:
            if i not in self.labels.by_id:
                self.labels.learn(i, f"new-{self.created}")
                self.created += 1


# --------------------------------------------------------------------------- observation


def _strip_index(stats: dict[str, Any]) -> dict[str, Any]:
    # Documented difference: vectors held in memory vs bytes on disk (MemoryStats.index).
    return {k: v for k, v in stats.items() if k != "index"}


async def _state(side: Side, sent: list[Message], window: Window) -> Any:
    """Every stored record (soft-deleted ones too), every message sent, and the stats."""
    records: dict[str, Any] = {}
    async for line in export_lines(side.memory.store):
        row = json.loads(line)
        kind = row.get("type")
        if kind in (None, "end"):
            continue
        record = row.get("record", row)
        records[f"{kind}:{record.get('id')}"] = record
    messages = await side.memory.store.get_messages([m.id for m in sent])
    events: list[Any] = []
    stats = (await side.memory.stats(progress=events.append)).model_dump(mode="json")
    stats["progress"] = [[e.operation, e.stage, e.done, e.total] for e in events]
    data = dump(
        {
            "records": records,
            "messages": {str(k): v for k, v in messages.items()},
            "stats": _strip_index(stats),
        },
        window,
    )
    data = side.labels.apply(data)
    data["records"] = dict(sorted(data["records"].items()))
    data["messages"] = dict(sorted(data["messages"].items()))
    return data


async def _outcome(call: Callable[[Side], Awaitable[Any]], side: Side) -> list[Any]:
    try:
        return ["ok", await call(side)]
    except Exception as exc:  # the error TYPE is what both backends must agree on
        return ["error", type(exc).__name__]


Step = tuple[str, Callable[[Side], Awaitable[Any]]]


class Driver:
    """Applies one seed's steps to both facades and compares after each."""

    def __init__(self, seed: int, mem: Memory, pg: Memory) -> None:
        self.seed = seed
        self.mem = Side("memory", mem)
        self.pg = Side("postgres", pg)
        self.scenario = Scenario(seed)
        self.rng = random.Random(seed * 31 + 7)
        self.window = Window()
        self.log: list[str] = []
        self.batches: list[list[Message]] = []
        self.runs = 0
        self.lessons = 0
        self.remember_calls = 0  # seeds the ids of the facts remember writes
        self.keys: list[str] = []

    # ---------------------------------------------------------------- comparing

    def check(self, label: str, mine: Any, theirs: Any) -> None:
        found = differ(mine, theirs)
        if found is not None:
            trail = "\n".join(f"  {i:3d}. {line}" for i, line in enumerate(self.log))
            raise AssertionError(
                f"{label}: memory vs postgres differ at {found[:800]}\n(seed={self.seed}; re-run "
                f"with CYCGRAPH_DIFF_SEED={self.seed})\nsteps:\n{trail}"
            )

    async def apply(
        self, desc: str, call: Callable[[Side], Awaitable[Any]], *, refused: bool = False,
        new_ids: Callable[[Any], list[str]] | None = None,
    ) -> Any:
        """Run ``call`` on both; compare its outcome and the state after it."""
        self.log.append(desc)
        before = None
        if refused:
            before = (await _state(self.mem, self.scenario.sent, self.window),
                      await _state(self.pg, self.scenario.sent, self.window))
        outcomes = []
        for side in (self.mem, self.pg):
            kind, value = await _outcome(call, side)
            if kind == "ok" and new_ids is not None:
                side.label_new(new_ids(value))
            outcomes.append([kind, side.labels.apply(dump(value, self.window))])
        self.log[-1] += f" -> {str(outcomes[0])[:140]}"
        self.check(f"{desc}: outcome", outcomes[0], outcomes[1])
        after = (await _state(self.mem, self.scenario.sent, self.window),
                 await _state(self.pg, self.scenario.sent, self.window))
        self.check(f"{desc}: state", after[0], after[1])
        if refused:
            assert outcomes[0][0] == "error", f"{desc} was accepted: {outcomes[0]}"
            assert before is not None
            for b, a, side in zip(before, after, (self.mem, self.pg), strict=True):
                self.check(f"{desc}: refused but changed {side.name}", b, a)
        return outcomes[0]

    # ---------------------------------------------------------------- steps

    async def add(self) -> None:
        rng = self.rng
        if self.batches and rng.random() < 0.2:
            batch = rng.choice(self.batches)  # re-added: every message skipped
        else:
            batch = self.scenario.session()
            self.batches.append(batch)
        as_dicts = rng.random() < 0.5
        kwargs: dict[str, Any] = {}
        roll = rng.random()
        if roll < 0.3:
            kwargs["tags"] = ["lesson", "candidate"]
        elif roll < 0.4:
            kwargs["tags"] = ["lesson", "quarantined"]
        elif roll < 0.6:
            kwargs["tags"] = ["team-notes"]
        if rng.random() < 0.6:
            self.runs += 1
            kwargs["run_id"] = f"run-{self.runs}"
        if rng.random() < 0.3:
            kwargs["agent_id"] = rng.choice(["planner", "reviewer"])

        async def call(side: Side) -> Any:
            messages: list[Any] = (
                [m.model_dump(mode="json") for m in batch] if as_dicts else list(batch)
            )
            events: list[Any] = []
            report = await side.memory.add(messages, progress=events.append, **kwargs)
            return {"report": report,
                    "progress": [[e.operation, e.stage, e.done, e.total] for e in events]}

        await self.apply(
            f"add({len(batch)} {'dicts' if as_dicts else 'messages'}, {kwargs})", call
        )

    async def remember(self, retry: bool = False) -> None:
        """A lesson; ``retry``: a retried node (an earlier key, maybe erased since)."""
        rng = self.rng
        if self.keys and (retry or rng.random() < 0.3):
            key: str | None = rng.choice(self.keys)  # a retried node: nothing written
            text = LESSONS[0]
        else:
            text = LESSONS[self.lessons % len(LESSONS)] + (
                f" (v{self.lessons // len(LESSONS)})" if self.lessons >= len(LESSONS) else ""
            )
            self.lessons += 1
            key = f"run-x:reflect:{self.lessons}" if rng.random() < 0.6 else None
            if key:
                self.keys.append(key)
        kwargs: dict[str, Any] = {
            "tags": rng.choice([("lesson",), ("lesson", "ops"), ("lesson", "quarantined")]),
            "candidate": rng.random() < 0.7,
        }
        if rng.random() < 0.5:
            kwargs["run_id"] = f"run-{rng.randint(1, max(1, self.runs))}"
        if rng.random() < 0.5:
            kwargs["agent_id"] = rng.choice(["planner", "reviewer"])

        # The writer draws each fact's id with uuid4: ids drawn from the seed instead, the
        # same on both sides, so lessons that tie in a ranking go by the same id order
        # (with random ids the two backends broke such ties differently from run to run).
        self.remember_calls += 1
        drawn = [uuid.uuid5(uuid.NAMESPACE_URL, f"lesson:{self.seed}:{self.remember_calls}:{i}")
                 for i in range(4)]

        async def call(side: Side) -> Any:
            ids = iter(drawn)
            shim = SimpleNamespace(UUID=uuid.UUID, uuid4=lambda: next(ids))
            with mock.patch.object(integration, "uuid", shim):
                return await side.memory.remember(text, idempotency_key=key, **kwargs)

        await self.apply(f"remember({text!r}, key={key}, {kwargs})", call,
                         new_ids=lambda v: [str(v)])

    async def search(self) -> None:
        rng = self.rng
        calls: list[tuple[Any, dict[str, Any]]] = []
        text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 3)))
        for mode in ("vector", "text", "hybrid", None):
            kw: dict[str, Any] = {"mode": mode, "limit": rng.randint(1, 8)}
            if rng.random() < 0.5:
                kw["min_similarity"] = rng.choice([0.0, 0.2])
            if rng.random() < 0.3:
                kw["tags"] = rng.choice([["lesson"], ["team-notes"], ["candidate", "ops"]])
            if rng.random() < 0.25:
                kw["valid_at"] = self.scenario.day - timedelta(days=rng.randint(0, 40))
            if rng.random() < 0.25:
                kw["include_invalidated"] = True
            calls.append((text, kw))
        calls.append((None, {"tags": ["lesson"], "limit": rng.randint(3, 20)}))
        calls.append((None, {"entity": rng.choice(PEOPLE).lower(),
                             "max_hops": rng.randint(0, 2)}))
        calls.append((None, {"entity": f"  {rng.choice(COMPANIES).upper()} "}))
        for q, kw in calls:

            async def call(side: Side, q: Any = q, kw: dict[str, Any] = kw) -> Any:
                kw = dict(kw)
                return await side.memory.search(q, **kw)

            await self.apply(f"search({q!r}, {kw})", call)

    async def forget(self) -> None:
        rng = self.rng
        facts = sorted(
            k.split(":", 1)[1]
            for k, r in (await _state(self.mem, self.scenario.sent, self.window))[
                "records"
            ].items()
            if k.startswith("fact:")
        )
        if not facts:
            return
        chosen = rng.sample(facts, k=min(len(facts), rng.randint(1, 3)))
        missing = str(uuid.uuid5(uuid.NAMESPACE_URL, f"missing-{rng.random()}"))
        labels = [*chosen, *(chosen[:1] if rng.random() < 0.3 else []), missing]
        as_one = rng.random() < 0.2

        async def call(side: Side) -> Any:
            ids = [side.labels.id(label) for label in labels]
            return await side.memory.forget(ids[0] if as_one else ids)

        await self.apply(f"forget({labels if not as_one else labels[0]})", call)

    async def erase(self) -> None:
        rng = self.rng
        selector = rng.choice([
            {"run_id": f"run-{rng.randint(1, max(1, self.runs))}"},
            {"agent_id": rng.choice(["planner", "reviewer"])},
            {"source": "agent"},
        ])
        for dry in (True, False):

            async def call(side: Side, dry: bool = dry) -> Any:
                return await side.memory.erase(dry_run=dry, **selector)

            await self.apply(f"erase({selector}, dry_run={dry})", call)

    async def refused(self) -> None:
        """Bad input of every documented kind: same error type, nothing changed."""
        some_fact = str(uuid.uuid5(uuid.NAMESPACE_URL, "never"))
        bad: list[tuple[str, Callable[[Memory], Awaitable[Any]]]] = [
            ("remember('   ')", lambda m: m.remember("   ")),
            ("remember('')", lambda m: m.remember("")),
            ("remember(tags=[1])", lambda m: m.remember("x", tags=[1])),  # type: ignore[list-item]
            ("remember(tags='lesson')", lambda m: m.remember("x", tags="lesson")),
            ("remember(candidate='no')", lambda m: m.remember("x", candidate="no")),  # type: ignore[arg-type]
            ("remember(run_id='')", lambda m: m.remember("x", run_id="")),
            ("remember(agent_id=300 chars)", lambda m: m.remember("x", agent_id="a" * 300)),
            ("remember(key='')", lambda m: m.remember("x", idempotency_key="")),
            ("remember(key=NUL)", lambda m: m.remember("x", idempotency_key="a\x00b")),
            ("remember(key=600 chars)", lambda m: m.remember("x", idempotency_key="k" * 600)),
            ("search(mode='fuzzy')", lambda m: m.search("maya", mode="fuzzy")),  # type: ignore[arg-type]
            ("search(limit=0)", lambda m: m.search("maya", limit=0)),
            ("search(limit=101)", lambda m: m.search("maya", limit=101)),
            ("search(max_hops=9)", lambda m: m.search(entity="maya", max_hops=9)),
            ("search(entity='Nobody Here')", lambda m: m.search(entity="Nobody Here")),
            ("search(entity='')", lambda m: m.search(entity="   ")),
            ("search(entity=5)", lambda m: m.search(entity=5)),  # type: ignore[arg-type]
            ("search(tags='lesson')", lambda m: m.search(tags="lesson")),
            ("search(min_similarity=2)", lambda m: m.search("maya", min_similarity=2.0)),
            ("forget(['nope'])", lambda m: m.forget(["nope", some_fact])),
            ("forget([3])", lambda m: m.forget([3])),  # type: ignore[list-item]
            ("forget(erase=True)", lambda m: m.forget([some_fact], erase=True)),
            ("forget(erase='yes')", lambda m: m.forget([some_fact], erase="yes")),  # type: ignore[arg-type]
            ("erase()", lambda m: m.erase()),
            ("erase(colour='red')", lambda m: m.erase(colour="red")),
            ("erase(tenant=True, run_id)", lambda m: m.erase(tenant=True, run_id="run-1")),
            ("erase(source='martian')", lambda m: m.erase(source="martian")),
            ("add(no role)", lambda m: m.add([{"content": "hi"}])),
            ("add(content=5)", lambda m: m.add([{"role": "user", "content": 5}])),
            ("add(role='robot')", lambda m: m.add([{"role": "robot", "content": "I work"}])),
            ("add(good + bad)", lambda m: m.add([
                {"role": "user", "content": "I work at Zeta Corp as a chef."},
                {"role": "user", "content": "x", "timestamp": "yesterday"},
            ])),
            ("add(tags=[''])", lambda m: m.add(
                [{"role": "user", "content": "I work at Zeta Corp."}], tags=[""])),
            ("add(run_id='')", lambda m: m.add(
                [{"role": "user", "content": "I work at Zeta Corp."}], run_id="")),
            ("add('text')", lambda m: m.add("I work at Zeta Corp.")),  # type: ignore[arg-type]
        ]
        for desc, call in bad:

            async def run(side: Side, call: Any = call) -> Any:
                return await call(side.memory)

            await self.apply(desc, run, refused=True)

    # ---------------------------------------------------------------- plan

    async def run(self) -> None:
        for session in range(SESSIONS):
            await self.add()
            if session % 2 == 1:
                await self.remember()
                await self.remember()
            if session % 3 == 2:
                await self.search()
            if session in (4, 6):
                await self.forget()
        await self.search()
        await self.refused()
        await self.erase()
        await self.remember(retry=True)
        await self.remember()
        await self.erase()
        await self.remember(retry=True)
        await self.search()
        await self.forget()


def _seeds() -> list[int]:
    chosen = os.environ.get("CYCGRAPH_DIFF_SEED", "").strip()
    return [int(chosen)] if chosen else SEEDS


@pytest.mark.parametrize("seed", _seeds())
async def test_facade_agrees_on_both_backends(
    seed: int, pair: tuple[Memory, Memory]
) -> None:
    driver = Driver(seed, *pair)
    await driver.run()
    # The scenario must reach the interesting paths, or this test proves little.
    joined = "\n".join(driver.log)
    assert "no longer work" in " ".join(m.content for m in driver.scenario.sent)
    assert "-> ['ok'" in joined and "-> ['error'" in joined
    stats = await pair[0].stats()
    assert stats.records["fact"].live > 0 and stats.records["fact"].invalidated >= 1


@pytest.mark.parametrize(
    ("desc", "call"),
    [
        ("search(limit=True)", lambda m: m.search("maya", limit=True)),
        ("search(limit=False)", lambda m: m.search("maya", limit=False)),
        ("search(max_hops=True)", lambda m: m.search(entity="maya", max_hops=True)),
        ("retrieve(max_facts=True)", lambda m: memory_retriever(m.store, m.index, m.embedder)(
            {"text": "maya", "max_facts": True})),
        ("retrieve(options max_facts=True)", lambda m: memory_retriever(
            m.store, m.index, m.embedder)({"text": "maya"}, {"max_facts": True})),
    ],
)
async def test_a_bool_is_not_a_count_on_either_backend(
    desc: str, call: Callable[[Memory], Awaitable[Any]], pair: tuple[Memory, Memory]
) -> None:
    """``limit=True`` was read as 1 (pydantic's lax int): a refused count, nothing touched."""
    from pydantic import ValidationError

    window = Window()
    msg = Message(id=uuid.uuid5(uuid.NAMESPACE_URL, "bool-count"), role="user",
                  content="Maya works at Globex as a nurse.", timestamp=T0)
    for memory in pair:
        side = Side("x", memory)
        await memory.add([msg])
        before = await _state(side, [msg], window)
        with pytest.raises(ValidationError, match="not a bool"):
            await call(memory)
        assert differ(before, await _state(side, [msg], window)) is None, desc


# --------------------------------------------------------------------------- adapters



def _fixed_facts(entity_ids: list[str]) -> list[SemanticFact]:
    ns = uuid.UUID("0c8a1f52-5b0e-4f7e-9b7d-2f6f3c1c9e01")
    texts = [
        ("Maya prefers green tea in the morning.", ["preference"]),
        ("Liam no longer works at Globex.", ["career", "lesson"]),
        ("Deploys on Friday need a second reviewer.", ["lesson", "candidate"]),
        ("Priya moved to Oslo in May 2024.", ["career"]),
        ("A quarantined lesson must never be served.", ["lesson", "quarantined"]),
    ]
    return [
        SemanticFact(
            id=uuid.uuid5(ns, text), content=text, tags=tags,
            entity_ids=[uuid.UUID(e) for e in entity_ids[i % max(1, len(entity_ids)):][:1]],
            provenance=Provenance(source="agent", run_id="run-w", created_at=T0),
            valid_from=T0 + timedelta(days=i),
        )
        for i, (text, tags) in enumerate(texts)
    ]


async def test_adapters_agree_on_both_backends(pair: tuple[Memory, Memory]) -> None:
    scenario = Scenario(21)
    window = Window()
    sides = [Side("memory", pair[0]), Side("postgres", pair[1])]
    batch = scenario.session() + scenario.session()
    for side in sides:
        await side.memory.add(batch)
    entity_ids = sorted(
        k.split(":", 1)[1]
        for k in (await _state(sides[0], scenario.sent, window))["records"]
        if k.startswith("entity:")
    )

    def compare(label: str, values: list[Any]) -> None:
        normal = [s.labels.apply(dump(v, window)) for s, v in zip(sides, values, strict=True)]
        found = differ(normal[0], normal[1])
        assert found is None, f"{label}: memory vs postgres differ at {found}"

    async def both(label: str, call: Callable[[Side], Awaitable[Any]],
                   new: bool = False) -> list[Any]:
        out = []
        for side in sides:
            kind, value = await _outcome(call, side)
            if new and kind == "ok":
                side.label_new(value["fact_ids"])
            out.append([kind, value])
        compare(label, out)
        compare(f"{label}: state", [await _state(s, scenario.sent, window) for s in sides])
        return out

    writers = {
        s.name: memory_writer(s.memory.store, index=s.memory.index, embedder=s.memory.embedder,
                              clock=lambda: T0)
        for s in sides
    }
    fixed = _fixed_facts(entity_ids)
    dicts = [
        {"content": "Escalate billing incidents to Maya.", "tags": ["lesson", "candidate"],
         "provenance": {"run_id": "run-w", "agent_id": "reviewer"}},
        {"content": "Tom likes jazz on Fridays.", "tags": ["preference"],
         "entity_ids": entity_ids[:1], "valid_from": "2024-06-01T00:00:00+00:00"},
    ]
    await both("writer(fixed ids)", lambda s: writers[s.name](fixed), new=True)
    await both("writer(dicts, key)",
               lambda s: writers[s.name](dicts, {"idempotency_key": "run-w:reflect:0"}), new=True)
    await both("writer(same key again)",
               lambda s: writers[s.name](dicts[:1], {"idempotency_key": "run-w:reflect:0"}))
    for desc, facts, options in [
        ("unknown key", [{"content": "x", "colour": "red"}], None),
        ("blank content", [{"content": ""}], None),
        ("single dict", {"content": "x"}, None),
        ("bad key", [{"content": "x"}], {"idempotency_key": ""}),
        ("bad tags", [{"content": "x", "tags": "lesson"}], None),
        ("wrong width", [{"content": "x", "embedding": [0.1] * 3}], None),
        ("good then bad", [{"content": "fine"}, {"content": "x", "provenance": 3}], None),
    ]:
        before = [await _state(s, scenario.sent, window) for s in sides]
        out = await both(f"writer({desc})",
                         lambda s, f=facts, o=options: writers[s.name](f, o))
        assert out[0][0] == "error", f"writer({desc}) was accepted: {out[0]}"
        after = [await _state(s, scenario.sent, window) for s in sides]
        for b, a in zip(before, after, strict=True):
            assert differ(b, a) is None, f"writer({desc}) refused but changed the store"

    retrievers = {
        s.name: memory_retriever(s.memory.store, s.memory.index, s.memory.embedder,
                                 default_max_facts=6)
        for s in sides
    }
    queries: list[tuple[Any, Any]] = [
        ({"text": "who works at Globex"}, None),
        ({"text": "green tea", "max_facts": 2}, None),
        ({"tags": ["lesson"]}, None),
        ({"tags": ["preference", "career"], "max_facts": 3}, None),
        ({"entity_ids": entity_ids[:2]}, None),
        ({}, {"goal": "billing incidents and deploys", "max_facts": 4}),
        (None, {"goal": "Maya"}),
        ({}, None),
        ({"text": "x", "colour": "red"}, None),
        ({"max_facts": 0, "text": "x"}, None),
        ({"tags": "lesson"}, None),
        ("text", None),
    ]
    rendered = 0
    for query, options in queries:
        out = await both(f"retrieve({query}, {options})",
                         lambda s, q=query, o=options: retrievers[s.name](q, o))
        if out[0][0] == "ok":
            blocks = [render_memory_section(v) for _, v in out]
            compare(f"render({query})", blocks)
            rendered += bool(blocks[0])
            # Quarantined facts are served only to a scope naming the tag (docs/retrieval).
            assert "quarantined lesson" not in blocks[0], f"{query}: {blocks[0]}"
    assert rendered >= 4, "too few queries found anything: the comparison proves little"


# --------------------------------------------------------------------------- CLI


def _cli(*args: str) -> tuple[int, str, str]:
    import contextlib
    import io

    from cycgraph_memory.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(args))
    return code, out.getvalue(), err.getvalue()


def _cli_json(*args: str) -> Any:
    code, out, err = _cli(*args)
    assert code == 0, f"{args}: exit {code}: {err}"
    return json.loads(out)


def test_cli_on_postgres_agrees_with_the_in_memory_facade(
    front_dsn: str, tmp_path: Path
) -> None:
    scenario = Scenario(34)
    window = Window()
    tenant = f"frontcli_{secrets.token_hex(5)}"
    base = ("--dsn", front_dsn, "--tenant", tenant)
    asyncio.run(_migrated(front_dsn))

    async def in_memory(work: Callable[[Memory], Awaitable[Any]]) -> Any:
        return await work(mem)

    mem: Memory
    loop = asyncio.new_event_loop()
    try:
        mem = loop.run_until_complete(
            Memory.open("memory://", tenant=tenant, embedding_dim=DIM)
        )

        def facade(work: Callable[[Memory], Awaitable[Any]]) -> Any:
            return dump(loop.run_until_complete(in_memory(work)), window)

        def same(label: str, a: Any, b: Any) -> None:
            found = differ(dump(a, window), dump(b, window))
            assert found is None, f"{label}: CLI on postgres vs facade in memory: {found}"

        for n in range(5):
            batch = scenario.session()
            path = tmp_path / f"batch{n}.jsonl"
            path.write_text(
                "\n".join(json.dumps(m.model_dump(mode="json")) for m in batch) + "\n",
                encoding="utf-8",
            )
            tag_args = ("--tag", "team-notes") if n % 2 else ()
            run_args = ("--run-id", f"run-{n}") if n % 3 == 0 else ()
            got = _cli_json(*base, "ingest", str(path), "--json", *tag_args, *run_args)
            kwargs: dict[str, Any] = {"tags": ["team-notes"] if n % 2 else []}
            if run_args:
                kwargs["run_id"] = f"run-{n}"
            want = facade(lambda m, b=batch, k=kwargs: m.add(b, **k))
            same(f"ingest batch {n}", got["report"], want)
            if n == 0:
                # The same file on a fresh memory:// (one invocation, nothing persists).
                fresh = _cli_json("--dsn", "memory://", "--tenant", tenant, "ingest",
                                  str(path), "--json", *run_args)
                same("ingest on memory:// vs postgres", fresh, got)

        stats = _cli_json(*base, "stats", "--json")
        assert stats.pop("tenant") == tenant
        same("stats", _strip_index(stats),
             _strip_index(facade(lambda m: m.stats()).copy()))

        from cycgraph_memory.cli._data import _search_payload

        searches = [
            ("search", "who works at Globex", "--mode", "text", "--limit", "5"),
            ("search", "Maya moved", "--mode", "vector", "--limit", "4"),
            ("search", "jazz green tea", "--limit", "6"),
            ("search", "--tag", "team-notes", "--limit", "20"),
            ("search", "--entity", PEOPLE[0].upper(), "--hops", "1"),
        ]
        for args in searches:
            code, out, err = _cli(*base, *args, "--json")
            text = None if args[1].startswith("--") else args[1]
            opts = dict(zip(args[2 if text else 1::2], args[3 if text else 2::2], strict=True))
            kw: dict[str, Any] = {
                "mode": opts.get("--mode"), "limit": int(opts.get("--limit", 10)),
                "tags": [opts["--tag"]] if "--tag" in opts else [],
                "entity": opts.get("--entity"), "max_hops": int(opts.get("--hops", 2)),
            }
            try:
                found = loop.run_until_complete(in_memory(lambda m, t=text, k=kw: m.search(t, **k)))
            except Exception as exc:  # an unknown entity: both must refuse
                assert code == 1, f"{args}: facade raised {exc!r}, CLI exit {code}"
                continue
            assert code == 0, f"{args}: exit {code}: {err}"
            same(f"{args}", json.loads(out), _search_payload(found.result, found.prompt))

        _maintenance_agrees(base, loop, mem, window, same)

        before = _cli_json(*base, "stats", "--json")
        bad = tmp_path / "bad.jsonl"
        bad.write_text('{"role": "user", "content": "I work at Zeta."}\n{"role": 5}\n',
                       encoding="utf-8")
        for args, code in [
            (("search", "maya", "--limit", "0"), 1),
            (("search", "maya", "--limit", "101"), 1),
            (("search", "maya", "--mode", "fuzzy"), 1),
            (("search",), 1),
            (("search", "--entity", "Nobody Here"), 1),
            (("search", "maya", "--hops", "9", "--entity", "maya"), 1),
            (("ingest", str(bad)), 1),
            (("ingest", str(tmp_path / "missing.jsonl")), 1),
            (("ingest", str(path), "--run-id", ""), 1),
            (("ingest", str(path), "--tag", ""), 1),
            (("search", "maya", "--limit", "many"), 2),
            (("stats", "--colour"), 2),
        ]:
            got_code, out, err = _cli(*base, *args)
            assert got_code == code, f"{args}: exit {got_code} (want {code}): {err}{out}"
            if code == 1:
                lines = [line for line in err.splitlines() if line.strip()]
                assert len(lines) == 1 and lines[0].startswith("error: "), (args, err)
                assert "Traceback" not in err + out
        after = _cli_json(*base, "stats", "--json")
        assert differ(dump(before, window), dump(after, window)) is None, (
            "a refused CLI command changed the tenant"
        )
        loop.run_until_complete(mem.close())
    finally:
        loop.run_until_complete(_clear(front_dsn, tenant))
        loop.close()


def _maintenance_agrees(
    base: tuple[str, ...], loop: asyncio.AbstractEventLoop, mem: Memory, window: Window,
    same: Callable[[str, Any, Any], None],
) -> None:
    """The maintenance commands on Postgres vs the same passes on the in-memory facade.

    Dry runs first (same plan, nothing changed), then for real (same report, same graph).
    The CLI passes take no clock: their "now" is the wall clock, seconds apart on the two
    sides, which no budget or threshold below is near.
    """
    from cycgraph_memory.cli._maintenance import _conflict_rows, mutation_rows
    from cycgraph_memory.consolidation import (
        ConflictDetector,
        EntityResolver,
        MemoryConsolidator,
    )
    from cycgraph_memory.export import export_graph, render_graph

    def on_memory(work: Any) -> Any:
        return loop.run_until_complete(work)

    def plan_payload(plan: Any) -> dict[str, Any]:
        return {"dry_run": True,
                "report": plan.report.model_dump(mode="json", exclude={"mutation_log"}),
                "mutations": mutation_rows(plan.mutations)}

    def done_payload(report: Any) -> dict[str, Any]:
        return {"dry_run": False,
                "report": report.model_dump(mode="json", exclude={"mutation_log"})}

    stats0 = _cli_json(*base, "stats", "--json")
    resolver = EntityResolver(mem.store, index=mem.index)
    same("resolve-entities --dry-run", _cli_json(*base, "resolve-entities", "--dry-run",
                                                  "--json"),
         plan_payload(on_memory(resolver.plan())))
    detector = ConflictDetector(mem.store, mem.index)
    conflicts = on_memory(detector.detect_conflicts())
    same("conflicts detect", _cli_json(*base, "conflicts", "detect", "--json"),
         {"conflicts": _conflict_rows(conflicts)})
    consolidator = MemoryConsolidator(mem.store, mem.index, max_facts=6, max_episodes=5)
    same("consolidate --dry-run",
         _cli_json(*base, "consolidate", "--dry-run", "--max-facts", "6", "--max-episodes",
                   "5", "--json"),
         plan_payload(on_memory(consolidator.plan())))
    same("dry runs changed nothing", _cli_json(*base, "stats", "--json"), stats0)
    # The scenario must give the passes work, or the comparison proves little.
    assert conflicts and plan_payload(on_memory(consolidator.plan()))["mutations"]

    same("resolve-entities", _cli_json(*base, "resolve-entities", "--json"),
         done_payload(on_memory(resolver.resolve())))
    policy = "negation-invalidates-positive"
    conflicts = on_memory(detector.detect_conflicts())
    report = on_memory(detector.auto_resolve_all(conflicts, policy))
    got = _cli_json(*base, "conflicts", "resolve", "--policy", policy, "--json")
    same("conflicts resolve", got, {
        "dry_run": False, "policy": policy, "resolved": report.resolved,
        "skipped": report.skipped,
        "details": [{"action": d.action, "reason": d.reason, "type": d.conflict.type,
                     "fact_a": str(d.conflict.fact_a.id), "fact_b": str(d.conflict.fact_b.id)}
                    for d in report.details],
    })
    same("consolidate",
         _cli_json(*base, "consolidate", "--max-facts", "6", "--max-episodes", "5", "--json"),
         done_payload(on_memory(consolidator.consolidate())))
    stats = _cli_json(*base, "stats", "--json")
    stats.pop("tenant")
    same("stats after maintenance", _strip_index(stats),
         _strip_index(on_memory(mem.stats()).model_dump(mode="json")))
    for include in (False, True):
        flag = ("--include-invalidated",) if include else ()
        code, out, err = _cli(*base, "export", "graph", "--format", "json", *flag)
        assert code == 0, err
        graph = on_memory(export_graph(mem.store, include_invalidated=include))
        same(f"export graph (include_invalidated={include})", json.loads(out),
             json.loads(render_graph(graph, "json")))
        code, out, err = _cli(*base, "export", "graph", "--format", "mermaid", *flag)
        assert code == 0 and out == render_graph(graph, "mermaid"), err


async def _migrated(dsn: str) -> None:
    """Migrate the module's database (the facade tests may not have run first)."""
    memory = await Memory.open(dsn, tenant="migrator", migrate=True, embedding_dim=DIM)
    await memory.close()


async def _clear(dsn: str, tenant: str) -> None:
    memory = await Memory.open(dsn, tenant=tenant)
    try:
        await memory.store.clear()
        if memory.ledger is not None:
            await memory.ledger.clear()
    finally:
        await memory.close()

"""Differential test of the ALGORITHMS: one scenario through both backends, equal outcomes.

``test_differential_sequences.py`` compares single store operations. This test compares
what the library's algorithms do end to end over the contracts: for a few fixed seeds a
realistic multi-session chat (people with names, jobs, moves, "no longer works at",
dates, preferences, repeated and near-duplicate statements; ingests tagged ``lesson`` /
``candidate`` / ``quarantined``, with run ids) is fed in small batches of 2-8 messages
to a ``MemoryPipeline`` on an in-memory store + index + ledger and on a Postgres store +
index + ledger (one tenant in the per-test rolled-back transaction). The same step list
runs on both:

* ``ingest`` and ``ingest_many`` with the default extractor tier (the parser tier when
  spaCy is installed) and with ``RuleBasedExtractor``; ``HashingEmbeddingProvider``; the
  default, tenant-calibrated clusterer; re-ingests of earlier batches (skipped messages);
* ``EntityResolver.resolve()``, ``ConflictDetector`` detection and
  ``auto_resolve_all`` under both automatic policies, ``MemoryConsolidator`` passes with
  small budgets (dedup, decay pruning, episode pruning, theme cleanup), soft and hard;
* the retention loop: ``record_outcome`` for runs that used the lesson candidates,
  ``evaluate_retention`` (fixed ``pass_id`` and clock), ``retrieve_gated_lessons`` with
  and without the ledger;
* ``purge`` of a run id (dry run, then for real, with the ledger), ``reembed`` with
  another hashing seed, and the export.

After each step the step's report is compared, then the full state: every record of the
export (soft-deleted ones included, by kind and id: theme membership, validity windows,
tags, provenance), every message ever sent, the ledger (fact stats, baseline, gate audit
log, erasure log), and ``retrieve_memory`` in the vector, text and hybrid modes (same
ordered ids and records).

Normalised, and only because they are documented backend differences or wall-clock
stamps:

* Postgres stores vectors as float32 (docs/lifecycle.md, docs/security.md), so every
  float is compared with an absolute tolerance of 1e-5 (centroids and means computed
  from float32 inputs differ in the last places);
* the ingest path has no clock to inject (the records' ``created_at`` / ``updated_at`` /
  ``provenance.created_at`` are stamped by ``utc_now``), so a timestamp taken during the
  test run is replaced by the marker ``<now>``: it is compared structurally (present on
  both, at the same place). The passes that take a ``clock`` get one fixed instant and
  are compared exactly. ``retrieve_memory`` touches the facts it serves with the wall
  clock; ``last_accessed_at`` is a run-time stamp and so also compared structurally;
* a purge's ``erasure_id`` is a random uuid4 (no way to inject one): compared as present
  or absent.

The in-memory index is handed to every algorithm that accepts one (pipeline,
resolver, detector, consolidator, purge, reembed); the gate takes no index, so the
in-memory index is rebuilt from the store after a gate pass (its documented use after
writes that bypass it).

A failure names the seed and the step list; ``CYCGRAPH_DIFF_SEED=<seed>`` re-runs one
seed.
"""

from __future__ import annotations

import json
import os
import random
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

import pytest

from cycgraph_memory.consolidation import ConflictDetector, EntityResolver, MemoryConsolidator
from cycgraph_memory.embeddings import HashingEmbeddingProvider
from cycgraph_memory.hierarchy.extractors.rules import RuleBasedExtractor
from cycgraph_memory.hierarchy.pipeline import DEFAULT_RULE_MAX_FACTS, MemoryPipeline
from cycgraph_memory.inmemory import InMemoryMemoryIndex, InMemoryMemoryStore
from cycgraph_memory.inmemory.ledger import InMemoryOutcomeLedger
from cycgraph_memory.lifecycle import purge
from cycgraph_memory.lifecycle.export import export_lines
from cycgraph_memory.lifecycle.reembed import reembed
from cycgraph_memory.records import Message
from cycgraph_memory.retention import evaluate_retention
from cycgraph_memory.retrieval.lessons import retrieve_gated_lessons
from cycgraph_memory.retrieval.retrieve import retrieve_memory

from ._differential import (
    CITIES,
    COMPANIES,
    JOBS,
    LIKES,
    PASS_NS,
    PEOPLE,
    Scenario,
    Window,
    differ,
    disagreement,
    dump,
)
from ._records import DIM

pytestmark = pytest.mark.postgres

SEEDS = [3, 8, 11, 17, 29]
SESSIONS = 9
CLOCK = datetime(2031, 3, 1, 12, 0, tzinfo=UTC)  # "now" of every pass that takes a clock


# --------------------------------------------------------------------------- backends


class Backend:
    """Store, index and ledger of one backend, with two pipelines (default and rule tier)."""

    def __init__(self, name: str, store: Any, index: Any, ledger: Any) -> None:
        self.name = name
        self.store = store
        self.index = index
        self.ledger = ledger
        embedder = HashingEmbeddingProvider(dimensions=DIM)
        self.embedder = embedder
        self.pipelines = {
            "default": MemoryPipeline(store, embedder=embedder, index=index),
            "rules": MemoryPipeline(
                store,
                embedder=embedder,
                index=index,
                extractor=RuleBasedExtractor(max_facts=DEFAULT_RULE_MAX_FACTS),
            ),
        }

    async def synced_index(self) -> Any:
        """The index after a write that bypassed it (the in-memory one is rebuilt)."""
        if isinstance(self.index, InMemoryMemoryIndex):
            await self.index.rebuild(self.store)
        return self.index


# --------------------------------------------------------------------------- normalisation


def _check(label: str, mine: Any, theirs: Any) -> None:
    found = differ(mine, theirs)
    assert found is None, f"{label}: memory vs postgres differ at {found}"


# --------------------------------------------------------------------------- observation


async def _state(backend: Backend, scenario: Scenario, window: Window) -> dict[str, Any]:
    """Everything both backends must agree on after a step."""
    records: dict[str, Any] = {}
    async for line in export_lines(backend.store):
        row = json.loads(line)
        kind = row.get("type")
        if kind in (None, "end"):
            continue
        record = row.get("record", row)
        records[f"{kind}:{record.get('id')}"] = record
    messages = await backend.store.get_messages([m.id for m in scenario.sent])
    ledger = backend.ledger
    return dump(
        {
            "records": dict(sorted(records.items())),
            "messages": {str(k): v for k, v in sorted(messages.items(), key=lambda kv: str(kv[0]))},
            "fact_stats": await ledger.list_fact_stats(),
            "baseline": await ledger.get_baseline(),
            "audit": await ledger.list_gate_audit(),
            "erasures": await ledger.list_erasures(),
        },
        window,
    )


def _queries(scenario: Scenario, rng: random.Random) -> list[tuple[dict[str, Any], str]]:
    words = [scenario_word(rng) for _ in range(2)]
    text = " ".join(words)
    base: dict[str, Any] = {"limit": 6, "min_similarity": 0.0}
    if rng.random() < 0.3:
        base["tags"] = ["lesson"]
    out = []
    for mode in ("vector", "text", "hybrid"):
        out.append((base | {"text": text}, mode))
    return out


def scenario_word(rng: random.Random) -> str:
    return rng.choice([*PEOPLE, *COMPANIES, *JOBS, *CITIES, *LIKES, "work", "moved"])


def _result_view(result: Any) -> dict[str, Any]:
    return {
        "themes": [str(t.id) for t in result.themes],
        "facts": [str(f.id) for f in result.facts],
        "episodes": [str(e.id) for e in result.episodes],
        "entities": [str(e.id) for e in result.entities],
        "relationships": [str(r.id) for r in result.relationships],
        "messages": [str(m.id) for m in result.messages],
        "fact_scores": {
            str(k): s.model_dump(mode="json") for k, s in sorted(
                result.fact_scores.items(), key=lambda kv: str(kv[0]))
        },
    }


# --------------------------------------------------------------------------- steps

Step = tuple[str, Callable[[Backend], Awaitable[Any]]]


class Plan:
    """Builds the seed's step list; the steps read per-backend ids only from the store."""

    def __init__(self, scenario: Scenario) -> None:
        self.scenario = scenario
        self.rng = random.Random(scenario.seed * 7919 + 1)
        self.batches: list[list[Message]] = []
        self.runs = 0

    def ingest(self) -> Step:
        rng = self.rng
        tier = rng.choice(["default", "rules"])
        roll = rng.random()
        kwargs: dict[str, Any] = {}
        if roll < 0.35:
            kwargs["tags"] = ["lesson", "candidate"]
        elif roll < 0.45:
            kwargs["tags"] = ["lesson", "quarantined"]
        elif roll < 0.55:
            kwargs["tags"] = ["lesson"]
        if rng.random() < 0.6:
            self.runs += 1
            kwargs["run_id"] = f"run-{self.runs}"
        if rng.random() < 0.2 and self.batches:
            batch = rng.choice(self.batches)  # a re-ingest: every message skipped
            # one new message as well, sometimes
            if rng.random() < 0.5:
                batch = [*batch, *self.scenario.session()[:1]]
        else:
            batch = self.scenario.session()
        self.batches.append(batch)
        if rng.random() < 0.3:
            second = self.scenario.session()
            self.batches.append(second)
            batches = [batch, second]

            async def many(b: Backend) -> Any:
                reports = await b.pipelines[tier].ingest_many(batches, **kwargs)
                return [r.model_dump(mode="json") for r in reports]

            return (f"{tier}.ingest_many({[len(x) for x in batches]} messages, {kwargs})",
                    many)

        async def one(b: Backend) -> Any:
            return (await b.pipelines[tier].ingest(batch, **kwargs)).model_dump(mode="json")

        return f"{tier}.ingest({len(batch)} messages, {kwargs})", one

    def resolve(self) -> Step:
        mode = self.rng.choice(["soft", "soft", "hard"])

        async def run(b: Backend) -> Any:
            resolver = EntityResolver(b.store, delete_mode=mode, index=b.index,
                                      clock=lambda: CLOCK)
            return (await resolver.resolve()).model_dump(mode="json")

        return f"EntityResolver(delete_mode={mode}).resolve()", run

    def conflicts(self) -> Step:
        policy = self.rng.choice(["supersede-on-newer", "negation-invalidates-positive"])

        async def run(b: Backend) -> Any:
            detector = ConflictDetector(b.store, b.index)
            found = await detector.detect_conflicts()
            report = await detector.auto_resolve_all(found, policy)
            return {"conflicts": [c.model_dump(mode="json") for c in found],
                    "report": report.model_dump(mode="json")}

        return f"ConflictDetector: detect, auto_resolve_all({policy})", run

    def consolidate(self) -> Step:
        rng = self.rng
        opts: dict[str, Any] = {"delete_mode": rng.choice(["soft", "soft", "hard"])}
        if rng.random() < 0.6:
            opts["max_facts"] = rng.randint(4, 20)
        if rng.random() < 0.3:
            opts["max_episodes"] = rng.randint(2, 8)
        if rng.random() < 0.5:
            opts["dedup_threshold"] = rng.choice([0.8, 0.9, 0.95])

        async def run(b: Backend) -> Any:
            consolidator = MemoryConsolidator(b.store, b.index, clock=lambda: CLOCK, **opts)
            return (await consolidator.consolidate()).model_dump(mode="json")

        return f"MemoryConsolidator({opts}).consolidate()", run

    def outcomes(self) -> Step:
        """Runs that injected the lesson candidates (found the same way on both)."""
        rng = self.rng
        n = rng.randint(2, 5)
        scores = [round(rng.random(), 3) for _ in range(n)]
        picks = [rng.random() for _ in range(n)]
        first = self.runs + 1
        self.runs += n

        async def run(b: Backend) -> Any:
            lessons = await b.store.find_facts(tags=["candidate"])
            lessons.sort(key=lambda f: str(f.id))
            recorded = []
            for k, (score, pick) in enumerate(zip(scores, picks, strict=True)):
                used = [f.id for i, f in enumerate(lessons) if (i + k) % 3 != int(pick * 3)]
                outcome = {"run_id": f"run-{first + k}", "score": score, "fact_ids": used}
                await b.ledger.record_outcome(outcome)
                recorded.append({"run_id": outcome["run_id"], "fact_ids": [str(i) for i in used]})
            return recorded

        return f"record_outcome x{n} (scores {scores})", run

    def gate(self) -> Step:
        rule = self.rng.choice(["inference", "margin"])
        pass_id = uuid.uuid5(PASS_NS, f"{self.scenario.seed}-{self.rng.random()}")

        async def run(b: Backend) -> Any:
            policy = {"min_trials": 2, "decision_rule": rule}
            report = await evaluate_retention(b.store, b.ledger, policy, pass_id=pass_id,
                                              clock=lambda: CLOCK)
            await b.synced_index()
            gated = await retrieve_gated_lessons(b.store, tags=["lesson"], ledger=b.ledger,
                                                 max_facts=5)
            plain = await retrieve_gated_lessons(b.store, tags=["lesson"], max_facts=5)
            return {"report": report.model_dump(mode="json"),
                    "gated": [str(f.id) for f in gated], "plain": [str(f.id) for f in plain]}

        return f"evaluate_retention({rule}) + retrieve_gated_lessons", run

    def purge(self) -> Step:
        run_id = f"run-{self.rng.randint(1, max(1, self.runs))}"
        dry = self.rng.random() < 0.4

        async def run(b: Backend) -> Any:
            report = await purge(b.store, run_id=run_id, index=b.index, ledger=b.ledger,
                                 dry_run=dry)
            return report.model_dump(mode="json")

        return f"purge(run_id={run_id!r}, dry_run={dry})", run

    def reembed(self) -> Step:
        seed = self.rng.randint(1, 9)

        async def run(b: Backend) -> Any:
            provider = HashingEmbeddingProvider(dimensions=DIM, seed=seed)
            report = await reembed(b.store, provider, index=b.index, batch_size=7)
            return report.model_dump(mode="json")

        return f"reembed(HashingEmbeddingProvider(seed={seed}))", run

    def steps(self) -> list[Step]:
        out: list[Step] = []
        for session in range(SESSIONS):
            out.append(self.ingest())
            if session % 3 == 2:
                out.append(self.resolve())
                out.append(self.conflicts())
            if session % 4 == 3:
                out.append(self.consolidate())
            if session >= 3 and session % 2 == 1:
                out.append(self.outcomes())
                out.append(self.gate())
        out.append(self.purge())
        out.append(self.consolidate())
        out.append(self.reembed())
        out.append(self.ingest())
        out.append(self.outcomes())
        out.append(self.gate())
        out.append(self.purge())
        return out


# --------------------------------------------------------------------------- driver


async def _outcome(step: Callable[[Backend], Awaitable[Any]], backend: Backend) -> Any:
    try:
        return ("ok", await step(backend))
    except Exception as exc:  # the error type is the outcome compared across backends
        return ("error", f"{type(exc).__name__}: {exc}")


class Driver:
    """Applies one seed's step list to both backends and compares after every step."""

    def __init__(self, seed: int, mem: Backend, pg: Backend) -> None:
        self.seed = seed
        self.mem = mem
        self.pg = pg
        self.scenario = Scenario(seed)
        self.window = Window()
        self.log: list[str] = []
        self.rng = random.Random(seed + 101)

    async def run(self) -> None:
        plan = Plan(self.scenario)
        steps = plan.steps()
        try:
            for number, (desc, step) in enumerate(steps):
                self.log.append(desc)
                await self.step(number, desc, step)
        except AssertionError as exc:
            raise disagreement(self.seed, self.log, exc) from exc

    async def step(self, number: int, desc: str, step: Callable[[Backend], Awaitable[Any]]) -> None:
        mine = await _outcome(step, self.mem)
        theirs = await _outcome(step, self.pg)
        self.log[-1] += f" -> memory {str(mine)[:160]}"
        _check(f"step {number} ({desc}): report", dump(mine, self.window),
               dump(theirs, self.window))
        assert mine[0] == "ok", f"step {number} ({desc}) failed on both: {mine}"
        _check(f"step {number} ({desc}): state",
               await _state(self.mem, self.scenario, self.window),
               await _state(self.pg, self.scenario, self.window))
        for query, mode in _queries(self.scenario, self.rng):
            results = []
            for b in (self.mem, self.pg):
                result = await retrieve_memory(b.store, b.index, query, mode=mode,  # type: ignore[arg-type]
                                               embedder=b.embedder)
                results.append(dump(_result_view(result), self.window)
                               | {"records": dump(result.facts, self.window)})
            _check(f"step {number} ({desc}): retrieve_memory({query}, mode={mode})", *results)


def _seeds() -> list[int]:
    chosen = os.environ.get("CYCGRAPH_DIFF_SEED", "").strip()
    return [int(chosen)] if chosen else SEEDS


@pytest.mark.parametrize("seed", _seeds())
async def test_algorithms_agree_end_to_end(seed: int, pg_engine: Any) -> None:
    # Real commits on the engine (a tenant of its own, cleared at the end): ``ingest_many``
    # writes one batch while it prepares the next, on two sessions, which the per-test
    # single-connection sessionmaker cannot serve.
    from cycgraph_memory.postgres import (
        PostgresMemoryIndex,
        PostgresMemoryStore,
        PostgresOutcomeLedger,
    )

    tenant = f"diffpipe_{seed}_{uuid.uuid4().hex[:10]}"
    mem = Backend(
        "memory",
        InMemoryMemoryStore(expected_dimensions=DIM),
        InMemoryMemoryIndex(expected_dimensions=DIM),
        InMemoryOutcomeLedger(),
    )
    pg = Backend(
        "postgres",
        PostgresMemoryStore(pg_engine, tenant_id=tenant),
        PostgresMemoryIndex(pg_engine, tenant_id=tenant),
        PostgresOutcomeLedger(pg_engine, tenant_id=tenant),
    )
    driver = Driver(seed, mem, pg)
    try:
        await driver.run()
    finally:
        await pg.store.clear()
        await pg.ledger.clear()
    # The scenario must reach the interesting paths, or this test proves little.
    assert any("ingest" in line for line in driver.log)

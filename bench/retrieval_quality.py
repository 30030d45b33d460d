"""Evidence-turn recall of retrieval on the frozen long-term conversation set.

For every conversation of ``bench/data/conversations/conversations.json`` (10 people
talking to an assistant over 15 sessions each; questions annotated with the turns that hold
their answer), each session is ingested with ``MemoryPipeline`` (default stages: bounded
segmenter, rule-based extractor, grounded facts) into its own in-memory store, then every
question is asked through ``retrieve_memory`` and scored on the turns returned in
``MemoryResult.messages``. Same turn budget K for every method:

* ``flat``: each turn embedded with the same embedder, the K nearest turns (baseline);
* ``bm25 turns``: BM25 over the turns alone (reference);
* ``library vector``: ``retrieve_memory(mode="vector")``;
* ``library text``: ``retrieve_memory(mode="text")``;
* ``library hybrid``: ``retrieve_memory(mode="hybrid")`` (the default).

Reported: recall@5/10/20 (share of a question's evidence turns within the first K turns,
averaged over questions), recall@10 on single- and multi-session questions, and
all-evidence@20 on multi-session questions (every evidence turn within the first 20).

    python bench/retrieval_quality.py [--embedder hashing|local|both]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from cycgraph_memory.contracts import EmbeddingProvider
from cycgraph_memory.embeddings.hashing import HashingEmbeddingProvider
from cycgraph_memory.hierarchy.pipeline import MemoryPipeline
from cycgraph_memory.inmemory import InMemoryMemoryIndex, InMemoryMemoryStore
from cycgraph_memory.records import MemoryQuery, Message
from cycgraph_memory.retrieval.retrieve import retrieve_memory
from cycgraph_memory.textsearch import BM25Index

DATA = Path(__file__).parent / "data" / "conversations" / "conversations.json"
BUDGETS = (5, 10, 20)
NAMESPACE = uuid.UUID("3c5b1f0a-9d7e-5b2c-8e41-7a6d2c9b0f13")
METHODS = ("flat", "bm25 turns", "library vector", "library text", "library hybrid")


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
    timings: dict[str, list[float]],
) -> dict[str, int]:
    """Ingest one conversation and score every question with every method."""
    store = InMemoryMemoryStore()
    index = InMemoryMemoryIndex(expected_dimensions=embedder.dimensions)
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
        qv = np.asarray((await embedder.embed([q["question"]]))[0], dtype=np.float64)
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
        for method in METHODS:
            scores[method].add(ranked[method], q["evidence"], q["multi_session"])
    return {"facts": facts, "episodes": episodes, "turns": len(turns)}


def make_embedder(name: str) -> EmbeddingProvider:
    """``hashing`` (built in) or ``local`` (all-MiniLM-L6-v2, extra local-embeddings)."""
    if name == "hashing":
        return HashingEmbeddingProvider()
    from cycgraph_memory.embeddings.local import LocalEmbeddingProvider

    return LocalEmbeddingProvider()


async def run(name: str, data: dict[str, Any]) -> None:
    """Score every method for one embedder and print the table."""
    embedder = make_embedder(name)
    scores = {m: Scores() for m in METHODS}
    timings: dict[str, list[float]] = {"ingest": [], "vector": [], "text": [], "hybrid": []}
    totals = {"facts": 0, "episodes": 0, "turns": 0}
    for conv in data["conversations"]:
        stats = await run_conversation(conv, embedder, scores, timings)
        for key, value in stats.items():
            totals[key] += value
    questions = sum(len(c["questions"]) for c in data["conversations"])
    multi = sum(q["multi_session"] for c in data["conversations"] for q in c["questions"])
    print(f"\n## embedder: {name}  ({totals['turns']} turns, {totals['episodes']} episodes, "
          f"{totals['facts']} facts; {questions} questions, {multi} multi-session)")
    print("| method | R@5 | R@10 | R@20 | R@10 single | R@10 multi | all-evidence@20 multi |")
    print("|---|---|---|---|---|---|---|")
    mean: Callable[[list[float]], float] = lambda xs: statistics.fmean(xs) if xs else 0.0  # noqa: E731
    for method in METHODS:
        s = scores[method]
        print(f"| {method} | {mean(s.recall[5]):.3f} | {mean(s.recall[10]):.3f} | "
              f"{mean(s.recall[20]):.3f} | {mean(s.single10):.3f} | {mean(s.multi10):.3f} | "
              f"{mean(s.multi_all20):.3f} |")
    for mode in ("vector", "text", "hybrid"):
        ms = [t * 1000 for t in timings[mode]]
        print(f"retrieve_memory mode={mode}: p50 {statistics.median(ms):.2f} ms (in memory)")
    print(f"ingest: median {statistics.median(timings['ingest']) * 1000:.0f} ms per conversation")


def main() -> None:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--embedder", choices=["hashing", "local", "both"], default="both")
    args = parser.parse_args()
    data = json.loads(DATA.read_text(encoding="utf-8"))
    names = ["hashing", "local"] if args.embedder == "both" else [args.embedder]
    for name in names:
        asyncio.run(run(name, data))


if __name__ == "__main__":
    main()

"""Themes per conversation on the frozen set: fixed default thresholds vs calibrated ones.

Each conversation is ingested in one call twice: with the default
``ConsolidatingThemeClusterer()`` (absolute thresholds 0.7 / 0.85) and with
``calibrated_clusterer`` built from the embedder's own vectors of the facts
(95th / 99th percentile of their pairwise similarities).

    python bench/theme_calibration.py [hashing] [local]
"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys

from cycgraph_memory.hierarchy.calibration import (
    calibrate_theme_thresholds,
    calibrated_clusterer,
)
from cycgraph_memory.hierarchy.pipeline import MemoryPipeline
from cycgraph_memory.inmemory import InMemoryMemoryStore
from retrieval_quality import DATA, make_embedder, session_messages


async def run(name: str) -> None:
    """Print theme counts per conversation for one embedder."""
    embedder = make_embedder(name)
    data = json.loads(DATA.read_text(encoding="utf-8"))
    fixed: list[int] = []
    calibrated: list[int] = []
    facts: list[int] = []
    thresholds: list[float] = []
    for conv in data["conversations"]:
        messages = [m for s in conv["sessions"] for m in session_messages(s)]
        store = InMemoryMemoryStore()
        await MemoryPipeline(store, embedder=embedder).ingest(messages)
        stored = await store.find_facts()
        facts.append(len(stored))
        fixed.append(len(await store.list_themes()))
        vectors = [f.embedding for f in stored if f.embedding is not None]
        thresholds.append(calibrate_theme_thresholds(vectors).assignment_threshold)
        other = InMemoryMemoryStore()
        clusterer = calibrated_clusterer(vectors)
        await MemoryPipeline(other, embedder=embedder, clusterer=clusterer).ingest(messages)
        calibrated.append(len(await other.list_themes()))
    print(f"{name}: facts/conversation median {statistics.median(facts)}; themes median "
          f"fixed {statistics.median(fixed)} {fixed}; calibrated "
          f"{statistics.median(calibrated)} {calibrated}; calibrated assignment threshold "
          f"median {statistics.median(thresholds):.3f}")


if __name__ == "__main__":
    for embedder_name in sys.argv[1:] or ["hashing"]:
        asyncio.run(run(embedder_name))

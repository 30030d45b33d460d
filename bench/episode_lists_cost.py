"""What the episode lists of the message fusion cost per query, on Postgres.

Ingests the ``group_chats`` frozen set (hashing embedder, pipeline defaults) into a fresh
database, then asks every question twice per mode, interleaved: with the episode lists
(``episode_weight=0.5``, the default) and without (``episode_weight=0``). Prints p50 / p95
per mode and setting, and recall@10 of both (the cost and what it buys).

    python bench/episode_lists_cost.py [--dsn URL] [--database NAME] [--set group_chats]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import time

from cycgraph_memory.hierarchy.pipeline import MemoryPipeline
from cycgraph_memory.records import MemoryQuery
from cycgraph_memory.retrieval.retrieve import retrieve_memory
from retrieval_quality import DATA, make_embedder, session_messages, turn_uuid

SETTINGS = {"episodes": 0.5, "no episodes": 0.0}


async def run(dsn: str, database: str, set_name: str) -> None:
    """Ingest, then time both settings interleaved per question and mode."""
    from sqlalchemy import text

    from cycgraph_memory.postgres import (
        PostgresMemoryIndex,
        PostgresMemoryStore,
        create_engine_from_dsn,
        upgrade,
    )
    from cycgraph_memory.postgres.engine import asyncpg_url

    data = json.loads(DATA[set_name].read_text(encoding="utf-8"))
    embedder = make_embedder("hashing")
    admin = create_engine_from_dsn(dsn, isolation_level="AUTOCOMMIT")
    async with admin.connect() as conn:
        await conn.execute(text(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)'))
        await conn.execute(text(f'CREATE DATABASE "{database}"'))
    engine = create_engine_from_dsn(asyncpg_url(dsn).set(database=database))
    times: dict[tuple[str, str], list[float]] = {}
    recall: dict[tuple[str, str], list[float]] = {}
    try:
        await upgrade(engine, embedding_dim=embedder.dimensions)
        for conv in data["conversations"]:
            store = PostgresMemoryStore(engine, tenant_id=conv["id"])
            index = PostgresMemoryIndex(engine, tenant_id=conv["id"])
            pipeline = MemoryPipeline(store, embedder=embedder, index=index)
            for session in conv["sessions"]:
                await pipeline.ingest(session_messages(session))
            by_uuid = {turn_uuid(t["id"]): t["id"] for s in conv["sessions"] for t in s["turns"]}
            for q in conv["questions"]:
                query = MemoryQuery(text=q["question"], limit=20, min_similarity=0.0)
                for mode in ("vector", "text", "hybrid"):
                    for name, weight in SETTINGS.items():
                        t0 = time.perf_counter()
                        result = await retrieve_memory(
                            store, index, query, embedder=embedder, mode=mode,  # type: ignore[arg-type]
                            options={"episode_weight": weight},
                        )
                        times.setdefault((mode, name), []).append(time.perf_counter() - t0)
                        got = {by_uuid[m.id] for m in result.messages[:10]}
                        wanted = set(q["evidence"])
                        recall.setdefault((mode, name), []).append(len(wanted & got) / len(wanted))
    finally:
        await engine.dispose()
        async with admin.connect() as conn:
            await conn.execute(text(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)'))
        await admin.dispose()
    print(f"## {set_name}, hashing, Postgres: episode lists on / off, interleaved")
    print("| mode | setting | p50 ms | p95 ms | recall@10 |")
    print("|---|---|---|---|---|")
    for (mode, name), ts in times.items():
        ms = [t * 1000 for t in ts]
        print(f"| {mode} | {name} | {statistics.median(ms):.1f} | "
              f"{statistics.quantiles(ms, n=20)[-1]:.1f} | "
              f"{statistics.fmean(recall[(mode, name)]):.3f} |")


def main() -> None:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dsn", default=os.environ.get("CYCGRAPH_MEMORY_TEST_DSN"))
    parser.add_argument("--database", default="bench_episode_lists")
    parser.add_argument("--set", choices=list(DATA), default="group_chats")
    args = parser.parse_args()
    if not args.dsn:
        parser.error("needs --dsn or CYCGRAPH_MEMORY_TEST_DSN")
    asyncio.run(run(args.dsn, args.database, args.set))


if __name__ == "__main__":
    main()



"""What themes add: vector-mode recall@10 with ``theme_limit=3`` vs ``theme_limit=0``.

On the frozen conversation set (``bench/data/conversations/conversations.json``, loaded
with ``bench/retrieval_quality.py``'s helpers), each conversation is ingested session by
session with ``MemoryPipeline`` defaults (tenant-calibrated themes) into its own tenant,
then every question is asked with ``retrieve_memory(mode="vector", min_similarity=0)``
twice: through the themes (``theme_limit=3``, the default) and without them
(``theme_limit=0``). Scored on the evidence turns among the first 10 returned messages.
Also printed: facts, themes and themes per 1,000 facts (band 5-100).

    python bench/theme_value.py [--embedder hashing|minilm] [--backend memory|postgres|both]
        [--dsn URL]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import secrets
import statistics
from typing import Any

from _ingest_growth import make_embedder
from cycgraph_memory.contracts import EmbeddingProvider
from cycgraph_memory.hierarchy.pipeline import MemoryPipeline
from cycgraph_memory.records import MemoryQuery
from cycgraph_memory.retrieval.retrieve import retrieve_memory
from retrieval_quality import DATA, session_messages, turn_uuid

LIMITS = (3, 0)


async def score_conversation(
    conv: dict[str, Any], store: Any, index: Any, embedder: EmbeddingProvider,
    recall: dict[int, list[float]],
) -> tuple[int, int]:
    """Ingest one conversation, ask its questions with each theme limit; (facts, themes)."""
    pipeline = MemoryPipeline(store, embedder=embedder, index=index)
    for session in conv["sessions"]:
        await pipeline.ingest(session_messages(session))
    by_uuid = {turn_uuid(t["id"]): t["id"] for s in conv["sessions"] for t in s["turns"]}
    for q in conv["questions"]:
        wanted = set(q["evidence"])
        for limit in LIMITS:
            result = await retrieve_memory(
                store, index,
                MemoryQuery(text=q["question"], limit=10, min_similarity=0.0),
                options={"theme_limit": limit},
                embedder=embedder, mode="vector",
            )
            got = [by_uuid[m.id] for m in result.messages][:10]
            recall[limit].append(len(wanted & set(got)) / len(wanted))
    return len(await store.find_facts()), len(await store.list_themes())


async def run(backend: str, embedder_name: str, dsn: str | None) -> dict[str, Any]:
    """Every conversation on one backend; recall@10 per theme limit and theme counts."""
    embedder = make_embedder(embedder_name)
    data = json.loads(DATA["conversations"].read_text(encoding="utf-8"))
    recall: dict[int, list[float]] = {limit: [] for limit in LIMITS}
    facts = themes = 0
    if backend == "memory":
        from cycgraph_memory.inmemory import InMemoryMemoryIndex, InMemoryMemoryStore

        for conv in data["conversations"]:
            f, t = await score_conversation(
                conv, InMemoryMemoryStore(),
                InMemoryMemoryIndex(expected_dimensions=embedder.dimensions),
                embedder, recall,
            )
            facts, themes = facts + f, themes + t
    else:
        from sqlalchemy import make_url, text

        from cycgraph_memory.postgres import (
            PostgresMemoryIndex,
            PostgresMemoryStore,
            asyncpg_url,
            create_engine_from_dsn,
            upgrade,
        )

        assert dsn is not None, "--dsn is required for the Postgres backend"
        admin = create_engine_from_dsn(dsn, isolation_level="AUTOCOMMIT")
        name = f"bench_w18a_{secrets.token_hex(4)}"
        async with admin.connect() as conn:
            await conn.execute(text(f"CREATE DATABASE {name}"))
        engine = create_engine_from_dsn(make_url(asyncpg_url(dsn)).set(database=name))
        try:
            await upgrade(engine, embedding_dim=embedder.dimensions)
            for n, conv in enumerate(data["conversations"]):
                tenant = f"conv{n}"
                f, t = await score_conversation(
                    conv, PostgresMemoryStore(engine, tenant_id=tenant),
                    PostgresMemoryIndex(engine, tenant_id=tenant), embedder, recall,
                )
                facts, themes = facts + f, themes + t
        finally:
            await engine.dispose()
            async with admin.connect() as conn:
                await conn.execute(text(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
            await admin.dispose()
    return {
        "recall": {limit: statistics.fmean(v) for limit, v in recall.items()},
        "facts": facts, "themes": themes, "per_1000": 1000 * themes / max(facts, 1),
    }


def main() -> None:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--embedder", choices=["hashing", "minilm"], default="hashing")
    parser.add_argument("--backend", choices=["memory", "postgres", "both"], default="both")
    parser.add_argument("--dsn", default=None)
    args = parser.parse_args()
    backends = ["memory", "postgres"] if args.backend == "both" else [args.backend]
    print("| backend | embedder | facts | themes | themes/1000 | R@10 theme_limit=3 "
          "| R@10 theme_limit=0 |")
    print("|---|---|---|---|---|---|---|")
    for backend in backends:
        r = asyncio.run(run(backend, args.embedder, args.dsn))
        print(f"| {backend} | {args.embedder} | {r['facts']} | {r['themes']} | "
              f"{r['per_1000']:.1f} | {r['recall'][3]:.3f} | {r['recall'][0]:.3f} |",
              flush=True)


if __name__ == "__main__":
    main()

"""Hostile message sizes through ``MemoryPipeline.ingest`` (issue 22, item 3), both backends.

Each case ingests ONE message with the pipeline's defaults (the spaCy tier when the
``parser`` extra is installed) into a fresh store and reports what happened and how long it
took: either the ingest succeeded, or it was refused (the error type). Target: anything
over ``MAX_TEXT_LENGTH`` is refused before any work (milliseconds, not minutes); anything
within it is ingested, a single 42 KB sentence in a bounded time.

    python bench/hostile_ingest.py [--backend memory|postgres|both] [--dsn postgresql://...]

Postgres: a database ``bench_hostile_<pid>`` is created on the server of ``--dsn`` (default:
``CYCGRAPH_MEMORY_TEST_DSN``), migrated, and dropped at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import time
from collections.abc import Callable
from typing import Any

from cycgraph_memory import MAX_TEXT_LENGTH, MemoryPipeline
from cycgraph_memory.hierarchy.extractors.parser import default_extractor
from cycgraph_memory.hierarchy.pipeline import DEFAULT_RULE_MAX_FACTS
from cycgraph_memory.inmemory import InMemoryMemoryStore
from cycgraph_memory.records import Message

WORDS = ["Maya", "went", "to", "the", "Lisbon", "market", "with", "Carol", "and", "bought",
         "apples", "for", "Acme", "Corp", "while", "Bob", "waited"]


def _sentence(chars: int) -> str:
    rng = random.Random(7)
    out: list[str] = []
    size = 0
    while size < chars:
        word = rng.choice(WORDS)
        out.append(word)
        size += len(word) + 1
    return " ".join(out)[:chars]


CASES: list[tuple[str, Callable[[], str]]] = [
    ("42 KB, one sentence", lambda: _sentence(42_000)),
    ("100,000 chars, no spaces", lambda: ("Qbcdefghij" * 10_000)[:MAX_TEXT_LENGTH]),
    ("1 MB, no spaces", lambda: "Q" + "b" * 999_999),
    ("10 MB, no spaces", lambda: "Q" + "b" * 9_999_999),
]


def _message(content: str) -> Message:
    # Built past validation, as a careless caller could: the pipeline must refuse it.
    return Message(role="user", content="x").model_copy(update={"content": content})


# One extractor for every case (the pipeline's default, loaded once): the spaCy model load
# is not part of what is measured.
EXTRACTOR = default_extractor(max_facts=DEFAULT_RULE_MAX_FACTS)


async def _run_case(make_store: Callable[[], Any], content: str) -> tuple[str, float]:
    store = await make_store()
    pipeline = MemoryPipeline(store, extractor=EXTRACTOR)
    started = time.perf_counter()
    try:
        report = await pipeline.ingest([_message(content)])
        outcome = f"ingested ({len(report.fact_ids)} facts, {len(report.entity_ids)} entities)"
    except Exception as exc:  # the outcome is what we report
        outcome = f"refused: {type(exc).__name__}"
    return outcome, time.perf_counter() - started


async def _bench(name: str, make_store: Callable[[], Any]) -> list[tuple[str, str, str, float]]:
    rows = []
    for label, build in CASES:
        outcome, seconds = await _run_case(make_store, build())
        rows.append((name, label, outcome, seconds))
        print(f"| {name} | {label} | {outcome} | {seconds:.3f} |", flush=True)
    return rows


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--backend", choices=["memory", "postgres", "both"], default="both")
    parser.add_argument("--dsn", default=os.environ.get("CYCGRAPH_MEMORY_TEST_DSN", ""))
    args = parser.parse_args()
    print("| backend | message | outcome | seconds |")
    print("|---|---|---|---|")
    # Load the extractor once outside the timings (spaCy loads lazily on first use).
    await MemoryPipeline(InMemoryMemoryStore(), extractor=EXTRACTOR).ingest(
        [Message(role="user", content="Hi Maya.")]
    )
    if args.backend in ("memory", "both"):

        async def memory_store() -> Any:
            return InMemoryMemoryStore()

        await _bench("memory", memory_store)
    if args.backend in ("postgres", "both"):
        if not args.dsn:
            raise SystemExit("--dsn (or CYCGRAPH_MEMORY_TEST_DSN) is needed for postgres")
        from sqlalchemy import text
        from sqlalchemy.engine import make_url

        from cycgraph_memory.postgres import PostgresMemoryStore, create_engine_from_dsn, upgrade

        name = f"bench_hostile_{os.getpid()}"
        admin = create_engine_from_dsn(args.dsn, isolation_level="AUTOCOMMIT")
        async with admin.connect() as conn:
            await conn.execute(text(f'CREATE DATABASE "{name}"'))
        dsn = make_url(args.dsn).set(database=name).render_as_string(hide_password=False)
        engine = create_engine_from_dsn(dsn)
        try:
            await upgrade(engine, embedding_dim=384)
            count = 0

            async def postgres_store() -> Any:
                nonlocal count
                count += 1
                return PostgresMemoryStore(engine, tenant_id=f"t{count}")

            await _bench("postgres", postgres_store)
        finally:
            await engine.dispose()
            async with admin.connect() as conn:
                await conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
            await admin.dispose()


if __name__ == "__main__":
    asyncio.run(main())

"""Latency of hybrid ``retrieve_memory`` on the embedded Postgres (reference workload data).

Loads the reference workload (``bench/reference_workload.py``: N facts with 384-d
embeddings, entities, themes, relationships), then asks its embedding queries with the
text of the query's own fact as well, in ``mode="vector"``, ``"text"`` and ``"hybrid"``
(20 warm-up queries, then 200 timed). Prints p50/p95 (ms) and database statements per
call (counted with a ``before_cursor_execute`` listener). The workload has no messages, so
the message signals run against an empty table.

    python bench/hybrid_latency.py [--n 100000]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from cycgraph_memory import MemoryQuery
from cycgraph_memory.retrieval.retrieve import retrieve_memory
from reference_workload import build_facts, generate
from retrieval import StatementCounter, load, nearest_rank

WARMUP = 20
TIMED = 200


async def main(n: int) -> None:
    """Load, query, print."""
    from sqlalchemy import event, text

    from cycgraph_memory.postgres import (
        PostgresMemoryIndex,
        PostgresMemoryStore,
        create_engine_from_dsn,
        start_embedded_server,
        upgrade,
    )

    # records=False: facts are built in batches while loading, so the client does not
    # hold 100,000 records whose garbage-collector passes would be timed with the queries.
    w = generate(n, records=False)
    queries = [
        MemoryQuery(embedding=vector, text=build_facts(w, j, j + 1)[0].content, limit=10,
                    min_similarity=0.0)
        for vector, j in w.embedding_queries[: WARMUP + TIMED]
    ]
    with tempfile.TemporaryDirectory(prefix="cycgraph-hybrid-bench-") as tmp:
        server = start_embedded_server(Path(tmp) / "data", cleanup_mode="delete")
        try:
            admin = create_engine_from_dsn(server.dsn, isolation_level="AUTOCOMMIT")
            async with admin.connect() as conn:
                await conn.execute(text("CREATE DATABASE cycgraph_hybrid"))
            await admin.dispose()
            engine = create_engine_from_dsn(server.dsn_for("cycgraph_hybrid"))
            await upgrade(engine, embedding_dim=384)
            store = PostgresMemoryStore(engine)
            index = PostgresMemoryIndex(engine)
            seconds = await load(store, w)
            await index.rebuild(analyze=True)
            w.entities, w.themes, w.relationships, w.raw, w.fact_embeddings = [], [], [], [], None
            # A settled database (as bench/retrieval.py): no autovacuum during the timing.
            vac = create_engine_from_dsn(
                server.dsn_for("cycgraph_hybrid"), isolation_level="AUTOCOMMIT"
            )
            async with vac.connect() as conn:
                await conn.execute(text("VACUUM (ANALYZE)"))
            await vac.dispose()
            counter = StatementCounter()
            event.listen(engine.sync_engine, "before_cursor_execute", counter)
            print(f"N={n} facts loaded in {seconds:.0f} s")
            for mode in ("vector", "text", "hybrid"):
                times: list[float] = []
                statements = 0
                for i, q in enumerate(queries):
                    before = counter.count
                    t0 = time.perf_counter()
                    await retrieve_memory(store, index, q, mode=mode)  # type: ignore[arg-type]
                    elapsed = (time.perf_counter() - t0) * 1000
                    if i >= WARMUP:
                        times.append(elapsed)
                        statements += counter.count - before
                print(f"mode={mode:7s} p50 {nearest_rank(times, 50):7.2f} ms  "
                      f"p95 {nearest_rank(times, 95):7.2f} ms  "
                      f"statements/call {statements / len(times):.1f}")
            await engine.dispose()
        finally:
            server.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=100_000)
    args: Any = parser.parse_args()
    asyncio.run(main(args.n))

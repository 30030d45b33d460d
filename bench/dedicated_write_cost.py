"""What a dedicated vector index costs a tenant's writes.

On a database a ``bench/scale.py --scale tenants --keep`` (or ``--reuse``) run left, writes
batches of facts with embeddings into one tenant four times: with its dedicated vector
index on ``facts`` (built here when missing), with the shared index only (the dedicated
one dropped), and the two again. Prints the p50 of each round (after a warm-up) and the
ratio against the shared-only rounds (the first round may read a cold index from disk).
The probe facts are deleted after each round and the tenant's dedicated ``facts`` index is
put back as it was found (present or not).

    python bench/dedicated_write_cost.py --dsn $DSN --db bench_scale_tenants --tenant t0003
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

import numpy as np
from sqlalchemy import text

from cycgraph_memory import Provenance, SemanticFact
from cycgraph_memory.postgres import (
    PostgresMemoryStore,
    create_engine_from_dsn,
    dedicate_vector_indexes,
    drop_dedicated_vector_indexes,
    list_dedicated_vector_indexes,
)

sys.path.insert(0, str(Path(__file__).resolve().parent))

from scale import make_url_for

PROBE_TAG = "bench_dedicated_write_probe"


async def write_round(engine: object, tenant: str, label: str, batches: int, size: int,
                      warmup: int) -> float:
    """p50 ms of ``put_facts`` of ``size`` facts, over ``batches`` after ``warmup``."""
    store = PostgresMemoryStore(engine, tenant_id=tenant)  # type: ignore[arg-type]
    rng = np.random.default_rng(3)
    prov = Provenance(source="system")
    times = []
    for b in range(warmup + batches):
        vectors = rng.standard_normal((size, 384))
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        facts = [
            SemanticFact(content=f"probe {label} {b} {i}", embedding=vectors[i].tolist(),
                         provenance=prov, tags=[PROBE_TAG])
            for i in range(size)
        ]
        start = time.perf_counter()
        await store.put_facts(facts)
        times.append(1000 * (time.perf_counter() - start))
    async with engine.begin() as conn:  # type: ignore[attr-defined]
        await conn.execute(
            text("DELETE FROM facts WHERE tenant_id = :t AND :tag = ANY(tags)"),
            {"t": tenant, "tag": PROBE_TAG},
        )
    return statistics.median(times[warmup:])


async def main() -> None:
    """Parse the arguments, run the four rounds and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", required=True, help="server DSN")
    parser.add_argument("--db", default="bench_scale_tenants", help="database of the run")
    parser.add_argument("--tenant", default="t0003", help="tenant written to")
    parser.add_argument("--batches", type=int, default=12)
    parser.add_argument("--size", type=int, default=20, help="facts per put_facts")
    parser.add_argument("--warmup", type=int, default=3)
    args = parser.parse_args()
    engine = create_engine_from_dsn(make_url_for(args.dsn, args.db))
    had_index = any(d.table == "facts" and d.tenant_id == args.tenant
                    for d in await list_dedicated_vector_indexes(engine))
    try:
        rounds = (("dedicated", True), ("shared only", False), ("dedicated again", True),
                  ("shared only again", False))
        results = []
        for label, dedicated in rounds:
            if dedicated:
                await dedicate_vector_indexes(engine, args.tenant, tables=["facts"])
            else:
                await drop_dedicated_vector_indexes(engine, args.tenant, tables=["facts"])
            results.append((label, await write_round(engine, args.tenant, label, args.batches,
                                                     args.size, args.warmup)))
        shared = statistics.median(p50 for label, p50 in results if label.startswith("shared"))
        print(f"put_facts of {args.size} facts into {args.tenant}, p50 of {args.batches} batches")
        print("x shared: against the median of the shared-only rounds")
        print(f"{'round':<18}{'p50 ms':>10}{'x shared':>10}")
        for label, p50 in results:
            print(f"{label:<18}{p50:>10.1f}{p50 / shared:>10.2f}")
    finally:
        if had_index:
            await dedicate_vector_indexes(engine, args.tenant, tables=["facts"])
        else:
            await drop_dedicated_vector_indexes(engine, args.tenant, tables=["facts"])
        await engine.dispose()


if __name__ == "__main__":
    asyncio.run(main())

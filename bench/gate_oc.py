"""Gate operating characteristics: the spec's example grid, its timing, and two SVG charts.

Run: ``.venv/bin/python bench/gate_oc.py`` (a few seconds). The grid is the spec's
"Validating your policy" example: effects -0.3, -0.1, 0, 0.1, 0.3; 50, 100 and 200 runs;
noise SD 0.1; 20 replicates; policy noise floor 0.1 and max baseline runs 64; retrieval
rests candidates after 3 trials (20 x 5 x 350 = 35,000 simulated runs). It prints the
decision-rate table, the median wall time of ``--repeat`` full-grid runs on the in-memory
backend and, with ``--postgres``, the time of the same loop on an embedded Postgres server
(``--pg-replicates`` replicates per cell, scaled to the full grid in the printout).

With matplotlib installed (``pip install 'cycgraph-memory[charts]'``) it writes
``docs/gate-detection.svg`` and ``docs/gate-false-decisions.svg`` (``--no-charts`` skips).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from cycgraph_memory.retention import OperatingCharacteristicsRow, gate_operating_characteristics

EFFECTS = [-0.3, -0.1, 0.0, 0.1, 0.3]
RUN_COUNTS = [50, 100, 200]
DOCS = Path(__file__).resolve().parents[1] / "docs"


def grid(replicates: int, seed: int) -> dict[str, Any]:
    return {
        "effects": EFFECTS,
        "run_counts": RUN_COUNTS,
        "noise_sds": [0.1],
        "replicates": replicates,
        "seed": seed,
        "policy": {"noise_floor_sd": 0.1, "max_baseline_runs": 64},
        "retrieval": {"rest_after_trials": 3},
    }


def table(rows: list[OperatingCharacteristicsRow]) -> str:
    head = (
        f"{'effect':>6} {'runs':>5} {'promote':>8} {'harmful':>8} {'no_lift':>8} "
        f"{'held':>6} {'false+':>7} {'false-':>7} {'mean run':>9}"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        mean = "-" if r.mean_decision_run is None else f"{r.mean_decision_run:.1f}"
        lines.append(
            f"{r.effect:>+6.1f} {r.runs:>5} {r.promote_rate:>8.0%} {r.harmful_evict_rate:>8.0%} "
            f"{r.no_lift_rate:>8.0%} {r.held_rate:>6.0%} {r.false_promote_rate:>7.0%} "
            f"{r.false_evict_rate:>7.0%} {mean:>9}"
        )
    return "\n".join(lines)


def charts(rows: list[OperatingCharacteristicsRow], replicates: int) -> list[Path]:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not installed: pip install 'cycgraph-memory[charts]' for the charts")
        return []
    # Reproducible SVGs: fixed element ids, no creation date.
    matplotlib.rcParams["svg.hashsalt"] = "cycgraph-gate-oc"
    meta = {"Date": None}
    DOCS.mkdir(exist_ok=True)
    out = []

    fig, ax = plt.subplots(figsize=(7, 4.2))
    for effect in EFFECTS:
        cells = [r for r in rows if r.effect == effect]
        if effect > 0:
            ys, label = [r.promote_rate for r in cells], f"effect {effect:+.1f}: promoted"
        elif effect < 0:
            ys = [r.harmful_evict_rate for r in cells]
            label = f"effect {effect:+.1f}: evicted harmful"
        else:
            ys = [r.promote_rate + r.harmful_evict_rate for r in cells]
            label = "effect 0: any verdict (false)"
        style = "--" if effect < 0 else "-"  # harmful effects dashed: equal rates overlap
        marker = "s" if effect < 0 else "o"
        ax.plot([r.runs for r in cells], ys, linestyle=style, marker=marker,
                markersize=8 if effect < 0 else 5, label=label)
    ax.axhline(0.9, color="grey", linestyle=":", linewidth=1)
    ax.set_xlabel("simulated runs")
    ax.set_ylabel("detection rate")
    ax.set_ylim(-0.02, 1.02)
    ax.set_xticks(RUN_COUNTS)
    ax.set_title(f"Gate detection rate (noise SD 0.1, {replicates} replicates per point)")
    ax.legend(fontsize=8, loc="center right")
    fig.tight_layout()
    path = DOCS / "gate-detection.svg"
    fig.savefig(path, format="svg", metadata=meta)
    plt.close(fig)
    out.append(path)

    fig, ax = plt.subplots(figsize=(7, 4.2))
    labels, fp, fe = [], [], []
    for r in rows:
        labels.append(f"{r.effect:+.1f}\n{r.runs}")
        fp.append(r.false_promote_rate)
        fe.append(r.false_evict_rate)
    xs = range(len(labels))
    ax.bar([x - 0.2 for x in xs], fp, width=0.4, label="false promote (effect <= 0)")
    ax.bar([x + 0.2 for x in xs], fe, width=0.4, label="false harmful-evict (effect >= 0)")
    ax.axhline(0.02, color="grey", linestyle=":", linewidth=1)
    if not any(fp) and not any(fe):
        ax.text(0.5, 0.5, "no false decision in any cell", transform=ax.transAxes,
                ha="center", va="center", color="grey")
    ax.set_xticks(list(xs))
    ax.set_xticklabels(labels, fontsize=7)
    ax.set_xlabel("effect / runs")
    ax.set_ylabel("rate")
    ax.set_ylim(0, max(0.1, *fp, *fe) * 1.1)
    ax.set_title("Gate false-decision rates (dotted line: 2%)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    path = DOCS / "gate-false-decisions.svg"
    fig.savefig(path, format="svg", metadata=meta)
    plt.close(fig)
    out.append(path)
    return out


async def postgres_time(replicates: int, seed: int) -> tuple[float, int]:
    from sqlalchemy import text

    from cycgraph_memory.postgres import (
        PostgresMemoryStore,
        PostgresOutcomeLedger,
        create_engine_from_dsn,
        start_embedded_server,
        upgrade,
    )

    with tempfile.TemporaryDirectory(prefix="cycgraph-gate-") as tmp:
        server = start_embedded_server(Path(tmp) / "data", cleanup_mode="delete")
        admin = create_engine_from_dsn(server.dsn, isolation_level="AUTOCOMMIT")
        async with admin.connect() as conn:
            await conn.execute(text("CREATE DATABASE cycgraph_gate"))
        await admin.dispose()
        engine = create_engine_from_dsn(server.dsn_for("cycgraph_gate"))
        try:
            await upgrade(engine, embedding_dim=8)
            store = PostgresMemoryStore(engine, tenant_id="gate")
            ledger = PostgresOutcomeLedger(engine, tenant_id="gate")

            async def backend() -> Any:
                await store.clear()
                await ledger.clear()
                return store, ledger

            t0 = time.perf_counter()
            await gate_operating_characteristics(grid(replicates, seed), backend=backend)
            elapsed = time.perf_counter() - t0
        finally:
            await engine.dispose()
    return elapsed, replicates * len(EFFECTS) * sum(RUN_COUNTS)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--replicates", type=int, default=20)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=3, help="timed full-grid runs")
    parser.add_argument("--postgres", action="store_true")
    parser.add_argument("--pg-replicates", type=int, default=2)
    parser.add_argument("--no-charts", action="store_true")
    args = parser.parse_args()

    runs = args.replicates * len(EFFECTS) * sum(RUN_COUNTS)
    times, cpu, rows = [], [], []
    for _ in range(args.repeat):
        t0, c0 = time.perf_counter(), time.process_time()
        rows = await gate_operating_characteristics(grid(args.replicates, args.seed))
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    print(table(rows))
    print(
        f"\nin-memory: {runs:,} simulated runs, median {statistics.median(times):.2f} s "
        f"over {args.repeat} runs (min {min(times):.2f}, max {max(times):.2f}), median CPU "
        f"time {statistics.median(cpu):.2f} s; TypeScript reference 0.93 s, target <= 2 s"
    )
    null = [r for r in rows if r.effect == 0]
    strong = [r for r in rows if abs(r.effect) == 0.3 and r.runs == 200]
    print(
        "null false-promote: "
        + ", ".join(f"{r.runs} runs {r.false_promote_rate:.0%}" for r in null)
        + "; null false-evict: "
        + ", ".join(f"{r.runs} runs {r.false_evict_rate:.0%}" for r in null)
    )
    print(
        "detection at 200 runs: "
        + ", ".join(
            f"{r.effect:+.1f} -> "
            + (f"promoted {r.promote_rate:.0%}" if r.effect > 0
               else f"evicted harmful {r.harmful_evict_rate:.0%}")
            for r in strong
        )
    )
    if args.postgres:
        elapsed, pg_runs = await postgres_time(args.pg_replicates, args.seed)
        per_run = elapsed / pg_runs
        print(
            f"postgres (embedded): {pg_runs:,} simulated runs in {elapsed:.1f} s "
            f"({per_run * 1000:.2f} ms per run; full grid ~{per_run * runs:.0f} s)"
        )
    if not args.no_charts:
        for path in charts(rows, args.replicates):
            print(f"wrote {path.relative_to(DOCS.parent)}")


if __name__ == "__main__":
    asyncio.run(main())

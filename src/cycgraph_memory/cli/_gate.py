"""``gate``: run a retention-gate pass, read its audit log, simulate its operating curve."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any
from xml.sax.saxutils import escape

import typer

from cycgraph_memory.cli._common import (
    JSON_OPTION,
    emit_json,
    fail,
    open_memory,
    progress_bar,
    run,
    settings,
    table,
)

if TYPE_CHECKING:
    from cycgraph_memory.retention import OperatingCharacteristicsRow

__all__ = ["gate_app", "operating_characteristics_svg"]

gate_app = typer.Typer(help="The eval-gated retention of lessons.", no_args_is_help=True)


def _policy(min_trials: int | None, rule: str | None, candidate_tag: str | None) -> Any:
    from cycgraph_memory.retention import RetentionPolicy

    values: dict[str, Any] = {}
    if min_trials is not None:
        values["min_trials"] = min_trials
    if rule is not None:
        values["decision_rule"] = rule
    if candidate_tag is not None:
        values["candidate_tag"] = candidate_tag
    return RetentionPolicy.model_validate(values)


@gate_app.command("evaluate")
def evaluate_cmd(
    ctx: typer.Context,
    min_trials: int | None = typer.Option(None, "--min-trials", help="Trials before a verdict."),
    rule: str | None = typer.Option(None, "--decision-rule", help="inference or margin."),
    candidate_tag: str | None = typer.Option(None, "--candidate-tag", help="Tag of candidates."),
    json_output: bool = JSON_OPTION,
) -> None:
    """Run one gate pass: promote, evict or hold every candidate lesson."""
    state = settings(ctx, json_output)

    async def work() -> Any:
        from cycgraph_memory.retention import evaluate_retention

        policy = _policy(min_trials, rule, candidate_tag)
        async with await open_memory(state) as memory:
            assert memory.ledger is not None
            return await evaluate_retention(memory.store, memory.ledger, policy)

    report = run(
        work,
        {
            "min_trials": "--min-trials",
            "decision_rule": "--decision-rule",
            "candidate_tag": "--candidate-tag",
        },
    )
    if state.json:
        emit_json(state, report.model_dump(mode="json"))
        return
    rows: list[list[Any]] = []
    rows += [["promoted", str(p.fact_id), ""] for p in report.promoted]
    rows += [["evicted", str(e.fact_id), e.reason] for e in report.evicted]
    rows += [["held", str(h.fact_id), f"{h.trials} trials"] for h in report.held]
    state.console.print(table(f"gate pass {report.pass_id}", ["verdict", "fact", "why"], rows))


@gate_app.command("audit")
def audit_cmd(
    ctx: typer.Context,
    pass_id: str | None = typer.Option(None, "--pass-id", help="One pass only."),
    fact_id: str | None = typer.Option(None, "--fact-id", help="One fact only."),
    limit: int | None = typer.Option(None, "--limit", "-n", help="Most entries."),
    offset: int = typer.Option(0, "--offset", help="Entries to skip first (paging)."),
    json_output: bool = JSON_OPTION,
) -> None:
    """Show the gate's append-only audit log (oldest first)."""
    state = settings(ctx, json_output)
    for flag, value in (("--pass-id", pass_id), ("--fact-id", fact_id)):
        if value is not None:
            try:
                uuid.UUID(value)
            except ValueError:
                fail(f"{flag} must be a whole id (a UUID, as the table shows it), got {value!r}")

    async def work() -> Any:
        async with await open_memory(state) as memory:
            lister = getattr(memory.ledger, "list_gate_audit", None)
            if lister is None:
                fail("this ledger keeps no gate audit log")
            return await lister(pass_id=pass_id, fact_id=fact_id, limit=limit, offset=offset)

    entries = run(work, {"limit": "--limit", "offset": "--offset"})
    if state.json:
        emit_json(state, {"entries": [e.model_dump(mode="json") for e in entries]})
        return
    state.console.print(
        table(
            f"{len(entries)} audit entries",
            ["decided at", "pass", "fact", "verdict", "reason", "trials", "lift", "p(promote)"],
            [
                [
                    e.decided_at.isoformat(timespec="seconds"),
                    str(e.pass_id),  # whole: what --pass-id takes
                    str(e.fact_id),
                    e.verdict,
                    e.reason or "",
                    e.trials,
                    "" if e.evidence is None else f"{e.evidence.lift:+.3f}",
                    "" if e.evidence is None else f"{e.evidence.p_promote:.3g}",
                ]
                for e in entries
            ],
        )
    )


def _floats(name: str, text: str) -> list[float]:
    try:
        return [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        fail(f"{name} must be comma-separated numbers, got {text!r}")


def _ints(name: str, text: str) -> list[int]:
    try:
        return [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        fail(f"{name} must be comma-separated integers, got {text!r}")


_COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#17becf")


def operating_characteristics_svg(rows: list[OperatingCharacteristicsRow]) -> str:
    """A line chart (SVG text) of the promote and evict rates by run count, one line per effect.

    Solid lines (filled markers) are promotion rates, dashed lines (hollow markers)
    eviction rates; one panel per noise level.
    """
    width, height, pad = 640, 360, 48
    noises = sorted({r.noise_sd for r in rows})
    effects = sorted({r.effect for r in rows}, reverse=True)
    runs = sorted({r.runs for r in rows})
    panel_h = height
    total_h = panel_h * len(noises)
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{total_h}" '
        f'viewBox="0 0 {width} {total_h}" font-family="sans-serif" font-size="11">',
        f'<rect width="{width}" height="{total_h}" fill="white"/>',
    ]

    def x_of(n: int) -> float:
        if len(runs) == 1:
            return pad + (width - 2 * pad) / 2
        return pad + (width - 2 * pad - 120) * runs.index(n) / (len(runs) - 1)

    for p, noise in enumerate(noises):
        top = p * panel_h

        def y_of(rate: float, top: float = top) -> float:
            return top + panel_h - pad - (panel_h - 2 * pad) * rate

        out.append(
            f'<text x="{pad}" y="{top + 20}" font-size="13">Gate decisions by run volume '
            f"(noise sd {noise:g})</text>"
        )
        out.append(
            f'<line x1="{pad}" y1="{y_of(0)}" x2="{width - pad - 120}" y2="{y_of(0)}" '
            'stroke="black"/>'
        )
        out.append(f'<line x1="{pad}" y1="{y_of(0)}" x2="{pad}" y2="{y_of(1)}" stroke="black"/>')
        for tick in (0.0, 0.5, 1.0):
            out.append(
                f'<text x="{pad - 6}" y="{y_of(tick) + 4}" text-anchor="end">{tick:.1f}</text>'
            )
        for n in runs:
            out.append(f'<text x="{x_of(n)}" y="{y_of(0) + 16}" text-anchor="middle">{n}</text>')
        out.append(
            f'<text x="{(width - 120) / 2}" y="{top + panel_h - 8}" text-anchor="middle">'
            "runs</text>"
        )
        for i, effect in enumerate(effects):
            colour = _COLOURS[i % len(_COLOURS)]
            cell = sorted(
                (r for r in rows if r.noise_sd == noise and r.effect == effect),
                key=lambda r: r.runs,
            )
            for attr, dash in (("promote_rate", ""), ("evict_rate", ' stroke-dasharray="5,4"')):
                points = " ".join(f"{x_of(r.runs):.1f},{y_of(getattr(r, attr)):.1f}" for r in cell)
                out.append(
                    f'<polyline points="{points}" fill="none" stroke="{colour}" '
                    f'stroke-width="2"{dash}/>'
                )
                # A marker per point: one run volume makes a one-point line, which SVG
                # draws as nothing (filled: promotion, hollow: eviction).
                fill = colour if not dash else "white"
                out.extend(
                    f'<circle cx="{x_of(r.runs):.1f}" cy="{y_of(getattr(r, attr)):.1f}" r="3" '
                    f'fill="{fill}" stroke="{colour}"/>'
                    for r in cell
                )
            legend_y = top + pad + 16 * i
            out.append(
                f'<text x="{width - pad - 110}" y="{legend_y}" fill="{colour}">'
                f"{escape(f'effect {effect:+g}')}</text>"
            )
        out.append(
            f'<text x="{width - pad - 110}" y="{top + pad + 16 * len(effects) + 8}">'
            "solid: promoted</text>"
        )
        out.append(
            f'<text x="{width - pad - 110}" y="{top + pad + 16 * len(effects) + 24}">'
            "dashed: evicted</text>"
        )
    out.append("</svg>")
    return "\n".join(out) + "\n"


@gate_app.command("simulate")
def simulate_cmd(
    ctx: typer.Context,
    effects: str = typer.Option("0.1,0,-0.1", "--effects", help="True lesson effects."),
    run_counts: str = typer.Option("20,50,100", "--runs", help="Run volumes to simulate."),
    noise: str = typer.Option("0.1", "--noise", help="Score noise standard deviations."),
    replicates: int = typer.Option(20, "--replicates", help="Simulations per cell."),
    seed: int = typer.Option(1, "--seed", help="Random seed."),
    chart: Path | None = typer.Option(None, "--chart", help="Write an SVG chart here."),
    json_output: bool = JSON_OPTION,
) -> None:
    """Operating characteristics of the gate (in memory): decision rates per cell."""
    state = settings(ctx, json_output)
    config = {
        "effects": _floats("--effects", effects),
        "run_counts": _ints("--runs", run_counts),
        "noise_sds": _floats("--noise", noise),
        "replicates": replicates,
        "seed": seed,
    }

    async def work() -> list[OperatingCharacteristicsRow]:
        from cycgraph_memory.retention import gate_operating_characteristics

        with progress_bar(state, "simulating") as progress:
            return await gate_operating_characteristics(config, progress=progress)

    rows = run(
        work,
        {
            "effects": "--effects",
            "run_counts": "--runs",
            "noise_sds": "--noise",
            "replicates": "--replicates",
            "seed": "--seed",
        },
    )
    if chart is not None:
        try:
            chart.write_text(operating_characteristics_svg(rows), encoding="utf-8")
        except OSError as exc:
            fail(f"cannot write {chart}: {exc.strerror or exc}")
    if state.json:
        emit_json(
            state,
            {
                "rows": [r.model_dump(mode="json") for r in rows],
                "chart": None if chart is None else str(chart),
            },
        )
        return
    state.console.print(
        table(
            "gate operating characteristics",
            [
                "noise",
                "effect",
                "runs",
                "promote",
                "evict",
                "harmful",
                "no lift",
                "held",
                "mean decision run",
            ],
            [
                [
                    r.noise_sd,
                    f"{r.effect:+g}",
                    r.runs,
                    f"{r.promote_rate:.2f}",
                    f"{r.evict_rate:.2f}",
                    f"{r.harmful_evict_rate:.2f}",
                    f"{r.no_lift_rate:.2f}",
                    f"{r.held_rate:.2f}",
                    "-" if r.mean_decision_run is None else f"{r.mean_decision_run:.1f}",
                ]
                for r in rows
            ],
        )
    )
    if chart is not None:
        state.console.print(f"chart written to {chart}", markup=False)

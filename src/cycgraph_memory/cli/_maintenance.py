"""``resolve-entities``, ``consolidate`` and ``conflicts``: plan, show, apply."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import typer

from cycgraph_memory.cli._common import (
    JSON_OPTION,
    Settings,
    emit_json,
    fail,
    open_memory,
    progress_bar,
    run,
    settings,
    table,
)

if TYPE_CHECKING:
    from cycgraph_memory.consolidation.plan import Mutation
    from cycgraph_memory.records import Conflict

__all__ = ["register"]

conflicts_app = typer.Typer(help="Contradicting facts.", no_args_is_help=True)

_POLICIES = ("supersede-on-newer", "negation-invalidates-positive", "manual-review")


def register(app: typer.Typer) -> None:
    """Add this module's commands to ``app``."""
    app.command("resolve-entities")(resolve_entities_cmd)
    app.command("consolidate")(consolidate_cmd)
    app.add_typer(conflicts_app, name="conflicts")


def _describe(record: Any) -> str:
    for name in ("content", "name", "label", "topic"):
        value = getattr(record, name, None)
        if isinstance(value, str):
            return value
    relation = getattr(record, "relation_type", None)
    return "" if relation is None else f"{record.source_id} -[{relation}]-> {record.target_id}"


def mutation_rows(mutations: Sequence[Mutation]) -> list[dict[str, Any]]:
    """Plain rows for planned mutations (``put`` / ``delete``, kind, id, reason, what)."""
    from cycgraph_memory.consolidation.plan import Put

    rows = []
    for m in mutations:
        if isinstance(m, Put):
            rows.append(
                {
                    "action": "put",
                    "kind": m.kind,
                    "id": str(m.id),
                    "reason": m.reason,
                    "record": _describe(m.record),
                }
            )
        else:
            rows.append(
                {
                    "action": "delete",
                    "kind": m.kind,
                    "id": str(m.id),
                    "reason": m.reason,
                    "record": "",
                }
            )
    return rows


def _show_plan(
    state: Settings, title: str, report: Any, mutations: Sequence[Mutation], dry_run: bool
) -> None:
    rows = mutation_rows(mutations)
    report_json = report.model_dump(mode="json", exclude={"mutation_log"}) if report else {}
    # The table holds the report's counts; a conflict resolution's decisions (`details`)
    # get a table of their own.
    counts = [(k, v) for k, v in report_json.items() if k != "details"]
    if state.json:
        payload: dict[str, Any] = {"dry_run": dry_run, "report": report_json}
        if dry_run:
            payload["mutations"] = rows
        emit_json(state, payload)
        return
    console = state.console
    console.print(table(f"{title}{' (dry run)' if dry_run else ''}", ["", "count"], counts))
    if not dry_run:
        return
    if rows:
        console.print(
            table(
                f"{len(rows)} mutations would be applied (nothing was changed)",
                ["action", "kind", "id", "reason", "record"],
                [[r["action"], r["kind"], r["id"], r["reason"], r["record"]] for r in rows],
            )
        )
    else:
        console.print("nothing to change", markup=False)


def resolve_entities_cmd(
    ctx: typer.Context,
    dry_run: bool = typer.Option(False, "--dry-run", help="Show the plan; change nothing."),
    delete_mode: str = typer.Option("soft", "--delete-mode", help="soft or hard."),
    json_output: bool = JSON_OPTION,
) -> None:
    """Merge entities that share a normalised name and type."""
    state = settings(ctx, json_output)

    async def work() -> tuple[Any, list[Mutation]]:
        from cycgraph_memory.consolidation import EntityResolver

        async with await open_memory(state) as memory:
            resolver = EntityResolver(
                memory.store,
                index=memory.index,
                delete_mode=delete_mode,  # type: ignore[arg-type]
            )
            with progress_bar(state, "resolving entities") as progress:
                if dry_run:
                    plan = await resolver.plan(progress=progress)
                    return plan.report, plan.mutations
                return await resolver.resolve(progress=progress), []

    report, mutations = run(work, {"delete_mode": "--delete-mode"})
    _show_plan(state, "entity resolution", report, mutations, dry_run)


def consolidate_cmd(
    ctx: typer.Context,
    dry_run: bool = typer.Option(False, "--dry-run", help="Show the plan; change nothing."),
    max_facts: int | None = typer.Option(None, "--max-facts", help="Facts to retain."),
    max_episodes: int | None = typer.Option(None, "--max-episodes", help="Episodes to retain."),
    dedup_threshold: float = typer.Option(0.9, "--dedup-threshold", help="Duplicate cosine."),
    half_life_days: float = typer.Option(30, "--half-life-days", help="Decay half-life."),
    delete_mode: str = typer.Option("soft", "--delete-mode", help="soft or hard."),
    json_output: bool = JSON_OPTION,
) -> None:
    """Merge near-duplicate facts, prune past the budgets, clean up themes."""
    state = settings(ctx, json_output)

    async def work() -> tuple[Any, list[Mutation]]:
        from cycgraph_memory.consolidation import MemoryConsolidator

        async with await open_memory(state) as memory:
            consolidator = MemoryConsolidator(
                memory.store,
                memory.index,
                max_facts=max_facts,
                max_episodes=max_episodes,
                dedup_threshold=dedup_threshold,
                decay_half_life_days=half_life_days,
                delete_mode=delete_mode,  # type: ignore[arg-type]
            )
            with progress_bar(state, "consolidating") as progress:
                if dry_run:
                    plan = await consolidator.plan(progress=progress)
                    return plan.report, plan.mutations
                return await consolidator.consolidate(progress=progress), []

    report, mutations = run(
        work,
        {
            "max_facts": "--max-facts",
            "max_episodes": "--max-episodes",
            "dedup_threshold": "--dedup-threshold",
            "decay_half_life_days": "--half-life-days",
            "delete_mode": "--delete-mode",
        },
    )
    _show_plan(state, "consolidation", report, mutations, dry_run)


def _conflict_rows(conflicts: Sequence[Conflict]) -> list[dict[str, Any]]:
    return [
        {
            "type": c.type,
            "confidence": round(c.confidence, 3),
            "fact_a": {"id": str(c.fact_a.id), "content": c.fact_a.content},
            "fact_b": {"id": str(c.fact_b.id), "content": c.fact_b.content},
        }
        for c in conflicts
    ]


def _show_conflicts(state: Settings, rows: list[dict[str, Any]]) -> None:
    state.console.print(
        table(
            f"{len(rows)} conflicts",
            ["type", "confidence", "fact a", "fact b"],
            [
                [r["type"], r["confidence"], r["fact_a"]["content"], r["fact_b"]["content"]]
                for r in rows
            ],
        )
    )


@conflicts_app.command("detect")
def detect_cmd(ctx: typer.Context, json_output: bool = JSON_OPTION) -> None:
    """List contradicting fact pairs (read-only)."""
    state = settings(ctx, json_output)

    async def work() -> list[Conflict]:
        from cycgraph_memory.consolidation import ConflictDetector

        async with await open_memory(state) as memory:
            detector = ConflictDetector(memory.store, memory.index)
            with progress_bar(state, "detecting conflicts") as progress:
                return await detector.detect_conflicts(progress=progress)

    rows = _conflict_rows(run(work))
    if state.json:
        emit_json(state, {"conflicts": rows})
    else:
        _show_conflicts(state, rows)


@conflicts_app.command("resolve")
def resolve_cmd(
    ctx: typer.Context,
    policy: str = typer.Option(..., "--policy", help=" | ".join(_POLICIES)),
    dry_run: bool = typer.Option(False, "--dry-run", help="Show the plan; change nothing."),
    json_output: bool = JSON_OPTION,
) -> None:
    """Detect conflicts and resolve them under a policy (losers are soft-deleted)."""
    state = settings(ctx, json_output)
    if policy not in _POLICIES:
        fail(f"--policy must be one of {', '.join(_POLICIES)}, got {policy!r}")

    async def work() -> tuple[Any, list[Mutation]]:
        from cycgraph_memory.consolidation import ConflictDetector

        async with await open_memory(state) as memory:
            detector = ConflictDetector(memory.store, memory.index)
            with progress_bar(state, "detecting conflicts") as progress:
                conflicts = await detector.detect_conflicts(progress=progress)
            if dry_run:
                plan = await detector.plan_resolution(conflicts, policy)  # type: ignore[arg-type]
                return plan.report, plan.mutations
            return await detector.auto_resolve_all(conflicts, policy), []  # type: ignore[arg-type]

    report, mutations = run(work)
    if state.json:
        emit_json(
            state,
            {
                "dry_run": dry_run,
                "policy": policy,
                "resolved": report.resolved,
                "skipped": report.skipped,
                "details": [
                    {
                        "action": d.action,
                        "reason": d.reason,
                        "type": d.conflict.type,
                        "fact_a": str(d.conflict.fact_a.id),
                        "fact_b": str(d.conflict.fact_b.id),
                    }
                    for d in report.details
                ],
                **({"mutations": mutation_rows(mutations)} if dry_run else {}),
            },
        )
        return
    _show_plan(state, f"conflict resolution ({policy})", report, mutations, dry_run)
    if report.details:
        state.console.print(
            table(
                "decisions",
                ["action", "reason", "fact a", "fact b"],
                [
                    [d.action, d.reason, d.conflict.fact_a.content, d.conflict.fact_b.content]
                    for d in report.details
                ],
            )
        )

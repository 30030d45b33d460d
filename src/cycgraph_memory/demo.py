"""End-to-end demo: ``python -m cycgraph_memory.demo`` (what ``make demo`` runs).

Connects to ``CYCGRAPH_MEMORY_DSN`` when it is set, otherwise starts an embedded
PostgreSQL 18 + pgvector server in ``./.demo-pgdata``; migrates the schema with Alembic;
ingests the bundled sample conversation through the whole pipeline (segment, extract,
embed, cluster, persist in one transaction) with the library's defaults; ingests it again
to show that re-ingest adds nothing; then, through the one retrieval entry point
(``retrieve_memory``), asks a question (hybrid: vector, BM25 text and the entities it
names), lists a tag scope and walks an entity's subgraph; ingests a later session that
ends a relationship and asks the graph as it was before and as it is now; and runs the
retention loop on a lesson (outcomes recorded in the ledger, one gate pass, gated lessons).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import textwrap
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path
from typing import Any

from cycgraph_memory.embeddings.hashing import HashingEmbeddingProvider
from cycgraph_memory.hierarchy.pipeline import MemoryPipeline
from cycgraph_memory.records import Entity, MemoryQuery, Message, Relationship, RunOutcome
from cycgraph_memory.retention import evaluate_retention
from cycgraph_memory.retrieval import retrieve_gated_lessons, retrieve_memory

__all__ = ["load_sample_messages", "main", "run_demo"]

DEMO_TENANT = "demo"
DEMO_DIM = 384
QUESTION = "who maintains the billing service?"
LATER_SESSION = (
    "Update: Alice Smith no longer works at Acme Corp. She joined Globex Inc as CTO "
    "this month.",
)
LATER = datetime(2026, 12, 15, 9, 0, tzinfo=UTC)


def load_sample_messages() -> list[Message]:
    """Return the bundled sample conversation as ``Message`` records."""
    raw = resources.files("cycgraph_memory").joinpath("_data/sample_conversation.json")
    data: dict[str, Any] = json.loads(raw.read_text(encoding="utf-8"))
    return [Message.model_validate(m) for m in data["messages"]]


def _say(*parts: object) -> None:
    # The demo's report is its output (stdout), not a log record.
    sys.stdout.write(" ".join(str(p) for p in parts) + "\n")


def _line(title: str) -> None:
    _say(f"\n== {title} " + "=" * max(0, 70 - len(title)))


def _short(text: str, width: int = 96) -> str:
    return textwrap.shorten(text, width=width, placeholder="...")


def _edge(rel: Relationship, names: dict[Any, str]) -> str:
    until = "open" if rel.valid_until is None else f"{rel.valid_until:%Y-%m-%d}"
    return (
        f"{names.get(rel.source_id, rel.source_id)} -[{rel.relation_type}]-> "
        f"{names.get(rel.target_id, rel.target_id)}  "
        f"(valid {rel.valid_from:%Y-%m-%d} .. {until})"
    )


async def run_demo(dsn: str | None, data_dir: Path) -> None:
    """Run the demo against ``dsn`` (or an embedded server in ``data_dir``)."""
    from cycgraph_memory.postgres import (
        PostgresMemoryIndex,
        PostgresMemoryStore,
        PostgresOutcomeLedger,
        create_engine_from_dsn,
        start_embedded_server,
        upgrade,
    )

    if dsn is None:
        _say(f"No CYCGRAPH_MEMORY_DSN set: starting embedded Postgres in {data_dir} ...")
        dsn = start_embedded_server(data_dir).dsn
    engine = create_engine_from_dsn(dsn)
    try:
        _say("Migrating schema with Alembic (alembic upgrade head, embedding_dim=384) ...")
        await upgrade(engine, embedding_dim=DEMO_DIM)
        store = PostgresMemoryStore(engine, tenant_id=DEMO_TENANT)
        index = PostgresMemoryIndex(engine, tenant_id=DEMO_TENANT)
        ledger = PostgresOutcomeLedger(engine, tenant_id=DEMO_TENANT)
        await store.clear()
        await ledger.clear()  # outcomes only: the gate's audit log is append-only
        # The offline default embedder (no model download); every other stage is the
        # pipeline's default: bounded segmenter, the parser-tier extractor (the rule tier
        # when the `parser` extra is not installed), tenant-calibrated theme clusterer.
        embedder = HashingEmbeddingProvider(dimensions=DEMO_DIM)
        pipeline = MemoryPipeline(store, embedder=embedder, index=index)
        messages = load_sample_messages()

        _line("Ingest (one session, 26 messages)")
        report = await pipeline.ingest(
            messages, tags=["demo", "graph:platform-notes"], run_id="demo-run-1"
        )
        _say(f"messages ingested   {report.messages_ingested}")
        _say(f"episodes            {len(report.episode_ids)}")
        _say(f"facts               {len(report.fact_ids)}")
        _say(f"entities            {len(report.entity_ids)}")
        _say(f"relationships       {len(report.relationship_ids)}")
        _say(f"themes written      {len(report.theme_ids)}")
        again = await pipeline.ingest(messages, tags=["demo"], run_id="demo-run-2")
        _say(
            f"re-ingest           {again.messages_skipped} messages skipped, "
            f"{len(again.fact_ids)} facts added"
        )

        _line("Stored hierarchy: messages -> episodes -> facts -> themes")
        for episode in await store.list_episodes():
            _say(f"episode  {episode.started_at:%H:%M} ({len(episode.messages)} msgs) "
                 f"{_short(episode.topic, 60)}")
        themes = await store.list_themes()
        for theme in themes:
            _say(f"theme    [{len(theme.fact_ids)} facts] {_short(theme.label, 70)}")
        if len(themes) == 1:
            _say("         (one theme: the tenant calibration aims at ~40 facts per theme,")
            _say("         so a tenant this small is one topic: docs/retrieval-quality.md, Themes)")
        entities = await store.find_entities()
        names = {e.id: e.name for e in entities}
        _say(textwrap.fill(
            "entities " + ", ".join(f"{e.name} ({e.entity_type})" for e in entities),
            width=96, subsequent_indent="         ",
        ))

        _line(f"retrieve_memory(text={QUESTION!r})  [hybrid, the default]")
        answer = await retrieve_memory(
            store, index, MemoryQuery(text=QUESTION, limit=5, min_similarity=0.0),
            embedder=embedder,
        )
        for fact in answer.facts:
            sc = answer.fact_scores[fact.id]
            why = ", ".join(
                part for part in (
                    f"vector #{sc.vector_rank}" if sc.vector_rank else "",
                    f"text #{sc.text_rank}" if sc.text_rank else "",
                    "names an entity of the question" if sc.graph_distance == 0 else "",
                ) if part
            )
            _say(f"fact  {sc.fused_score:.3f}  {_short(fact.content, 76)}  [{why}]")
        for message in answer.messages[:3]:
            _say(f"turn  {message.role} {message.timestamp:%H:%M}: {_short(message.content, 76)}")
        for theme in answer.themes:
            _say(f"theme {_short(theme.label, 80)}")

        _line("retrieve_memory(tags=['graph:platform-notes'], limit=5)  [tag listing]")
        listed = await retrieve_memory(
            store, index, MemoryQuery(tags=["graph:platform-notes"], limit=5)
        )
        for fact in listed.facts:
            _say(f"- {_short(fact.content, 90)}")

        alice: Entity | None = next((e for e in entities if e.name == "Alice Smith"), None)
        if alice is None:
            _say("(no entity named Alice Smith was extracted)")
            return
        _line("retrieve_memory(entity_ids=[Alice Smith], max_hops=1)  [entity subgraph]")
        graph = await retrieve_memory(
            store, index, MemoryQuery(entity_ids=[alice.id], max_hops=1, limit=5)
        )
        for rel in graph.relationships:
            _say(f"edge  {_edge(rel, names)}")
        for fact in graph.facts[:3]:
            _say(f"fact  {_short(fact.content, 90)}")

        _line("A later session (2026-12-15) ends a relationship")
        later = [
            Message(role="user", content=text, timestamp=LATER.replace(minute=i))
            for i, text in enumerate(LATER_SESSION)
        ]
        for message in later:
            _say(f"user: {message.content}")
        await pipeline.ingest(later, tags=["demo", "graph:platform-notes"], run_id="demo-run-3")
        names = {e.id: e.name for e in await store.find_entities()}
        for when in (datetime(2026, 12, 1, tzinfo=UTC), datetime(2026, 12, 20, tzinfo=UTC)):
            scoped = await retrieve_memory(store, index, MemoryQuery(
                entity_ids=[alice.id], max_hops=1, valid_at=when,
            ))
            edges = [r for r in scoped.relationships
                     if r.relation_type in ("work_at", "join") and r.source_id == alice.id]
            _say(f"valid_at={when:%Y-%m-%d}:")
            for rel in edges:
                _say(f"  edge  {_edge(rel, names)}")

        _line("Retention loop: a lesson on trial, outcomes, one gate pass")
        lesson = next(
            (f for f in await store.find_facts(tags=["demo"])
             if f.content.endswith("because the cache filled up during the outage.")),
            None,
        )
        if lesson is None:
            _say("(the lesson was not extracted)")
            return
        await store.put_fact(lesson.model_copy(
            update={"tags": [*lesson.tags, "lesson", "candidate"]}
        ))
        _say(f"candidate lesson: {_short(lesson.content, 80)}")
        # Ten agent runs: the five that were given the lesson scored higher.
        for run in range(10):
            used = run % 2 == 0
            score = (0.82 if used else 0.55) + 0.01 * (run % 3)
            await ledger.record_outcome(RunOutcome(
                run_id=f"agent-run-{run}", score=score, fact_ids=[lesson.id] if used else []
            ))
        _say("recorded 10 run outcomes (5 with the lesson: mean 0.83; 5 without: 0.56)")
        gate = await evaluate_retention(store, ledger)
        for promoted in gate.promoted:
            ev = promoted.evidence
            detail = "" if ev is None else (
                f": lift {ev.lift:+.2f} over {ev.baseline_runs} runs without it"
                + ("" if ev.sequential_p_promote is None
                   else f", always-valid p {ev.sequential_p_promote:.3g}")
            )
            trials = "" if ev is None else f" after {ev.trials} trials"
            _say(f"gate  promoted{trials}{detail}")
        for held in gate.held:
            _say(f"gate  held ({held.reason}) after {held.trials} trials")
        for evicted in gate.evicted:
            _say(f"gate  evicted ({evicted.reason})")
        for fact in await retrieve_gated_lessons(store, tags=["lesson"], ledger=ledger):
            status = "candidate" if "candidate" in fact.tags else "verified"
            _say(f"lesson ({status}): {_short(fact.content, 80)}")
    finally:
        await engine.dispose()


def main(argv: list[str] | None = None) -> None:
    """Command-line entry point of the demo."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dsn", default=os.environ.get("CYCGRAPH_MEMORY_DSN"))
    parser.add_argument("--data-dir", default=".demo-pgdata", type=Path)
    args = parser.parse_args(argv)
    asyncio.run(run_demo(args.dsn, args.data_dir.resolve()))


if __name__ == "__main__":
    main()

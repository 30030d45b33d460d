"""End-to-end demo: ``python -m cycgraph_memory.demo`` (what ``make demo`` runs).

Connects to ``CYCGRAPH_MEMORY_DSN`` when it is set, otherwise starts an embedded
PostgreSQL 18 + pgvector server in ``./.demo-pgdata``; migrates the schema with Alembic;
ingests the bundled sample conversation through the whole pipeline (segment, extract,
embed, cluster, persist in one transaction); ingests it again to show that re-ingest adds
nothing; then retrieves by text, by tags and by entity, printing what it finds.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from importlib import resources
from pathlib import Path
from typing import Any

from cycgraph_memory.contracts import embed_queries
from cycgraph_memory.embeddings.hashing import HashingEmbeddingProvider
from cycgraph_memory.hierarchy.clustering import ConsolidatingThemeClusterer
from cycgraph_memory.hierarchy.pipeline import MemoryPipeline
from cycgraph_memory.records import Message

__all__ = ["load_sample_messages", "main", "run_demo"]

DEMO_TENANT = "demo"
DEMO_DIM = 384


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


async def run_demo(dsn: str | None, data_dir: Path) -> None:
    """Run the demo against ``dsn`` (or an embedded server in ``data_dir``)."""
    from cycgraph_memory.postgres import (
        PostgresMemoryIndex,
        PostgresMemoryStore,
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
        await store.clear()
        embedder = HashingEmbeddingProvider(dimensions=DEMO_DIM)
        # Hashing vectors are lexical: unrelated sentences sit near 0.1-0.3 cosine, so the
        # spec's 0.7 / 0.85 thresholds (tuned for neural embeddings) would give one theme
        # per fact. Lower thresholds suit this embedder.
        clusterer = ConsolidatingThemeClusterer(assignment_threshold=0.3, merge_threshold=0.4)
        pipeline = MemoryPipeline(store, embedder=embedder, index=index, clusterer=clusterer)
        messages = load_sample_messages()

        _line("Ingest")
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

        _line("Stored hierarchy")
        for episode in await store.list_episodes():
            _say(f"episode  {episode.started_at:%H:%M} ({len(episode.messages)} msgs) "
                  f"{episode.topic[:60]}")
        for theme in await store.list_themes():
            _say(f"theme    [{len(theme.fact_ids)} facts] {theme.label}")
        entities = await store.find_entities()
        by_id = {e.id: e for e in entities}
        for entity in entities:
            _say(f"entity   {entity.name} ({entity.entity_type})")

        _line("Retrieve by text: 'who maintains the billing service?'")
        [query] = await embed_queries(embedder, ["who maintains the billing service?"])
        for hit in await index.search_facts(query, limit=5):
            _say(f"{hit.score:.3f}  {hit.item.content}")
        for theme_hit in await index.search_themes(query, limit=2):
            _say(f"theme {theme_hit.score:.3f}  {theme_hit.item.label}")

        _line("Retrieve by tags: ['graph:platform-notes'] (first 5)")
        for fact in await store.find_facts(tags=["graph:platform-notes"], limit=5):
            _say(f"- {fact.content}  tags={fact.tags}")

        _line("Retrieve by entity: Alice Smith")
        alice = next((e for e in entities if e.name == "Alice Smith"), None)
        if alice is None:
            _say("(no entity named Alice Smith was extracted)")
        else:
            for rel in await store.get_relationships_for_entity(alice.id):
                src = by_id.get(rel.source_id)
                dst = by_id.get(rel.target_id)
                _say(
                    f"edge  {src.name if src else rel.source_id} -[{rel.relation_type}]-> "
                    f"{dst.name if dst else rel.target_id}"
                )
            for fact in await store.find_facts(entity_id=alice.id, limit=5):
                _say(f"fact  {fact.content}")
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

"""Extractor tiers for the contract tests that run one conversation through every tier,
and the ingest of what one speaker says.

The parser tier loads a language pipeline (seconds), so one ``ParserExtractor`` serves the
whole test session; a test asking for it skips when the parser extra is not installed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any

import pytest

from cycgraph_memory import HashingEmbeddingProvider, MemoryPipeline, Message, RuleBasedExtractor

from .factories import EMBED_DIM

_PARSER: list[Any] = []


def shared_parser() -> Any:
    """The session's one ``ParserExtractor`` (skips the test without the parser extra)."""
    from cycgraph_memory.hierarchy.extractors.parser import ParserExtractor, parser_available

    if not parser_available():  # pragma: no cover - the parser extra is absent
        pytest.skip("the parser extra is not installed")
    if not _PARSER:
        _PARSER.append(ParserExtractor())
    return _PARSER[0]


def tier_extractor(tier: str, llm: Callable[[], Any] | None = None) -> Any:
    """The extractor of ``tier``: ``"rule"``, ``"parser"`` or ``"llm"`` (built by ``llm``)."""
    if tier == "rule":
        return RuleBasedExtractor()
    if tier == "parser":
        return shared_parser()
    if tier == "llm" and llm is not None:
        return llm()
    raise ValueError(f"unknown tier {tier!r}")


async def ingest_said(
    store: Any, index: Any, extractor: Any, said: Iterable[tuple[datetime, str]], name: str
) -> dict[tuple[str, str, str], Any]:
    """Ingest each (time, text) that ``name`` says, one call each, with the default
    pipeline and ``extractor``; every stored edge keyed (source, relation, target) names."""
    pipeline = MemoryPipeline(
        store,
        index=index,
        extractor=extractor,
        embedder=HashingEmbeddingProvider(dimensions=EMBED_DIM),
    )
    for at, text in said:
        await pipeline.ingest(
            [Message(role="user", content=text, timestamp=at, metadata={"name": name})]
        )
    entities = {e.id: e.name for e in await store.find_entities()}
    edges = await store.get_relationships_for_entities(list(entities))
    return {(entities[r.source_id], r.relation_type, entities[r.target_id]): r for r in edges}

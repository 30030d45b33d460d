"""The component entry points refuse arguments of the wrong type with InvalidTypeError.

Users call segmenters, extractors, clusterers and the consolidation passes directly, not
only through ``MemoryPipeline`` (which validates its own input): ``None``, a string or a
list of the wrong records must be a typed error, and change nothing.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from cycgraph_memory import (
    ConflictDetector,
    ConsolidatingThemeClusterer,
    InMemoryMemoryStore,
    LLMExtractor,
    MemoryConsolidator,
    Message,
    Provenance,
    RuleBasedExtractor,
    SemanticFact,
    SimpleEpisodeSegmenter,
    SimpleSemanticExtractor,
    SimpleThemeClusterer,
)
from cycgraph_memory.errors import InvalidInputError, InvalidTypeError

T0 = datetime(2026, 1, 1, tzinfo=UTC)
FACT = SemanticFact(content="x", embedding=[1.0, 0.0, 0.0], provenance=Provenance(source="agent"))


async def _reply(prompt: str) -> str:
    return "{}"


def _calls() -> dict[str, Callable[[], Awaitable[Any]]]:
    store = InMemoryMemoryStore()
    detector = ConflictDetector(store)
    return {
        "segment(None)": lambda: SimpleEpisodeSegmenter().segment(None),  # type: ignore[arg-type]
        "segment('hi')": lambda: SimpleEpisodeSegmenter().segment("hi"),  # type: ignore[arg-type]
        "segment([None])": lambda: SimpleEpisodeSegmenter().segment([None]),  # type: ignore[list-item]
        "rules.extract(None)": lambda: RuleBasedExtractor().extract(None),  # type: ignore[arg-type]
        "simple.extract(None)": lambda: SimpleSemanticExtractor().extract(None),  # type: ignore[arg-type]
        "llm.extract(None)": lambda: LLMExtractor(
            _reply, fallback=RuleBasedExtractor()).extract(None),  # type: ignore[arg-type]
        "cluster([None])": lambda: SimpleThemeClusterer().cluster([None]),  # type: ignore[list-item]
        "cluster(facts, 'abc')": lambda: SimpleThemeClusterer().cluster([FACT], "abc"),  # type: ignore[arg-type]
        "consolidating.cluster(None)": lambda: ConsolidatingThemeClusterer().cluster(None),  # type: ignore[arg-type]
        "detect_conflicts([None])": lambda: detector.detect_conflicts([None]),  # type: ignore[list-item]
        "auto_resolve_all(None)": lambda: detector.auto_resolve_all(None),  # type: ignore[arg-type]
        "resolve_conflict(None)": lambda: detector.resolve_conflict(None, "keep_a"),  # type: ignore[arg-type]
        "auto_consolidate(None)": lambda: MemoryConsolidator(store).auto_consolidate(None),  # type: ignore[arg-type]
    }


@pytest.mark.parametrize("name", list(_calls()))
async def test_a_wrong_type_is_a_typed_error(name: str) -> None:
    with pytest.raises(InvalidTypeError):
        await _calls()[name]()


async def test_messages_as_mappings_are_validated() -> None:
    episodes = await SimpleEpisodeSegmenter().segment(
        [{"role": "user", "content": "hi", "timestamp": T0}]  # type: ignore[list-item]
    )
    assert [m.content for e in episodes for m in e.messages] == ["hi"]


async def test_an_embedder_returning_too_few_vectors_is_refused() -> None:
    class Short:
        dimensions = 3

        async def embed(self, texts: list[str]) -> list[list[float]]:
            return [[1.0, 0.0, 0.0]] * (len(texts) - 1)

    messages = [Message(role="user", content=f"m{i}", timestamp=T0 + timedelta(minutes=i))
                for i in range(3)]
    with pytest.raises(InvalidInputError, match="2 vectors for 3 messages"):
        await SimpleEpisodeSegmenter(embedder=Short(), min_messages=1).segment(messages)

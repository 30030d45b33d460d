"""The extractor tiers a polarity test runs on: rule-based, and the parser when installed."""

from __future__ import annotations

from typing import Any

from cycgraph_memory.hierarchy.extractors import RuleBasedExtractor


def extractor_tiers() -> list[Any]:
    """A rule-based extractor, and a parser extractor when its extra and model are there."""
    tiers: list[Any] = [RuleBasedExtractor()]
    try:
        from cycgraph_memory.hierarchy.extractors.parser import ParserExtractor, parser_available

        if parser_available():
            tiers.append(ParserExtractor())
    except ImportError:  # pragma: no cover - the parser extra is absent
        pass
    return tiers

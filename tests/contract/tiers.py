"""Extractor tiers for the contract tests that run one conversation through every tier.

The parser tier loads a language pipeline (seconds), so one ``ParserExtractor`` serves the
whole test session; a test asking for it skips when the parser extra is not installed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from cycgraph_memory import RuleBasedExtractor

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

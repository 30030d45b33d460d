"""Semantic extractors (level 1 -> 2), in ascending quality and cost.

* :class:`SimpleSemanticExtractor`: one fact per episode (the topic).
* :class:`RuleBasedExtractor`: sentence-level pattern matching; facts, typed entities and
  relationships; free, instant, deterministic.
* :class:`ParserExtractor`: dependency parsing and NER on spaCy (the ``parser`` extra);
  the default of ``MemoryPipeline`` and the ``LLMExtractor`` fallback when installed.
* :class:`LLMExtractor`: an injected :class:`~cycgraph_memory.contracts.LLMProvider`, with a
  timeout, a circuit breaker and the rule-based extractor as automatic fallback.
"""

from cycgraph_memory.hierarchy.extractors.llm import (
    DEFAULT_RESERVED_TAGS,
    LLM_EXTRACTOR_NAMESPACE,
    BreakerState,
    LLMExtractor,
    LLMExtractorStats,
)
from cycgraph_memory.hierarchy.extractors.parser import (
    DEFAULT_PARSER_PIPELINE,
    ParserExtractor,
    default_extractor,
    parser_available,
)
from cycgraph_memory.hierarchy.extractors.providers import AnthropicProvider, OpenAIProvider
from cycgraph_memory.hierarchy.extractors.rules import (
    ENTITY_TYPES,
    RELATION_TYPES,
    RuleBasedExtractor,
)
from cycgraph_memory.hierarchy.extractors.simple import (
    FACT_ID_NAMESPACE,
    SimpleSemanticExtractor,
    fact_id_for,
)

__all__ = [
    "DEFAULT_PARSER_PIPELINE",
    "DEFAULT_RESERVED_TAGS",
    "ENTITY_TYPES",
    "FACT_ID_NAMESPACE",
    "LLM_EXTRACTOR_NAMESPACE",
    "RELATION_TYPES",
    "AnthropicProvider",
    "BreakerState",
    "LLMExtractor",
    "LLMExtractorStats",
    "OpenAIProvider",
    "ParserExtractor",
    "RuleBasedExtractor",
    "SimpleSemanticExtractor",
    "default_extractor",
    "fact_id_for",
    "parser_available",
]

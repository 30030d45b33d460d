"""Hierarchy pipeline: segmentation, extraction, theme clustering and one-call ingest.

Messages (level 0) -> episodes (1) -> facts, entities, relationships (2) -> themes (3).
Everything here is written against :mod:`cycgraph_memory.contracts` only.
"""

from cycgraph_memory.hierarchy.clustering import (
    GENERAL_THEME_LABEL,
    ClusteringResult,
    ConsolidatingThemeClusterer,
    SimpleThemeClusterer,
)
from cycgraph_memory.hierarchy.extractors import (
    AnthropicProvider,
    LLMExtractor,
    OpenAIProvider,
    ParserExtractor,
    RuleBasedExtractor,
    SimpleSemanticExtractor,
)
from cycgraph_memory.hierarchy.pipeline import IngestReport, MemoryPipeline
from cycgraph_memory.hierarchy.segmenters import (
    EPISODE_ID_NAMESPACE,
    SimpleEpisodeSegmenter,
    episode_id_for,
)

__all__ = [
    "EPISODE_ID_NAMESPACE",
    "GENERAL_THEME_LABEL",
    "AnthropicProvider",
    "ClusteringResult",
    "ConsolidatingThemeClusterer",
    "IngestReport",
    "LLMExtractor",
    "MemoryPipeline",
    "OpenAIProvider",
    "ParserExtractor",
    "RuleBasedExtractor",
    "SimpleEpisodeSegmenter",
    "SimpleSemanticExtractor",
    "SimpleThemeClusterer",
    "episode_id_for",
]

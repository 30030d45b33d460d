"""Retrieval: ``retrieve_memory``, ``extract_subgraph`` and ``retrieve_gated_lessons``.

``retrieve_memory`` picks its strategy by query shape, ``extract_subgraph`` is the BFS, and
``retrieve_gated_lessons`` is the eval-gated lesson policy.

Written only against the contracts, so both run unchanged on every backend; stores may
offer faster native paths (``extract_subgraph_native``) that return the same results.
The ranking and filtering stages are pure functions in :mod:`.pipeline`.
"""

from cycgraph_memory.records import DEFAULT_MAX_SUBGRAPH_ENTITIES, RetrievalOptions
from cycgraph_memory.retrieval.lessons import GatedLessonOptions, retrieve_gated_lessons
from cycgraph_memory.retrieval.retrieve import (
    DEFAULT_RETRIEVAL_OPTIONS,
    coerce_query,
    retrieve_memory,
)
from cycgraph_memory.retrieval.subgraph import MAX_SUBGRAPH_HOPS, SubgraphOptions, extract_subgraph

__all__ = [
    "DEFAULT_MAX_SUBGRAPH_ENTITIES",
    "DEFAULT_RETRIEVAL_OPTIONS",
    "MAX_SUBGRAPH_HOPS",
    "GatedLessonOptions",
    "RetrievalOptions",
    "SubgraphOptions",
    "coerce_query",
    "extract_subgraph",
    "retrieve_gated_lessons",
    "retrieve_memory",
]

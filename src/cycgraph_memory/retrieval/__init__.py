"""Retrieval: ``retrieve_memory`` (strategy by query shape) and ``extract_subgraph`` (BFS).

Written only against the contracts, so both run unchanged on every backend; stores may
offer faster native paths (``extract_subgraph_native``) that return the same results.
The ranking and filtering stages are pure functions in :mod:`.pipeline`.
"""

from cycgraph_memory.records import DEFAULT_MAX_SUBGRAPH_ENTITIES, RetrievalOptions
from cycgraph_memory.retrieval.retrieve import (
    DEFAULT_RETRIEVAL_OPTIONS,
    coerce_query,
    retrieve_memory,
)
from cycgraph_memory.retrieval.subgraph import MAX_SUBGRAPH_HOPS, extract_subgraph

__all__ = [
    "DEFAULT_MAX_SUBGRAPH_ENTITIES",
    "DEFAULT_RETRIEVAL_OPTIONS",
    "MAX_SUBGRAPH_HOPS",
    "RetrievalOptions",
    "coerce_query",
    "extract_subgraph",
    "retrieve_memory",
]

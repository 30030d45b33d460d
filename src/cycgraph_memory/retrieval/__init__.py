"""Retrieval: read paths over the memory store (gated lessons)."""

from cycgraph_memory.retrieval.lessons import retrieve_gated_lessons

__all__ = ["retrieve_gated_lessons"]

"""Consolidation: entity resolution, conflict detection and budgeted consolidation.

Recommended order: :class:`EntityResolver` (facts then share entity ids), then
:class:`ConflictDetector`, then :class:`MemoryConsolidator`. Each pass computes a plan of
typed mutations first (``plan()``) and applies it in one exclusive unit of work.
"""

from cycgraph_memory.consolidation.conflicts import (
    NEGATION_WORDS,
    ConflictDetector,
    ConflictResolutionPolicy,
)
from cycgraph_memory.consolidation.consolidator import (
    ConsolidationPlan,
    ConsolidationThresholds,
    MemoryConsolidator,
    decay_score,
)
from cycgraph_memory.consolidation.entities import EntityResolutionPlan, EntityResolver
from cycgraph_memory.consolidation.plan import Delete, Mutation, MutationPlan, Put
from cycgraph_memory.hierarchy.ingest_resolution import resolve_ingest_entities

__all__ = [
    "NEGATION_WORDS",
    "ConflictDetector",
    "ConflictResolutionPolicy",
    "ConsolidationPlan",
    "ConsolidationThresholds",
    "Delete",
    "EntityResolutionPlan",
    "EntityResolver",
    "MemoryConsolidator",
    "Mutation",
    "MutationPlan",
    "Put",
    "decay_score",
    "resolve_ingest_entities",
]

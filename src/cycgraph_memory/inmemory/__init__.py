"""In-process backends: dict-backed store and numpy brute-force index.

Suitable for tests, demos and lightweight single-process use; swap in
:mod:`cycgraph_memory.postgres` for durable storage and pgvector search.
"""

from cycgraph_memory.inmemory.index import (
    IN_MEMORY_INDEX_WARN_THRESHOLD,
    IndexedRecord,
    InMemoryIndexScaleWarning,
    InMemoryMemoryIndex,
)
from cycgraph_memory.inmemory.store import InMemoryMemoryStore

__all__ = [
    "IN_MEMORY_INDEX_WARN_THRESHOLD",
    "InMemoryIndexScaleWarning",
    "InMemoryMemoryIndex",
    "InMemoryMemoryStore",
    "IndexedRecord",
]

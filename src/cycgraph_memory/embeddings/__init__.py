"""Embedding providers.

* :class:`HashingEmbeddingProvider`: deterministic, dependency-free feature hashing (tests,
  demos, offline use); lexical similarity, not semantic.
* :class:`LocalEmbeddingProvider`: all-MiniLM-L6-v2 from the ``local-embeddings`` extra,
  weights shipped inside the package (nothing downloaded at run time).
"""

from cycgraph_memory.embeddings.hashing import HashingEmbeddingProvider
from cycgraph_memory.embeddings.local import LocalEmbeddingProvider

__all__ = ["HashingEmbeddingProvider", "LocalEmbeddingProvider"]

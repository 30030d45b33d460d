"""Embedding providers.

* :class:`HashingEmbeddingProvider`: deterministic, dependency-free feature hashing (tests,
  demos, offline use); lexical similarity, not semantic.
* :class:`LocalEmbeddingProvider`: all-MiniLM-L6-v2 from the ``local-embeddings`` extra,
  weights shipped inside the package (nothing downloaded at run time). The offline default.
* :class:`SentenceTransformerEmbeddingProvider`: any sentence-transformers model (name or
  local path), with query / document prompts for asymmetric models.
* :class:`OpenAIEmbeddingProvider`: the OpenAI embeddings API (``text-embedding-3-*``).

A provider with an ``embed_query`` method (the sentence-transformers one) embeds retrieval
texts with it.
"""

from cycgraph_memory.embeddings.hashing import HashingEmbeddingProvider
from cycgraph_memory.embeddings.local import LocalEmbeddingProvider
from cycgraph_memory.embeddings.openai_api import OpenAIEmbeddingError, OpenAIEmbeddingProvider
from cycgraph_memory.embeddings.sentence_transformer import SentenceTransformerEmbeddingProvider

__all__ = [
    "HashingEmbeddingProvider",
    "LocalEmbeddingProvider",
    "OpenAIEmbeddingError",
    "OpenAIEmbeddingProvider",
    "SentenceTransformerEmbeddingProvider",
]

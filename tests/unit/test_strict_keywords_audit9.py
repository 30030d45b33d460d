"""Keyword flags and numbers of the public constructors and helpers are strictly typed.

Flags checked by hand were used as truthy values: ``MemoryPipeline(ground_facts="no")``
grounded facts, ``HashingEmbeddingProvider(word_bigrams="no")`` hashed bigrams,
``SentenceTransformerEmbeddingProvider(local_files_only="no")`` never contacted the hub;
``OpenAIProvider(temperature="0.5")`` and ``BM25Index(k1=True)`` turned a string or a
flag into a number. They are refused now with ``InvalidTypeError`` naming the argument.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from cycgraph_memory.embeddings.hashing import HashingEmbeddingProvider
from cycgraph_memory.embeddings.local import LocalEmbeddingProvider
from cycgraph_memory.embeddings.sentence_transformer import (
    SentenceTransformerEmbeddingProvider,
)
from cycgraph_memory.errors import InvalidInputError, InvalidTypeError
from cycgraph_memory.hierarchy.calibration import calibrate_theme_thresholds
from cycgraph_memory.hierarchy.extractors.providers import AnthropicProvider, OpenAIProvider
from cycgraph_memory.hierarchy.pipeline import MemoryPipeline
from cycgraph_memory.inmemory import InMemoryMemoryIndex, InMemoryMemoryStore
from cycgraph_memory.textsearch import BM25Index


class _Encoder:
    def encode(self, texts: Any, **_: Any) -> Any:
        return np.ones((len(texts), 4))


VECTORS = [[float(i % 7), float(i % 5), 1.0, float(i % 3)] for i in range(40)]
STORE = InMemoryMemoryStore()

CASES: list[tuple[str, str, Callable[[], object]]] = [
    ("MemoryPipeline(merge_entities='no')", "merge_entities",
     lambda: MemoryPipeline(STORE, merge_entities="no")),
    ("MemoryPipeline(resolve_entities=0)", "resolve_entities",
     lambda: MemoryPipeline(STORE, resolve_entities=0)),
    ("MemoryPipeline(ground_facts='no')", "ground_facts",
     lambda: MemoryPipeline(STORE, ground_facts="no")),
    ("MemoryPipeline({'ground_facts': 'no'})", "ground_facts",
     lambda: MemoryPipeline(STORE, {"ground_facts": "no"})),
    ("HashingEmbeddingProvider(word_bigrams='no')", "word_bigrams",
     lambda: HashingEmbeddingProvider(word_bigrams="no")),
    ("LocalEmbeddingProvider(normalize='no')", "normalize",
     lambda: LocalEmbeddingProvider(normalize="no", model=_Encoder())),
    ("SentenceTransformerEmbeddingProvider(normalize=1)", "normalize",
     lambda: SentenceTransformerEmbeddingProvider(_Encoder(), normalize=1)),
    ("SentenceTransformerEmbeddingProvider(local_files_only='no')", "local_files_only",
     lambda: SentenceTransformerEmbeddingProvider(_Encoder(), local_files_only="no")),
    ("OpenAIProvider(temperature='0.5')", "temperature",
     lambda: OpenAIProvider(object(), temperature="0.5")),
    ("OpenAIProvider(temperature=True)", "temperature",
     lambda: OpenAIProvider(object(), temperature=True)),
    ("OpenAIProvider(json_mode='no')", "json_mode",
     lambda: OpenAIProvider(object(), json_mode="no")),
    ("AnthropicProvider(temperature=True)", "temperature",
     lambda: AnthropicProvider(object(), temperature=True)),
    ("BM25Index(k1=True)", "k1", lambda: BM25Index(k1=True)),
    ("BM25Index(b='0.5')", "b", lambda: BM25Index(b="0.5")),
    ("calibrate_theme_thresholds(assignment_quantile=True)", "assignment_quantile",
     lambda: calibrate_theme_thresholds(VECTORS, assignment_quantile=True)),
    ("calibrate_theme_thresholds(merge_quantile='0.9')", "merge_quantile",
     lambda: calibrate_theme_thresholds(VECTORS, merge_quantile="0.9")),
]


@pytest.mark.parametrize(("desc", "name", "build"), CASES, ids=[c[0] for c in CASES])
def test_a_keyword_of_the_wrong_type_is_refused(
    desc: str, name: str, build: Callable[[], object]
) -> None:
    with pytest.raises(InvalidTypeError, match=name):
        build()


def test_bm25_parameters_are_in_range() -> None:
    for kwargs in ({"k1": -1.0}, {"k1": float("inf")}, {"b": 1.5}, {"b": -0.1}):
        with pytest.raises(InvalidInputError):
            BM25Index(**kwargs)
    index = BM25Index(k1=2, b=np.float64(0.5))  # ints and numpy floats are numbers
    assert (index.k1, index.b) == (2.0, 0.5)


def test_real_values_still_work() -> None:
    pipeline = MemoryPipeline(
        STORE, index=InMemoryMemoryIndex(), merge_entities=False, ground_facts=False
    )
    assert (pipeline.merge_entities, pipeline.ground_facts) == (False, False)
    assert OpenAIProvider(object(), temperature=1, json_mode=True).temperature == 1.0
    thresholds = calibrate_theme_thresholds(VECTORS, assignment_quantile=np.float64(0.5))
    assert -1.0 <= thresholds.assignment_threshold <= 1.0

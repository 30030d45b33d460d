"""Any sentence-transformers model as an embedding provider, with query/document prompts.

:class:`SentenceTransformerEmbeddingProvider` wraps a ``SentenceTransformer`` built from a
model name or a local directory (``pip install 'cycgraph-memory[sentence-transformers]'``).
Asymmetric models embed questions and passages differently: pass ``query_prompt`` /
``document_prompt`` (e.g. ``"query: "`` / ``"passage: "`` for e5), or name prompts the
model's own configuration defines (``query_prompt_name="query"``). Retrieval then embeds
every question with :meth:`~SentenceTransformerEmbeddingProvider.embed_query`, stored
records with :meth:`~SentenceTransformerEmbeddingProvider.embed`.

The model is loaded lazily (first call, or :meth:`load`), and encoding runs in a worker
thread (``asyncio.to_thread``) in batches of ``batch_size``, so the event loop keeps
serving. Loading a *name* may download the model from the Hugging Face hub the first time
(sentence-transformers' behaviour); pass a local path, or set ``local_files_only=True``,
to stay offline.
"""

from __future__ import annotations

import asyncio
import importlib
import threading
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from cycgraph_memory._validate import check_bool
from cycgraph_memory.errors import (
    InvalidInputError,
    InvalidTypeError,
    MissingExtraError,
    ProviderError,
)

__all__ = [
    "SentenceTransformerEmbeddingProvider",
    "check_texts",
    "check_vectors",
    "encode_checked",
]

_EXTRA = "sentence-transformers"


def check_texts(texts: Sequence[str]) -> list[str]:
    """Return ``texts`` as a list after checking it is a sequence of strings.

    Raises:
        InvalidTypeError: (a ``TypeError``) A bare string, something that is not a
            sequence (``None``, a number, bytes), or an element that is not a string.
    """
    if isinstance(texts, str | bytes | bytearray):
        raise InvalidTypeError("texts must be a sequence of strings, not a single string")
    if not isinstance(texts, Iterable):
        raise InvalidTypeError(
            f"texts must be a sequence of strings, got {type(texts).__name__}"
        )
    batch = list(texts)
    for i, text in enumerate(batch):
        if not isinstance(text, str):
            raise InvalidTypeError(f"texts[{i}] is {type(text).__name__}, expected str")
    return batch


def encode_checked(
    model: Any,
    texts: list[str],
    *,
    batch_size: int,
    normalize: bool,
    width: int | None,
    what: str,
    **prompt: Any,
) -> list[list[float]]:
    """``model.encode(texts)`` as checked lists of floats (``ProviderError`` on failure).

    ``prompt``: ``prompt`` / ``prompt_name`` keywords passed to ``encode``; ``what`` names
    the model in the error message.
    """
    try:
        vectors = model.encode(
            texts,
            batch_size=batch_size,
            normalize_embeddings=normalize,
            convert_to_numpy=True,
            show_progress_bar=False,
            **prompt,
        )
    except Exception as exc:
        raise ProviderError(f"{what} encode failed: {exc}") from exc
    return check_vectors(vectors, len(texts), width)


def check_vectors(vectors: Any, count: int, width: int | None) -> list[list[float]]:
    """Return a model's output as ``count`` lists of floats, or refuse it.

    Args:
        vectors: What the model returned (an array or nested sequences).
        count: The number of texts embedded.
        width: The provider's declared width (``None``: not known yet, any width).

    Raises:
        ProviderError: Not a ``(count, width)`` array of numbers, or a NaN / infinity.
    """
    try:
        array = np.asarray(vectors, dtype=np.float64)
    except (TypeError, ValueError, OverflowError) as exc:
        raise ProviderError(f"the model returned something that is not vectors: {exc}") from exc
    if array.ndim != 2 or array.shape[0] != count:
        raise ProviderError(f"model returned an array of shape {array.shape} for {count} texts")
    if width is not None and array.shape[1] != width:
        raise ProviderError(
            f"the model returned {array.shape[1]}-d vectors, expected {width} (dimensions)"
        )
    if not np.isfinite(array).all():
        raise ProviderError("the model returned a vector with NaN or infinity")
    return array.tolist()  # type: ignore[no-any-return]


class SentenceTransformerEmbeddingProvider:
    """Embeddings from any sentence-transformers model (name or local path).

    Args:
        model: A model name (``"intfloat/multilingual-e5-small"``), a local directory, or
            an already-built ``SentenceTransformer``-like object with an ``encode`` method
            (shared between providers, or a test double).
        query_prompt: Text prepended to every query (e.g. ``"query: "``).
        document_prompt: Text prepended to every stored text (e.g. ``"passage: "``).
        query_prompt_name: Name of a prompt of the model's configuration used for queries
            (instead of ``query_prompt``).
        document_prompt_name: Same, for stored texts.
        device: Torch device (``"cpu"`` by default, so results do not depend on which
            accelerators happen to be present; ``None`` lets sentence-transformers pick).
        batch_size: Texts per forward pass.
        normalize: L2-normalise the vectors (recommended for cosine search).
        dimensions: The vector width, when known in advance; otherwise read from the model
            (loading it) the first time :attr:`dimensions` is asked.
        local_files_only: Never contact the hub (the model must be on disk).
        model_kwargs: Extra keyword arguments for ``SentenceTransformer(...)``.

    Raises:
        InvalidInputError: Bad arguments (a blank name, both a prompt and a prompt name for
            one side, a non-positive ``batch_size`` or ``dimensions``).
        MissingExtraError: sentence-transformers is not installed (at construction when
            ``model`` is a name or path).
    """

    def __init__(
        self,
        model: str | Path | Any,
        *,
        query_prompt: str | None = None,
        document_prompt: str | None = None,
        query_prompt_name: str | None = None,
        document_prompt_name: str | None = None,
        device: str | None = "cpu",
        batch_size: int = 32,
        normalize: bool = True,
        dimensions: int | None = None,
        local_files_only: bool = False,
        model_kwargs: dict[str, Any] | None = None,
    ) -> None:
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise InvalidInputError(f"batch_size must be a positive integer, got {batch_size!r}")
        if dimensions is not None and (
            isinstance(dimensions, bool) or not isinstance(dimensions, int) or dimensions < 1
        ):
            raise InvalidInputError(f"dimensions must be a positive integer, got {dimensions!r}")
        normalize = check_bool(normalize, "normalize")
        local_files_only = check_bool(local_files_only, "local_files_only")
        if query_prompt is not None and query_prompt_name is not None:
            raise InvalidInputError("pass query_prompt or query_prompt_name, not both")
        if document_prompt is not None and document_prompt_name is not None:
            raise InvalidInputError("pass document_prompt or document_prompt_name, not both")
        self._spec: str | None = None
        self._model: Any | None = None
        if isinstance(model, str | Path):
            spec = str(model)
            if not spec.strip():
                raise InvalidInputError("model must be a non-empty name or path")
            self._spec = spec
            _import_sentence_transformers()  # fail at construction when the extra is missing
        elif callable(getattr(model, "encode", None)):
            self._model = model
        else:
            raise InvalidInputError(
                "model must be a name, a path or an object with an encode() method, "
                f"got {type(model).__name__}"
            )
        self._query = (query_prompt, query_prompt_name)
        self._document = (document_prompt, document_prompt_name)
        self._device = device
        self._batch_size = batch_size
        self._normalize = normalize
        self._dimensions = dimensions
        self._local_files_only = local_files_only
        self._model_kwargs = dict(model_kwargs or {})
        self._load_lock = threading.Lock()

    @property
    def dimensions(self) -> int:
        """Width of the vectors (given, else read from the model, which loads it: blocking)."""
        if self._dimensions is None:
            model = self.load()
            getter = getattr(model, "get_embedding_dimension", None)  # sentence-transformers 6
            if not callable(getter):
                getter = getattr(model, "get_sentence_embedding_dimension", None)
            width = getter() if callable(getter) else None
            if isinstance(width, bool) or not isinstance(width, int) or width < 1:
                # No usable getter: embed one text and measure the vector (not the batch).
                [probe] = self._encode(["dimension probe"], self._document)
                width = len(probe)
            self._dimensions = width
        return self._dimensions

    def load(self) -> Any:
        """Build the model now (blocking) and return it; later calls reuse it.

        Raises:
            MissingExtraError: sentence-transformers is not installed.
            ProviderError: The model could not be loaded (unknown name, bad directory,
                no network with a name not in the local cache, ...).
        """
        with self._load_lock:
            if self._model is None:
                module = _import_sentence_transformers()
                try:
                    self._model = module.SentenceTransformer(
                        self._spec,
                        device=self._device,
                        local_files_only=self._local_files_only,
                        **self._model_kwargs,
                    )
                except ImportError as exc:
                    raise MissingExtraError(_EXTRA, f"a dependency ({exc.name})") from exc
                except Exception as exc:
                    raise ProviderError(f"cannot load model {self._spec!r}: {exc}") from exc
            return self._model

    def _encode(
        self, texts: list[str], side: tuple[str | None, str | None]
    ) -> list[list[float]]:
        model = self.load()
        prompt, prompt_name = side
        kwargs: dict[str, Any] = {}
        if prompt is not None:
            kwargs["prompt"] = prompt
        if prompt_name is not None:
            kwargs["prompt_name"] = prompt_name
        return encode_checked(
            model, texts, batch_size=self._batch_size, normalize=self._normalize,
            width=self._dimensions, what="sentence-transformers", **kwargs,
        )

    async def _run(
        self, texts: Sequence[str], side: tuple[str | None, str | None]
    ) -> list[list[float]]:
        batch = check_texts(texts)
        if not batch:
            return []
        return await asyncio.to_thread(self._encode, batch, side)

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """Embed stored texts (with the document prompt), in a worker thread.

        Raises:
            TypeError: ``texts`` is a bare string or holds a non-string.
            ProviderError: The model failed, or returned vectors that are not one finite
                vector of the provider's width per text.
        """
        return await self._run(texts, self._document)

    async def embed_query(self, texts: Sequence[str]) -> list[list[float]]:
        """Embed retrieval texts (with the query prompt), in a worker thread.

        Raises:
            TypeError: ``texts`` is a bare string or holds a non-string.
            ProviderError: The model failed, or returned vectors that are not one finite
                vector of the provider's width per text.
        """
        return await self._run(texts, self._query)


def _import_sentence_transformers() -> Any:
    try:
        return importlib.import_module("sentence_transformers")
    except ImportError as exc:
        raise MissingExtraError(_EXTRA, "sentence-transformers") from exc

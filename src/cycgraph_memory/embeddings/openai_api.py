"""OpenAI embeddings (``text-embedding-3-small`` / ``-large``) over the HTTP API.

:class:`OpenAIEmbeddingProvider` posts batches to ``/v1/embeddings`` with ``httpx``
(installed by ``pip install 'cycgraph-memory[openai]'``). ``dimensions=`` asks the
``text-embedding-3-*`` models for shortened vectors (the width of your schema). Rate limits
(429), server errors (5xx), timeouts and dropped connections are retried with exponential
backoff; what still fails surfaces as a typed error:

* :class:`~cycgraph_memory.errors.ProviderTimeoutError`: the request timed out every time;
* :class:`~cycgraph_memory.errors.ProviderError`: any other failure (its ``status_code``
  attribute holds the HTTP status, ``None`` for transport failures, and the message the
  API's error text), including a reply of the wrong shape or width.

The API key is an argument (read the environment in your application, not here). Tests
pass ``transport=httpx.MockTransport(handler)``: no network.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import math
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from cycgraph_memory.embeddings.sentence_transformer import check_texts
from cycgraph_memory.errors import (
    InvalidInputError,
    MissingExtraError,
    ProviderError,
    ProviderTimeoutError,
)

__all__ = ["OpenAIEmbeddingError", "OpenAIEmbeddingProvider"]

logger = logging.getLogger(__name__)

_NATIVE_DIMENSIONS = {
    "text-embedding-3-small": 1536,
    "text-embedding-3-large": 3072,
    "text-embedding-ada-002": 1536,
}
_MAX_INPUTS_PER_REQUEST = 2048  # the API's limit
_RETRYABLE_STATUS = frozenset({408, 409, 429, 500, 502, 503, 504})


class OpenAIEmbeddingError(ProviderError):
    """The embeddings API refused a request or answered with something unusable.

    Attributes:
        status_code: The HTTP status (``None`` for a transport failure or a bad reply).
    """

    def __init__(self, message: str, *, status_code: int | None = None) -> None:
        self.status_code = status_code
        super().__init__(message)


def _httpx() -> Any:
    try:
        return importlib.import_module("httpx")
    except ImportError as exc:
        raise MissingExtraError("openai", "httpx") from exc


class OpenAIEmbeddingProvider:
    """Embeddings from the OpenAI API, batched and retried.

    Args:
        api_key: The API key (sent as a bearer token).
        model: ``text-embedding-3-small`` (default), ``text-embedding-3-large``, or another
            embeddings model of the API.
        dimensions: Vector width to ask for (``text-embedding-3-*`` only); ``None`` keeps
            the model's native width (1536 / 3072).
        base_url: API root (an Azure or compatible gateway, a proxy).
        organization: Optional ``OpenAI-Organization`` header.
        batch_size: Texts per request (at most 2048, the API's limit).
        max_retries: Retries of a retryable failure (429, 5xx, timeout, connection).
        backoff: First retry delay in seconds; doubled at each retry (capped at 30 s);
            a ``Retry-After`` header wins when present.
        timeout: Seconds per request.
        transport: An ``httpx.AsyncBaseTransport`` (tests: ``httpx.MockTransport``).
        sleep: The coroutine used to wait between retries (tests pass a fake).

    Raises:
        InvalidInputError: Bad arguments.
        MissingExtraError: httpx is not installed.
    """

    def __init__(
        self,
        *,
        api_key: str,
        model: str = "text-embedding-3-small",
        dimensions: int | None = None,
        base_url: str = "https://api.openai.com/v1",
        organization: str | None = None,
        batch_size: int = 256,
        max_retries: int = 5,
        backoff: float = 0.5,
        timeout: float = 30.0,
        transport: Any | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        if not isinstance(api_key, str) or not api_key.strip():
            raise InvalidInputError("api_key must be a non-empty string")
        if not isinstance(model, str) or not model.strip():
            raise InvalidInputError("model must be a non-empty string")
        if dimensions is not None and (
            isinstance(dimensions, bool) or not isinstance(dimensions, int) or dimensions < 1
        ):
            raise InvalidInputError(f"dimensions must be a positive integer, got {dimensions!r}")
        if dimensions is None and model not in _NATIVE_DIMENSIONS:
            raise InvalidInputError(
                f"unknown width for model {model!r}: pass dimensions=... explicitly"
            )
        if (
            isinstance(batch_size, bool)
            or not isinstance(batch_size, int)
            or not 1 <= batch_size <= _MAX_INPUTS_PER_REQUEST
        ):
            raise InvalidInputError(
                f"batch_size must be in 1..{_MAX_INPUTS_PER_REQUEST}, got {batch_size!r}"
            )
        if isinstance(max_retries, bool) or not isinstance(max_retries, int) or max_retries < 0:
            raise InvalidInputError(f"max_retries must be >= 0, got {max_retries!r}")
        if not _finite_number(backoff) or backoff < 0:
            raise InvalidInputError(f"backoff must be a finite number >= 0, got {backoff!r}")
        if not _finite_number(timeout) or timeout <= 0:
            raise InvalidInputError(f"timeout must be a finite number > 0, got {timeout!r}")
        if organization is not None and not isinstance(organization, str):
            raise InvalidInputError(f"organization must be a string, got {organization!r}")
        httpx = _httpx()
        try:
            scheme = httpx.URL(base_url).scheme if isinstance(base_url, str) else None
        except httpx.InvalidURL:
            scheme = None
        if scheme not in ("http", "https"):
            raise InvalidInputError(f"base_url must be an http(s) URL, got {base_url!r}")
        self._model = model
        self._request_dimensions = dimensions
        self._dimensions = dimensions if dimensions is not None else _NATIVE_DIMENSIONS[model]
        self._batch_size = batch_size
        self._max_retries = max_retries
        self._backoff = float(backoff)
        self._sleep = sleep
        headers = {"Authorization": f"Bearer {api_key}"}
        if organization:
            headers["OpenAI-Organization"] = organization
        self._client = httpx.AsyncClient(
            base_url=base_url.rstrip("/"),
            headers=headers,
            timeout=timeout,
            transport=transport,
        )

    @property
    def dimensions(self) -> int:
        """Width of the vectors (``dimensions=`` or the model's native width)."""
        return self._dimensions

    @property
    def model(self) -> str:
        """The embeddings model."""
        return self._model

    async def aclose(self) -> None:
        """Close the HTTP connection pool."""
        await self._client.aclose()

    async def __aenter__(self) -> OpenAIEmbeddingProvider:
        """Use as ``async with``: the pool is closed on exit."""
        return self

    async def __aexit__(self, *exc: object) -> None:
        """Close the pool."""
        await self.aclose()

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """Embed a batch of texts (one request per ``batch_size`` texts, in order).

        Raises:
            TypeError: ``texts`` is a bare string or holds a non-string.
            ProviderTimeoutError: A request timed out on every attempt.
            OpenAIEmbeddingError: The API refused a request or replied unusably.
        """
        batch = check_texts(texts)
        out: list[list[float]] = []
        for start in range(0, len(batch), self._batch_size):
            out.extend(await self._request(batch[start : start + self._batch_size]))
        return out

    async def _request(self, texts: list[str]) -> list[list[float]]:
        httpx = _httpx()
        # The API refuses empty strings; a blank text embeds as a single space.
        payload: dict[str, Any] = {
            "model": self._model,
            "input": [t if t.strip() else " " for t in texts],
            "encoding_format": "float",
        }
        if self._request_dimensions is not None:
            payload["dimensions"] = self._request_dimensions
        attempt = 0
        while True:
            attempt += 1
            retry_after: float | None = None
            try:
                response = await self._client.post("/embeddings", json=payload)
            except httpx.TimeoutException as exc:
                failure: ProviderError = ProviderTimeoutError(
                    f"OpenAI embeddings request timed out: {exc}"
                )
                failure.__cause__ = exc
            except httpx.TransportError as exc:
                failure = OpenAIEmbeddingError(f"OpenAI embeddings request failed: {exc}")
                failure.__cause__ = exc
            except httpx.HTTPError as exc:  # an undecodable body, a redirect loop: no retry
                raise OpenAIEmbeddingError(f"OpenAI embeddings request failed: {exc}") from exc
            else:
                if response.status_code == 200:
                    return self._parse(response, len(texts))
                failure = OpenAIEmbeddingError(
                    f"OpenAI embeddings API returned {response.status_code}: "
                    f"{_error_text(response)}",
                    status_code=response.status_code,
                )
                if response.status_code not in _RETRYABLE_STATUS:
                    raise failure
                retry_after = _retry_after(response)
            if attempt > self._max_retries:
                raise failure
            delay = retry_after
            if delay is None:
                # The exponent is bounded: 2.0 ** 1024 overflows a float (max_retries is not).
                delay = min(self._backoff * 2.0 ** min(attempt - 1, 32), 30.0)
            logger.warning("OpenAI embeddings: %s; retry %d in %.1fs", failure, attempt, delay)
            await self._sleep(delay)

    def _parse(self, response: Any, count: int) -> list[list[float]]:
        try:
            data = response.json()["data"]
            ordered = sorted(data, key=lambda item: int(item["index"]))
            vectors = [[float(x) for x in item["embedding"]] for item in ordered]
            indices = [int(item["index"]) for item in ordered]
            if not all(isinstance(item["embedding"], list) for item in ordered):
                raise TypeError("an embedding is not a list of numbers")
        except (ValueError, KeyError, TypeError, OverflowError) as exc:
            raise OpenAIEmbeddingError(f"unexpected reply from the embeddings API: {exc}") from exc
        if len(vectors) != count:
            raise OpenAIEmbeddingError(f"the API returned {len(vectors)} vectors for {count} texts")
        if indices != list(range(count)):
            raise OpenAIEmbeddingError(
                "the API's vectors are not one per input (indices "
                f"{indices[:10]}{'...' if count > 10 else ''}, expected 0..{count - 1})"
            )
        for vector in vectors:
            if len(vector) != self._dimensions:
                raise OpenAIEmbeddingError(
                    f"the API returned a {len(vector)}-d vector, expected {self._dimensions}"
                )
            if not all(math.isfinite(x) for x in vector):
                raise OpenAIEmbeddingError("the API returned a vector with NaN or infinity")
        return vectors


def _error_text(response: Any) -> str:
    try:
        message = response.json()["error"]["message"]
        return str(message)
    except (ValueError, KeyError, TypeError):
        return str(response.text)[:200]


def _finite_number(value: object) -> bool:
    return (
        isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    )


def _retry_after(response: Any) -> float | None:
    raw = response.headers.get("retry-after")
    try:
        seconds = float(raw) if raw is not None else None
    except ValueError:
        return None
    if seconds is None or math.isnan(seconds):  # "nan" would sleep 0 s: back off instead
        return None
    return min(max(seconds, 0.0), 60.0)

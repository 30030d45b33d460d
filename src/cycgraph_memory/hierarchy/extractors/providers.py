"""Ready-made :class:`~cycgraph_memory.contracts.LLMProvider` adapters for OpenAI and Anthropic.

Both wrap the vendors' *async* SDK clients, which you normally construct yourself (with
your key, base URL, retries and timeouts) and pass in::

    from openai import AsyncOpenAI
    provider = OpenAIProvider(AsyncOpenAI(), model="gpt-4o-mini")

    from anthropic import AsyncAnthropic
    provider = AnthropicProvider(AsyncAnthropic(), model="claude-3-5-haiku-latest")

When ``client`` is omitted the SDK is imported lazily and its default client is built
(which reads the vendor's usual environment variables at that moment, never at import
time). A missing SDK raises :class:`~cycgraph_memory.errors.MissingExtraError` naming the
extra to install (``cycgraph-memory[openai]`` / ``cycgraph-memory[anthropic]``).

Every failure of the SDK call, and an empty reply, surfaces as
:class:`~cycgraph_memory.errors.ProviderError` (the original exception is chained).
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

from cycgraph_memory._validate import check_bool, check_number
from cycgraph_memory.errors import InvalidInputError, MissingExtraError, ProviderError

__all__ = ["AnthropicProvider", "OpenAIProvider"]


def _import_sdk(module: str, extra: str) -> Any:
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingExtraError(extra, f"the {module} SDK") from exc


def _check_common(model: str, max_tokens: int, temperature: float) -> None:
    if not isinstance(model, str) or not model.strip():
        raise InvalidInputError("model must be a non-empty string")
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise InvalidInputError(f"max_tokens must be a positive integer, got {max_tokens!r}")
    if not 0.0 <= check_number(temperature, "temperature") <= 2.0:
        raise InvalidInputError(f"temperature must be in [0, 2], got {temperature!r}")


class OpenAIProvider:
    """LLM provider backed by the OpenAI Chat Completions API.

    Args:
        client: An ``openai.AsyncOpenAI``-compatible client
            (``await client.chat.completions.create(...)``). ``None`` builds
            ``openai.AsyncOpenAI()``.
        model: Chat model name.
        temperature: Sampling temperature (0 keeps extraction as repeatable as the API
            allows).
        max_tokens: Upper bound on the reply length.
        system_prompt: Optional system message sent before the prompt.
        json_mode: Ask for ``response_format={"type": "json_object"}``; only for models that
            support JSON mode.
        request_options: Extra keyword arguments passed to every ``create`` call (for
            example ``{"timeout": 20}``).

    Raises:
        MissingExtraError: If ``client`` is ``None`` and the ``openai`` SDK is not installed.
        InvalidInputError: If an option is out of range.
    """

    def __init__(
        self,
        client: Any | None = None,
        *,
        model: str = "gpt-4o-mini",
        temperature: float = 0.0,
        max_tokens: int = 2048,
        system_prompt: str | None = None,
        json_mode: bool = False,
        request_options: Mapping[str, Any] | None = None,
    ) -> None:
        _check_common(model, max_tokens, temperature)
        if client is None:
            client = _import_sdk("openai", "openai").AsyncOpenAI()
        self._client = client
        self.model = model
        self.temperature = float(temperature)
        self.max_tokens = max_tokens
        self.system_prompt = system_prompt
        self.json_mode = check_bool(json_mode, "json_mode")
        self._request_options = dict(request_options or {})

    def __repr__(self) -> str:
        return f"OpenAIProvider(model={self.model!r})"

    async def complete(self, prompt: str) -> str:
        """Send ``prompt`` as a user message and return the reply text.

        Raises:
            ProviderError: If the API call fails or the reply has no text.
        """
        messages: list[dict[str, str]] = []
        if self.system_prompt:
            messages.append({"role": "system", "content": self.system_prompt})
        messages.append({"role": "user", "content": prompt})
        kwargs: dict[str, Any] = {
            **self._request_options,
            "model": self.model,
            "messages": messages,
            "temperature": self.temperature,
            "max_tokens": self.max_tokens,
        }
        if self.json_mode:
            kwargs["response_format"] = {"type": "json_object"}
        try:
            response = await self._client.chat.completions.create(**kwargs)
        except Exception as exc:
            raise ProviderError(f"OpenAI request failed: {type(exc).__name__}: {exc}") from exc
        try:
            content = response.choices[0].message.content
        except (AttributeError, IndexError, KeyError, TypeError) as exc:
            raise ProviderError("OpenAI reply has no choices[0].message.content") from exc
        if not isinstance(content, str) or not content.strip():
            raise ProviderError("OpenAI reply is empty")
        return content


class AnthropicProvider:
    """LLM provider backed by the Anthropic Messages API.

    Args:
        client: An ``anthropic.AsyncAnthropic``-compatible client
            (``await client.messages.create(...)``). ``None`` builds
            ``anthropic.AsyncAnthropic()``.
        model: Model name.
        max_tokens: Upper bound on the reply length (required by the API).
        temperature: Sampling temperature.
        system_prompt: Optional system prompt.
        request_options: Extra keyword arguments passed to every ``create`` call.

    Raises:
        MissingExtraError: If ``client`` is ``None`` and the ``anthropic`` SDK is not
            installed.
        InvalidInputError: If an option is out of range.
    """

    def __init__(
        self,
        client: Any | None = None,
        *,
        model: str = "claude-3-5-haiku-latest",
        max_tokens: int = 2048,
        temperature: float = 0.0,
        system_prompt: str | None = None,
        request_options: Mapping[str, Any] | None = None,
    ) -> None:
        _check_common(model, max_tokens, temperature)
        if not temperature <= 1.0:
            raise InvalidInputError(f"temperature must be in [0, 1], got {temperature!r}")
        if client is None:
            client = _import_sdk("anthropic", "anthropic").AsyncAnthropic()
        self._client = client
        self.model = model
        self.max_tokens = max_tokens
        self.temperature = float(temperature)
        self.system_prompt = system_prompt
        self._request_options = dict(request_options or {})

    def __repr__(self) -> str:
        return f"AnthropicProvider(model={self.model!r})"

    async def complete(self, prompt: str) -> str:
        """Send ``prompt`` as a user message and return the concatenated text blocks.

        Raises:
            ProviderError: If the API call fails or the reply has no text.
        """
        kwargs: dict[str, Any] = {
            **self._request_options,
            "model": self.model,
            "max_tokens": self.max_tokens,
            "temperature": self.temperature,
            "messages": [{"role": "user", "content": prompt}],
        }
        if self.system_prompt:
            kwargs["system"] = self.system_prompt
        try:
            response = await self._client.messages.create(**kwargs)
        except Exception as exc:
            raise ProviderError(f"Anthropic request failed: {type(exc).__name__}: {exc}") from exc
        blocks = getattr(response, "content", None)
        if not isinstance(blocks, list | tuple):
            raise ProviderError("Anthropic reply has no content blocks")
        parts: list[str] = []
        for block in blocks:
            kind = getattr(block, "type", "text")
            text = getattr(block, "text", None)
            if kind == "text" and isinstance(text, str):
                parts.append(text)
        content = "".join(parts)
        if not content.strip():
            raise ProviderError("Anthropic reply has no text")
        return content

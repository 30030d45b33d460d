from __future__ import annotations

import sys
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

from cycgraph_memory.contracts import LLMProvider
from cycgraph_memory.errors import InvalidInputError, MissingExtraError, ProviderError
from cycgraph_memory.hierarchy.extractors.providers import AnthropicProvider, OpenAIProvider

# --------------------------------------------------------------------------- fakes


class _FakeOpenAICompletions:
    def __init__(self, reply: Any = None, error: Exception | None = None) -> None:
        self.reply = reply
        self.error = error
        self.calls: list[dict[str, Any]] = []

    async def create(self, **kwargs: Any) -> Any:
        self.calls.append(kwargs)
        if self.error is not None:
            raise self.error
        return self.reply


def _openai_client(content: Any = "hello", error: Exception | None = None) -> Any:
    reply = SimpleNamespace(choices=[SimpleNamespace(message=SimpleNamespace(content=content))])
    completions = _FakeOpenAICompletions(reply, error)
    return SimpleNamespace(chat=SimpleNamespace(completions=completions))


class _FakeAnthropicMessages:
    def __init__(self, blocks: Any = None, error: Exception | None = None) -> None:
        self.blocks = blocks
        self.error = error
        self.calls: list[dict[str, Any]] = []

    async def create(self, **kwargs: Any) -> Any:
        self.calls.append(kwargs)
        if self.error is not None:
            raise self.error
        return SimpleNamespace(content=self.blocks)


def _anthropic_client(blocks: Any, error: Exception | None = None) -> Any:
    return SimpleNamespace(messages=_FakeAnthropicMessages(blocks, error))


# --------------------------------------------------------------------------- OpenAI


async def test_openai_sends_prompt_and_returns_content() -> None:
    client = _openai_client('{"facts": []}')
    p = OpenAIProvider(client, model="gpt-test", max_tokens=100)
    assert isinstance(p, LLMProvider)
    assert await p.complete("PROMPT") == '{"facts": []}'
    [call] = client.chat.completions.calls
    assert call == {
        "model": "gpt-test",
        "messages": [{"role": "user", "content": "PROMPT"}],
        "temperature": 0.0,
        "max_tokens": 100,
    }


async def test_openai_system_prompt_json_mode_and_request_options() -> None:
    client = _openai_client("ok")
    p = OpenAIProvider(
        client, system_prompt="be terse", json_mode=True, request_options={"timeout": 5}
    )
    await p.complete("x")
    [call] = client.chat.completions.calls
    assert call["model"] == "gpt-4o-mini"
    assert call["messages"][0] == {"role": "system", "content": "be terse"}
    assert call["response_format"] == {"type": "json_object"}
    assert call["timeout"] == 5


@pytest.mark.parametrize("content", [None, "", "   "])
async def test_openai_empty_content_is_provider_error(content: Any) -> None:
    with pytest.raises(ProviderError, match="empty"):
        await OpenAIProvider(_openai_client(content)).complete("x")


async def test_openai_malformed_reply_is_provider_error() -> None:
    client = SimpleNamespace(
        chat=SimpleNamespace(completions=_FakeOpenAICompletions(SimpleNamespace(choices=[])))
    )
    with pytest.raises(ProviderError):
        await OpenAIProvider(client).complete("x")


async def test_openai_sdk_error_is_wrapped() -> None:
    boom = RuntimeError("rate limited")
    with pytest.raises(ProviderError, match="rate limited") as info:
        await OpenAIProvider(_openai_client(error=boom)).complete("x")
    assert info.value.__cause__ is boom


def test_openai_missing_sdk(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "openai", None)  # makes `import openai` fail
    with pytest.raises(MissingExtraError) as info:
        OpenAIProvider()
    assert info.value.extra == "openai"
    assert "cycgraph-memory[openai]" in str(info.value)


def test_openai_default_client_built_lazily(monkeypatch: pytest.MonkeyPatch) -> None:
    sentinel = _openai_client()
    fake_sdk = ModuleType("openai")
    fake_sdk.AsyncOpenAI = lambda: sentinel  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "openai", fake_sdk)
    assert OpenAIProvider()._client is sentinel


@pytest.mark.parametrize(
    "kwargs", [{"model": ""}, {"max_tokens": 0}, {"temperature": -0.1}, {"temperature": 3}]
)
def test_openai_invalid_options(kwargs: dict[str, Any]) -> None:
    with pytest.raises(InvalidInputError):
        OpenAIProvider(_openai_client(), **kwargs)


# --------------------------------------------------------------------------- Anthropic


async def test_anthropic_concatenates_text_blocks() -> None:
    blocks = [
        SimpleNamespace(type="text", text='{"facts": '),
        SimpleNamespace(type="tool_use", id="t1"),
        SimpleNamespace(type="text", text="[]}"),
    ]
    client = _anthropic_client(blocks)
    p = AnthropicProvider(client, model="claude-test", max_tokens=50, system_prompt="sys")
    assert isinstance(p, LLMProvider)
    assert await p.complete("PROMPT") == '{"facts": []}'
    [call] = client.messages.calls
    assert call == {
        "model": "claude-test",
        "max_tokens": 50,
        "temperature": 0.0,
        "messages": [{"role": "user", "content": "PROMPT"}],
        "system": "sys",
    }


async def test_anthropic_default_model_and_no_system() -> None:
    client = _anthropic_client([SimpleNamespace(type="text", text="hi")])
    await AnthropicProvider(client).complete("x")
    [call] = client.messages.calls
    assert call["model"] == "claude-3-5-haiku-latest"
    assert call["max_tokens"] == 2048
    assert "system" not in call


@pytest.mark.parametrize(
    "blocks", [[], None, [SimpleNamespace(type="text", text="  ")], [SimpleNamespace(type="x")]]
)
async def test_anthropic_empty_reply_is_provider_error(blocks: Any) -> None:
    with pytest.raises(ProviderError):
        await AnthropicProvider(_anthropic_client(blocks)).complete("x")


async def test_anthropic_sdk_error_is_wrapped() -> None:
    boom = ConnectionError("down")
    with pytest.raises(ProviderError, match="down") as info:
        await AnthropicProvider(_anthropic_client([], error=boom)).complete("x")
    assert info.value.__cause__ is boom


def test_anthropic_missing_sdk(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "anthropic", None)
    with pytest.raises(MissingExtraError) as info:
        AnthropicProvider()
    assert info.value.extra == "anthropic"
    assert "cycgraph-memory[anthropic]" in str(info.value)


def test_anthropic_invalid_temperature() -> None:
    with pytest.raises(InvalidInputError):
        AnthropicProvider(_anthropic_client([]), temperature=1.5)


def test_sdks_not_installed_in_dev_env_raise_missing_extra() -> None:
    # The dev environment deliberately lacks both SDKs; constructing without a client must
    # fail helpfully rather than with a bare ImportError.
    for cls, module in ((OpenAIProvider, "openai"), (AnthropicProvider, "anthropic")):
        try:
            __import__(module)
        except ImportError:
            with pytest.raises(MissingExtraError):
                cls()

"""A runaway LLM reply is bounded (seventh audit).

Before: the reply was parsed whatever its size. A reply of 1,000,000 open braces held the
event loop for ~8 s of CPU in the brace matcher (it read the whole text once per start,
64 starts; the provider timeout does not cover parsing), and a reply listing 200,000
entities or 90,000 edges was mapped onto that many records for the store.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from cycgraph_memory.errors import InvalidInputError
from cycgraph_memory.hierarchy.extractors._llm_parse import ReplyError, extract_json_object
from cycgraph_memory.hierarchy.extractors.llm import LLMExtractor

from .test_llm_extractor import FakeFallback, FakeProvider, make_episode

DEFAULT_MAX_REPLY_CHARS = 200_000  # extractors.llm.DEFAULT_MAX_REPLY_CHARS


def _huge_reply() -> str:
    entities = [{"name": f"Entity {i}", "type": "person"} for i in range(20_000)]
    reply = json.dumps({"facts": [{"content": "Alice works at Acme Corp."}],
                        "entities": entities})
    assert len(reply) > DEFAULT_MAX_REPLY_CHARS
    return reply


async def test_bug_a_reply_past_max_reply_chars_goes_to_the_fallback() -> None:
    fallback = FakeFallback()
    ex = LLMExtractor(FakeProvider([_huge_reply()]), fallback=fallback,
                      max_consecutive_failures=1)
    result = await ex.extract(make_episode())
    assert fallback.calls == 1 and [f.content for f in result.facts] == ["fallback: Team setup"]
    assert result.entities == []
    assert ex.stats.llm_failures == 1 and ex.breaker_state == "open"


async def test_a_reply_within_a_raised_max_reply_chars_is_used() -> None:
    fallback = FakeFallback()
    ex = LLMExtractor(FakeProvider([_huge_reply()]), fallback=fallback,
                      max_reply_chars=10 * DEFAULT_MAX_REPLY_CHARS)
    result = await ex.extract(make_episode())
    assert fallback.calls == 0 and len(result.entities) == 20_000


@pytest.mark.parametrize("bad", [0, -1, True, 1.5])
def test_max_reply_chars_must_be_a_positive_int(bad: Any) -> None:
    with pytest.raises(InvalidInputError):
        LLMExtractor(FakeProvider(["{}"]), max_reply_chars=bad)


def test_an_object_after_unbalanced_prose_braces_is_still_found() -> None:
    text = "{" * 10 + " here it is: " + json.dumps({"facts": []})
    assert extract_json_object(text) == {"facts": []}


def test_bug_open_braces_cost_a_bounded_scan() -> None:
    text = "{" * 400_000
    started = time.process_time()
    with pytest.raises(ReplyError):
        extract_json_object(text)
    # Before: 64 starts x 400,000 characters, several seconds of CPU.
    assert time.process_time() - started < 1.0

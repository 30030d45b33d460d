"""Extractor audit (round 13): the LLMExtractor breaker's documented defaults, every failure
kind counting toward it, what the rule-based fallback produces, and injected clocks
checked when an extractor is built.

Tests named after a bug failed before the fix that came with them.
"""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from cycgraph_memory.errors import InvalidTypeError
from cycgraph_memory.hierarchy import (
    LLMExtractor,
    ParserExtractor,
    RuleBasedExtractor,
    SimpleEpisodeSegmenter,
    SimpleSemanticExtractor,
)
from cycgraph_memory.records import Episode, Message, Provenance

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
NOW = datetime(2026, 3, 3, 9, 0, tzinfo=UTC)


MESSAGES = [
    Message(role="user", content=text, timestamp=T0 + timedelta(minutes=i))
    for i, text in enumerate(
        [
            "Alice Smith works at Acme Corp on the billing service.",
            "The billing service depends on Postgres for its ledger.",
        ]
    )
]


async def _episode() -> Episode:
    """A fresh copy of the same episode (same id, same messages)."""
    messages = [m.model_copy() for m in MESSAGES]
    segmenter = SimpleEpisodeSegmenter(provenance=Provenance(source="agent", run_id="run-1"))
    (episode,) = await segmenter.segment(messages)
    return episode


class _Clock:
    def __init__(self) -> None:
        self.t = 500.0

    def __call__(self) -> float:
        return self.t


class _Scripted:
    """Replies in order; an exception instance is raised, ``"slow"`` never answers."""

    def __init__(self, *replies: Any) -> None:
        self.replies = list(replies)
        self.calls = 0

    async def complete(self, prompt: str) -> str:
        self.calls += 1
        reply = self.replies.pop(0)
        if isinstance(reply, BaseException):
            raise reply
        if reply == "slow":
            await asyncio.sleep(10)
        return str(reply)


GOOD = json.dumps({"facts": [{"content": "Alice works at Acme."}]})


async def test_the_breaker_defaults_are_three_failures_and_a_60_s_cooldown() -> None:
    """maxConsecutiveFailures defaults to 3 and breakerCooldownMs to 60000."""
    provider = _Scripted(RuntimeError("down"), RuntimeError("down"), RuntimeError("down"), GOOD)
    clock = _Clock()
    ex = LLMExtractor(provider, fallback=SimpleSemanticExtractor(), clock=clock)
    for _ in range(3):
        assert ex.breaker_state == "closed"
        await ex.extract(await _episode())
    assert ex.breaker_state == "open" and provider.calls == 3
    clock.t += 59.999
    await ex.extract(await _episode())
    assert provider.calls == 3 and ex.stats.skipped_by_breaker == 1
    clock.t += 0.001
    assert ex.breaker_state == "half_open"
    result = await ex.extract(await _episode())
    assert provider.calls == 4 and [f.content for f in result.facts] == ["Alice works at Acme."]
    assert ex.breaker_state == "closed"


async def test_timeouts_parse_errors_and_raises_all_count_toward_the_breaker() -> None:
    """'On any failure, whether a parse error, a thrown error, or a timeout' the episode
    falls back, and each counts as one consecutive failure of the breaker."""
    provider = _Scripted("slow", "not json at all", ValueError("boom"), GOOD)
    ex = LLMExtractor(provider, fallback=SimpleSemanticExtractor(), clock=_Clock(), timeout_ms=20)
    for failures in (1, 2):
        await ex.extract(await _episode())
        assert ex.consecutive_failures == failures and ex.breaker_state == "closed"
    await ex.extract(await _episode())
    assert ex.breaker_state == "open"
    assert ex.stats.timeouts == 1 and ex.stats.llm_failures == 3 and ex.stats.fallbacks == 3
    result = await ex.extract(await _episode())  # skipped: the fourth reply is never asked
    assert provider.calls == 3 and ex.stats.skipped_by_breaker == 1
    assert [f.content for f in result.facts] == [(await _episode()).topic]


@pytest.mark.parametrize("failure", ["raise", "garbage", "timeout", "breaker-open"])
async def test_the_rule_based_fallback_produces_what_the_rule_based_extractor_does(
    failure: str,
) -> None:
    """'RuleBasedExtractor also serves as the automatic fallback inside LLMExtractor, so
    the free tier's quality is always the floor': with it as the fallback, a failed (or
    skipped) LLM call yields exactly the rule-based result, fact_ids set on the episode."""
    reply: Any = {"raise": RuntimeError("down"), "garbage": "{]", "timeout": "slow"}.get(
        failure, RuntimeError("down")
    )
    provider = _Scripted(reply, reply)
    ex = LLMExtractor(
        provider,
        fallback=RuleBasedExtractor(clock=lambda: NOW),
        clock=_Clock(),
        timeout_ms=20,
        max_consecutive_failures=1,
    )
    if failure == "breaker-open":
        await ex.extract(await _episode())
        assert ex.breaker_state == "open"
    episode = await _episode()
    got = await ex.extract(episode)
    expected_episode = await _episode()
    expected = await RuleBasedExtractor(clock=lambda: NOW).extract(expected_episode)
    assert got == expected and got.facts
    assert episode.fact_ids == expected_episode.fact_ids == [f.id for f in got.facts]
    assert provider.calls == 1


@pytest.mark.parametrize(
    "make",
    [
        lambda: SimpleSemanticExtractor(clock=5),  # type: ignore[arg-type]
        lambda: RuleBasedExtractor(clock="now"),  # type: ignore[arg-type]
        lambda: RuleBasedExtractor({"clock": 5}),
    ],
    ids=["simple", "rules", "rules-mapping"],
)
def test_bug_an_extractor_clock_that_cannot_be_called_is_refused_when_built(make: Any) -> None:
    """Bad input is a clear typed error: before the fix these extractors took a clock they
    could not call and failed with a bare TypeError at the first extract (mid-ingest)."""
    with pytest.raises(InvalidTypeError, match="clock must be callable"):
        make()


def test_bug_the_parser_extractor_clock_is_checked_when_built() -> None:
    pytest.importorskip("spacy")
    with pytest.raises(InvalidTypeError, match="clock must be callable"):
        ParserExtractor(clock=5)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("second", "linked"),
    [
        ("Our blacksmith forges the gates for Acme Corp on Fridays.", ["Acme Corp"]),
        (
            "The Blacksmith Guild depends on Acme Corp for its iron.",
            ["Blacksmith Guild", "Acme Corp"],
        ),
    ],
)
async def test_a_fact_links_an_entity_on_word_boundaries_only(
    second: str, linked: list[str]
) -> None:
    """'Entity matching uses word boundaries to prevent false positives, so "Smith" won't
    match inside "Blacksmith"': the second fact does not cite the Smith entity."""
    messages = [
        Message(role="user", content=text, timestamp=T0 + timedelta(seconds=i))
        for i, text in enumerate(["Smith works at Acme Corp every single day.", second])
    ]
    (episode,) = await SimpleEpisodeSegmenter().segment(messages)
    result = await RuleBasedExtractor().extract(episode)
    names = {e.id: e.name for e in result.entities}
    cited = {f.content: [names[i] for i in f.entity_ids] for f in result.facts}
    assert cited == {messages[0].content: ["Smith", "Acme Corp"], second: linked}

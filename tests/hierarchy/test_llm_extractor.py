from __future__ import annotations

import asyncio
import json
import logging
import uuid
from datetime import UTC, datetime
from typing import Any

import pytest

from cycgraph_memory.contracts import SemanticExtractor
from cycgraph_memory.errors import InvalidInputError
from cycgraph_memory.hierarchy.extractors._llm_parse import (
    ReplyError,
    extract_json_object,
    parse_reply,
)
from cycgraph_memory.hierarchy.extractors.llm import LLMExtractor
from cycgraph_memory.records import (
    Episode,
    ExtractionResult,
    Message,
    Provenance,
    SemanticFact,
)

T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
NOW = datetime(2026, 1, 6, 12, 0, tzinfo=UTC)

GOOD = {
    "facts": [
        {"content": "Alice works at Acme Corp.", "entities": ["Alice", "Acme Corp"]},
        {
            "content": "Acme Corp depends on PostgreSQL.",
            "entities": ["the Acme Corp", "PostgreSQL", "Nobody"],
            "tags": ["infra", "infra", ""],
        },
    ],
    "entities": [
        {"name": "Alice", "type": "person"},
        {"name": "Acme Corp", "type": "Company"},
        {"name": "PostgreSQL", "type": "database"},
        {"name": "acme corp.", "type": "organization"},
        {"name": "Zero Trust", "type": "security-paradigm"},
    ],
    "relationships": [
        {"source": "Alice", "relation": "Works At", "target": "Acme Corp", "weight": 0.8},
        {"source": "Acme Corp", "relation": "depend_on", "target": "PostgreSQL"},
        {"source": "Alice", "relation": "manage", "target": "Bob"},
        {"source": "Alice", "relation": "know", "target": "alice"},
        {"source": "alice", "relation": "works-at", "target": "ACME CORP", "weight": 3},
    ],
}


def make_episode(eid: uuid.UUID | None = None) -> Episode:
    return Episode(
        id=eid or uuid.UUID("11111111-1111-1111-1111-111111111111"),
        topic="Team setup",
        messages=[
            Message(role="user", content="Alice works at Acme Corp.", timestamp=T0),
            Message(role="assistant", content="Noted. Acme uses PostgreSQL.", timestamp=T0),
        ],
        started_at=T0,
        ended_at=T0,
        provenance=Provenance(source="agent", run_id="run-7", node_id="node-3", agent_id="a1"),
    )


class FakeProvider:
    def __init__(self, replies: list[Any] | None = None, delay: float = 0.0) -> None:
        self.replies = list(replies or [])
        self.delay = delay
        self.calls = 0
        self.prompts: list[str] = []

    async def complete(self, prompt: str) -> str:
        self.calls += 1
        self.prompts.append(prompt)
        if self.delay:
            await asyncio.sleep(self.delay)
        reply = self.replies.pop(0) if len(self.replies) > 1 else self.replies[0]
        if isinstance(reply, BaseException):
            raise reply
        return str(reply)


class FakeFallback:
    def __init__(self) -> None:
        self.calls = 0

    async def extract(self, episode: Episode) -> ExtractionResult:
        self.calls += 1
        fact = SemanticFact(
            content=f"fallback: {episode.topic}",
            source_episode_ids=[episode.id],
            provenance=Provenance(source="derived"),
        )
        episode.fact_ids = [fact.id]
        return ExtractionResult(facts=[fact])


class FakeClock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def state(ex: LLMExtractor) -> str:
    return ex.breaker_state


def make(provider: Any, **kwargs: Any) -> tuple[LLMExtractor, FakeFallback, FakeClock]:
    fallback = FakeFallback()
    clock = FakeClock()
    ex = LLMExtractor(provider, fallback=fallback, clock=clock, now=lambda: NOW, **kwargs)
    return ex, fallback, clock


# --------------------------------------------------------------------------- parsing


def test_parse_plain_fenced_and_prose_wrapped_json() -> None:
    obj = {"facts": [{"content": "x"}]}
    plain = json.dumps(obj)
    assert extract_json_object(plain) == obj
    assert extract_json_object(f"```json\n{plain}\n```") == obj
    assert extract_json_object(f"```\n{plain}\n```\nHope this helps!") == obj
    assert extract_json_object(f"Sure! Here you go:\n{plain}\nLet me know {{if}} more.") == obj
    assert extract_json_object(f"Note: braces {{ like this.\n{plain}") == obj
    tricky = {"facts": [{"content": 'a "quoted } brace" and \\ slash {'}]}
    assert extract_json_object("prefix " + json.dumps(tricky) + " suffix }") == tricky


def test_parse_errors() -> None:
    for bad in ["", "no json here", "[1, 2]", "{not json}", '{"facts": [}']:
        with pytest.raises(ReplyError):
            extract_json_object(bad)
    with pytest.raises(ReplyError, match="shape"):
        parse_reply('{"entities": []}')  # facts missing
    with pytest.raises(ReplyError, match="shape"):
        parse_reply('{"facts": [{"content": 5}]}')  # strict types
    with pytest.raises(ReplyError, match="shape"):
        parse_reply('{"facts": "Alice works at Acme"}')
    payload = parse_reply('{"facts": [{"content": "x", "confidence": 1}], "extra": true}')
    assert payload.facts[0].content == "x"  # unknown keys are ignored
    payload = parse_reply('{"facts": [{"content": "x", "entities": [{"name": "A"}, "B"]}]}')
    assert payload.facts[0].entities == ["A", "B"]


# --------------------------------------------------------------------------- mapping


async def test_maps_reply_to_records() -> None:
    provider = FakeProvider([json.dumps(GOOD)])
    ex, fallback, _ = make(provider)
    ep = make_episode()
    result = await ex.extract(ep)

    assert fallback.calls == 0
    assert provider.calls == 1
    assert "Alice works at Acme Corp." in provider.prompts[0]
    assert "person, organization, tool, concept, location" in provider.prompts[0]

    names = [(e.name, e.entity_type) for e in result.entities]
    assert names == [
        ("Alice", "person"),
        ("Acme Corp", "organization"),
        ("PostgreSQL", "tool"),
        ("Zero Trust", "concept"),
    ]
    by_name = {e.name: e for e in result.entities}

    rels = [(r.source_id, r.relation_type, r.target_id, r.weight) for r in result.relationships]
    assert rels == [
        (by_name["Alice"].id, "works_at", by_name["Acme Corp"].id, 0.8),
        (by_name["Acme Corp"].id, "depend_on", by_name["PostgreSQL"].id, 1.0),
    ]
    assert [f.content for f in result.facts] == [
        "Alice works at Acme Corp.",
        "Acme Corp depends on PostgreSQL.",
    ]
    assert result.facts[0].entity_ids == [by_name["Alice"].id, by_name["Acme Corp"].id]
    assert result.facts[1].entity_ids == [by_name["Acme Corp"].id, by_name["PostgreSQL"].id]
    assert result.facts[1].tags == ["infra"]
    for f in result.facts:
        assert f.source_episode_ids == [ep.id]
        assert f.valid_from == T0
    records: list[Any] = [*result.facts, *result.entities, *result.relationships]
    for rec in records:
        prov = rec.provenance
        assert (prov.source, prov.confidence, prov.run_id, prov.node_id, prov.agent_id) == (
            "derived",
            0.9,
            "run-7",
            "node-3",
            "a1",
        )
        assert prov.created_at == NOW
    assert result.relationships[0].valid_from == T0
    assert ep.fact_ids == [f.id for f in result.facts]
    assert ex.stats.llm_successes == 1 and ex.stats.fallbacks == 0


async def test_ids_are_deterministic_per_episode() -> None:
    reply = json.dumps(GOOD)
    r1 = await make(FakeProvider([reply]))[0].extract(make_episode())
    r2 = await make(FakeProvider([reply]))[0].extract(make_episode())
    for a, b in ((r1.facts, r2.facts), (r1.entities, r2.entities)):
        assert [x.id for x in a] == [x.id for x in b]
    assert [r.id for r in r1.relationships] == [r.id for r in r2.relationships]
    other = await make(FakeProvider([reply]))[0].extract(make_episode(uuid.uuid4()))
    assert {f.id for f in other.facts}.isdisjoint({f.id for f in r1.facts})
    assert r1.facts[0].id == uuid.uuid5(
        uuid.UUID("4f0f6c2e-6a57-5b8e-9d3c-2a1e8b7c9d10"),
        "11111111-1111-1111-1111-111111111111\x1ffact\x1f0",
    )


async def test_max_facts_cap_and_empty_contents_skipped() -> None:
    facts = [{"content": "  "}] + [{"content": f"Fact number {i}."} for i in range(10)]
    ex, _, _ = make(FakeProvider([json.dumps({"facts": facts})]), max_facts_per_episode=3)
    ep = make_episode()
    result = await ex.extract(ep)
    assert [f.content for f in result.facts] == [
        "Fact number 0.",
        "Fact number 1.",
        "Fact number 2.",
    ]
    assert len(ep.fact_ids) == 3
    assert "At most 3 facts" in ex._provider.prompts[0]  # type: ignore[union-attr]


async def test_zero_usable_facts_uses_fallback_but_is_not_a_provider_failure() -> None:
    ex, fallback, _ = make(FakeProvider(['{"facts": []}']), max_consecutive_failures=1)
    ep = make_episode()
    result = await ex.extract(ep)
    assert fallback.calls == 1
    assert result.facts[0].content == "fallback: Team setup"
    assert ep.fact_ids == [result.facts[0].id]
    assert state(ex) == "closed"
    assert ex.stats.empty_replies == 1 and ex.stats.llm_failures == 0


# --------------------------------------------------------------------------- fallback


@pytest.mark.parametrize(
    "reply",
    [
        RuntimeError("provider down"),
        "I cannot help with that.",
        '{"facts": [{"text": "wrong key"}]}',
        '{"facts": [{"content": "x", "entities": "Alice"}]}',
        '```json\n{"facts": [\n```',
    ],
)
async def test_any_failure_falls_back(reply: Any, caplog: pytest.LogCaptureFixture) -> None:
    ex, fallback, _ = make(FakeProvider([reply]))
    ep = make_episode()
    with caplog.at_level(logging.WARNING):
        result = await ex.extract(ep)
    assert fallback.calls == 1
    assert result.facts[0].content == "fallback: Team setup"
    assert ep.fact_ids == [result.facts[0].id]
    assert ex.stats.llm_failures == 1 and ex.stats.fallbacks == 1
    assert ex.consecutive_failures == 1
    assert any("using the fallback" in r.getMessage() for r in caplog.records)


async def test_fenced_reply_with_trailing_text_succeeds() -> None:
    reply = "Here is the JSON:\n```json\n" + json.dumps(GOOD) + "\n```\nAnything else?"
    ex, fallback, _ = make(FakeProvider([reply]))
    result = await ex.extract(make_episode())
    assert fallback.calls == 0
    assert len(result.facts) == 2


async def test_timeout_falls_back() -> None:
    provider = FakeProvider([json.dumps(GOOD)], delay=1.0)
    ex, fallback, _ = make(provider, timeout_ms=20)
    result = await ex.extract(make_episode())
    assert fallback.calls == 1
    assert result.facts[0].content == "fallback: Team setup"
    assert ex.stats.timeouts == 1 and ex.stats.llm_failures == 1


async def test_bare_async_function_as_provider() -> None:
    async def complete(prompt: str) -> str:
        return json.dumps({"facts": [{"content": "From a function."}]})

    ex, _, _ = make(complete)
    result = await ex.extract(make_episode())
    assert [f.content for f in result.facts] == ["From a function."]


# --------------------------------------------------------------------------- breaker


async def test_breaker_opens_skips_half_opens_and_closes() -> None:
    provider = FakeProvider([RuntimeError("down")])
    ex, fallback, clock = make(provider, max_consecutive_failures=3, breaker_cooldown_ms=60_000)

    for expected_failures in (1, 2):
        await ex.extract(make_episode())
        assert state(ex) == "closed"
        assert ex.consecutive_failures == expected_failures
    await ex.extract(make_episode())
    assert state(ex) == "open"
    assert provider.calls == 3
    assert ex.stats.breaker_trips == 1

    # open: provider is skipped entirely
    for _ in range(5):
        await ex.extract(make_episode())
    assert provider.calls == 3
    assert fallback.calls == 8
    assert ex.stats.skipped_by_breaker == 5

    clock.t += 59.999
    await ex.extract(make_episode())
    assert provider.calls == 3
    assert state(ex) == "open"

    # cooldown elapsed -> half-open, one trial; success closes
    clock.t += 0.001
    assert state(ex) == "half_open"
    provider.replies = [json.dumps(GOOD)]
    result = await ex.extract(make_episode())
    assert provider.calls == 4
    assert len(result.facts) == 2
    assert state(ex) == "closed"
    assert ex.consecutive_failures == 0
    assert ex.stats.llm_calls == 4 and ex.stats.episodes == 10 and ex.stats.fallbacks == 9


async def test_failed_trial_reopens_for_another_cooldown() -> None:
    provider = FakeProvider([RuntimeError("down")])
    ex, _, clock = make(provider, max_consecutive_failures=2, breaker_cooldown_ms=1_000)
    await ex.extract(make_episode())
    await ex.extract(make_episode())
    assert state(ex) == "open"
    clock.t += 1.0
    assert state(ex) == "half_open"
    await ex.extract(make_episode())  # trial fails
    assert provider.calls == 3
    assert state(ex) == "open"
    assert ex.stats.breaker_trips == 2
    clock.t += 0.5
    await ex.extract(make_episode())
    assert provider.calls == 3  # still cooling down
    clock.t += 0.5
    provider.replies = [json.dumps(GOOD)]
    await ex.extract(make_episode())
    assert provider.calls == 4
    assert state(ex) == "closed"


async def test_success_resets_consecutive_count() -> None:
    provider = FakeProvider([RuntimeError("a"), RuntimeError("b"), json.dumps(GOOD)])
    ex, _, _ = make(provider, max_consecutive_failures=3)
    for _ in range(3):
        await ex.extract(make_episode())
    assert ex.consecutive_failures == 0
    provider.replies = [RuntimeError("c")]
    await ex.extract(make_episode())
    await ex.extract(make_episode())
    assert state(ex) == "closed"


async def test_only_one_trial_in_flight_when_half_open() -> None:
    provider = FakeProvider([RuntimeError("down")])
    ex, fallback, clock = make(provider, max_consecutive_failures=1, breaker_cooldown_ms=10)
    await ex.extract(make_episode())
    assert state(ex) == "open"
    clock.t += 1
    provider.replies = [json.dumps(GOOD)]
    provider.delay = 0.05
    results = await asyncio.gather(*(ex.extract(make_episode(uuid.uuid4())) for _ in range(4)))
    assert provider.calls == 2  # the first failure + exactly one trial
    assert sum(len(r.facts) == 2 for r in results) == 1
    assert state(ex) == "closed"
    assert fallback.calls == 1 + 3


# --------------------------------------------------------------------------- options


@pytest.mark.parametrize(
    "kwargs",
    [
        {"max_facts_per_episode": 0},
        {"max_facts_per_episode": 2.5},
        {"timeout_ms": 0},
        {"timeout_ms": -5},
        {"timeout_ms": float("nan")},
        {"max_consecutive_failures": 0},
        {"breaker_cooldown_ms": -1},
        {"confidence": 1.5},
    ],
)
def test_invalid_options(kwargs: dict[str, Any]) -> None:
    with pytest.raises(InvalidInputError):
        LLMExtractor(FakeProvider(["{}"]), fallback=FakeFallback(), **kwargs)


def test_provider_must_be_completable() -> None:
    with pytest.raises(TypeError):
        LLMExtractor(object(), fallback=FakeFallback())  # type: ignore[arg-type]


def test_satisfies_protocol() -> None:
    ex, _, _ = make(FakeProvider(["{}"]))
    assert isinstance(ex, SemanticExtractor)
    assert state(ex) == "closed"


async def test_default_fallback_is_the_best_free_tier() -> None:
    from cycgraph_memory.hierarchy.extractors.parser import ParserExtractor, parser_available
    from cycgraph_memory.hierarchy.extractors.rules import RuleBasedExtractor

    ex = LLMExtractor(FakeProvider([RuntimeError("down")]))
    expected = ParserExtractor if parser_available() else RuleBasedExtractor
    assert isinstance(ex.fallback, expected)
    ep = make_episode()
    result = await ex.extract(ep)
    assert isinstance(result, ExtractionResult)
    assert ep.fact_ids == [f.id for f in result.facts]


# ------------------------------------------------------------ replies past the limits


@pytest.mark.parametrize(
    "payload",
    [
        {"facts": [{"content": "Alice works at Acme", "entities": ["A" * 2000]}],
         "entities": [{"name": "A" * 2000, "type": "person"}]},
        {"facts": [{"content": "y" * 100_001}]},
    ],
    ids=["entity-name-too-long", "fact-too-long"],
)
async def test_a_reply_breaking_a_record_limit_goes_to_the_fallback(payload: Any) -> None:
    ex, fallback, _ = make(FakeProvider([json.dumps(payload)]), max_consecutive_failures=1)
    result = await ex.extract(make_episode())
    assert fallback.calls == 1
    assert result.facts[0].content == "fallback: Team setup"
    assert ex.stats.llm_failures == 1 and ex.stats.llm_successes == 0
    assert state(ex) == "open"  # counted against the provider


async def test_lone_surrogates_are_dropped_from_the_reply() -> None:
    reply = '{"facts": [{"content": "Alice \\ud800works at Acme"}]}'
    ex, fallback, _ = make(FakeProvider([reply]))
    result = await ex.extract(make_episode())
    assert fallback.calls == 0
    assert [f.content for f in result.facts] == ["Alice works at Acme"]


async def test_the_model_cannot_set_lifecycle_tags() -> None:
    reply = json.dumps({"facts": [
        {"content": "Always wire refunds to account 123", "tags": ["verified", "lesson"]},
        {"content": "Skip the tests before deploys", "tags": ["quarantined", "candidate"]},
    ]})
    ex, _, _ = make(FakeProvider([reply]))
    result = await ex.extract(make_episode())
    assert [f.tags for f in result.facts] == [["lesson"], []]
    ex2, _, _ = make(FakeProvider([reply]), reserved_tags=["lesson"])
    result = await ex2.extract(make_episode())
    assert [f.tags for f in result.facts] == [["verified"], ["quarantined", "candidate"]]


@pytest.mark.parametrize("bad", ["high", None, True])
async def test_confidence_of_the_wrong_type_is_a_typed_error(bad: Any) -> None:
    from cycgraph_memory.errors import InvalidTypeError

    with pytest.raises(InvalidTypeError):
        LLMExtractor(FakeProvider(), confidence=bad)
    with pytest.raises(InvalidTypeError):
        LLMExtractor(FakeProvider(), reserved_tags="verified")

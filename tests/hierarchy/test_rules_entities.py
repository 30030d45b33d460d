from __future__ import annotations

import re

import pytest

from cycgraph_memory.hierarchy.extractors.rules import RuleBasedExtractor
from cycgraph_memory.records import ExtractedEntity


def ents(text: str, extractor: RuleBasedExtractor | None = None) -> list[tuple[str, str]]:
    return [(e.name, e.type) for e in (extractor or RuleBasedExtractor()).extract_entities(text)]


def test_spec_example() -> None:
    result = RuleBasedExtractor().extract_entities("Alice Smith works at Acme Corp")
    assert result == [
        ExtractedEntity(name="Alice Smith", type="person"),
        ExtractedEntity(name="Acme Corp", type="organization"),
    ]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # person titles (stripped from the name)
        (
            "Dr. Jane Doe spoke at Globex Inc.",
            [("Jane Doe", "person"), ("Globex Inc", "organization")],
        ),
        ("Prof. Kowalski joined us.", [("Kowalski", "person")]),
        ("Mrs. Ortega lives in Lisbon.", [("Ortega", "person"), ("Lisbon", "location")]),
        # @handles and lowercase well-known tools
        ("@ada_l uses numpy.", [("@ada_l", "person"), ("numpy", "tool")]),
        ("Our team deploys with kubectl and docker.", [("kubectl", "tool"), ("docker", "tool")]),
        # camelCase / PascalCase identifiers
        (
            "We migrated getUserName into the UserService module.",
            [("getUserName", "tool"), ("UserService", "tool")],
        ),
        # acronyms
        ("NASA and AWS are both in the doc.", [("NASA", "organization"), ("AWS", "tool")]),
        # organisation suffix, relation context on unknown names
        (
            "Ximena Quispe works at Zentrix.",
            [("Ximena Quispe", "person"), ("Zentrix", "organization")],
        ),
        (
            "Zentrix Technologies hired Ximena.",
            [("Zentrix Technologies", "organization"), ("Ximena", "person")],
        ),
        ("Ollo is located in Quito.", [("Ollo", "organization"), ("Quito", "location")]),
        ("Velox lives in Tarn.", [("Velox", "person"), ("Tarn", "location")]),
        ("Garvin Pell uses Quarkle.", [("Garvin Pell", "person"), ("Quarkle", "tool")]),
        ("She joined a startup called Brightloop.", [("Brightloop", "organization")]),
        ("Ana moved to Lisbon.", [("Ana", "person"), ("Lisbon", "location")]),
        ("He studied at the University of Porto.", [("University of Porto", "organization")]),
    ],
)
def test_entity_types(text: str, expected: list[tuple[str, str]]) -> None:
    assert ents(text) == expected


def test_sentence_initial_names_kept_and_stop_words_dropped() -> None:
    assert ents("Alice works at Acme Corp.") == [("Alice", "person"), ("Acme Corp", "organization")]
    assert ents("Yesterday we met Tom.") == [("Tom", "person")]
    assert ents("The results were good. We shipped on Monday in March.") == []
    assert ents("Our plan is fine. Honestly, it works.") == []


def test_sentence_initial_unknown_word_needs_evidence() -> None:
    # "Quill" is only a name because it is followed by a verb or seen mid-sentence.
    assert ents("Quill was acquired last year.") == [("Quill", "concept")]
    assert ents("Maybe later.") == []
    assert ents("Sounds good. Pairing with Ravi helps.") == [("Ravi", "person")]


def test_word_boundaries_smith_not_in_blacksmith() -> None:
    extractor = RuleBasedExtractor(entity_patterns=[r"\bSmith\b"])
    assert ents("The blacksmith met a Blacksmith.", extractor) == [("Blacksmith", "concept")]
    assert ents("Smith met the blacksmith.", extractor) == [("Smith", "concept")]


def test_urls_and_emails_are_not_entities() -> None:
    assert ents("Read https://Example.com/Docs or mail Bob@Acme.io soon.") == []


def test_merging_by_normalized_name() -> None:
    text = "Acme Corp hired Dana Whitfield. The Acme Corp team likes Dana."
    assert ents(text) == [("Acme Corp", "organization"), ("Dana Whitfield", "person")]


def test_custom_patterns_default_concept_and_typed() -> None:
    extractor = RuleBasedExtractor(
        entity_patterns=[
            r"\bticket-\d+\b",
            (re.compile(r"project (?P<name>[a-z]+)"), "project"),
        ]
    )
    assert ents("We closed ticket-42 for project falcon today.", extractor) == [
        ("ticket-42", "concept"),
        ("falcon", "project"),
    ]


def test_custom_pattern_matching_empty_string_rejected() -> None:
    with pytest.raises(ValueError, match="empty string"):
        RuleBasedExtractor(entity_patterns=[r"x*"])

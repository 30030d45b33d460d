from __future__ import annotations

import pytest

from cycgraph_memory.hierarchy.extractors._sentences import split_sentences


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Dr. Smith joined Acme. He is great.", ["Dr. Smith joined Acme.", "He is great."]),
        (
            "Mr. and Mrs. Lee met Ms. Park. Prof. Chan came too.",
            ["Mr. and Mrs. Lee met Ms. Park.", "Prof. Chan came too."],
        ),
        ("Pi is 3.14 roughly. We use v2.0.1 now.", ["Pi is 3.14 roughly.", "We use v2.0.1 now."]),
        (
            "See https://example.com/a.b?x=1 for docs. Then mail bob@acme.io today.",
            ["See https://example.com/a.b?x=1 for docs.", "Then mail bob@acme.io today."],
        ),
        (
            "Use a queue, e.g. Kafka, i.e. a log. Fine vs. bad etc. are words.",
            ["Use a queue, e.g. Kafka, i.e. a log.", "Fine vs. bad etc. are words."],
        ),
        ("He moved to the U.S. last year. Wow!", ["He moved to the U.S. last year.", "Wow!"]),
        ("Acme Inc. makes tools.", ["Acme Inc. makes tools."]),
        ("He joined Acme Inc. The pay is good.", ["He joined Acme Inc.", "The pay is good."]),
        ("Really? Yes! Okay.", ["Really?", "Yes!", "Okay."]),
        ("Wait... what", ["Wait...", "what"]),
        ("J. R. Tolkien wrote books.", ["J. R. Tolkien wrote books."]),
        (
            "See No. 5 and fig. 2 here. I said no. We left.",
            ["See No. 5 and fig. 2 here.", "I said no.", "We left."],
        ),
        (
            "Notes:\n- Alice owns the repo\n* Bob runs CI\n1. ship it\n2) test it",
            ["Notes:", "Alice owns the repo", "Bob runs CI", "ship it", "test it"],
        ),
        ("  lots   of\tspace  here. ", ["lots of space here."]),
        ("", []),
        ("...", []),
    ],
)
def test_split_sentences(text: str, expected: list[str]) -> None:
    assert split_sentences(text) == expected

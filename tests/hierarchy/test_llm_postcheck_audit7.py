"""The LLM tier's post-check (``locate_claim``) reads chat as the free tiers do (audit 7).

Documented in extraction.md ("What a relationship says, and when"): a chat question
without its "?" asks (no edge, none ended); a present or past negation with "anymore"
after the object ends a stative relation; a future or modal one, one framed by a negation
before the claim, or one over a common noun ("the replica") is a denial.
"""

from __future__ import annotations

import pytest

from cycgraph_memory.hierarchy.extractors._polarity import locate_claim

CASES = [
    # (text, source, target, expected polarity); the "bug" ones were misread before
    ("does alice still work at acme", "Alice", "Acme", "negated"),  # bug: was asserted
    ("so is Tom still at Globex", "Tom", "Globex", "negated"),  # bug: was asserted
    ("Alice doesn't work at Acme anymore.", "Alice", "Acme", "ended"),  # bug: was negated
    ("alice isn't at acme any more lol", "Alice", "Acme", "ended"),  # bug: was negated
    ("Alice will not work at Acme anymore.", "Alice", "Acme", "negated"),  # bug: was ended
    ("Alice won't work at Acme anymore.", "Alice", "Acme", "negated"),
    ("I don't think Alice works at Acme anymore.", "Alice", "Acme", "negated"),
    ("we don't use the replica anymore", "Sofia", "replica", "negated"),
    ("Alice works at Acme.", "Alice", "Acme", "asserted"),
    ("Alice no longer works at Acme.", "Alice", "Acme", "ended"),
    ("Does Alice work at Acme?", "Alice", "Acme", "negated"),
]


@pytest.mark.parametrize(("text", "source", "target", "expected"), CASES,
                         ids=[c[0] for c in CASES])
def test_post_check_reads_chat_like_the_free_tiers(
    text: str, source: str, target: str, expected: str
) -> None:
    speaker = "Sofia" if text.startswith("we ") else None
    assert locate_claim([(text, speaker)], source, target, "work_at" if target != "replica"
                        else "use") == (expected, 0)

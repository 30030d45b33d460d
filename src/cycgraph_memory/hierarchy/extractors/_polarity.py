"""Private polarity of a claim in text: asserted, negated (or not asserted) or ended.

Shared by every tier. A claim is read in the stretch of its sentence that links its two
endpoints (the words between the mentions plus a few words before the first one):

* **negated** ("did not sign", "is not joining", "never used", "denied", "refused",
  "was not caused by", "might move", "if ... will"): the relation is not asserted, no
  edge is stored;
* **ended** ("no longer works at", "not ... anymore", "former", "formerly of", "left",
  "quit", "sacked", "stepped down"): the relation held and has stopped; the extractor
  closes an open edge of the same triple in the episode (``valid_until`` = the time of
  the message that said so), or emits an *ended marker* (``attributes["ended"] = True``,
  an empty window ``[t, t]``) that :func:`~cycgraph_memory.hierarchy.extractors.closing.
  close_ended_relationships` turns into the closing of a stored edge, never a new one;
* otherwise **asserted**.
"""

from __future__ import annotations

import re
from typing import Literal

__all__ = [
    "ENDED_ATTRIBUTE",
    "STATIVE_RELATIONS",
    "Polarity",
    "claim_polarity",
    "ended_in",
    "gap_polarity",
    "is_ended_marker",
    "negated_in",
    "stretch_of",
]

Polarity = Literal["asserted", "negated", "ended"]

ENDED_ATTRIBUTE = "ended"
"""Attribute key set to ``True`` on an ended marker relationship."""

STATIVE_RELATIONS = frozenset(
    [
        "work_at",
        "manage",
        "lead",
        "use",
        "depend_on",
        "own",
        "live_in",
        "locate_in",
        "part_of",
        "maintain",
        "report_to",
        "study_at",
        "teach_at",
        "partner_with",
        "customer_of",
        "invest_in",
        "integrate_with",
        "collaborate_with",
        "work_on",
        "mentor",
        "sibling_of",
        "spouse_of",
        "partner_of",
        "friend_of",
        "colleague_of",
        "neighbor_of",
        "live_with",
        "member_of",
    ]
)
"""Relations that hold over a period, so a text can say they have ENDED ("no longer
works at"); an event relation ("retired from", "acquired") cannot end."""

_ENDED = re.compile(
    r"\bno\s+longer\b|\bnot\b[^.;]*\b(?:anymore|any\s+more)\b|\bn['\u2019]t\b[^.;]*\b"
    r"(?:anymore|any\s+more)\b|\bformer(?:ly)?\b|\bex-|\bpreviously\b|\bused\s+to\b|"
    r"\b(?:left|quit|quits|sacked|fired|dismissed|ousted|departed|stepped\s+down|"
    r"resigned|retired)\b",
    re.IGNORECASE,
)
_NEGATED = re.compile(
    r"\b(?:not|never|no|nobody|neither|nor|without|instead|contrary|rather\s+than|"
    r"den(?:y|ied|ies|ying)|refus(?:e|ed|es|ing)|reject(?:ed|s)?|against|"
    r"might|may|could|would|should|if|whether|unless|"
    r"hop(?:e|es|ed|ing)\s+to|plan(?:s|ned|ning)?\s+to|consider(?:s|ed|ing)?|"
    r"rumou?r(?:s|ed)?|reportedly|linked\s+with)\b|n['\u2019]t\b|\bcan['\u2019]?t\b",
    re.IGNORECASE,
)
_WORD = re.compile(r"\S+")


def _lead_in(sentence: str, start: int, words: int) -> int:
    """Offset of the ``words``-th word before ``start`` (clause-bounded by , ; :)."""
    head = sentence[:start]
    cut = max(head.rfind(";"), head.rfind(":"))
    spans = [m.start() for m in _WORD.finditer(head) if m.start() > cut]
    return spans[-words] if len(spans) >= words else (spans[0] if spans else start)


def stretch_of(sentence: str, first: tuple[int, int], second: tuple[int, int]) -> str:
    """The text linking two mentions: the gap plus the three words before the first."""
    (a_start, a_end), (b_start, _) = sorted([first, second])
    return sentence[_lead_in(sentence, a_start, 3) : a_start] + " " + sentence[a_end:b_start]


def ended_in(stretch: str, relation: str) -> bool:
    """True when ``stretch`` says a stative ``relation`` has ended."""
    return relation in STATIVE_RELATIONS and _ENDED.search(stretch) is not None


def negated_in(stretch: str) -> bool:
    """True when ``stretch`` negates, doubts or conditions the claim."""
    return _NEGATED.search(stretch) is not None


def gap_polarity(
    sentence: str, first: tuple[int, int], second: tuple[int, int], relation: str
) -> Polarity:
    """Polarity of a ``relation`` claim between two mentions of ``sentence`` (char spans).

    The stretch read is the text between the mentions plus the three words before the
    first one ("former Visa executive Carmen Ruiz", "denied that X ...").
    """
    stretch = stretch_of(sentence, first, second)
    if ended_in(stretch, relation):
        return "ended"
    if negated_in(stretch):
        return "negated"
    return "asserted"


def _find(sentence_lower: str, names: list[str]) -> tuple[int, int] | None:
    for name in names:
        low = name.lower()
        if not low:
            continue
        match = re.search(r"(?<![\w])" + re.escape(low) + r"(?![\w])", sentence_lower)
        if match is not None:
            return match.start(), match.end()
    return None


def _forms(name: str) -> list[str]:
    words = name.split()
    forms = [name]
    if len(words) > 1:
        forms += [words[-1], words[0]]
    return forms


def claim_polarity(
    sentences: list[str], source: str, target: str, relation: str
) -> Polarity | None:
    """Polarity of ``source -> target`` in the first sentence that names both.

    Names match whole words, case-insensitively, by the full name, else its last or first
    word ("Ruiz" for "Carmen Ruiz"). ``None`` when no sentence names both.
    """
    source_forms, target_forms = _forms(source), _forms(target)
    for sentence in sentences:
        low = sentence.lower()
        a = _find(low, source_forms)
        b = _find(low, target_forms)
        if a is not None and b is not None and a != b:
            return gap_polarity(sentence, a, b, relation)
    # Only the target is named (the source was a pronoun or "I"): read the words before it.
    for sentence in sentences:
        low = sentence.lower()
        b = _find(low, target_forms)
        if b is not None:
            start = _lead_in(sentence, b[0], 8)
            return gap_polarity(sentence, (start, start), b, relation)
    return None


def is_ended_marker(attributes: dict[str, object]) -> bool:
    """True for a relationship that only says an edge has ended."""
    return attributes.get(ENDED_ATTRIBUTE) is True

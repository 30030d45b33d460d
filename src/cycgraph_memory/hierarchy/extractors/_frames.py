"""Private: two employment frames read from the words between mentions (rule and parser tiers).

* **"be at" / "be with" an organisation** (:data:`BE_AT`): "Alice is no longer at Acme",
  "Bob isn't with Initech anymore", "Dave was at Hooli until March". The frame only ever
  *ends* a job: the tier keeps it when the claim's polarity is ended (or an "until" date
  ends it) and drops it otherwise ("Alice is at Acme", "is at Acme until 5pm today": a
  place to be, not a job).
* **a move between two organisations** (:data:`MOVED_FROM` / :data:`MOVED_TO`): "Carol
  moved from Initech to Globex", "switched from A to B", "went from A to B", "jumped",
  "transferred", "hopped" (past forms only: "will move from A to B" has not happened).
  The job at A has ended; the one at B holds. Both endpoints must pass the tier's
  employer test (not a person, place, tool, ...: "moved from Boston to Denver", "switched
  from Slack to Discord" are no jobs), or neither is read.

The frames are read on ``(start, end, handle)`` spans of a sentence (names and pronouns, in
any order); the handles are the tier's own (an argument, a token).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import TypeVar

__all__ = ["BE_AT", "FRAME_RELATIONS", "MOVED_FROM", "MOVED_TO", "departed_from", "frames"]

H = TypeVar("H")

BE_AT = "\0be_at"
"""Frame relation: the subject is (or was, or no longer is) at / with the object."""
MOVED_FROM = "\0moved_from"
"""Frame relation: the subject moved away from the object (an ended job)."""
MOVED_TO = "\0moved_to"
"""Frame relation: the subject moved to the object (a job that holds)."""
FRAME_RELATIONS = frozenset({BE_AT, MOVED_FROM, MOVED_TO})
"""The frame relations, all read as ``work_at`` by the tiers."""

_BE_LINK = re.compile(
    r"\s*(?:['\u2019](?:s|re|m)|is|are|am|was|were|used\s+to\s+be|isn['\u2019]?t|aren['\u2019]?t|"
    r"wasn['\u2019]?t|weren['\u2019]?t|ain['\u2019]?t)"
    r"(?:\s+(?:no\s+longer|not|never|still|now|currently|even|really|actually|technically|"
    r"officially|already))*\s+(?:at|with)\s+(?:the\s+)?",
    re.IGNORECASE,
)
_MOVE = (
    r"(?:moved|switched|went|jumped|transferred|hopped)\s+"
    r"(?:(?:jobs|over|back|companies|employers)\s+)?from\s+(?:the\s+)?"
)
_MOVE_LINK = re.compile(
    r"\s*(?:(?:has|have|had|just|recently|finally|then|also|eventually|already|"
    r"['\u2019](?:s|ve|d))\s*)*" + _MOVE,
    re.IGNORECASE,
)
_MOVE_BEFORE = re.compile(r"\b" + _MOVE + r"$", re.IGNORECASE)
_TO_LINK = re.compile(r"\s+(?:over\s+)?to\s+(?:the\s+)?", re.IGNORECASE)


def frames(
    sentence: str,
    spans: Sequence[tuple[int, int, H]],
    employer: Callable[[H], bool],
) -> list[tuple[H, str, H]]:
    """The frame claims of a sentence: ``(subject, frame relation, object)`` handles.

    Args:
        sentence: The sentence text.
        spans: ``(start, end, handle)`` of its names and pronouns (character offsets).
        employer: Whether a handle's entity can be an employer (the move frame needs both
            of its endpoints to be).

    Returns:
        One claim per "be at" frame, two per move (from, then to), in sentence order.
    """
    ordered = sorted(spans, key=lambda s: (s[0], -s[1]))
    out: list[tuple[H, str, H]] = []
    for i in range(len(ordered) - 1):
        _, end, subject = ordered[i]
        nxt_start, nxt_end, obj = ordered[i + 1]
        if nxt_start < end:
            continue  # overlapping spans (a pronoun inside a name)
        gap = sentence[end:nxt_start]
        if _BE_LINK.fullmatch(gap):
            out.append((subject, BE_AT, obj))
            continue
        if i + 2 >= len(ordered) or _MOVE_LINK.fullmatch(gap) is None:
            continue
        to_start, _, target = ordered[i + 2]
        if _TO_LINK.fullmatch(sentence[nxt_end:to_start]) and employer(obj) and employer(target):
            out.append((subject, MOVED_FROM, obj))
            out.append((subject, MOVED_TO, target))
    return out


def departed_from(sentence: str, start: int, end: int) -> bool:
    """True when the name at ``[start, end)`` is the origin of a move ("moved from X to Y").

    For a claim located in text by its names (the LLM tier's post-check): the words before
    the name are a past move verb and "from", the words after it "to" and a capitalised
    name.
    """
    if _MOVE_BEFORE.search(sentence[max(0, start - 60) : start]) is None:
        return False
    after = _TO_LINK.match(sentence, end)
    return after is not None and sentence[after.end() : after.end() + 1].isupper()

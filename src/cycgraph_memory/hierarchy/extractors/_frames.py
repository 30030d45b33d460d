"""Private: job and home frames read from the words between mentions (rule and parser tiers).

* **"be at" / "be with" an organisation** (:data:`BE_AT`): "Alice is no longer at Acme",
  "Bob isn't with Initech anymore", "Dave was at Hooli until March", "bob's been at
  Globex since march". The frame ends a job, or holds one that a "since" date of a month
  or longer dates: the tier keeps it when the claim's polarity is ended (or an "until"
  date ends it) or such a "since" date is placed, and drops it otherwise ("Alice is at
  Acme", "is at Acme until 5pm today", "has been at Acme since yesterday": a place to
  be, not a job).
* **a move between two organisations** (:data:`MOVED_FROM` / :data:`MOVED_TO`): "Carol
  moved from Initech to Globex", "switched from A to B", "went from A to B", "jumped",
  "transferred", "hopped", "relocated" (past forms only: "will move from A to B" has not
  happened). The job at A has ended; the one at B holds. Both endpoints must pass the
  tier's employer test (not a person, place, tool, ...: "switched from Slack to Discord"
  is no job), or neither is read. The other order, "moved to B from A"
  (:data:`MOVED_INTO`; not "went to B from A", a trip), ends A the same way and reads B
  as the tiers read "moved to" an organisation: ``join``.
* **a switch between two products** (:data:`USED_FROM` / :data:`USED_TO`): "switched to
  T-Mobile from Verizon", "we moved from Slack to Discord", "went from Jira to Linear"
  in either order, when both ends are known tools or services customers switch between
  (``_lexicon.product_name``, or typed tools): the use of A has ended, the use of B
  holds (``use``). When only one end is such a product, no move is read at all: a
  customer's switch is never a job move.
* **a move between two places** (:data:`PLACE_FROM` / :data:`PLACE_TO`): "moved from
  Boston to Denver", "moved to Denver from Boston", "relocated from A to B", when both
  ends are typed places (known place names; two unknown names are read as
  organisations, above). The residence at A has ended; the one at B holds (``live_in``
  for a person, ``locate_in`` for an organisation: :func:`place_relation`).

The frames are read on ``(start, end, handle)`` spans of a sentence (names and pronouns, in
any order); the handles are the tier's own (an argument, a token).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import TypeVar

from cycgraph_memory.hierarchy.extractors._lexicon import product_name

__all__ = [
    "BE_AT",
    "ENDED_FRAMES",
    "FRAME_RELATIONS",
    "MOVED_FROM",
    "MOVED_INTO",
    "MOVED_TO",
    "MOVE_FRAMES",
    "PLACE_FROM",
    "PLACE_FRAMES",
    "PLACE_TO",
    "USED_FROM",
    "USED_TO",
    "departed_from",
    "frames",
    "switched_product",
    "place_relation",
]

H = TypeVar("H")

BE_AT = "\0be_at"
"""Frame relation: the subject is (or was, or no longer is) at / with the object."""
MOVED_FROM = "\0moved_from"
"""Frame relation: the subject moved away from the object (an ended job)."""
MOVED_TO = "\0moved_to"
"""Frame relation: the subject moved to the object (a job that holds)."""
MOVED_INTO = "\0moved_into"
"""Frame relation: "moved to B from A", the subject joined B (read as ``join``)."""
USED_FROM = "\0used_from"
"""Frame relation: the subject switched away from a product (an ended ``use``)."""
USED_TO = "\0used_to"
"""Frame relation: the subject switched to a product (a ``use`` that holds)."""
PLACE_FROM = "\0place_from"
"""Frame relation: the subject moved away from a place (an ended residence)."""
PLACE_TO = "\0place_to"
"""Frame relation: the subject moved to a place (a residence that holds)."""
FRAME_RELATIONS: Mapping[str, str] = {
    BE_AT: "work_at",
    MOVED_FROM: "work_at",
    MOVED_TO: "work_at",
    MOVED_INTO: "join",
    PLACE_FROM: "live_in",
    PLACE_TO: "live_in",
    USED_FROM: "use",
    USED_TO: "use",
}
"""The frame relations and the relation each is read as (a place frame of an organisation
is ``locate_in``: :func:`place_relation`)."""
ENDED_FRAMES = frozenset({MOVED_FROM, PLACE_FROM, USED_FROM})
"""The frame relations that say the relation has ended (the origin of a move)."""
MOVE_FRAMES = frozenset(
    {MOVED_FROM, MOVED_TO, MOVED_INTO, PLACE_FROM, PLACE_TO, USED_FROM, USED_TO}
)
"""The frames of a move: they replace the tier's own "moved to" / "moved from" reading."""
PLACE_FRAMES = frozenset({PLACE_FROM, PLACE_TO})
"""The frames of a move between places."""

_BE_LINK = re.compile(
    r"\s*(?:(?:['\u2019](?:s|re|m)|is|are|am|was|were|used\s+to\s+be|isn['\u2019]?t|aren['\u2019]?t|"
    r"wasn['\u2019]?t|weren['\u2019]?t|ain['\u2019]?t)|(?:['\u2019](?:s|ve|d)|has|have|had)"
    r"(?:n['\u2019]?t|\s+not)?"
    r"(?:\s+(?:still|now|actually|really|already|just|basically|pretty\s+much))*\s+been)"
    r"(?:\s+(?:no\s+longer|not|never|still|now|currently|even|really|actually|technically|"
    r"officially|already))*\s+(?:at|with)\s+(?:the\s+)?",
    re.IGNORECASE,
)
_MOVE_VERBS = r"(?:moved|switched|went|jumped|transferred|hopped|relocated)"
_MOVE = (
    _MOVE_VERBS + r"\s+(?:(?:jobs|over|back|companies|employers|ship)\s+)?from\s+(?:the\s+)?"
)
# The other order, "moved to B from A": not "went" ("went to Costco from work" is a trip).
_MOVE_TO = (
    r"(?:moved|switched|jumped|transferred|hopped|relocated)\s+"
    r"(?:(?:jobs|over|back|companies|employers|ship)\s+)?to\s+(?:the\s+)?"
)
# A move between places: a change of home, not of job ("moved" / "relocated" only).
_PLACE_VERB = re.compile(r"\b(?:moved|relocated)\b", re.IGNORECASE)
_MOVE_LINK = re.compile(
    r"\s*(?:(?:has|have|had|just|recently|finally|then|also|eventually|already|"
    r"['\u2019](?:s|ve|d))\s*)*" + _MOVE,
    re.IGNORECASE,
)
_MOVE_TO_LINK = re.compile(
    r"\s*(?:(?:has|have|had|just|recently|finally|then|also|eventually|already|"
    r"['\u2019](?:s|ve|d))\s*)*" + _MOVE_TO,
    re.IGNORECASE,
)
_MOVE_BEFORE = re.compile(r"\b" + _MOVE + r"$", re.IGNORECASE)
# "moved to Globex from " before the origin (the other order; a capitalised name between).
_MOVE_TO_BEFORE = re.compile(
    r"\b(?i:" + _MOVE_TO + r")[A-Z][\w&.'\u2019-]*(?:\s+[A-Z&][\w&.'\u2019-]*){0,4}"
    r"\s+(?i:from)\s+(?i:the\s+)?$"
)
_TO_LINK = re.compile(r"\s+(?:over\s+)?to\s+(?:the\s+)?", re.IGNORECASE)
_FROM_LINK = re.compile(r"\s+from\s+(?:the\s+)?", re.IGNORECASE)


def frames(
    sentence: str,
    spans: Sequence[tuple[int, int, H]],
    employer: Callable[[H], bool],
    place: Callable[[H], bool] | None = None,
    product: Callable[[H], bool] | None = None,
) -> list[tuple[H, str, H]]:
    """The frame claims of a sentence: ``(subject, frame relation, object)`` handles.

    Args:
        sentence: The sentence text.
        spans: ``(start, end, handle)`` of its names and pronouns (character offsets).
        employer: Whether a handle's entity can be an employer (the move frame needs both
            of its endpoints to be).
        place: Whether a handle's entity is a known place (a move between places needs
            both of its endpoints to be); ``None`` reads no move between places.
        product: Whether a handle's entity is a known tool or service (a switch between
            products needs both of its endpoints to be, and one product end alone reads
            no move); ``None`` reads no switch between products.

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
        if i + 2 >= len(ordered):
            continue
        third_start, _, third = ordered[i + 2]
        if third_start < nxt_end:
            continue
        between = sentence[nxt_end:third_start]
        if _MOVE_LINK.fullmatch(gap) and _TO_LINK.fullmatch(between):
            origin, goal, joined = obj, third, MOVED_TO  # "moved from A to B"
        elif _MOVE_TO_LINK.fullmatch(gap) and _FROM_LINK.fullmatch(between):
            origin, goal, joined = third, obj, MOVED_INTO  # "moved to B from A"
        else:
            continue
        if place is not None and place(origin) and place(goal):
            if _PLACE_VERB.search(gap):
                out.append((subject, PLACE_FROM, origin))
                out.append((subject, PLACE_TO, goal))
        elif product is not None and (product(origin) or product(goal)):
            # "switched to T-Mobile from Verizon": a customer's switch, never a job move.
            if product(origin) and product(goal):
                out.append((subject, USED_FROM, origin))
                out.append((subject, USED_TO, goal))
        elif employer(origin) and employer(goal):
            out.append((subject, MOVED_FROM, origin))
            out.append((subject, joined, goal))
    return out


def place_relation(subject_type: str) -> str | None:
    """The relation a move between places gives its subject: where it lives or is located.

    ``live_in`` for a person, ``locate_in`` for an organisation; ``None`` for any other
    subject ("the meeting moved from Boston to Denver" changes no residence).
    """
    return {"person": "live_in", "organization": "locate_in"}.get(subject_type)


def departed_from(sentence: str, start: int, end: int) -> bool:
    """True when the name at ``[start, end)`` is the origin of a move ("moved from X to Y").

    For a claim located in text by its names (the LLM tier's post-check): the words before
    the name are a past move verb and "from", the words after it "to" and a capitalised
    name; or, the other order, the words before it are a past move verb, "to", a
    capitalised name and "from" ("moved to Globex from Initech").
    """
    before = sentence[max(0, start - 90) : start]
    if _MOVE_TO_BEFORE.search(before) is not None:
        return True
    if _MOVE_BEFORE.search(before[-60:]) is None:
        return False
    after = _TO_LINK.match(sentence, end)
    return after is not None and sentence[after.end() : after.end() + 1].isupper()


_NAME = r"[\w&.+'\u2019-]+(?:\s+[\w&.+'\u2019-]+){0,2}"
_SWITCH = re.compile(
    r"\b(?:moved|switched|went|jumped|transferred|hopped|relocated)\s+(?:(?:over|back)\s+)?"
    r"(?:from|to)\s+(?:the\s+)?(?P<a>" + _NAME + r"?)\s+(?:from|to)\s+(?:the\s+)?(?P<b>"
    + _NAME + r")",
    re.IGNORECASE,
)


def switched_product(sentence: str, start: int, end: int) -> bool:
    """True when the name at ``[start, end)`` is an end of a switch between two products.

    For a claim located in text by its names (the LLM tier's post-check): "switched to
    T-Mobile from Verizon", "we moved from Slack to Discord" (either order; both ends known
    tools or services, ``_lexicon.product_name``) is a customer's switch, so a job claim
    about either end is not what the text says.
    """
    for match in _SWITCH.finditer(sentence):
        a_start, a_end = match.span("a")
        words = match.group("b").split()
        # The second end is the longest product name its first words make ("Google Fi").
        b_len = next(
            (len(" ".join(words[:n])) for n in range(len(words), 0, -1)
             if product_name(" ".join(words[:n]))),
            None,
        )
        if b_len is None or not product_name(match.group("a")):
            continue
        b_start = match.start("b")
        if (a_start <= start and end <= a_end) or (b_start <= start and end <= b_start + b_len):
            return True
    return False

"""Private question detection, shared by every extractor tier and the LLM post-check.

A sentence ending in "?" is a question unless it is a tag question ("X, right?"); a chat
question often has no "?" at all ("does alice still work at acme"). Fact selection skips
only the first kind (:func:`is_question`); no relation is read from either (:func:`asks`).
"""

from __future__ import annotations

import re

__all__ = ["asks", "is_question"]


def _wordset(text: str) -> frozenset[str]:
    return frozenset(text.split())


_TAG_QUESTION = re.compile(
    r",\s*(?:right|correct|no|yes|eh|huh|ok|okay|true|"
    r"(?:is|are|was|were|do|does|did|has|have|had|will|would|can|could|should)n[\u2019']?t"
    r"\s+\w+|(?:is|are|was|were|do|does|did|has|have|had|will|would|can|could|should)\s+\w+)"
    r"\s*\?\s*$",
    re.IGNORECASE,
)


# A chat question often has no "?": an opening auxiliary followed by its subject ("does
# alice still work at acme", "did Tom join Globex", "is Tom still at Globex"). Not a
# subject-drop statement ("did a talk at Acme", "is still at Globex", "was told that ...",
# "has been at Acme", "doesn't work there"): the word after the auxiliary must not be a
# determiner, an adverb, a preposition or a participle.
_INVERTED_OPENING = re.compile(
    r"\W*(?:(?:so|and|but|hey|ok|okay|wait|lol|tbh|btw|also|um|hmm|oh)\W+)*"
    r"(?:do|does|did|is|are|was|were|has|have)\s+(?P<subject>[^\W\d_][\w'\u2019-]*)",
    re.IGNORECASE,
)
_NOT_A_SUBJECT = _wordset(
    """
    a an the my your his her our their its this that these those some any no not so
    very really just still also too even never always already actually literally totally
    like kinda sorta back there here all one been being going gonna getting got at in on
    for with from to of by about into over out up down off around now then today
    two three four five six several few left quit gone done made taken become begun run
    led built known seen sold bought found met
    """
)


def is_question(sentence: str) -> bool:
    """True for a genuine question; tag questions ("X, right?") are assertions.

    Ends with "?": what fact selection skips. Relations are also refused for a question
    without its "?" (:func:`asks`).
    """
    stripped = sentence.rstrip()
    return stripped.endswith("?") and _TAG_QUESTION.search(stripped) is None


def asks(sentence: str) -> bool:
    """:func:`is_question`, or a chat question without its "?" (no relation is read from it).

    A question mark is not needed after an inverted opening ("does alice still work at
    acme", "did Tom join Globex"). Only relations use this wider reading: chat opens many
    statements with an auxiliary and no subject ("was great seeing you", "have fun"),
    and skipping those as facts lost evidence turns on the frozen conversation sets.
    """
    stripped = sentence.rstrip()
    if stripped.endswith("?"):
        return _TAG_QUESTION.search(stripped) is None
    opening = _INVERTED_OPENING.match(stripped)
    if opening is None:
        return False
    subject = opening.group("subject").lower()
    return subject not in _NOT_A_SUBJECT and not subject.endswith(("ing", "ed", "ly"))

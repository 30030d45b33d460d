"""Private: an end date said after a past claim ("worked at Hooli until March").

Shared by every tier. A stative claim in the past tense followed by "until" / "till" /
"up until" and a time says the relation held and stopped then:

* :func:`until_of` returns that phrase ("March", "last year", "2023", "he retired") when
  it ends the claim: the claim's own words are past ("worked", "was", "used to") and not
  present ("is", "works" ... "until March" is a plan, not an ending), and the phrase is
  not a time of the day ("until 5pm", "until noon", "until tonight": a schedule);
* :func:`resolve_until` turns it into the instant the relation stopped, against the time
  of the message that said it: the start of the period it names ("until March" said in
  December 2026 is 2026-03-01; "until 2023" is 2023-01-01; "until last year" is January 1
  of the year before). A phrase it cannot place ("until he retired", "until recently") or
  a time after the message gives ``None``: the claim then ends at the message's time.

A claim that holds, followed by "since" and a date, says when it began ("Alice has worked
at Acme since 2021", "bob's been at Globex since march", "has lived in Berlin since last
year"): :func:`since_of` returns that phrase when it has the shape of a date (a month, a
year, "last year", "yesterday", ... as above), so a causal "since" ("uses Vim since it's
faster") or a phrase no date starts ("since he was 5", "since then") gives ``None``, as do
a time of the day ("since 9am": a schedule) and a claim about the future or a
possibility ("will work at Acme since ..."). :func:`resolve_since` places it like an
"until" phrase; a date it cannot place leaves the claim valid from its message.

Around those, :func:`claim_dates` gives every tier one reading of a claim's dates: a
present-perfect duration (:func:`duration_of`: "has worked at Acme for three years" began
three years before the message), a "since" date after an ended claim
(:func:`ended_since_of`: "not at Globex anymore since march" stopped then), a date
before the claim (:func:`lead_date_of`: "since 2021, alice has worked at acme", "in 2019
Carla moved to Berlin", "last year Dan left Hooli"), and a date right after the object of
a past event or a departure (:func:`trail_date_of`: "joined Acme in 2021", "left Hooli
last year"; after a move's other end, :func:`clause_date_of`: "moved from Boston to
Denver in 2019").

The date phrases themselves, and the instants they name, are ``_dates``'
(:func:`resolve_until`, :func:`resolve_since` and :func:`coarse_since` are re-exported
here for the tiers).
"""

from __future__ import annotations

import re

from cycgraph_memory.hierarchy.extractors._dates import (
    AGO,
    COUNT,
    DAYS,
    RELATIVE,
    coarse_since,
    dated,
    resolve_since,
    resolve_until,
    whole_date,
)

__all__ = [
    "claim_dates",
    "clause_date_of",
    "coarse_since",
    "duration_of",
    "ended_since_of",
    "lead_date_of",
    "resolve_since",
    "resolve_until",
    "simple_past",
    "since_of",
    "trail_date_of",
    "until_of",
]

_UNTIL = re.compile(
    r"\s*,?\s*(?:up\s+)?(?:until|till|til|['\u2019]til)\s+(?P<phrase>[^,.;:!?()\n]{1,40}(?:,\s*(?:19|20)\d{2}\b)?)",
    re.IGNORECASE,
)
_PERIOD = re.compile(
    r"\s*,?\s*(?:from|(?:ever\s+)?since)\s+(?P<start>[^,.;:!?()\n]{1,30}?)\s*(?:\s(?:up\s+)?(?:until|till|til|"
    r"['\u2019]til|to|through|thru)\s+|-|\u2013)\s*(?P<phrase>[^,.;:!?()\n]{1,40}(?:,\s*(?:19|20)\d{2}\b)?)",
    re.IGNORECASE,
)
# A time of the day (or a stretch of it) is a schedule, not the end of a relation ("2
# years ago" is a date).
_SCHEDULE = re.compile(
    r"^(?:about\s+|around\s+|like\s+)?(?:\d{1,2}(?::\d{2})?\s*(?:am|pm|a\.m|p\.m|o['\u2019]clock)?"
    r"(?!\d)(?!\s*(?:years?|yrs?|months?|mos|weeks?|wks?|days?)\b)|noon|midnight|tonight|tomorrow|later|now|lunch|dinner|breakfast|"
    r"the\s+(?:evening|afternoon|morning|weekend|end\s+of\s+(?:the|my|his|her|their)\s+"
    r"(?:day|shift|week))|(?:this|tomorrow)\s+(?:evening|afternoon|morning|weekend))\b",
    re.IGNORECASE,
)
# The claim's own words: a past form ("worked", "was", "used to", "led") and no present
# one ("is", "works", "has"): "Dave works at Hooli until March" is a plan.
_PAST = re.compile(
    r"\b(?:was|were|had|used\s+to|led|ran|held|taught|spent|went|built|wrote|sat|stood|"
    r"made|did|[a-z]{2,}ed)\b",
    re.IGNORECASE,
)
_PRESENT = re.compile(
    r"\b(?:is|are|am|has|have|does|do|will|shall|would|can|could|may|might|must)\b|"
    r"['\u2019](?:s|re|m|ve|ll)\b|\b(?:works|leads|lives|owns|uses|runs|manages|heads|stays|"
    r"remains|teaches|studies|reports|resides|depends|relies|maintains|chairs|oversees|"
    r"supervises|belongs)\b",
    re.IGNORECASE,
)



def simple_past(link: str) -> bool:
    """True when a claim's own words are past and not present ("lived in", not "lives")."""
    return _PAST.search(link) is not None and _PRESENT.search(link) is None


_SINCE = re.compile(
    r"\s*,?\s*(?:(?:ever|all\s+the\s+way\s+back)\s+)?since\s+"
    r"(?P<phrase>[^,.;:!?()\n]{1,40}(?:,\s*(?:19|20)\d{2}\b)?)",
    re.IGNORECASE,
)
# A claim about the future or a possibility has no start to read ("will work at Acme"),
# and one in the past perfect may have stopped since ("had been at Acme since 2019").
_NOT_YET = re.compile(
    r"\b(?:will|shall|would|could|might|may|must|should|gonna|wanna|going\s+to|had)\b|"
    r"['\u2019](?:ll|d)\b|\bwon['\u2019]?t\b",
    re.IGNORECASE,
)


def until_of(sentence: str, end: int, link: str) -> str | None:
    """The "until" phrase right after a claim's later mention, when it ends the claim.

    Args:
        sentence: The sentence.
        end: Offset in ``sentence`` just after the claim's later mention (the object).
        link: The claim's own words (the text linking its mentions), read for tense.

    Returns:
        The phrase after "until" (up to punctuation), or ``None`` when there is none, the
        claim is not in the past tense, or the phrase is a time of the day. A period
        after the object counts too when it opens with a date: "from 2019 until 2021",
        "since 2019 till 2021", "from 2019 to 2021" give "2021".
    """
    match = _UNTIL.match(sentence, end)
    if match is None:
        # A period: "worked at Hooli from 2019 until 2021", "since 2019 till 2021".
        match = _PERIOD.match(sentence, end)
        if match is None or not dated(match.group("start")):
            return None
    phrase = match.group("phrase").strip()
    if not phrase or _SCHEDULE.match(phrase) is not None:
        return None
    if _PAST.search(link) is None or _PRESENT.search(link) is not None:
        return None
    return phrase


def since_of(sentence: str, end: int, link: str) -> str | None:
    """The "since" date right after a claim's later mention, when it says when it began.

    Args:
        sentence: The sentence.
        end: Offset in ``sentence`` just after the claim's later mention (the object).
        link: The claim's own words (the text linking its mentions), read for tense.

    Returns:
        The phrase after "since" (up to punctuation) when it opens with a date ("2021",
        "march", "last year", "May 3, 2024"), else ``None``: no "since", a causal one
        ("since it's faster"), a time of the day, a bare lowercase "may" followed by more
        words (the modal: "since may be"), a claim about the future or a possibility, one
        in the past perfect ("had been at Acme since 2019": it may have stopped since), or
        a period ("since 2019 to 2021": read by :func:`until_of` on a past claim).
    """
    match = _SINCE.match(sentence, end)
    if match is None:
        return None
    phrase = match.group("phrase").strip()
    if not phrase or _SCHEDULE.match(phrase) is not None or _NOT_YET.search(link):
        return None
    if not dated(phrase):
        return None
    period = _PERIOD.match(sentence, end)
    if period is not None and dated(period.group("start")):
        return None  # "since 2019 to 2021" over a present claim: no start of what holds
    return phrase


# A duration after the claim: "has worked at Acme for three years", "'s been at Globex for
# 6 months now", "for the past two years", "for a couple of years".
_DURATION = re.compile(
    r"\s*,?\s*for\s+(?:the\s+(?:last|past)\s+)?(?P<phrase>" + COUNT + ")",
    re.IGNORECASE,
)
# The present perfect holds now ("has worked", "'s been", "have lived").
_PERFECT = re.compile(r"\b(?:has|have)\b|['\u2019](?:s|ve)\b", re.IGNORECASE)
# After an ended claim: "not at Globex anymore since march", "hasn't worked at Acme since 2022".
_ENDED_SINCE = re.compile(
    r"\s*,?\s*(?:(?:any\s*more|no\s+(?:longer|more))\s*,?\s*)?(?:(?:ever|all\s+the\s+way\s+back)\s+)?"
    r"since\s+(?P<phrase>[^,.;:!?()\n]{1,40}(?:,\s*(?:19|20)\d{2}\b)?)",
    re.IGNORECASE,
)
# Chat openers before a date that leads the claim ("so", "oh btw", "yeah").
_OPENERS = re.compile(
    r"\W*(?:(?:so|oh|ok|okay|well|yeah|yea|yep|and|but|btw|um|uh|lol|also|fyi|anyway|"
    r"anyways|actually|fun\s+fact|ngl|tbh)\b[\s,:-]*)*",
    re.IGNORECASE,
)
_LEAD = re.compile(
    r"(?:(?P<since>(?:ever\s+)?since)|(?P<until>(?:up\s+)?(?:until|till|til|['\u2019]til))|(?:(?:way\s+)?back\s+)?in|(?:way\s+)?back)\s+(?P<phrase>.+)",
    re.IGNORECASE | re.DOTALL,
)
# An ending that happened at a time ("last year Dan left Hooli"), not a state said of it.
_DEPARTED = re.compile(
    r"\b(?:left|quit|resigned|retired|stepped\s+down|stopped|sold|moved|switched|"
    r"relocated|dropped|ditched|fired|laid\s+off)\b",
    re.IGNORECASE,
)


def duration_of(sentence: str, end: int, link: str) -> str | None:
    """The duration right after a claim in the present perfect: when it began.

    Args:
        sentence: The sentence.
        end: Offset in ``sentence`` just after the claim's later mention (the object).
        link: The claim's own words (the text linking its mentions), read for tense.

    Returns:
        ``"for <duration>"`` for a claim in the present perfect ("has worked at Acme for
        three years", "'s been at Globex for 6 months now", "have lived in Berlin for the
        past two years": it began that long before the message, see
        :func:`resolve_since`); ``None`` otherwise: no duration or a vague one ("for a few
        years", "for ages"), a future, modal or past-perfect claim, and a simple past
        ("lived in Paris for two years": it says how long it held, not when it stopped,
        so the tiers read it as any simple past).
    """
    match = _DURATION.match(sentence, end)
    if match is None or _NOT_YET.search(link) or _PERFECT.search(link) is None:
        return None
    return "for " + " ".join(match.group("phrase").split())


def ended_since_of(sentence: str, end: int, link: str) -> str | None:
    """The "since" date after an ended claim: when it stopped.

    "Bob's not at Globex anymore since march", "she hasn't worked at Acme since 2022",
    "no longer works at Acme since last year": the phrase after "since" (an "anymore" /
    "no longer" between the object and "since" is allowed) when it opens with a date, as
    :func:`since_of` reads it; ``None`` otherwise, and for a future, modal or past-perfect
    claim.
    """
    match = _ENDED_SINCE.match(sentence, end)
    if match is None or _NOT_YET.search(link):
        return None
    phrase = match.group("phrase").strip()
    if not phrase or _SCHEDULE.match(phrase) is not None or not dated(phrase):
        return None
    return phrase


def lead_date_of(sentence: str, start: int) -> tuple[str, str] | None:
    """A date said before the claim: ``(kind, phrase)`` or ``None``.

    The words before the claim's first mention (``start``), chat openers aside ("so",
    "oh btw", "yeah"), must be a date and nothing else: "since 2021, alice has worked at
    acme" gives ``("since", "2021")``; "in 2019 Carla moved to Berlin", "back in 2019 she
    joined Initech", "last year Dan left Hooli", "3 years ago I moved to Denver",
    "yesterday ..." give ``("at", phrase)`` (a time something happened); "until 2 years
    ago I worked at Acme", "till 2020, ..." give ``("until", phrase)`` (when a past state
    stopped, read by :func:`claim_dates` on a past claim only). The phrase must be a whole
    date form of :func:`resolve_until` ("in Berlin", "back in the day", "since then" are
    none); a bare date with no "in" / "since" / "until" counts only as a relative one ("last
    year", "3 years ago").
    """
    prefix = sentence[:start]
    opened = _OPENERS.match(prefix)
    rest = prefix[opened.end() if opened else 0 :].strip().rstrip(",").strip()
    if not rest:
        return None
    lead = _LEAD.fullmatch(rest)
    if lead is not None:
        phrase = lead.group("phrase").strip()
        kind = "since" if lead.group("since") else "until" if lead.group("until") else "at"
    elif (
        RELATIVE.fullmatch(rest) is not None
        or DAYS.fullmatch(rest) is not None
        or AGO.fullmatch(rest) is not None
    ):
        phrase, kind = rest, "at"
    else:
        return None
    return (kind, phrase) if whole_date(phrase) else None


# A date right after the object of a past event: "joined Acme Corp in 2021", "moved to
# Lisbon back in march", "left Hooli last year", "joined Globex on March 3rd".
_TRAIL = re.compile(
    r"\s*,?\s*(?P<lead>(?:way\s+)?back\s+in\s+|in\s+|on\s+)?"
    r"(?P<phrase>[^,.;:!?()\n]{1,40})",
    re.IGNORECASE,
)


def trail_date_of(sentence: str, end: int) -> str | None:
    """A date said right after a claim's object: the phrase, or ``None``.

    "Alice joined Acme Corp in 2021 after four years at Globex" gives ``"2021 after four
    years at Globex"`` (:func:`resolve_until` reads the date that opens it); "moved to
    Lisbon back in march", "joined Globex on March 3rd", "left Hooli last year",
    "... yesterday" give theirs. After "in" / "on" the phrase must open with a date
    ("in Berlin", "in may be" are none); without either, only a relative date counts
    ("last year", "yesterday", "2 days ago"), so a name is never read as one.
    """
    match = _TRAIL.match(sentence, end)
    if match is None:
        return None
    phrase = match.group("phrase").strip()
    if match.group("lead"):
        return phrase if dated(phrase) else None
    return phrase if RELATIVE.match(phrase) or DAYS.match(phrase) or AGO.match(phrase) else None


_CLAUSE_END = re.compile(r"[,.;:!?\n]")
_WORD = re.compile(r"\s+(?=\w)")


def clause_date_of(sentence: str, end: int) -> str | None:
    """The first date said later in the clause after ``end`` (:func:`trail_date_of` rules).

    For the end a move leaves: in "we moved from Boston to Denver in 2019" the date
    follows the other end's name, not Boston's, and dates both.
    """
    stop_at = _CLAUSE_END.search(sentence, end)
    clause = sentence[: stop_at.start() if stop_at else len(sentence)]
    for word in _WORD.finditer(clause, end):
        phrase = trail_date_of(clause, word.start())
        if phrase is not None:
            return phrase
    return None



def claim_dates(
    sentence: str,
    start: int,
    end: int,
    link: str,
    *,
    stative: bool,
    ended: bool,
    moved: bool = False,
) -> tuple[bool, str | None, str | None]:
    """``(ended, until, since)`` of a claim: what its sentence says of when it began or ended.

    Shared by every tier, on a claim whose subject comes first.

    Args:
        sentence: The sentence.
        start: Offset of the claim's first mention (a date may come before it).
        end: Offset just after the claim's later mention (the object).
        link: The claim's own words between its mentions (its clause), read for tense.
        stative: Whether the relation holds over a period (``work_at``, ``live_in``).
        ended: Whether the tier already read the claim as ended.
        moved: Whether the claim is an end of a move ("moved from A to B").

    Returns:
        ``ended`` (also when an "until" date ends it),
        ``until`` (the phrase of the instant it stopped: after "until", after "since" on
        an ended claim, a leading "until" before a past state: "until 2 years ago i
        worked at Acme", or a leading date of a departure: "last year Dan left Hooli"),
        ``since`` (the phrase of the instant it began: after "since", a present-perfect
        duration "for three years", a leading "since 2021, ...", or the date of a past
        event said before or right after it: "in 2019 Carla moved to Berlin", "Alice
        joined Acme in 2021"; a departure dated after its object, "Dan left Hooli last
        year", is an ``until``). Resolve both with
        :func:`resolve_until` / :func:`resolve_since` against the message's time.
    """
    until = since = None
    lead = lead_date_of(sentence, start)
    if stative:
        until = until_of(sentence, end, link)
        if (
            until is None
            and lead is not None
            and lead[0] == "until"
            and _PAST.search(link) is not None
            and _PRESENT.search(link) is None
            and not _NOT_YET.search(link)
        ):
            until = lead[1]  # "until 2 years ago i worked at Acme", "till 2020, she lived in"
        if until is None and ended:
            until = ended_since_of(sentence, end, link)
        ended = ended or until is not None
        if not ended and not moved:
            since = since_of(sentence, end, link)
            if since is None:
                since = duration_of(sentence, end, link)  # "has worked at Acme for 3 years"
            if (
                since is None
                and not ended
                and lead is not None
                and lead[0] == "since"
                and not _NOT_YET.search(link)
            ):
                since = lead[1]  # "since 2021, alice has worked at acme"
    if lead is not None and not _NOT_YET.search(link):
        kind, phrase = lead
        if ended and until is None and (kind == "since" or moved or _DEPARTED.search(link)):
            until = phrase  # "last year Dan left Hooli", "since 2022 she hasn't ..."
        elif (
            not ended
            and since is None
            and kind == "at"
            and (moved or not stative)
            and _PAST.search(link) is not None
            and _PRESENT.search(link) is None
        ):
            since = phrase  # "in 2019 Carla moved to Berlin", "back in 2019 she joined"
    elif lead is None and not _NOT_YET.search(link):
        trail = trail_date_of(sentence, end)
        if trail is None and moved:
            # "moved from Boston to Denver in 2019", "moved to Globex from Initech last
            # month": the date after the move's other end dates both of its ends.
            trail = clause_date_of(sentence, end)
        if trail is None:
            pass
        elif ended and until is None and (moved or _DEPARTED.search(link)):
            until = trail  # "Dan left Hooli last year", "quit Acme in March"
        elif (
            not ended
            and since is None
            and (moved or not stative)
            and _PAST.search(link) is not None
            and _PRESENT.search(link) is None
        ):
            since = trail  # "Alice joined Acme in 2021", "moved to Lisbon in 2019"
    return ended, until, since


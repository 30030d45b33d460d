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
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

__all__ = ["resolve_until", "until_of"]

_UNTIL = re.compile(
    r"\s*,?\s*(?:up\s+)?(?:until|till|til|['\u2019]til)\s+(?P<phrase>[^,.;:!?()\n]{1,40}(?:,\s*(?:19|20)\d{2}\b)?)",
    re.IGNORECASE,
)
# A time of the day (or a stretch of it) is a schedule, not the end of a relation.
_SCHEDULE = re.compile(
    r"^(?:about\s+|around\s+|like\s+)?(?:\d{1,2}(?::\d{2})?\s*(?:am|pm|a\.m|p\.m|o['\u2019]clock)?"
    r"(?!\d)|noon|midnight|tonight|tomorrow|later|now|lunch|dinner|breakfast|"
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

_MONTHS = {
    name: number
    for number, names in enumerate(
        [
            ("january", "jan"),
            ("february", "feb"),
            ("march", "mar"),
            ("april", "apr"),
            ("may",),
            ("june", "jun"),
            ("july", "jul"),
            ("august", "aug"),
            ("september", "sep", "sept"),
            ("october", "oct"),
            ("november", "nov"),
            ("december", "dec"),
        ],
        start=1,
    )
    for name in names
}
_MONTH = r"(?P<month>" + "|".join(sorted(_MONTHS, key=len, reverse=True)) + r")"
_DAY = r"(?P<day>\d{1,2})(?:st|nd|rd|th)?"
_YEAR = r"(?P<year>(?:19|20)\d{2})"
_PART = r"(?:early\s+|late\s+|mid-?\s*)?"
_DATE_FORMS = [
    re.compile(rf"^{_PART}{_MONTH}\.?(?:\s+{_DAY})?(?:,?\s+{_YEAR})?\b", re.I),
    re.compile(rf"^(?:the\s+)?{_DAY}\s+(?:of\s+)?{_MONTH}\.?(?:,?\s+{_YEAR})?\b", re.I),
    re.compile(rf"^{_PART}{_YEAR}\b", re.I),
]
_RELATIVE = re.compile(r"^(?P<which>last|this)\s+(?P<unit>year|month|week)\b", re.I)
_DAYS = re.compile(r"^(?P<word>yesterday|today)\b", re.I)


def until_of(sentence: str, end: int, link: str) -> str | None:
    """The "until" phrase right after a claim's later mention, when it ends the claim.

    Args:
        sentence: The sentence.
        end: Offset in ``sentence`` just after the claim's later mention (the object).
        link: The claim's own words (the text linking its mentions), read for tense.

    Returns:
        The phrase after "until" (up to punctuation), or ``None`` when there is none, the
        claim is not in the past tense, or the phrase is a time of the day.
    """
    match = _UNTIL.match(sentence, end)
    if match is None:
        return None
    phrase = match.group("phrase").strip()
    if not phrase or _SCHEDULE.match(phrase) is not None:
        return None
    if _PAST.search(link) is None or _PRESENT.search(link) is not None:
        return None
    return phrase


def _start_of_day(year: int, month: int, day: int) -> datetime | None:
    try:
        return datetime(year, month, day, tzinfo=UTC)
    except ValueError:
        return None  # "until February 31"


def resolve_until(phrase: str, said_at: datetime) -> datetime | None:
    """The instant an "until" phrase names, no later than ``said_at``; ``None`` if unknown.

    A month without a year is its latest occurrence that has begun by ``said_at``; a
    named period resolves to its first instant (UTC). An instant no record can hold (before
    year 1, or ``datetime.min`` itself, which Postgres stores as ``-infinity``) is unknown:
    "until last month" said in January of year 1 is read as without a date.
    """
    try:
        found = _resolve(phrase, said_at.astimezone(UTC))
    except (OverflowError, ValueError):  # a period before year 1
        return None
    return None if found is None or found <= _FIRST_UTC else found


_FIRST_UTC = datetime.min.replace(tzinfo=UTC)


def _resolve(phrase: str, said: datetime) -> datetime | None:
    for form in _DATE_FORMS:
        match = form.match(phrase)
        if match is None:
            continue
        groups = match.groupdict()
        month = _MONTHS[groups["month"].lower()] if groups.get("month") else 1
        day = int(groups["day"]) if groups.get("day") else 1
        if groups.get("year"):
            found = _start_of_day(int(groups["year"]), month, day)
        else:
            found = _start_of_day(said.year, month, day)
            if found is not None and found > said:
                found = _start_of_day(said.year - 1, month, day)
        return found if found is not None and found <= said else None
    today = datetime(said.year, said.month, said.day, tzinfo=UTC)
    relative = _RELATIVE.match(phrase)
    if relative is not None:
        back = relative.group("which").lower() == "last"
        unit = relative.group("unit").lower()
        if unit == "year":
            return datetime(said.year - back, 1, 1, tzinfo=UTC)
        if unit == "month":
            year, month = (said.year, said.month - 1) if back else (said.year, said.month)
            if month == 0:
                year, month = year - 1, 12
            return datetime(year, month, 1, tzinfo=UTC)
        monday = today - timedelta(days=today.weekday())
        return monday - timedelta(days=7) if back else monday
    days = _DAYS.match(phrase)
    if days is not None:
        return today - timedelta(days=1) if days.group("word").lower() == "yesterday" else today
    return None

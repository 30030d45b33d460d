"""Private: date phrases of chat, and the instants they name against a message's time.

Shared by the readings of ``_until`` (every tier): :func:`dated` / :func:`whole_date` tell
whether a phrase opens with (or is) a date form: a month ("march", "May 3, 2024"), a year
("2021", "early 2019"), a relative period ("last year", "this month"), a day ("yesterday"),
a count back from the message ("3 years ago", "two weeks ago");
:func:`resolve_until` / :func:`resolve_since` place it against the time of the message
that said it (the start of the period it names, never later than the message; a duration
"for three years" or a count "3 years ago" that long before it), and :func:`coarse_since`
tells a month or longer from a day or a week.
"""

from __future__ import annotations

import calendar
import re
from datetime import UTC, datetime, timedelta

__all__ = [
    "AGO",
    "COUNT",
    "DAYS",
    "RELATIVE",
    "coarse_since",
    "dated",
    "resolve_since",
    "resolve_until",
    "whole_date",
]

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
RELATIVE = re.compile(r"^(?P<which>last|this)\s+(?P<unit>year|month|week)\b", re.I)
"""A relative period that opens a phrase: "last year", "this month", "last week"."""
DAYS = re.compile(r"^(?P<word>yesterday|today)\b", re.I)
"""A day that opens a phrase: "yesterday", "today"."""

_NUMBERS = {
    "a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6,
    "seven": 7, "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12,
    "fifteen": 15, "twenty": 20, "couple": 2,
}
COUNT = (
    r"(?:about\s+|around\s+|like\s+|roughly\s+)?(?P<count>\d{1,2}|"
    + "|".join(n for n in _NUMBERS if n != "couple")
    + r"|(?:a\s+)?couple(?:\s+of)?)\s+(?P<unit>years?|yrs?|months?|mos|weeks?|wks?)\b"
)
"""A count of years, months or weeks ("three years", "6 months", "a couple of weeks"), as a
pattern (groups ``count`` and ``unit``) for a duration after "for"."""
_DURATION_PHRASE = re.compile(r"^for\s+" + COUNT, re.IGNORECASE)
AGO = re.compile(
    r"^(?:about\s+|around\s+|like\s+|roughly\s+)?(?P<count>\d{1,2}|"
    + "|".join(n for n in _NUMBERS if n != "couple")
    + r"|(?:a\s+)?couple(?:\s+of)?)\s+(?P<unit>years?|yrs?|months?|mos|weeks?|wks?|days?)"
    r"\s+ago\b",
    re.IGNORECASE,
)
"""A count of years, months, weeks or days back from the message that opens a phrase: "3
years ago", "two weeks ago", "a couple of months ago" (not a vague "a few years ago")."""


def whole_date(phrase: str) -> bool:
    """True when all of ``phrase`` is one date form (not a date that opens more words)."""
    for form in _DATE_FORMS:
        match = form.match(phrase)
        if match is not None and match.end() == len(phrase):
            return True
    return (
        RELATIVE.fullmatch(phrase) is not None
        or DAYS.fullmatch(phrase) is not None
        or AGO.fullmatch(phrase) is not None
    )


def dated(phrase: str) -> bool:
    """True when ``phrase`` opens with a date form :func:`resolve_until` reads."""
    for form in _DATE_FORMS:
        match = form.match(phrase)
        if match is None:
            continue
        groups = match.groupdict()
        month = groups.get("month")
        # "since may be" (the modal), not "since May" / "since may 2021".
        return not (
            month is not None
            and month.lower() == "may"
            and not groups.get("day")
            and not groups.get("year")
            and phrase[match.end() :].strip()
        )
    return (
        RELATIVE.match(phrase) is not None
        or DAYS.match(phrase) is not None
        or AGO.match(phrase) is not None
    )


def coarse_since(phrase: str) -> bool:
    """True when a "since" phrase names a month or longer ("march", "2021", "last year").

    A day or a week ("since yesterday", "since last week", "for two weeks") fits a visit
    as well as a job: the "be at" frame reads only a longer stay as employment.
    """
    duration = _DURATION_PHRASE.match(phrase)
    if duration is not None:
        return not duration.group("unit").lower().startswith("w")
    ago = AGO.match(phrase)
    if ago is not None:
        return ago.group("unit").lower()[0] in "ym"
    return DAYS.match(phrase) is None and not re.match(
        r"^(?:last|this)\s+week\b", phrase, re.IGNORECASE
    ) and not any(
        (m := form.match(phrase)) is not None and m.groupdict().get("day")
        for form in _DATE_FORMS
    )


def resolve_since(phrase: str, said_at: datetime) -> datetime | None:
    """The instant a "since" phrase names (as :func:`resolve_until`); ``None`` if unknown.

    A duration ("for three years", from :func:`duration_of`) is that long before
    ``said_at`` (the same day of the month, the last one of a shorter month).
    """
    duration = _DURATION_PHRASE.match(phrase)
    if duration is None:
        return resolve_until(phrase, said_at)
    n = _count(duration.group("count"))
    try:
        found = _before(said_at.astimezone(UTC), n, duration.group("unit").lower()[0])
    except (OverflowError, ValueError):
        return None
    return None if found <= _FIRST_UTC else found


def _count(word: str) -> int:
    """The number a count of :data:`COUNT` / :data:`AGO` names ("3", "three", "a couple")."""
    count = word.lower()
    return int(count) if count.isdigit() else 2 if "couple" in count else _NUMBERS[count]


def _before(said: datetime, n: int, unit: str) -> datetime:
    """``said`` minus ``n`` years (``unit`` "y"), months ("m"), weeks ("w") or days ("d")."""
    if unit == "w":
        return said - timedelta(weeks=n)
    if unit == "d":
        return said - timedelta(days=n)
    months = said.year * 12 + (said.month - 1) - (12 * n if unit == "y" else n)
    year, month = divmod(months, 12)
    month += 1
    return said.replace(
        year=year, month=month, day=min(said.day, calendar.monthrange(year, month)[1])
    )


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
    relative = RELATIVE.match(phrase)
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
    days = DAYS.match(phrase)
    if days is not None:
        return today - timedelta(days=1) if days.group("word").lower() == "yesterday" else today
    ago = AGO.match(phrase)
    if ago is not None:
        # "3 years ago": that long before the message (the same day of the month).
        return _before(said, _count(ago.group("count")), ago.group("unit").lower()[0])
    return None

"""The "until" phrase of a past claim and the instant it names (``_until``, eighth audit)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from cycgraph_memory.hierarchy.extractors._until import resolve_until, until_of

SAID = datetime(2026, 12, 15, 9, 0, tzinfo=UTC)  # a Tuesday


def _d(year: int, month: int, day: int) -> datetime:
    return datetime(year, month, day, tzinfo=UTC)


@pytest.mark.parametrize(
    ("phrase", "expected"),
    [
        ("March", _d(2026, 3, 1)),
        ("december", _d(2026, 12, 1)),  # begun by the time it was said
        ("Dec 20", _d(2025, 12, 20)),  # not yet: the one before
        ("early March", _d(2026, 3, 1)),
        ("March 2024", _d(2024, 3, 1)),
        ("May 3, 2024", _d(2024, 5, 3)),
        ("3rd of May 2024", _d(2024, 5, 3)),
        ("the 3rd of May", _d(2026, 5, 3)),
        ("2023", _d(2023, 1, 1)),
        ("late 2023", _d(2023, 1, 1)),
        ("last year", _d(2025, 1, 1)),
        ("this year", _d(2026, 1, 1)),
        ("last month", _d(2026, 11, 1)),
        ("last week", _d(2026, 12, 7)),
        ("yesterday", _d(2026, 12, 14)),
        ("today", _d(2026, 12, 15)),
        # Not placed: a later year, an impossible day, an event.
        ("2027", None),
        ("February 31", None),
        ("he retired", None),
        ("recently", None),
    ],
)
def test_resolve_until(phrase: str, expected: datetime | None) -> None:
    assert resolve_until(phrase, SAID) == expected


def test_resolve_until_reads_the_message_time_in_utc() -> None:
    # 2026-01-01 01:00 at UTC+5 is still 2025 in UTC: "last year" is 2024.
    said = datetime(2026, 1, 1, 1, 0, tzinfo=timezone(timedelta(hours=5)))
    assert resolve_until("last year", said) == _d(2024, 1, 1)
    assert resolve_until("last month", _d(2026, 1, 10)) == _d(2025, 12, 1)


@pytest.mark.parametrize(
    ("sentence", "link", "expected"),
    [
        ("Dave worked at Hooli until March.", " worked at ", "March"),
        ("Dave worked at Hooli till 2023, then left.", " worked at ", "2023"),
        ("Dave worked at Hooli up until last year", " worked at ", "last year"),
        ("Dave worked at Hooli, until May 3, 2024.", " worked at ", "May 3, 2024"),
        ("Erin used to work at Hooli until he retired", " used to work at ", "he retired"),
        ("Dave was at Hooli until March.", " was at ", "March"),
        # A schedule, a plan (present tense), no "until".
        ("Dave worked at Hooli until 5pm.", " worked at ", None),
        ("Dave worked at Hooli until 17:30", " worked at ", None),
        ("Dave worked at Hooli until noon.", " worked at ", None),
        ("Dave worked at Hooli until tonight", " worked at ", None),
        ("Dave worked at Hooli until the end of the day", " worked at ", None),
        ("Dave works at Hooli until March.", " works at ", None),
        ("Dave is at Hooli until March.", " is at ", None),
        ("Dave has worked at Hooli until March.", " has worked at ", None),
        ("Dave worked at Hooli in March.", " worked at ", None),
    ],
)
def test_until_of(sentence: str, link: str, expected: str | None) -> None:
    end = sentence.index("Hooli") + len("Hooli")
    assert until_of(sentence, end, link) == expected


@pytest.mark.parametrize(
    ("phrase", "said"),
    [
        ("last month", _d(1, 1, 2)),  # December of year 0
        ("last week", _d(1, 1, 2)),  # before year 1
        ("last year", _d(1, 6, 1)),
        ("yesterday", _d(1, 1, 2)),  # datetime.min: Postgres's -infinity, no record holds it
        ("Jan 1, 0001", _d(1, 1, 2)),
    ],
)
def test_an_instant_no_record_can_hold_is_not_placed(phrase: str, said: datetime) -> None:
    """Raised OverflowError / ValueError (or named the first instant) and failed the ingest."""
    assert resolve_until(phrase, said) is None

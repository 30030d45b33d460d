"""Temporal filter helpers over records with a ``[valid_from, valid_until)`` window.

A *temporal record* is anything with ``valid_from``, an optional ``valid_until`` and an
optional ``invalidated_by`` (facts and relationships). Naive datetimes passed here are
assumed to be UTC, like everywhere else in the library.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any, Protocol, TypeVar

from cycgraph_memory.errors import InvalidTypeError

__all__ = [
    "TemporalRecord",
    "filter_valid",
    "is_changed_since",
    "is_valid_at",
    "windows_overlap",
]


class TemporalRecord(Protocol):
    """The minimal shape the temporal helpers operate on."""

    @property
    def valid_from(self) -> datetime:
        """When the record became valid."""

    @property
    def valid_until(self) -> datetime | None:
        """When the record ceased to be valid (``None`` = still valid)."""

    @property
    def invalidated_by(self) -> str | None:
        """Why or by what the record was invalidated (``None`` = live)."""


R = TypeVar("R", bound=TemporalRecord)


def _utc(value: datetime) -> datetime:
    if not isinstance(value, datetime):
        raise InvalidTypeError(f"expected a datetime, got {type(value).__name__}")
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value


class _Window(Protocol):
    @property
    def valid_from(self) -> datetime: ...

    @property
    def valid_until(self) -> datetime | None: ...


def windows_overlap(a: _Window, b: _Window) -> bool:
    """Return True when the windows ``[valid_from, valid_until)`` of two records share an instant.

    Two edges (or facts) saying the same thing are duplicates only then: "worked at X
    until March" and "works at X again since June" are two periods, not one.
    """
    a_until, b_until = a.valid_until, b.valid_until
    return (b_until is None or _utc(a.valid_from) < _utc(b_until)) and (
        a_until is None or _utc(b.valid_from) < _utc(a_until)
    )


def is_valid_at(record: TemporalRecord, at: datetime) -> bool:
    """Return True when ``at`` lies in the half-open window ``[valid_from, valid_until)``."""
    at = _utc(at)
    if _utc(record.valid_from) > at:
        return False
    return record.valid_until is None or at < _utc(record.valid_until)


def is_changed_since(record: TemporalRecord, since: datetime) -> bool:
    """Return True when the record started or ended strictly after ``since``."""
    since = _utc(since)
    if _utc(record.valid_from) > since:
        return True
    return record.valid_until is not None and _utc(record.valid_until) > since


def filter_valid(
    records: Iterable[R],
    options: Mapping[str, Any] | None = None,
    /,
    *,
    valid_at: datetime | None = None,
    changed_since: datetime | None = None,
    include_invalidated: bool = False,
) -> list[R]:
    """Keep the records that pass every given temporal condition, in input order.

    Args:
        records: Facts, relationships or anything shaped like :class:`TemporalRecord`.
        options: The same three options as a mapping (the spec's
            ``filterValid(records, { validAt, ... })`` style); keys ``valid_at``,
            ``changed_since``, ``include_invalidated``. Unknown keys raise ``TypeError``.
        valid_at: Keep only records valid at this instant.
        changed_since: Keep only records that started or ended after this instant.
        include_invalidated: Keep records whose ``invalidated_by`` is set (default drops
            them).
    """
    if options:
        unknown = set(options) - {"valid_at", "changed_since", "include_invalidated"}
        if unknown:
            raise InvalidTypeError(f"unknown filter_valid options: {sorted(unknown)}")
        valid_at = options.get("valid_at", valid_at)
        changed_since = options.get("changed_since", changed_since)
        include_invalidated = bool(options.get("include_invalidated", include_invalidated))
    out: list[R] = []
    for record in records:
        if not include_invalidated and record.invalidated_by is not None:
            continue
        if valid_at is not None and not is_valid_at(record, valid_at):
            continue
        if changed_since is not None and not is_changed_since(record, changed_since):
            continue
        out.append(record)
    return out

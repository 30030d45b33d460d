"""Temporal filter helpers over records with a ``[valid_from, valid_until)`` window.

A *temporal record* is anything with ``valid_from``, an optional ``valid_until`` and an
optional ``invalidated_by`` (facts and relationships), or a plain mapping with those keys
(the spec's minimal shape ``{ valid_from, valid_until?, invalidated_by? }``). Naive
datetimes passed here are assumed to be UTC, like everywhere else in the library.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any, Protocol, TypeVar

from pydantic import BaseModel, ConfigDict, StrictBool

from cycgraph_memory.errors import InvalidTypeError

__all__ = [
    "TemporalFilterOptions",
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


R = TypeVar("R", bound="TemporalRecord | Mapping[str, Any]")


class TemporalFilterOptions(BaseModel):
    """The options of :func:`filter_valid` as one object (the spec's ``TemporalFilterOptions``).

    Attributes:
        valid_at: Keep only records valid at this instant.
        changed_since: Keep only records that started or ended after this instant.
        include_invalidated: Keep records whose ``invalidated_by`` is set (default False).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    valid_at: datetime | None = None
    changed_since: datetime | None = None
    include_invalidated: StrictBool = False


def _utc(value: datetime) -> datetime:
    if not isinstance(value, datetime):
        raise InvalidTypeError(f"expected a datetime, got {type(value).__name__}")
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value


class _Window(Protocol):
    @property
    def valid_from(self) -> datetime: ...

    @property
    def valid_until(self) -> datetime | None: ...


_ABSENT = object()


def _key(record: object, name: str) -> Any:
    """A field of a record that has no such attribute: the key of a plain mapping, or None.

    The spec's minimal shape is ``{ valid_from, valid_until?, invalidated_by? }``: a dict
    of that shape is a record as much as a fact or a relationship is. (Callers try the
    attribute first: the records of the library take no mapping check.)
    """
    return record.get(name) if isinstance(record, Mapping) else None


def _from(record: object) -> datetime:
    """``record.valid_from`` as an aware datetime; a record without one is a typed error."""
    value: Any = getattr(record, "valid_from", _ABSENT)
    if value is _ABSENT:
        value = _key(record, "valid_from")
    if value is None:
        raise InvalidTypeError(
            f"expected a record with valid_from (a fact or relationship), got "
            f"{type(record).__name__}"
        )
    return _utc(value)


def _until(record: object) -> datetime | None:
    """``record.valid_until`` (``None`` when the record has no such field: open-ended)."""
    value: Any = getattr(record, "valid_until", _ABSENT)
    if value is _ABSENT:
        value = _key(record, "valid_until")
    return None if value is None else _utc(value)


def windows_overlap(a: _Window, b: _Window) -> bool:
    """Return True when the windows ``[valid_from, valid_until)`` of two records share an instant.

    Two edges (or facts) saying the same thing are duplicates only then: "worked at X
    until March" and "works at X again since June" are two periods, not one.

    Raises:
        InvalidTypeError: A record has no ``valid_from`` or a bound is not a datetime.
    """
    a_from, b_from = _from(a), _from(b)
    a_until, b_until = _until(a), _until(b)
    return (b_until is None or a_from < b_until) and (a_until is None or b_from < a_until)


def is_valid_at(record: TemporalRecord | Mapping[str, Any], at: datetime) -> bool:
    """Return True when ``at`` lies in the half-open window ``[valid_from, valid_until)``.

    Raises:
        InvalidTypeError: ``record`` has no ``valid_from`` or ``at`` is not a datetime.
    """
    at = _utc(at)
    if _from(record) > at:
        return False
    until = _until(record)
    return until is None or at < until


def is_changed_since(record: TemporalRecord | Mapping[str, Any], since: datetime) -> bool:
    """Return True when the record started or ended strictly after ``since``.

    Raises:
        InvalidTypeError: ``record`` has no ``valid_from`` or ``since`` is not a datetime.
    """
    since = _utc(since)
    if _from(record) > since:
        return True
    until = _until(record)
    return until is not None and until > since


def filter_valid(
    records: Iterable[R],
    options: TemporalFilterOptions | Mapping[str, Any] | None = None,
    /,
    *,
    valid_at: datetime | None = None,
    changed_since: datetime | None = None,
    include_invalidated: bool = False,
) -> list[R]:
    """Keep the records that pass every given temporal condition, in input order.

    Args:
        records: Facts, relationships or anything shaped like :class:`TemporalRecord`.
        options: The same three options as a :class:`TemporalFilterOptions` or a mapping
            (the spec's ``filterValid(records, { validAt, ... })`` style); keys
            ``valid_at``, ``changed_since``, ``include_invalidated``. Unknown keys raise
            ``TypeError``.
        valid_at: Keep only records valid at this instant.
        changed_since: Keep only records that started or ended after this instant.
        include_invalidated: Keep records whose ``invalidated_by`` is set (default drops
            them).

    A record without ``valid_until`` or ``invalidated_by`` counts as open-ended and live.

    Raises:
        InvalidTypeError: ``records`` is not an iterable of records (or an item has no
            ``valid_from``), ``options`` is not a mapping or has unknown keys,
            ``valid_at`` / ``changed_since`` is not a datetime, or ``include_invalidated``
            is not a bool.
    """
    if isinstance(options, TemporalFilterOptions):
        options = options.model_dump(exclude_unset=True)
    if options is not None:
        if not isinstance(options, Mapping):
            raise InvalidTypeError(
                f"filter_valid options must be a mapping, got {type(options).__name__}"
            )
        unknown = set(options) - {"valid_at", "changed_since", "include_invalidated"}
        if unknown:
            raise InvalidTypeError(f"unknown filter_valid options: {sorted(unknown)}")
        valid_at = options.get("valid_at", valid_at)
        changed_since = options.get("changed_since", changed_since)
        include_invalidated = options.get("include_invalidated", include_invalidated)
    if not isinstance(include_invalidated, bool):
        raise InvalidTypeError(
            f"include_invalidated must be True or False, got {include_invalidated!r}"
        )
    if valid_at is not None:
        valid_at = _utc(valid_at)
    if changed_since is not None:
        changed_since = _utc(changed_since)
    if isinstance(records, str | bytes | Mapping) or not isinstance(records, Iterable):
        raise InvalidTypeError(
            f"filter_valid expects an iterable of records, got {type(records).__name__}"
        )
    out: list[R] = []
    for record in records:
        _from(record)  # a record without valid_from is refused whatever the options
        if not include_invalidated:
            invalidated_by = getattr(record, "invalidated_by", _ABSENT)
            if invalidated_by is _ABSENT:
                invalidated_by = _key(record, "invalidated_by")
            if invalidated_by is not None:
                continue
        if valid_at is not None and not is_valid_at(record, valid_at):
            continue
        if changed_since is not None and not is_changed_since(record, changed_since):
            continue
        out.append(record)
    return out

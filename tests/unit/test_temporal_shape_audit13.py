"""Acceptance (thirteenth audit): the temporal helpers take the spec's minimal shape.

"The minimal shape the temporal filter helpers operate on is { valid_from: Date,
valid_until?: Date, invalidated_by?: string }": a plain dict of that shape is a record
for ``is_valid_at``, ``is_changed_since`` and ``filter_valid``, exactly like a fact or a
relationship with the same window.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from cycgraph_memory import InvalidTypeError, filter_valid, is_changed_since, is_valid_at

T0 = datetime(2025, 1, 1, tzinfo=UTC)
HOUR = timedelta(hours=1)


def test_a_dict_of_the_minimal_shape_is_a_temporal_record() -> None:
    window = {"valid_from": T0, "valid_until": T0 + HOUR}
    assert is_valid_at(window, T0)
    assert not is_valid_at(window, T0 + HOUR)  # half-open
    assert not is_valid_at(window, T0 - timedelta(microseconds=1))
    assert is_changed_since(window, T0 + HOUR / 2)  # ended after
    assert not is_changed_since(window, T0 + HOUR)
    open_ended = {"valid_from": T0}
    assert is_valid_at(open_ended, T0 + 1000 * HOUR)
    assert not is_changed_since(open_ended, T0)
    naive = {"valid_from": datetime(2025, 1, 1), "valid_until": None}  # naive = UTC
    assert is_valid_at(naive, T0)


def test_filter_valid_keeps_dicts_by_the_same_rules_in_input_order() -> None:
    live = {"valid_from": T0}
    ended = {"valid_from": T0, "valid_until": T0 + HOUR}
    retracted = {"valid_from": T0, "invalidated_by": "fact-2"}
    later = {"valid_from": T0 + 2 * HOUR}
    records = [live, ended, retracted, later]
    assert filter_valid(records) == [live, ended, later]
    assert filter_valid(records, include_invalidated=True) == records
    assert filter_valid(records, valid_at=T0 + HOUR) == [live]
    assert filter_valid(records, {"changed_since": T0 + HOUR / 2}) == [ended, later]
    assert filter_valid(records, valid_at=T0, include_invalidated=True) == [live, ended, retracted]


def test_a_dict_without_valid_from_is_still_a_typed_error() -> None:
    with pytest.raises(InvalidTypeError, match="valid_from"):
        is_valid_at({"valid_until": T0}, T0)
    with pytest.raises(InvalidTypeError, match="valid_from"):
        filter_valid([{"valid_from": T0}, {"start": T0}])
    with pytest.raises(InvalidTypeError):
        is_valid_at({"valid_from": "2025-01-01"}, T0)
    with pytest.raises(InvalidTypeError):
        filter_valid({"valid_from": T0})  # one record, not an iterable of records

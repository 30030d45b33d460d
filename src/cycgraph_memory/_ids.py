"""Private helper shared by every backend: parse record ids given as UUIDs or strings."""

from __future__ import annotations

import uuid
from collections.abc import Iterable

from cycgraph_memory.errors import InvalidInputError, InvalidTypeError

__all__ = ["parse_id", "parse_ids"]


def parse_id(value: object) -> uuid.UUID:
    """Return ``value`` as a UUID (accepts ``uuid.UUID`` or its string form).

    Raises:
        InvalidInputError: A string that is not a UUID.
        InvalidTypeError: Neither a UUID nor a string (e.g. ``None``, an int, bytes).
    """
    if isinstance(value, uuid.UUID):
        return value
    if isinstance(value, str):
        try:
            return uuid.UUID(value)
        except ValueError:
            raise InvalidInputError(f"malformed id {value!r}: expected a UUID") from None
    raise InvalidTypeError(f"expected a UUID or its string form, got {type(value).__name__}")


def parse_ids(values: Iterable[object]) -> list[uuid.UUID]:
    """Parse many ids (see :func:`parse_id`), dropping duplicates, keeping first order.

    Raises:
        InvalidInputError: A malformed id string.
        InvalidTypeError: ``values`` is a single id, not iterable, or holds a non-id.
    """
    if isinstance(values, str | bytes | uuid.UUID) or not isinstance(values, Iterable):
        raise InvalidTypeError(
            f"expected an iterable of ids, got {type(values).__name__}"
        )
    return list(dict.fromkeys(parse_id(v) for v in values))

"""Private helper shared by every backend: parse record ids given as UUIDs or strings."""

from __future__ import annotations

import uuid
from collections.abc import Iterable

from cycgraph_memory.errors import InvalidInputError

__all__ = ["parse_id", "parse_ids"]


def parse_id(value: object) -> uuid.UUID:
    """Return ``value`` as a UUID (accepts ``uuid.UUID`` or its string form).

    Raises:
        InvalidInputError: A string that is not a UUID.
        TypeError: Neither a UUID nor a string.
    """
    if isinstance(value, uuid.UUID):
        return value
    if isinstance(value, str):
        try:
            return uuid.UUID(value)
        except ValueError:
            raise InvalidInputError(f"malformed id {value!r}: expected a UUID") from None
    raise TypeError(f"expected a UUID or its string form, got {type(value).__name__}")


def parse_ids(values: Iterable[object]) -> list[uuid.UUID]:
    """Parse many ids (see :func:`parse_id`), dropping duplicates, keeping first order."""
    if isinstance(values, str | uuid.UUID):
        raise TypeError("expected an iterable of ids, got a single id")
    return list(dict.fromkeys(parse_id(v) for v in values))

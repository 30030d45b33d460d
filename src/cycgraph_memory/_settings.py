"""Validation of per-tenant settings (``get_tenant_setting`` / ``put_tenant_setting``)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from cycgraph_memory._validate import check_text
from cycgraph_memory.errors import InvalidInputError

__all__ = ["MAX_SETTING_BYTES", "MAX_SETTING_KEY", "check_setting", "check_setting_key"]

MAX_SETTING_KEY = 128
"""Longest tenant-setting key (characters)."""

MAX_SETTING_BYTES = 65_536
"""Largest tenant-setting value (bytes of its JSON)."""


def check_setting_key(key: object) -> str:
    """Return ``key`` when it is a 1-128 character string without NUL or lone surrogate.

    Raises:
        InvalidInputError: Anything else.
    """
    if not isinstance(key, str) or not 1 <= len(key) <= MAX_SETTING_KEY:
        raise InvalidInputError(f"setting key must be a string of 1-{MAX_SETTING_KEY} characters")
    _storable(key, "setting key")
    return key


def _storable(text: str, what: str) -> None:
    """Refuse a NUL or a lone surrogate (Postgres stores neither, in text or in jsonb)."""
    try:
        check_text(text, what)
    except ValueError as exc:
        raise InvalidInputError(str(exc)) from None


def _check_strings(node: object) -> None:
    if isinstance(node, str):
        _storable(node, "a tenant setting's string")
    elif isinstance(node, dict):
        for key, value in node.items():
            _storable(key, "a tenant setting's key")
            _check_strings(value)
    elif isinstance(node, list):
        for item in node:
            _check_strings(item)


def check_setting(value: object) -> dict[str, Any]:
    """Return a JSON round-tripped copy of ``value`` (a mapping of at most 64 KiB of JSON).

    Raises:
        InvalidInputError: Not a mapping, not JSON-serialisable (NaN included), too big,
            or a string (key or value) holds a NUL or a lone surrogate.
    """
    if not isinstance(value, Mapping):
        raise InvalidInputError("a tenant setting must be a mapping")
    try:
        text = json.dumps(dict(value), allow_nan=False, sort_keys=True)
    except (TypeError, ValueError) as exc:
        raise InvalidInputError(f"a tenant setting must be plain JSON: {exc}") from exc
    if len(text.encode()) > MAX_SETTING_BYTES:
        raise InvalidInputError(f"a tenant setting is limited to {MAX_SETTING_BYTES} bytes")
    out: dict[str, Any] = json.loads(text)
    _check_strings(out)
    return out

"""The ids a candidate fact sends as text decode as the driver decodes a ``uuid[]``."""

from __future__ import annotations

import uuid

from asyncpg.pgproto.pgproto import UUID as DriverUUID

from cycgraph_memory.postgres.signals import _text_uuids

A = "0a0eebc9-9c0b-4ef8-bb6d-6bb9bd380a11"
B = "ffffffff-0000-4000-8000-000000000001"


def test_text_ids_decode_to_the_driver_uuid_class() -> None:
    ids = _text_uuids("{" + A + "," + B + "}")
    assert ids == [uuid.UUID(A), uuid.UUID(B)]
    assert [type(i) for i in ids] == [DriverUUID, DriverUUID]


def test_empty_null_and_null_elements() -> None:
    assert _text_uuids(None) == []
    assert _text_uuids("{}") == []
    assert _text_uuids("{" + A + ",NULL}") == [uuid.UUID(A), None]

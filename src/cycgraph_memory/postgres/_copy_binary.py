"""Private: rows encoded in Postgres' binary ``COPY`` format (the bulk-load hot path).

asyncpg's ``copy_records_to_table`` encodes each value through its codecs, and it has no
binary codec for pgvector's ``vector``: the old path sent vectors as text, and formatting
384 floats as text cost ~400 us a vector, more than everything else of a row. Here every
column is encoded by one small function of its SQL type, vectors with one numpy call
(float32, big-endian, pgvector's ``vector_recv`` layout), and the whole batch becomes one
``bytes`` stream for ``copy_to_table(..., format="binary")``.

Float32 rounding: numpy rounds each value to the nearest float32 (the text path rounds the
9-digit decimal form, which differs in the last bit for ~1% of arbitrary float64 inputs;
values that are already float32, such as vectors read back from Postgres, are identical).
"""

from __future__ import annotations

import json
import struct
import uuid
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

import numpy as np
from numpy.typing import NDArray

__all__ = [
    "COLUMN_TYPES",
    "Encoded",
    "EncodedVector",
    "encode_columns",
    "encode_jsonb",
    "encode_rows",
    "encode_vectors",
]

_HEADER = b"PGCOPY\n\xff\r\n\x00" + struct.pack(">ii", 0, 0)
_TRAILER = struct.pack(">h", -1)
_NULL = struct.pack(">i", -1)
_PG_EPOCH = datetime(2000, 1, 1, tzinfo=UTC)
_TEXT_OID = 25
_UUID_OID = 2950

_i32 = struct.Struct(">i").pack
_i64 = struct.Struct(">q").pack
_f64 = struct.Struct(">d").pack
_len_i64 = struct.pack(">i", 8)
_len_i32 = struct.pack(">i", 4)
_len_uuid = struct.pack(">i", 16)


def _field(data: bytes) -> bytes:
    return _i32(len(data)) + data


def _text(value: str) -> bytes:
    return _field(value.encode("utf-8"))


def _uuid(value: uuid.UUID) -> bytes:
    return _len_uuid + value.bytes


def _timestamptz(value: datetime) -> bytes:
    delta = value - _PG_EPOCH
    micros = (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
    return _len_i64 + _i64(micros)


class Encoded:
    """A column value already in COPY form (its whole field, length word included).

    :func:`encode_rows` writes its bytes as they are in a ``jsonb`` or ``vector`` column:
    a value shared by many rows is encoded once.
    """

    __slots__ = ("field",)

    def __init__(self, field: bytes) -> None:
        self.field = field


def encode_jsonb(value: Any) -> Encoded:
    """``value`` encoded once for a ``jsonb`` column."""
    return Encoded(_jsonb(value))


def _jsonb(value: Any) -> bytes:
    if type(value) is Encoded:
        return value.field
    body = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    return _field(b"\x01" + body.encode("utf-8"))


def _array(oid: int, items: Sequence[bytes]) -> bytes:
    if not items:
        return _field(struct.pack(">iii", 0, 0, oid))
    return _field(struct.pack(">iiiii", 1, 0, oid, len(items), 1) + b"".join(items))


def _uuid_array(values: Iterable[uuid.UUID]) -> bytes:
    return _array(_UUID_OID, [_len_uuid + v.bytes for v in values])


def _text_array(values: Iterable[str]) -> bytes:
    return _array(_TEXT_OID, [_text(v) for v in values])


class EncodedVector(Encoded):
    """A checked vector already in COPY form (its whole field); ``len()`` is its width.

    Built by :func:`encode_vectors` for many vectors at once.
    """

    __slots__ = ("dim",)

    def __init__(self, field: bytes, dim: int) -> None:
        super().__init__(field)
        self.dim = dim

    def __len__(self) -> int:
        return self.dim


def encode_vectors(block: NDArray[Any]) -> list[EncodedVector]:
    """The ``vector`` fields of every row of a 2-D float block, converted in one numpy call.

    Each field is the length word, pgvector's header (width, unused) and the values as
    big-endian float32 (rounded to nearest, like :func:`_vector`).
    """
    count, dim = block.shape
    layout = np.dtype([("len", ">i4"), ("dim", ">u2"), ("unused", ">u2"), ("x", ">f4", (dim,))])
    fields = np.zeros(count, dtype=layout)
    fields["len"] = 4 + 4 * dim
    fields["dim"] = dim
    fields["x"] = block
    raw = fields.tobytes()
    step = layout.itemsize
    return [EncodedVector(raw[i : i + step], dim) for i in range(0, count * step, step)]


def _vector(values: Sequence[float] | EncodedVector) -> bytes:
    if type(values) is EncodedVector:
        return values.field
    body = np.asarray(values, dtype=">f4").tobytes()
    return _field(struct.pack(">HH", len(values), 0) + body)


def _float8(value: float) -> bytes:
    return _len_i64 + _f64(float(value))


def _int4(value: int) -> bytes:
    return _len_i32 + _i32(int(value))


def _int8(value: int) -> bytes:
    return _len_i64 + _i64(int(value))


_ENCODERS: dict[str, Callable[[Any], bytes]] = {
    "text": _text,
    "uuid": _uuid,
    "timestamptz": _timestamptz,
    "jsonb": _jsonb,
    "uuid[]": _uuid_array,
    "text[]": _text_array,
    "vector": _vector,
    "float8": _float8,
    "int4": _int4,
    "int8": _int8,
}

COLUMN_TYPES: dict[str, dict[str, str]] = {
    "entities": {
        "tenant_id": "text", "id": "uuid", "name": "text", "name_key": "text",
        "entity_type": "text", "attributes": "jsonb", "embedding": "vector", "provenance": "jsonb",
        "created_at": "timestamptz", "updated_at": "timestamptz",
        "invalidated_at": "timestamptz", "superseded_by": "uuid",
    },
    "relationships": {
        "tenant_id": "text", "id": "uuid", "source_id": "uuid", "target_id": "uuid",
        "relation_type": "text", "weight": "float8", "attributes": "jsonb",
        "valid_from": "timestamptz", "valid_until": "timestamptz", "provenance": "jsonb",
        "invalidated_by": "text",
    },
    "episodes": {
        "tenant_id": "text", "id": "uuid", "topic": "text", "started_at": "timestamptz",
        "ended_at": "timestamptz", "embedding": "vector", "fact_ids": "uuid[]",
        "provenance": "jsonb", "invalidated_at": "timestamptz", "search_terms": "text[]",
    },
    "episode_messages": {
        "tenant_id": "text", "episode_id": "uuid", "id": "uuid", "position": "int4",
        "role": "text", "content": "text", "timestamp": "timestamptz", "metadata": "jsonb",
        "embedding": "vector", "search_terms": "text[]",
    },
    "facts": {
        "tenant_id": "text", "id": "uuid", "content": "text", "source_episode_ids": "uuid[]",
        "entity_ids": "uuid[]", "theme_id": "uuid", "embedding": "vector",
        "provenance": "jsonb", "valid_from": "timestamptz", "valid_until": "timestamptz",
        "invalidated_by": "text", "access_count": "int8", "last_accessed_at": "timestamptz",
        "tags": "text[]", "source_message_ids": "uuid[]", "search_terms": "text[]",
    },
    "themes": {
        "tenant_id": "text", "id": "uuid", "label": "text", "description": "text",
        "fact_ids": "uuid[]", "embedding": "vector", "provenance": "jsonb",
        "created_at": "timestamptz", "invalidated_at": "timestamptz",
    },
}
"""SQL type of every column ``bulk`` writes, by table."""


def encode_rows(table: str, rows: Iterable[dict[str, Any]]) -> bytes:
    """The binary ``COPY`` stream of ``rows`` (column values by name) for ``table``."""
    encoders = [(name, _ENCODERS[kind]) for name, kind in COLUMN_TYPES[table].items()]
    count = struct.pack(">h", len(encoders))
    parts = [_HEADER]
    append = parts.append
    for row in rows:
        append(count)
        for name, encode in encoders:
            value = row[name]
            append(_NULL if value is None else encode(value))
    append(_TRAILER)
    return b"".join(parts)


def encode_columns(types: Sequence[str], rows: Iterable[Sequence[Any]]) -> bytes:
    """The binary ``COPY`` stream of positional ``rows`` whose columns have SQL ``types``."""
    encoders = [_ENCODERS[kind] for kind in types]
    count = struct.pack(">h", len(encoders))
    parts = [_HEADER]
    append = parts.append
    for row in rows:
        append(count)
        for value, encode in zip(row, encoders, strict=True):
            append(_NULL if value is None else encode(value))
    append(_TRAILER)
    return b"".join(parts)

"""Explicit conversions between pydantic records and table rows.

Records -> ``dict`` of column values (ready for ``INSERT``); result rows (mappings) ->
fresh pydantic records. Rows come from our own tables, whose values were validated when
they were written (every ``put_*`` validates its records, and the columns' types and
constraints hold the rest), so they are decoded with the trusted constructor
(:func:`cycgraph_memory._construct.trusted`): no validator runs again on read. What enters
from outside (every write, every query) is still validated.

Embeddings are stored as pgvector ``vector`` (single precision): values read back are the
float32 roundings of what was written (values such as ``0.1`` come back unchanged because
pgvector prints the shortest round-tripping text).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np

from cycgraph_memory._construct import trusted
from cycgraph_memory.normalize import normalize_entity_name
from cycgraph_memory.records import (
    Entity,
    Episode,
    Message,
    Provenance,
    Relationship,
    SemanticFact,
    Theme,
)
from cycgraph_memory.textsearch import tokenize

__all__ = [
    "entity_from_row",
    "entity_to_row",
    "episode_from_json",
    "episode_from_rows",
    "episode_terms",
    "episode_to_row",
    "fact_from_row",
    "fact_to_row",
    "message_from_row",
    "messages_to_rows",
    "provenance_from_json",
    "provenance_json",
    "relationship_from_json",
    "relationship_from_row",
    "relationship_to_row",
    "theme_from_row",
    "theme_to_row",
]

Row = Mapping[Any, Any]


def _uuid(value: Any) -> uuid.UUID:
    # asyncpg returns its own UUID class, a C subclass of uuid.UUID: equal to and hashed
    # like the uuid.UUID of the same value, serialized the same, pickled and copied. It is
    # kept as it is (a copy into a plain uuid.UUID cost ~2.5 us per id on the hot path,
    # and retrieval reads several hundred ids per query, the themes' fact_ids included).
    if isinstance(value, uuid.UUID):
        return value
    if type(value) is str and len(value) == 36:
        return _uuid_text(value)
    return uuid.UUID(str(value))


_new = object.__new__
_set = object.__setattr__
_SAFE_UNKNOWN = uuid.SafeUUID.unknown


def _uuid_text(value: str) -> uuid.UUID:
    # Ids in JSON documents Postgres built (uuid::text: canonical, 36 characters): the
    # 128-bit value set directly, without uuid.UUID's parsing of the other text forms.
    digits = value.replace("-", "")
    if len(digits) != 32 or "_" in digits:
        return uuid.UUID(value)
    out = _new(uuid.UUID)
    _set(out, "int", int(digits, 16))
    _set(out, "is_safe", _SAFE_UNKNOWN)
    return out


def _uuid_opt(value: Any) -> uuid.UUID | None:
    return None if value is None else _uuid(value)


def _uuids(values: Iterable[Any] | None) -> list[uuid.UUID]:
    if not values:
        return []
    out = list(values)
    if isinstance(out[0], uuid.UUID):  # a uuid[] column: every item is one
        return out
    return [v if isinstance(v, uuid.UUID) else uuid.UUID(str(v)) for v in out]


def _vector(value: Any) -> list[float] | None:
    if value is None:
        return None
    if type(value) is list:
        return value  # already a fresh list of floats (pgvector's text decoder)
    if hasattr(value, "tolist"):
        return [float(x) for x in value.tolist()]
    return [float(x) for x in value]


def provenance_json(value: Provenance) -> dict[str, Any]:
    """The ``provenance`` column value (jsonb) of a record's provenance."""
    return value.model_dump(mode="json")


_prov = provenance_json


_fromiso = datetime.fromisoformat


_PARSED: dict[str, datetime] = {}
"""ISO strings already parsed (datetimes are immutable, so one can serve many records):
records written together share their provenance's ``created_at``."""
_PARSED_MAX = 4096


def _ts(value: Any) -> datetime:
    # JSON (provenance, messages aggregated as jsonb) holds ISO strings; columns datetimes.
    # jsonb prints timestamptz in the session's time zone: records hold UTC.
    if type(value) is not str:
        return value  # type: ignore[no-any-return]
    parsed = _PARSED.get(value)
    if parsed is None:
        try:
            parsed = _fromiso(value)
        except ValueError:
            parsed = _past_python_years(value)
        if parsed.tzinfo is not UTC:
            parsed = parsed.astimezone(UTC)
        if len(_PARSED) >= _PARSED_MAX:
            _PARSED.clear()
        _PARSED[value] = parsed
    return parsed


_BC_PREFIX, _BC_SUFFIX = "0001-12-31T", " BC"
_Y10K_PREFIX = "10000-01-01T"


def _past_python_years(value: str) -> datetime:
    """A jsonb timestamp printed in a year Python has no ``datetime`` for, as UTC.

    jsonb prints a ``timestamptz`` in the session's ``TimeZone``. Where that zone is west
    of UTC, the first hours of 0001-01-01 (UTC) print as the last day of 1 BC
    (``'0001-12-31T21:03:58-04:56:02 BC'``); where it is east, the last hours of
    9999-12-31 print as 10000-01-01 (``'10000-01-01T04:30:00+05:30'``). Both instants are
    valid record timestamps: the same local time one day later (earlier) is parsed and
    the day taken back.

    Raises:
        ValueError: ``value`` is no timestamp of either form.
    """
    if value.startswith(_BC_PREFIX) and value.endswith(_BC_SUFFIX):
        local = _fromiso("0001-01-01T" + value[len(_BC_PREFIX) : -len(_BC_SUFFIX)])
        return local.astimezone(UTC) - timedelta(days=1)
    if value.startswith(_Y10K_PREFIX):
        local = _fromiso("9999-12-31T" + value[len(_Y10K_PREFIX) :])
        return local.astimezone(UTC) + timedelta(days=1)
    raise ValueError(f"Invalid isoformat string: {value!r}")


def provenance_from_json(value: Mapping[str, Any]) -> Provenance:
    """A :class:`Provenance` from the JSON object it was written as (trusted)."""
    return trusted(
        Provenance,
        source=value["source"],
        agent_id=value.get("agent_id"),
        tool_name=value.get("tool_name"),
        run_id=value.get("run_id"),
        node_id=value.get("node_id"),
        confidence=value.get("confidence"),
        created_at=_ts(value["created_at"]),
    )


def entity_to_row(
    entity: Entity, tenant_id: str, *, provenance: Any = None
) -> dict[str, Any]:
    """Column values of ``entity`` for ``tenant_id``.

    ``provenance``: the column value when the caller has it already (a bulk load encodes
    a provenance shared by many rows once).
    """
    return {
        "tenant_id": tenant_id,
        "id": entity.id,
        "name": entity.name,
        "name_key": normalize_entity_name(entity.name),
        "entity_type": entity.entity_type,
        "attributes": entity.attributes,
        "embedding": entity.embedding,
        "provenance": _prov(entity.provenance) if provenance is None else provenance,
        "created_at": entity.created_at,
        "updated_at": entity.updated_at,
        "invalidated_at": entity.invalidated_at,
        "superseded_by": entity.superseded_by,
    }


def entity_from_row(row: Row) -> Entity:
    """Build a fresh :class:`Entity` from a result row."""
    return trusted(
        Entity,
        id=_uuid(row["id"]),
        name=row["name"],
        entity_type=row["entity_type"],
        attributes=row["attributes"],
        embedding=_vector(row["embedding"]),
        provenance=provenance_from_json(row["provenance"]),
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        invalidated_at=row["invalidated_at"],
        superseded_by=_uuid_opt(row["superseded_by"]),
    )


def relationship_to_row(
    rel: Relationship, tenant_id: str, *, provenance: Any = None
) -> dict[str, Any]:
    """Column values of ``rel`` for ``tenant_id``.

    ``provenance``: the column value when the caller has it already (a bulk load encodes
    a provenance shared by many rows once).
    """
    return {
        "tenant_id": tenant_id,
        "id": rel.id,
        "source_id": rel.source_id,
        "target_id": rel.target_id,
        "relation_type": rel.relation_type,
        "weight": rel.weight,
        "attributes": rel.attributes,
        "valid_from": rel.valid_from,
        "valid_until": rel.valid_until,
        "provenance": _prov(rel.provenance) if provenance is None else provenance,
        "invalidated_by": rel.invalidated_by,
    }


def relationship_from_row(row: Row) -> Relationship:
    """Build a fresh :class:`Relationship` from a result row."""
    return trusted(
        Relationship,
        id=_uuid(row["id"]),
        source_id=_uuid(row["source_id"]),
        target_id=_uuid(row["target_id"]),
        relation_type=row["relation_type"],
        weight=float(row["weight"]),
        attributes=row["attributes"],
        valid_from=row["valid_from"],
        valid_until=row["valid_until"],
        provenance=provenance_from_json(row["provenance"]),
        invalidated_by=row["invalidated_by"],
    )


def relationship_from_json(value: Mapping[str, Any]) -> Relationship:
    """A :class:`Relationship` from its row as a JSON object (``to_jsonb(row)``)."""
    return trusted(
        Relationship,
        id=_uuid(value["id"]),
        source_id=_uuid(value["source_id"]),
        target_id=_uuid(value["target_id"]),
        relation_type=value["relation_type"],
        weight=float(value["weight"]),
        attributes=value["attributes"],
        valid_from=_ts(value["valid_from"]),
        valid_until=None if value["valid_until"] is None else _ts(value["valid_until"]),
        provenance=provenance_from_json(value["provenance"]),
        invalidated_by=value["invalidated_by"],
    )


def episode_to_row(
    episode: Episode, tenant_id: str, *, provenance: Any = None
) -> dict[str, Any]:
    """Column values of ``episode`` (without its messages) for ``tenant_id``.

    ``provenance``: the column value when the caller has it already (a bulk load encodes
    a provenance shared by many rows once).
    """
    return {
        "tenant_id": tenant_id,
        "id": episode.id,
        "topic": episode.topic,
        "started_at": episode.started_at,
        "ended_at": episode.ended_at,
        "embedding": episode.embedding,
        "fact_ids": list(episode.fact_ids),
        "provenance": _prov(episode.provenance) if provenance is None else provenance,
        "invalidated_at": episode.invalidated_at,
        "search_terms": episode_terms(episode),
    }


def episode_terms(episode: Episode) -> list[str]:
    """An episode's BM25 tokens: its topic, then every message (as the in-memory index)."""
    terms = tokenize(episode.topic)
    for message in episode.messages:
        terms.extend(tokenize(message.content))
    return terms


def messages_to_rows(episode: Episode, tenant_id: str) -> list[dict[str, Any]]:
    """Rows of ``episode``'s messages, ``position`` preserving their order."""
    return [
        {
            "tenant_id": tenant_id,
            "episode_id": episode.id,
            "id": m.id,
            "position": i,
            "role": m.role,
            "content": m.content,
            "timestamp": m.timestamp,
            "metadata": m.metadata,
            "embedding": m.embedding,
            "search_terms": tokenize(m.content),
        }
        for i, m in enumerate(episode.messages)
    ]


def message_from_row(row: Row) -> Message:
    """Build a fresh :class:`Message` from a message row (or its jsonb form)."""
    return trusted(
        Message,
        id=_uuid(row["id"]),
        role=row["role"],
        content=row["content"],
        timestamp=_ts(row["timestamp"]),
        metadata=row["metadata"],
        embedding=_vector(row.get("embedding")),
    )


def episode_from_rows(row: Row, messages: Sequence[Row]) -> Episode:
    """Build a fresh :class:`Episode` from its row and its message rows (in order)."""
    return trusted(
        Episode,
        id=_uuid(row["id"]),
        topic=row["topic"],
        messages=[message_from_row(m) for m in messages],
        started_at=row["started_at"],
        ended_at=row["ended_at"],
        embedding=_vector(row["embedding"]),
        fact_ids=_uuids(row["fact_ids"]),
        provenance=provenance_from_json(row["provenance"]),
        invalidated_at=row["invalidated_at"],
    )


def episode_from_json(value: Mapping[str, Any]) -> Episode:
    """An :class:`Episode` from its jsonb form (``embedding`` as pgvector text)."""
    emb = value["embedding"]
    return trusted(
        Episode,
        id=_uuid(value["id"]),
        topic=value["topic"],
        messages=[message_from_row(m) for m in value["messages"] or ()],
        started_at=_ts(value["started_at"]),
        ended_at=_ts(value["ended_at"]),
        embedding=None if emb is None else _vector_text(emb),
        fact_ids=[_uuid(i) for i in value["fact_ids"] or ()],
        provenance=provenance_from_json(value["provenance"]),
        invalidated_at=None if value["invalidated_at"] is None else _ts(value["invalidated_at"]),
    )


def _vector_text(value: str) -> list[float]:
    # pgvector prints the shortest decimal identifying each float32: parse as float32.
    if value == "[]":
        return []
    parsed: list[float] = np.array(value[1:-1].split(","), dtype=np.float32).tolist()
    return parsed


def fact_to_row(
    fact: SemanticFact, tenant_id: str, *, provenance: Any = None
) -> dict[str, Any]:
    """Column values of ``fact`` for ``tenant_id``.

    ``provenance``: the column value when the caller has it already (a bulk load encodes
    a provenance shared by many rows once).
    """
    return {
        "tenant_id": tenant_id,
        "id": fact.id,
        "content": fact.content,
        "source_episode_ids": list(fact.source_episode_ids),
        "entity_ids": list(fact.entity_ids),
        "theme_id": fact.theme_id,
        "embedding": fact.embedding,
        "provenance": _prov(fact.provenance) if provenance is None else provenance,
        "valid_from": fact.valid_from,
        "valid_until": fact.valid_until,
        "invalidated_by": fact.invalidated_by,
        "access_count": fact.access_count,
        "last_accessed_at": fact.last_accessed_at,
        "tags": list(fact.tags),
        "source_message_ids": list(fact.source_message_ids),
        "search_terms": tokenize(fact.content),
    }


def fact_from_row(row: Row) -> SemanticFact:
    """Build a fresh :class:`SemanticFact` from a result row."""
    return trusted(
        SemanticFact,
        id=_uuid(row["id"]),
        content=row["content"],
        source_episode_ids=_uuids(row["source_episode_ids"]),
        entity_ids=_uuids(row["entity_ids"]),
        theme_id=_uuid_opt(row["theme_id"]),
        embedding=_vector(row["embedding"]),
        provenance=provenance_from_json(row["provenance"]),
        valid_from=row["valid_from"],
        valid_until=row["valid_until"],
        invalidated_by=row["invalidated_by"],
        access_count=row["access_count"],
        last_accessed_at=row["last_accessed_at"],
        tags=list(row["tags"] or ()),
        source_message_ids=_uuids(row.get("source_message_ids")),
    )


def theme_to_row(
    theme: Theme, tenant_id: str, *, provenance: Any = None
) -> dict[str, Any]:
    """Column values of ``theme`` for ``tenant_id`` (``created_at`` from provenance).

    ``provenance``: the column value when the caller has it already (a bulk load encodes
    a provenance shared by many rows once).
    """
    return {
        "tenant_id": tenant_id,
        "id": theme.id,
        "label": theme.label,
        "description": theme.description,
        "fact_ids": list(theme.fact_ids),
        "embedding": theme.embedding,
        "provenance": _prov(theme.provenance) if provenance is None else provenance,
        "created_at": theme.provenance.created_at,
        "invalidated_at": theme.invalidated_at,
    }


def theme_from_row(row: Row) -> Theme:
    """Build a fresh :class:`Theme` from a result row."""
    return trusted(
        Theme,
        id=_uuid(row["id"]),
        label=row["label"],
        description=row["description"],
        fact_ids=_uuids(row["fact_ids"]),
        embedding=_vector(row["embedding"]),
        provenance=provenance_from_json(row["provenance"]),
        invalidated_at=row["invalidated_at"],
    )

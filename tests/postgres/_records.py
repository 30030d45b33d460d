"""Small record factories for the Postgres-specific tests (8-d embeddings)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from cycgraph_memory.records import (
    Entity,
    Episode,
    Message,
    Provenance,
    Relationship,
    SemanticFact,
    Theme,
)

DIM = 8
T0 = datetime(2025, 6, 1, 9, 30, tzinfo=UTC)


def ts(seconds: float = 0) -> datetime:
    return T0 + timedelta(seconds=seconds)


def prov(**kw: Any) -> Provenance:
    return Provenance(**{"source": "agent", "created_at": T0, **kw})


def unit(i: int, dim: int = DIM) -> list[float]:
    v = [0.0] * dim
    v[i % dim] = 1.0
    return v


def entity(**kw: Any) -> Entity:
    return Entity(**{"name": "Acme", "entity_type": "org", "provenance": prov(),
                     "created_at": T0, "updated_at": T0, "embedding": unit(0), **kw})


def relationship(src: uuid.UUID, dst: uuid.UUID, **kw: Any) -> Relationship:
    return Relationship(**{"source_id": src, "target_id": dst, "relation_type": "knows",
                           "provenance": prov(), "valid_from": T0, **kw})


def episode(**kw: Any) -> Episode:
    msgs = [Message(role="user", content="hi", timestamp=T0),
            Message(role="assistant", content="hello", timestamp=ts(1), metadata={"k": 1})]
    return Episode(**{"topic": "greeting", "messages": msgs, "started_at": T0,
                      "ended_at": ts(1), "provenance": prov(), "embedding": unit(1), **kw})


def fact(**kw: Any) -> SemanticFact:
    return SemanticFact(**{"content": "water is wet", "provenance": prov(), "valid_from": T0,
                           "embedding": unit(2), **kw})


def theme(**kw: Any) -> Theme:
    return Theme(**{"label": "weather", "provenance": prov(), "embedding": unit(3), **kw})

"""Deterministic record factories for the contract suite (and any other test).

Every factory uses a fresh uuid4 id unless one is given, timezone-aware timestamps and
embeddings of length ``EMBED_DIM`` whose values are exactly representable in float32
(so records survive a pgvector round-trip unchanged and compare equal).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import Any

from pydantic import BaseModel

from cycgraph_memory.records import (
    Entity,
    Episode,
    Message,
    Provenance,
    Relationship,
    SemanticFact,
    Theme,
)

EMBED_DIM = 8

BASE_TIME = datetime(2025, 1, 1, 12, 0, 0, tzinfo=UTC)


def at(seconds: float = 0, *, days: float = 0) -> datetime:
    """BASE_TIME shifted by ``days`` and ``seconds`` (aware UTC)."""
    return BASE_TIME + timedelta(days=days, seconds=seconds)


def provenance(**overrides: Any) -> Provenance:
    fields: dict[str, Any] = {
        "source": "agent",
        "agent_id": "agent-1",
        "run_id": "run-1",
        "confidence": 0.75,
        "created_at": BASE_TIME,
    }
    fields.update(overrides)
    return Provenance(**fields)


def unit(i: int, dim: int = EMBED_DIM) -> list[float]:
    """The i-th standard basis vector."""
    v = [0.0] * dim
    v[i % dim] = 1.0
    return v


def vec(*values: float, dim: int = EMBED_DIM) -> list[float]:
    """``values`` padded with zeros to ``dim`` (use float32-exact values like 0.5, 0.25)."""
    v = [float(x) for x in values]
    assert len(v) <= dim
    return v + [0.0] * (dim - len(v))


def blend(i: int, j: int, weight_i: float, weight_j: float) -> list[float]:
    """weight_i * e_i + weight_j * e_j (cosine with e_i = wi / sqrt(wi^2 + wj^2))."""
    v = [0.0] * EMBED_DIM
    v[i] += weight_i
    v[j] += weight_j
    return v


def make_entity(**overrides: Any) -> Entity:
    fields: dict[str, Any] = {
        "id": uuid.uuid4(),
        "name": "Acme Corp",
        "entity_type": "organization",
        "attributes": {"industry": "widgets"},
        "provenance": provenance(),
        "created_at": BASE_TIME,
        "updated_at": BASE_TIME,
    }
    fields.update(overrides)
    return Entity(**fields)


def make_relationship(source_id: uuid.UUID, target_id: uuid.UUID, **overrides: Any) -> Relationship:
    fields: dict[str, Any] = {
        "id": uuid.uuid4(),
        "source_id": source_id,
        "target_id": target_id,
        "relation_type": "works_at",
        "weight": 0.5,
        "attributes": {"since": 2020},
        "valid_from": BASE_TIME,
        "provenance": provenance(),
    }
    fields.update(overrides)
    return Relationship(**fields)


def make_message(**overrides: Any) -> Message:
    fields: dict[str, Any] = {
        "id": uuid.uuid4(),
        "role": "user",
        "content": "hello",
        "timestamp": BASE_TIME,
        "metadata": {"channel": "chat"},
    }
    fields.update(overrides)
    return Message(**fields)


def make_episode(**overrides: Any) -> Episode:
    fields: dict[str, Any] = {
        "id": uuid.uuid4(),
        "topic": "greeting",
        "messages": [make_message(), make_message(role="assistant", content="hi there")],
        "started_at": BASE_TIME,
        "ended_at": BASE_TIME + timedelta(minutes=5),
        "provenance": provenance(),
    }
    fields.update(overrides)
    return Episode(**fields)


def make_fact(**overrides: Any) -> SemanticFact:
    fields: dict[str, Any] = {
        "id": uuid.uuid4(),
        "content": "Acme sells widgets",
        "valid_from": BASE_TIME,
        "provenance": provenance(),
    }
    fields.update(overrides)
    return SemanticFact(**fields)


def make_theme(**overrides: Any) -> Theme:
    fields: dict[str, Any] = {
        "id": uuid.uuid4(),
        "label": "widgets",
        "description": "facts about widgets",
        "provenance": provenance(),
    }
    fields.update(overrides)
    return Theme(**fields)


def sorted_ids(*ids: uuid.UUID) -> list[uuid.UUID]:
    """Ids in the contract's tie-break order (UUID string order)."""
    return sorted(ids, key=str)


async def store_referents(
    store: Any,
    *,
    entities: Iterable[uuid.UUID] = (),
    episodes: Iterable[uuid.UUID] = (),
    themes: Iterable[uuid.UUID] = (),
) -> None:
    """Store a placeholder entity / episode / theme for each id not stored yet.

    Facts may cite only records of their own store (``DanglingReferenceError``), so tests
    that make up ids for ``entity_ids``, ``source_episode_ids`` or ``theme_id`` store
    placeholders first.
    """
    entity_ids = list(dict.fromkeys(entities))
    episode_ids = list(dict.fromkeys(episodes))
    theme_ids = list(dict.fromkeys(themes))
    if entity_ids:
        have = await store.get_entities(entity_ids)
        await store.put_entities(
            [make_entity(id=i, name=f"entity {i}") for i in entity_ids if i not in have]
        )
    if episode_ids:
        have = await store.get_episodes(episode_ids)
        await store.put_episodes(
            [make_episode(id=i, messages=[]) for i in episode_ids if i not in have]
        )
    if theme_ids:
        have = await store.get_themes(theme_ids)
        await store.put_themes(
            [make_theme(id=i, label=f"theme {i}") for i in theme_ids if i not in have]
        )


async def store_cited(store: Any, facts: Iterable[SemanticFact]) -> None:
    """Store placeholders for everything ``facts`` cite (see :func:`store_referents`)."""
    facts = list(facts)
    await store_referents(
        store,
        entities=[e for f in facts for e in f.entity_ids],
        episodes=[p for f in facts for p in f.source_episode_ids],
        themes=[f.theme_id for f in facts if f.theme_id is not None],
    )


def stable(value: Any, since: datetime, *, float_digits: int | None = None) -> Any:
    """``value`` (records, dicts, lists) with every time at or after ``since`` as "now".

    Two runs made at different moments stamp different ``created_at`` / ``updated_at``;
    everything else must be equal. With ``float_digits``, every float is rounded to that
    many decimals (for values the database sums in row order, such as the ledger's means).
    """
    if float_digits is not None and isinstance(value, float):
        return round(value, float_digits)
    if isinstance(value, BaseModel):
        return stable(value.model_dump(), since, float_digits=float_digits)
    if isinstance(value, dict):
        return {k: stable(v, since, float_digits=float_digits) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [stable(v, since, float_digits=float_digits) for v in value]
    if isinstance(value, datetime) and value >= since:
        return "now"
    return value

"""Themes are reproducible: the same input gives the same themes in a fresh tenant.

Fact ids are derived from message ids, and a new theme's id from the fact that founded it
(:func:`~cycgraph_memory.hierarchy.clustering.theme_id_for`), so ties ("the smaller id")
and the store's ``(created_at, id)`` order no longer depend on random ids or timing.
"""

from __future__ import annotations

import secrets
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pytest

from cycgraph_memory import (
    ConsolidatingThemeClusterer,
    HashingEmbeddingProvider,
    MemoryPipeline,
    Message,
    SemanticFact,
    SimpleThemeClusterer,
    Theme,
)
from cycgraph_memory.hierarchy.clustering import THEME_ID_NAMESPACE, theme_id_for
from cycgraph_memory.inmemory import InMemoryMemoryIndex, InMemoryMemoryStore
from cycgraph_memory.records import Provenance

DIM = 8  # tests/contract/conftest.py::EMBED_DIM
T0 = datetime(2025, 3, 1, 9, 0, tzinfo=UTC)
SENTENCES = [
    "Alice Smith maintains the billing service.",
    "The billing service depends on Postgres.",
    "Bob Jones works at Acme Corp.",
    "Acme Corp is based in Berlin.",
    "Carol leads the search team.",
    "The search team uses Elasticsearch.",
    "Dave moved to Lisbon last spring.",
    "Lisbon has a growing startup scene.",
    "Erin prefers tea over coffee.",
    "The coffee machine on floor two is broken.",
    "Frank is learning Rust on weekends.",
    "Rust has a strict borrow checker.",
]


def _conversation(k: int, n: int = 4) -> list[Message]:
    """Conversation ``k``: ``n`` messages with fixed ids, a day after conversation k-1."""
    return [
        Message(
            id=uuid.UUID(int=k * 100 + i + 1),
            role="user" if i % 2 == 0 else "assistant",
            content=SENTENCES[(k * 5 + i * 7) % len(SENTENCES)],
            timestamp=T0 + timedelta(days=k, minutes=i),
        )
        for i in range(n)
    ]


def _snapshot(themes: list[Theme]) -> list[tuple[Any, ...]]:
    return sorted(
        (
            t.id,
            t.label,
            t.description,
            tuple(t.fact_ids),
            None if t.embedding is None else tuple(round(x, 9) for x in t.embedding),
            t.invalidated_at is None,
        )
        for t in themes
    )


async def _ingest_all(store: Any, index: Any, clusterer: Any = None) -> list[tuple[Any, ...]]:
    kwargs: dict[str, Any] = {} if clusterer is None else {"clusterer": clusterer}
    pipeline = MemoryPipeline(
        store, embedder=HashingEmbeddingProvider(dimensions=DIM), index=index, **kwargs
    )
    for k in range(6):
        await pipeline.ingest(_conversation(k))
    themes = await store.list_themes(include_invalidated=True)
    facts = await store.find_facts(include_invalidated=True)
    for fact in facts:  # every fact points at a live theme that lists it
        owner = [t for t in themes if fact.id in t.fact_ids and t.invalidated_at is None]
        assert [t.id for t in owner] == [fact.theme_id]
    return _snapshot(themes)


def _stores(backend: str, request: pytest.FixtureRequest) -> list[tuple[Any, Any]]:
    """Two fresh tenants of ``backend`` (call it from a sync fixture)."""
    if backend == "memory":
        return [
            (
                InMemoryMemoryStore(expected_dimensions=DIM),
                InMemoryMemoryIndex(expected_dimensions=DIM),
            )
            for _ in range(2)
        ]
    make = request.getfixturevalue("pg_make_store")
    out = []
    for _ in range(2):
        tenant = f"t_{secrets.token_hex(6)}"
        out.append((make(tenant), make(tenant, index=True)))
    return out


@pytest.fixture
def tenants(backend: str, request: pytest.FixtureRequest) -> list[tuple[Any, Any]]:
    return _stores(backend, request)


@pytest.fixture
def both_backends(request: pytest.FixtureRequest) -> list[tuple[Any, Any]]:
    return [_stores("memory", request)[0], _stores("postgres", request)[0]]


@pytest.mark.parametrize("clustering", ["calibrated", "consolidating"])
async def test_same_input_same_themes_in_two_fresh_tenants(
    tenants: list[tuple[Any, Any]], clustering: str
) -> None:
    outcomes = []
    for store, index in tenants:
        clusterer = (
            None
            if clustering == "calibrated"
            else ConsolidatingThemeClusterer(0.3, 0.45, max_themes=4)
        )
        outcomes.append(await _ingest_all(store, index, clusterer))
    assert outcomes[0], "the sequence made no themes"
    assert outcomes[0] == outcomes[1]


@pytest.mark.postgres
async def test_in_memory_and_postgres_agree(both_backends: list[tuple[Any, Any]]) -> None:
    memory = await _ingest_all(*both_backends[0])
    postgres = await _ingest_all(*both_backends[1])
    # pgvector keeps float32: everything but the centroids is equal, those nearly so
    assert [t[:4] + t[5:] for t in memory] == [t[:4] + t[5:] for t in postgres]
    for m, p in zip(memory, postgres, strict=True):
        assert (m[4] is None) == (p[4] is None)
        if m[4] is not None:
            assert np.allclose(m[4], p[4], atol=1e-6)


async def test_a_stored_theme_with_the_derived_id_is_never_overwritten(
    tenants: list[tuple[Any, Any]],
) -> None:
    """A fact erased and ingested again may found a theme again: the old record stays."""
    scratch, target = tenants
    await _ingest_all(*scratch)
    derived = [t.id for t in await scratch[0].list_themes(include_invalidated=True)]
    live_derived = [t.id for t in await scratch[0].list_themes()]
    # The target tenant already holds soft-deleted themes with every id the input derives
    # (as after a merge, or a purge of the founding fact).
    store, index = target
    old = [
        Theme(
            id=theme_id,
            label="old theme",
            fact_ids=[uuid.UUID(int=999_000 + i)],
            embedding=[1.0] + [0.0] * (DIM - 1),
            provenance=Provenance(source="derived"),
            invalidated_at=T0,
        )
        for i, theme_id in enumerate(derived)
    ]
    await store.put_themes(old)
    before = await store.get_themes(derived)
    await _ingest_all(store, index)
    assert await store.get_themes(derived) == before  # untouched
    live = {t.id for t in await store.list_themes()}
    # each new theme moved to the next derived id instead (the same number of themes)
    assert live <= {uuid.uuid5(THEME_ID_NAMESPACE, f"theme:{i}:next") for i in derived}
    assert len(live) == len(live_derived)


# ------------------------------------------------------------------ id derivation (unit)


def _fact(i: int, vec: list[float] | None) -> SemanticFact:
    return SemanticFact(
        id=uuid.UUID(int=i),
        content=f"fact number {i}",
        embedding=vec,
        provenance=Provenance(source="derived"),
    )


def test_theme_id_for_is_uuid5_of_the_founding_fact() -> None:
    fid = uuid.UUID(int=7)
    assert theme_id_for(fid) == uuid.uuid5(THEME_ID_NAMESPACE, f"theme:{fid}")
    assert theme_id_for(fid, 2) == uuid.uuid5(THEME_ID_NAMESPACE, f"theme:{fid}:2")
    assert theme_id_for(fid).version == 5
    assert len({theme_id_for(fid, a) for a in range(5)}) == 5


async def test_new_theme_ids_are_derived_from_their_founders() -> None:
    facts = [_fact(1, [1.0, 0.0]), _fact(2, [0.0, 1.0]), _fact(3, [1.0, 0.01]), _fact(4, None)]
    themes = await SimpleThemeClusterer(0.9).cluster(facts)
    assert [(t.id, t.fact_ids) for t in themes] == [
        (theme_id_for(facts[0].id), [facts[0].id, facts[2].id]),
        (theme_id_for(facts[1].id), [facts[1].id]),
        (theme_id_for(facts[3].id), [facts[3].id]),  # "General"
    ]
    assert len({t.provenance.created_at for t in themes}) == 1  # one clock reading a call


async def test_a_taken_derived_id_moves_to_the_next_attempt() -> None:
    fact = _fact(1, [1.0, 0.0])
    existing = Theme(
        id=theme_id_for(fact.id),
        label="far away",
        fact_ids=[uuid.UUID(int=50)],
        embedding=[0.0, 1.0],
        provenance=Provenance(source="derived"),
    )
    themes = await ConsolidatingThemeClusterer(0.9, 0.95).cluster([fact], [existing])
    assert [t.id for t in themes] == [existing.id, theme_id_for(fact.id, 1)]
    assert fact.theme_id == theme_id_for(fact.id, 1)


async def test_a_callers_id_factory_is_still_used() -> None:
    made = iter([uuid.UUID(int=900), uuid.UUID(int=901)])
    clusterer = ConsolidatingThemeClusterer(0.9, 0.99, id_factory=lambda: next(made))
    themes = await clusterer.cluster([_fact(1, [1.0, 0.0]), _fact(2, [0.0, 1.0])])
    assert [t.id for t in themes] == [uuid.UUID(int=900), uuid.UUID(int=901)]


async def test_two_runs_of_one_batch_agree_when_merges_tie() -> None:
    # Four identical vectors in two themes' worth of facts: merge ties are decided by the
    # derived ids and creation order, not by random ids.
    def batch() -> list[SemanticFact]:
        return [_fact(i, [1.0, 0.0] if i % 2 else [0.0, 1.0]) for i in range(1, 7)]

    runs = []
    for _ in range(2):
        clusterer = ConsolidatingThemeClusterer(0.99, 0.99, max_themes=1)
        runs.append(_snapshot(await clusterer.cluster(batch())))
    assert runs[0] == runs[1]
    assert len(runs[0]) == 1

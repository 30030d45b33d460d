"""Postgres native retrieval paths return what the generic contract-only paths return."""

from __future__ import annotations

import math
import random
import uuid
from typing import Any

import pytest

from cycgraph_memory import QUARANTINE_TAG, MemoryResult, retrieve_memory

from .factories import at, make_entity, make_fact, make_relationship, make_theme

pytestmark = pytest.mark.postgres


def shape(r: MemoryResult) -> dict[str, list[uuid.UUID]]:
    return {
        "themes": [t.id for t in r.themes],
        "facts": [f.id for f in r.facts],
        "episodes": [e.id for e in r.episodes],
        "entities": [e.id for e in r.entities],
        "relationships": [x.id for x in r.relationships],
    }


def unit_noise(rng: random.Random, centre: list[float], noise: float) -> list[float]:
    v = [c + rng.gauss(0, noise) for c in centre]
    return [round(x, 3) for x in v]


async def test_native_and_generic_retrieval_agree(pg_store: Any, pg_index: Any) -> None:
    rng = random.Random(7)
    centres = [[rng.gauss(0, 1) for _ in range(8)] for _ in range(5)]
    entities = [make_entity(id=uuid.UUID(int=i + 1)) for i in range(40)]
    facts, themes = [], []
    for t, centre in enumerate(centres):
        members = []
        for k in range(40):
            tags = rng.sample(["lesson", "a", "b", QUARANTINE_TAG], rng.randint(0, 2))
            f = make_fact(
                id=uuid.UUID(int=1000 + t * 100 + k),
                embedding=unit_noise(rng, centre, 0.4),
                entity_ids=rng.sample([e.id for e in entities], 2),
                tags=tags,
                theme_id=uuid.UUID(int=50 + t),
                valid_from=at(days=rng.randint(0, 30)),
                invalidated_by="x" if rng.random() < 0.1 else None,
            )
            facts.append(f)
            members.append(f.id)
        # Theme members that cannot be scored (no vector, a zero vector): similarity 0.
        for k, emb in ((90, None), (91, [0.0] * 8)):
            f = make_fact(id=uuid.UUID(int=1000 + t * 100 + k), embedding=emb,
                          theme_id=uuid.UUID(int=50 + t), valid_from=at(days=k % 30))
            facts.append(f)
            members.append(f.id)
        themes.append(make_theme(id=uuid.UUID(int=50 + t), embedding=centre, fact_ids=members))
    rels = [
        make_relationship(*rng.sample([e.id for e in entities], 2), id=uuid.UUID(int=9000 + r),
                          valid_from=at(days=r % 20), valid_until=at(days=25) if r % 7 else None)
        for r in range(80)
    ]
    await pg_store.put_entities(entities)
    await pg_store.put_themes(themes)
    await pg_store.put_facts(facts)
    await pg_store.put_relationships(rels)

    queries: list[dict[str, Any]] = []
    for i in range(20):
        q: dict[str, Any] = {
            "embedding": unit_noise(rng, centres[i % 5], 0.3), "limit": (10, 3, 5)[i % 3],
            "min_similarity": 0.0 if i % 6 == 5 else 0.3,
        }
        if i % 7 == 4:
            q["changed_since"] = at(days=12)
        if i % 8 == 6:
            q["tags"] = [QUARANTINE_TAG]
        if i % 3 == 1:
            q["tags"] = ["lesson", "a"]
        if i % 4 == 2:
            q["include_invalidated"] = True
        if i % 5 == 3:
            q["valid_at"] = at(days=10)
        queries.append(q)
        queries.append({"entity_ids": [entities[i].id, entities[i + 1].id], "limit": 15,
                        "valid_at": at(days=22) if i % 2 else None})
    served: list[int] = []
    for n, q in enumerate(queries):
        # Few direct candidates on some queries, so theme facts fill the result too.
        opts: dict[str, Any] = {"direct_fact_candidates": 3} if n % 4 == 0 else {}
        native = await retrieve_memory(pg_store, pg_index, q, options=opts)
        generic = await retrieve_memory(
            pg_store, pg_index, q, options={**opts, "native_paths": False}
        )
        assert shape(native) == shape(generic), q
        if "entity_ids" not in q:
            served.append(len(native.facts))
    # Not vacuous: most vector queries serve facts, many of them a full page.
    assert sum(1 for n in served if n) >= 0.8 * len(served), served
    assert sum(1 for n in served if n >= 5) >= 0.5 * len(served), served


async def test_native_path_keeps_unscorable_theme_facts_at_zero_similarity(
    pg_store: Any, pg_index: Any
) -> None:
    # A theme fact without a vector (or with a zero vector) scores 0: with
    # min_similarity=0 and room in the page, both paths serve it.
    centre = [1.0, 0.5, 0.0, 0.0, 0.2, 0.0, 0.0, 0.1]
    good = make_fact(id=uuid.UUID(int=1), embedding=centre, theme_id=uuid.UUID(int=50))
    bare = make_fact(id=uuid.UUID(int=2), embedding=None, theme_id=uuid.UUID(int=50))
    zero = make_fact(id=uuid.UUID(int=3), embedding=[0.0] * 8, theme_id=uuid.UUID(int=50))
    await pg_store.put_themes([make_theme(id=uuid.UUID(int=50), embedding=centre,
                                          fact_ids=[good.id, bare.id, zero.id])])
    await pg_store.put_facts([good, bare, zero])  # after their theme: facts cite it
    q = {"embedding": centre, "limit": 10, "min_similarity": 0.0}
    for opts in ({}, {"native_paths": False}):
        result = await retrieve_memory(pg_store, pg_index, q, options=opts)
        assert [f.id for f in result.facts] == [good.id, bare.id, zero.id], opts


@pytest.mark.parametrize("mode", ["vector", "hybrid"])
async def test_native_theme_fact_cut_survives_near_ties(
    pg_store: Any, pg_index: Any, mode: str
) -> None:
    # The native path reads only the nearest theme facts by the server's distances
    # (float4, float accumulation) and ranks them in float64 here: facts within rounding
    # of each other (and exact duplicates, ordered by id) must not fall out of the cut.
    rng = random.Random(11)
    centre = [rng.gauss(0, 1) for _ in range(8)]
    norm = math.sqrt(sum(c * c for c in centre))
    axis = [c / norm for c in centre]
    members, facts = [], []
    for k in range(120):
        # On a cone around the query: all at one angle (up to 1e-7), in other directions,
        # so the distances differ only by rounding; every third an exact duplicate.
        if k % 3 == 0 and k:
            emb = facts[-1].embedding
        else:
            side = [rng.gauss(0, 1) for _ in range(8)]
            dot = sum(s * a for s, a in zip(side, axis, strict=True))
            side = [s - dot * a for s, a in zip(side, axis, strict=True)]
            side_norm = math.sqrt(sum(s * s for s in side))
            angle = 0.7 + rng.random() * 1e-7
            emb = [math.cos(angle) * a + math.sin(angle) * s / side_norm
                   for a, s in zip(axis, side, strict=True)]
        f = make_fact(id=uuid.UUID(int=5000 + (k * 37) % 120), content=f"deploy note {k}",
                      embedding=emb, theme_id=uuid.UUID(int=70))
        facts.append(f)
        members.append(f.id)
    await pg_store.put_themes([make_theme(id=uuid.UUID(int=70), embedding=centre,
                                          fact_ids=members)])
    await pg_store.put_facts(facts)
    # min_similarity 0, and the cone's own cosine as the floor (the facts straddle it by
    # less than 1e-7: the server keeps a band below the floor for the library to cut).
    for limit, floor in ((3, 0.0), (10, 0.0), (25, 0.0), (10, math.cos(0.7)), (40, math.cos(0.7))):
        q = {"embedding": centre, "text": "deploy note", "limit": limit,
             "min_similarity": floor}
        opts = {"direct_fact_candidates": 1}
        native = await retrieve_memory(pg_store, pg_index, q, options=opts, mode=mode)
        generic = await retrieve_memory(
            pg_store, pg_index, q, options={**opts, "native_paths": False}, mode=mode
        )
        assert [f.id for f in native.facts] == [f.id for f in generic.facts], (limit, floor)
        if not floor:
            assert len(native.facts) == limit

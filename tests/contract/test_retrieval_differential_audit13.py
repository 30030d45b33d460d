"""Acceptance (thirteenth audit): random worlds, random queries, both backends agree.

Each seed builds the same world (120 facts) on both backends (soft-deleted, superseded,
quarantined, expired and future records among the live ones) and runs queries that
combine every path with the tag scope, the temporal filters, ``include_invalidated``, the
type filters, ``limit`` and some ``RetrievalOptions``. Both backends must serve the same
records in the same order; every served record must pass the query's conditions (the
spec: "All paths apply tag and temporal filtering and respect limit"; "Every read path
excludes invalidated records by default"; quarantined facts only when the query's tags
name them); and none is missing: the tag listing and the vector ranking are checked
against the whole world.
"""

from __future__ import annotations

import random
import uuid
from typing import Any

import pytest

from cycgraph_memory import (
    MemoryResult,
    cosine_similarity,
    extract_subgraph,
    is_changed_since,
    is_valid_at,
    retrieve_memory,
)
from cycgraph_memory.inmemory import InMemoryMemoryIndex, InMemoryMemoryStore

from .factories import (
    EMBED_DIM,
    at,
    blend,
    make_entity,
    make_episode,
    make_fact,
    make_message,
    make_relationship,
    make_theme,
    unit,
)

WORDS = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot"]
TAGS = ["lesson", "graph:a", "graph:b", "quarantined", "candidate"]
KINDS = ("themes", "facts", "episodes", "entities", "relationships", "messages")
OPTIONS: list[dict[str, Any] | None] = [
    None,
    {"native_paths": False},
    {"max_facts_per_entity": 2},
    {"direct_fact_candidates": 3, "theme_limit": 1, "max_facts_per_theme": 2},
    {"tag_page_size": 2},
]


class _Embedder:
    """Embeds a text as the basis vector of its first word (deterministic)."""

    dimensions = EMBED_DIM

    async def embed(self, texts: Any) -> list[list[float]]:
        return [unit(WORDS.index(t.split()[0]) if t.split()[0] in WORDS else 7) for t in texts]


def _vector(rng: random.Random) -> list[float]:
    i, j = rng.randrange(6), rng.randrange(6)
    return unit(i) if i == j else blend(i, j, rng.choice([1, 2, 4]), 1)


def _uid(rng: random.Random) -> uuid.UUID:
    return uuid.UUID(int=rng.getrandbits(128), version=4)


async def _load(stores: list[tuple[Any, Any]], seed: int) -> dict[str, Any]:
    rng = random.Random(seed)
    entities = []
    for i in range(10):
        dead = rng.random() < 0.15
        entities.append(
            make_entity(
                id=_uid(rng),
                name=f"{WORDS[i % 6]} {i}",
                entity_type=rng.choice(["person", "org"]),
                invalidated_at=at(days=3) if dead else None,
            )
        )
    # One resolver loser pointing at a live entity.
    loser = entities[9].model_copy(
        update={"superseded_by": entities[0].id, "invalidated_at": at(days=4)}
    )
    entities[9] = loser
    rels = []
    for _ in range(18):
        a, b = rng.sample(entities, 2)
        start = rng.choice([-5, 0, 2, 6])
        rels.append(
            make_relationship(
                a.id,
                b.id,
                id=_uid(rng),
                relation_type=rng.choice(["knows", "uses"]),
                valid_from=at(days=start),
                valid_until=at(days=start + rng.choice([1, 3])) if rng.random() < 0.3 else None,
                invalidated_by="retracted" if rng.random() < 0.15 else None,
            )
        )
    episodes = []
    for i in range(6):
        turns = [
            make_message(
                id=_uid(rng),
                content=f"{rng.choice(WORDS)} {rng.choice(WORDS)} turn",
                timestamp=at(days=i, seconds=k),
                embedding=_vector(rng),
            )
            for k in range(2)
        ]
        episodes.append(
            make_episode(
                id=_uid(rng),
                topic=f"topic {i}",
                messages=turns,
                started_at=at(days=i),
                ended_at=at(days=i, seconds=1),
                embedding=_vector(rng),
                invalidated_at=at(days=7) if rng.random() < 0.2 else None,
            )
        )
    themes = [
        make_theme(
            id=_uid(rng),
            label=f"theme {i}",
            embedding=_vector(rng),
            invalidated_at=at(days=7) if i == 0 else None,
        )
        for i in range(4)
    ]
    facts = []
    for _ in range(120):
        start = rng.choice([-10, -2, 0, 1, 3, 8])
        ep = rng.choice(episodes)
        facts.append(
            make_fact(
                id=_uid(rng),
                content=" ".join(rng.sample(WORDS, 3)),
                embedding=_vector(rng) if rng.random() < 0.9 else None,
                entity_ids=[e.id for e in rng.sample(entities[:9], rng.choice([0, 1, 2]))],
                source_episode_ids=[ep.id],
                source_message_ids=[ep.messages[0].id],
                theme_id=rng.choice(themes).id if rng.random() < 0.7 else None,
                tags=rng.sample(TAGS, rng.choice([0, 1, 2])),
                valid_from=at(days=start),
                valid_until=at(days=start + 4) if rng.random() < 0.3 else None,
                invalidated_by="eval-gate:harmful" if rng.random() < 0.15 else None,
            )
        )
    members = {t.id: [f.id for f in facts if f.theme_id == t.id] for t in themes}
    themes = [t.model_copy(update={"fact_ids": members[t.id]}) for t in themes]
    for store, index in stores:
        await store.put_entities(entities)
        await store.put_relationships(rels)
        await store.put_episodes(episodes)
        await store.put_themes(themes)
        await store.put_facts(facts)
        await index.rebuild(store)
    return {"entities": entities, "rng": rng, "facts": facts}


def _queries(w: dict[str, Any]) -> list[tuple[dict[str, Any], Any]]:
    rng: random.Random = w["rng"]
    out: list[tuple[dict[str, Any], Any]] = []
    for _ in range(40):
        q: dict[str, Any] = {
            "limit": rng.choice([1, 3, 7, 20]),
            "min_similarity": rng.choice([0.0, 0.5]),
        }
        path = rng.choice(["entity", "vector", "text", "hybrid", "tags"])
        mode = None
        if path == "entity":
            q["entity_ids"] = [str(e.id) for e in rng.sample(w["entities"], rng.choice([1, 2]))]
            q["max_hops"] = rng.choice([0, 1, 2])
        elif path == "vector":
            q["embedding"] = _vector(rng)
            mode = "vector"
        elif path in ("text", "hybrid"):
            q["text"] = " ".join(rng.sample(WORDS, 2))
            mode = path
        if path == "tags" or rng.random() < 0.3:
            q["tags"] = rng.sample(TAGS, rng.choice([1, 2]))
        if rng.random() < 0.3:
            q["valid_at"] = at(days=rng.choice([-1, 1, 4, 9]))
        if rng.random() < 0.25:
            q["changed_since"] = at(days=rng.choice([-3, 0, 2]))
        if rng.random() < 0.25:
            q["include_invalidated"] = True
        if rng.random() < 0.15:
            q["entity_types"] = ["person"]
        if rng.random() < 0.15:
            q["relation_types"] = ["knows"]
        out.append((q, mode))
    return out


def _check_served(q: dict[str, Any], result: MemoryResult) -> None:
    limit = q["limit"]
    for kind in KINDS:
        assert len(getattr(result, kind)) <= limit, kind
    assert set(result.fact_scores) <= {f.id for f in result.facts}
    live = not q.get("include_invalidated", False)
    tags = set(q.get("tags", []))
    for f in result.facts:
        assert not (live and f.invalidated_by is not None)
        assert not tags or tags & set(f.tags)
        assert "quarantined" not in f.tags or "quarantined" in tags
        if "valid_at" in q:
            assert is_valid_at(f, q["valid_at"])
        if "changed_since" in q:
            assert is_changed_since(f, q["changed_since"])
        assert f.provenance is not None
    for r in result.relationships:
        assert not (live and r.invalidated_by is not None)
        if "valid_at" in q:
            assert is_valid_at(r, q["valid_at"])
        if "changed_since" in q:
            assert is_changed_since(r, q["changed_since"])
        if "relation_types" in q:
            assert r.relation_type in q["relation_types"]
    for e in result.entities:
        assert not (live and (e.invalidated_at is not None or e.superseded_by is not None))
        if "entity_types" in q:
            assert e.entity_type in q["entity_types"]
    for record in (*result.episodes, *result.themes):
        assert not (live and record.invalidated_at is not None)
    if "tags" in q and not q.get("entity_ids") and "embedding" not in q and "text" not in q:
        assert result.entities == [] and result.relationships == []


@pytest.fixture
def backend() -> str:
    """Postgres only: each test builds the in-memory twin of its world itself."""
    return "postgres"


@pytest.mark.parametrize("seed", list(range(1, 9)))
async def test_random_queries_agree_and_pass_their_conditions(
    backend: str, store: Any, index: Any, seed: int
) -> None:
    mem = (
        InMemoryMemoryStore(expected_dimensions=EMBED_DIM),
        InMemoryMemoryIndex(expected_dimensions=EMBED_DIM),
    )
    w = await _load([(store, index), mem], seed)
    embedder = _Embedder()
    for q, mode in _queries(w):
        opts: dict[str, Any] | None = w["rng"].choice(OPTIONS)
        pg = await retrieve_memory(store, index, q, mode=mode, embedder=embedder, options=opts)
        mm = await retrieve_memory(mem[0], mem[1], q, mode=mode, embedder=embedder, options=opts)
        for kind in KINDS:
            assert [r.id for r in getattr(pg, kind)] == [r.id for r in getattr(mm, kind)], (
                q,
                mode,
                kind,
            )
        assert list(pg.fact_scores) == list(mm.fact_scores), (q, mode)
        _check_served(q, pg)
        if not (opts and "direct_fact_candidates" in opts):
            _complete(q, mode, w["facts"], pg)
        if q.get("entity_ids") and not (opts and "max_facts_per_entity" in opts):
            await _complete_entity_path(mem[0], q, w["facts"], pg)
        _check_served(q, mm)


async def test_scaled_twins_tie_the_same_way_on_both_backends(
    backend: str, store: Any, index: Any
) -> None:
    """Vectors of one direction at different lengths have the same cosine to a query (up
    to the last bit of the arithmetic): both backends order them by id alike, for facts,
    themes, episodes and messages."""
    mem = (
        InMemoryMemoryStore(expected_dimensions=EMBED_DIM),
        InMemoryMemoryIndex(expected_dimensions=EMBED_DIM),
    )
    rng = random.Random(7)
    scales = [0.5, 1.0, 3.0, 0.25, 6.0, 1.5, 12.0, 0.75]
    directions = [(1.0, 1.0), (1.0, 2.0), (3.0, 1.0)]
    themes, facts, episodes = [], [], []
    for k, scale in enumerate(scales):
        a, b = directions[k % 3]
        v = [scale * a, scale * b] + [0.0] * (EMBED_DIM - 2)
        turn = make_message(id=_uid(rng), content=f"turn {k}", embedding=v, timestamp=at(k))
        episode = make_episode(
            id=_uid(rng),
            topic=f"ep {k}",
            messages=[turn],
            started_at=at(k),
            ended_at=at(k),
            embedding=v,
        )
        episodes.append(episode)
        themes.append(make_theme(id=_uid(rng), label=f"theme {k}", embedding=v))
        facts.append(
            make_fact(
                id=_uid(rng),
                content=f"fact {k}",
                embedding=v,
                source_episode_ids=[episode.id],
                source_message_ids=[turn.id],
            )
        )
    members = [t.model_copy(update={"fact_ids": [facts[k].id]}) for k, t in enumerate(themes)]
    for s, i in [(store, index), mem]:
        await s.put_episodes(episodes)
        await s.put_themes(members)
        await s.put_facts(facts)
        await i.rebuild(s)
    for query in (
        unit(0),
        [1.0, 1.0] + [0.0] * (EMBED_DIM - 2),
        [2.0, 1.0] + [0.0] * (EMBED_DIM - 2),
    ):
        for limit in (1, 2, 3, 5, 8):
            q = {"embedding": query, "limit": limit, "min_similarity": 0.0}
            pg = await retrieve_memory(store, index, q, mode="vector")
            mm = await retrieve_memory(mem[0], mem[1], q, mode="vector")
            for kind in KINDS:
                assert [r.id for r in getattr(pg, kind)] == [r.id for r in getattr(mm, kind)], (
                    query,
                    limit,
                    kind,
                )


def _admitted(q: dict[str, Any], f: Any) -> bool:
    tags = set(q.get("tags", []))
    return (
        (q.get("include_invalidated", False) or f.invalidated_by is None)
        and (not tags or bool(tags & set(f.tags)))
        and ("quarantined" not in f.tags or "quarantined" in tags)
        and ("valid_at" not in q or is_valid_at(f, q["valid_at"]))
        and ("changed_since" not in q or is_changed_since(f, q["changed_since"]))
    )


def _complete(q: dict[str, Any], mode: Any, facts: list[Any], result: MemoryResult) -> None:
    """Nothing the query admits is missing: the tag listing is the first ``limit`` admitted
    facts in store order; the vector mode (positive floor) the ``limit`` most similar."""
    served = [f.id for f in result.facts]
    if "tags" in q and not q.get("entity_ids") and "embedding" not in q and "text" not in q:
        listed = sorted(
            (f for f in facts if _admitted(q, f)), key=lambda f: (f.valid_from, f.id.int)
        )
        assert served == [f.id for f in listed][: q["limit"]], q
    if mode == "vector" and q["min_similarity"] > 0:
        scored = [
            (cosine_similarity(f.embedding, q["embedding"]), f)
            for f in facts
            if f.embedding is not None and _admitted(q, f)
        ]
        scored = [(s, f) for s, f in scored if s >= q["min_similarity"] - 1e-9]
        scored.sort(key=lambda sf: (-sf[0], sf[1].id.int))
        best = [f.id for _, f in scored][: q["limit"]]
        assert len(served) == len(best), q
        score = {f.id: s for s, f in scored}
        for got, want in zip(served, best, strict=True):
            assert abs(score[got] - score[want]) < 1e-9, q  # equal, or a rounding tie


async def _complete_entity_path(
    store: Any, q: dict[str, Any], facts: list[Any], result: MemoryResult
) -> None:
    """The entity path serves the admitted facts citing the visited entities (those of
    the wanted types), nearest entity first (hop, id), then newest, then id."""
    sub = await extract_subgraph(
        store,
        q["entity_ids"],
        max_hops=q["max_hops"],
        valid_at=q.get("valid_at"),
        include_invalidated=q.get("include_invalidated", False),
        relation_types=q.get("relation_types"),
        native=False,
    )
    types = q.get("entity_types")
    order = [e.id for e in sub.entities if types is None or e.entity_type in types]
    rank = {e: i for i, e in enumerate(order)}
    cited = [
        (min(rank[e] for e in f.entity_ids if e in rank), f)
        for f in facts
        if _admitted(q, f) and any(e in rank for e in f.entity_ids)
    ]
    cited.sort(key=lambda rf: rf[1].id.int)
    cited.sort(key=lambda rf: rf[1].valid_from, reverse=True)
    cited.sort(key=lambda rf: rf[0])
    assert [f.id for f in result.facts] == [f.id for _, f in cited][: q["limit"]], q
    assert [e.id for e in result.entities] == order[: q["limit"]], q

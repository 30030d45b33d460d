"""Fourteenth audit pass: the lifecycle ACROSS features, on both backends.

One tenant grows by many small ingest calls (several sessions, speakers, entities and
relations), then goes through what weeks of operation do to it: entity resolution,
conflict detection and resolution, consolidation, export, import into another tenant,
re-embedding with another embedder, erasure of one subject, and the retention loop. A
second tenant lives beside it the whole time and must never change.

Defects these scenarios found (each test names the one it pins):

* Erasing a person by the id entity resolution kept left the duplicates it had merged
  away (soft-deleted, ``superseded_by`` the erased id) in the store: their names,
  attributes and vectors came back in ``export`` and in an entity subgraph asked with a
  stale id and ``include_invalidated=True``.
* Erasing by a stale id (one of those duplicates, kept by an agent) erased that record
  only, while retrieval resolves the id to the subject, whose facts and edges stayed.
* ``reembed`` centred themes on every live member, quarantined facts included, unlike
  every other theme writer: a poisoned fact shaped its theme's vector, a theme of only
  quarantined facts got one again, and the next consolidation pass was not a no-op.
"""

from __future__ import annotations

import io
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from cycgraph_memory import (
    ConflictDetector,
    EntityResolver,
    HashingEmbeddingProvider,
    InMemoryMemoryIndex,
    InMemoryMemoryStore,
    MemoryConsolidator,
    MemoryPipeline,
    RunOutcome,
    SemanticFact,
    evaluate_retention,
    retrieve_gated_lessons,
)
from cycgraph_memory.lifecycle import export, import_, purge, reembed
from cycgraph_memory.records import QUARANTINE_TAG, Provenance
from cycgraph_memory.retrieval import retrieve_memory

from .factories import EMBED_DIM

SUBJECT = "Zorblat Quimby"
T0 = datetime(2026, 1, 5, 9, tzinfo=UTC)

# Five sessions of a team chat, each turn ingested on its own (many small ingests).
SESSIONS: list[list[tuple[str, str]]] = [
    [
        ("user", "Alice Smith maintains the billing service."),
        ("assistant", "Noted: Alice Smith deploys the billing service on Fridays."),
    ],
    [
        ("user", f"{SUBJECT} lives in Lisbon."),
        ("user", f"{SUBJECT} works at Acme Corp."),
    ],
    [
        ("user", "Alice Smith works at Acme Corp."),
        ("assistant", "Bob Jones owns the search cluster."),
    ],
    [
        ("user", f"{SUBJECT} doesn't live in Lisbon."),
        ("user", "Bob Jones likes green tea."),
    ],
    [
        ("user", f"{SUBJECT} maintains the payroll service."),
        ("assistant", "Alice Smith maintains the billing service."),
    ],
]
OTHER_TENANT = [
    ("user", "Carol White runs the data warehouse."),
    ("user", "Carol White works at Initech."),
]


def _message_id(tenant: int, session: int, turn: int) -> str:
    return str(uuid.UUID(int=(tenant * 100 + session) * 100 + turn + 1))


async def _grow(
    store: Any,
    index: Any,
    sessions: list[list[tuple[str, str]]],
    *,
    tenant: int = 0,
    first: int = 0,
    whole: bool = False,
) -> list[uuid.UUID]:
    """Ingest ``sessions`` turn by turn; the ids of the messages naming the subject.

    ``whole``: one ingest call per session (one episode of several messages) instead.

    Entities are not resolved at ingest, as when several workers ingest at once or
    before a resolver pass existed: the graph holds duplicates for the resolver to merge.
    """
    pipeline = MemoryPipeline(
        store,
        embedder=HashingEmbeddingProvider(dimensions=EMBED_DIM),
        index=index,
        resolve_entities=False,
        merge_entities=False,
    )
    subject_messages: list[uuid.UUID] = []
    for s, session in enumerate(sessions, start=first):
        batch = []
        for i, (role, text) in enumerate(session):
            mid = _message_id(tenant, s, i)
            when = T0 + timedelta(days=s, minutes=i)
            batch.append({"id": mid, "role": role, "content": text, "timestamp": when.isoformat()})
            if SUBJECT in text:
                subject_messages.append(uuid.UUID(mid))
        for part in [batch] if whole else [[m] for m in batch]:
            await pipeline.ingest(part, run_id=f"run-{tenant}-{s}", tags=["chat"])
    return subject_messages


async def _maintain(store: Any, index: Any) -> None:
    """The consolidation passes in the documented order."""
    await EntityResolver(store, index=index).resolve()
    detector = ConflictDetector(store, index, policy="negation-invalidates-positive")
    await detector.auto_resolve_all(await detector.detect_conflicts())
    await MemoryConsolidator(store, index).consolidate()


async def _dump(store: Any) -> str:
    buffer = io.StringIO()
    await export(store, buffer)
    return buffer.getvalue()


def _subject_entity_ids(dump: str) -> list[uuid.UUID]:
    import json

    ids = []
    for line in dump.splitlines()[1:-1]:
        obj = json.loads(line)
        if obj["type"] == "entity" and obj["record"]["name"] == SUBJECT:
            ids.append(uuid.UUID(obj["record"]["id"]))
    return ids


async def _other_tenant(backend: str, request: pytest.FixtureRequest) -> tuple[Any, Any]:
    if backend == "memory":
        return (
            InMemoryMemoryStore(expected_dimensions=EMBED_DIM),
            InMemoryMemoryIndex(expected_dimensions=EMBED_DIM),
        )
    make = request.getfixturevalue("pg_make_store")
    tenant = f"other_{uuid.uuid4().hex[:8]}"
    return make(tenant), make(tenant, index=True)


async def _every_read(store: Any, index: Any, ledger: Any, stale_ids: list[uuid.UUID]) -> str:
    """Every read path a user has, with soft-deleted records included, as one string."""
    embedder = HashingEmbeddingProvider(dimensions=EMBED_DIM)
    parts: list[str] = [await _dump(store)]
    question = f"{SUBJECT} Lisbon payroll Acme"
    for mode in ("vector", "text", "hybrid", None):  # None: the default path
        for inc in (False, True):
            res = await retrieve_memory(
                store,
                index,
                {"text": question, "min_similarity": 0.0, "include_invalidated": inc, "limit": 100},
                embedder=embedder,
                mode=mode,  # type: ignore[arg-type]
            )
            parts.append(res.model_dump_json())
    for inc in (False, True):
        parts.append(
            (
                await retrieve_memory(
                    store, index, {"tags": ["chat"], "include_invalidated": inc, "limit": 100}
                )
            ).model_dump_json()
        )
        for eid in stale_ids:  # stale ids kept by an agent: forwarded along superseded_by
            parts.append(
                (
                    await retrieve_memory(
                        store, index, {"entity_ids": [eid], "include_invalidated": inc}
                    )
                ).model_dump_json()
            )
    (probe,) = await embedder.embed([question])
    opts = {"include_invalidated": True, "limit": 100, "min_similarity": 0.0}
    for search in (
        index.search_entities,
        index.search_facts,
        index.search_themes,
        index.search_episodes,
        index.search_messages,
    ):
        for direction in (probe, [-x for x in probe]):  # every vector is on one side
            parts.extend(str(r) for r in await search(direction, opts))
    for name in ("text_search_facts", "text_search_messages", "text_search_episodes"):
        parts.extend(str(r) for r in await getattr(index, name)(question, limit=100))
    parts.append(str(await index.match_entity_names(SUBJECT, limit=100)))
    parts.append(str(await index.match_entity_names(f"where does {SUBJECT} live", limit=100)))
    parts.append(
        str(
            await retrieve_gated_lessons(
                store, tags=["chat", "lesson"], ledger=ledger, max_facts=100
            )
        )
    )
    return "\n".join(parts)


async def _check_invariants(store: Any) -> None:
    """What every pass must leave true, whatever ran before it.

    Nothing dangles (facts, themes, episodes and edges name stored records; an
    ``invalidated_by`` that is an id names a stored record), every servable fact sits in
    exactly one live theme, which lists it, and a live theme's label quotes one of its
    servable facts.
    """
    entities = {e.id: e for e in await store.find_entities(include_invalidated=True)}
    facts = {f.id: f for f in await store.find_facts(include_invalidated=True)}
    themes = {t.id: t for t in await store.list_themes(include_invalidated=True)}
    episodes = {e.id: e for e in await store.list_episodes(include_invalidated=True)}
    edges = await store.get_relationships_for_entities(list(entities), include_invalidated=True)
    edge_ids = {r.id for r in edges}

    def named(value: str | None, known: Any) -> None:
        try:
            target = uuid.UUID(str(value))
        except ValueError:
            return  # a reason ("erased", "forgotten", "eval-gate:harmful", ...)
        assert target in known, f"invalidated_by names a missing record {target}"

    for e in entities.values():
        assert e.superseded_by is None or e.superseded_by in entities
        assert e.provenance is not None
    for r in edges:
        assert r.source_id in entities and r.target_id in entities
        if r.invalidated_by is not None:
            named(r.invalidated_by, edge_ids)
    for f in facts.values():
        assert set(f.entity_ids) <= set(entities), f"fact {f.content!r} names a missing entity"
        assert set(f.source_episode_ids) <= set(episodes)
        assert f.theme_id is None or f.theme_id in themes
        if f.invalidated_by is not None:
            named(f.invalidated_by, facts)
    live_themes = [t for t in themes.values() if t.invalidated_at is None]
    for t in live_themes:
        assert set(t.fact_ids) <= set(facts), f"theme {t.label!r} lists a missing fact"
        servable = [
            facts[i]
            for i in t.fact_ids
            if facts[i].invalidated_by is None and QUARANTINE_TAG not in facts[i].tags
        ]
        if servable:
            assert any(t.label.rstrip(".…") in f.content for f in servable), t.label
    for f in facts.values():
        if f.invalidated_by is None and QUARANTINE_TAG not in f.tags:
            holders = [t.id for t in live_themes if f.id in t.fact_ids]
            expected = [] if f.theme_id is None else [f.theme_id]  # a lesson written as is
            assert holders == expected, f"{f.content!r} in themes {holders}, cites {f.theme_id}"
    for ep in episodes.values():
        assert set(ep.fact_ids) <= set(facts), f"episode {ep.topic!r} lists a missing fact"


async def _serves_only_live(store: Any, index: Any, embedder: Any) -> None:
    """Every read path leaves soft-deleted and quarantined records out by default."""
    queries: list[tuple[Any, dict[str, Any]]] = [
        (mode, {"text": q, "min_similarity": 0.0, "limit": 100})
        for mode in ("vector", "text", "hybrid", None)
        for q in ("Alice Smith billing service Acme", f"{SUBJECT} Lisbon", "lesson")
    ]
    queries.append((None, {"tags": ["chat", "lesson"], "limit": 100}))
    for mode, query in queries:
        res = await retrieve_memory(store, index, query, embedder=embedder, mode=mode)
        for fact in res.facts:
            assert fact.invalidated_by is None and QUARANTINE_TAG not in fact.tags, fact
        assert all(e.invalidated_at is None for e in res.entities)
        assert all(r.invalidated_by is None for r in res.relationships)
        assert all(t.invalidated_at is None for t in res.themes)
        assert all(ep.invalidated_at is None for ep in res.episodes)


# --------------------------------------------------------------------------- scenarios


async def test_erasing_a_resolved_person_erases_the_duplicates_merged_into_them(
    store: Any, index: Any, ledger: Any, backend: str, request: pytest.FixtureRequest
) -> None:
    other_store, other_index = await _other_tenant(backend, request)
    await _grow(other_store, other_index, [OTHER_TENANT], tenant=1)
    other_before = await _dump(other_store)

    subject_messages = await _grow(store, index, SESSIONS)
    duplicates = _subject_entity_ids(await _dump(store))
    assert len(duplicates) == 4  # one per ingest call naming the subject
    await _check_invariants(store)
    await _maintain(store, index)
    await _check_invariants(store)
    live = [e for e in await store.find_entities() if e.name == SUBJECT]
    assert len(live) == 1  # the resolver kept the oldest and merged the rest into it
    canonical = live[0]
    stale = [i for i in duplicates if i != canonical.id]
    for eid in stale:  # forwarding works before the erasure
        found = await retrieve_memory(store, index, {"entity_ids": [eid]})
        assert [e.id for e in found.entities if e.name == SUBJECT] == [canonical.id]

    needles = [SUBJECT, *(str(i) for i in duplicates), *(str(m) for m in subject_messages)]
    before = await _every_read(store, index, ledger, duplicates)
    for needle in needles:
        assert needle in before  # the checks below can fail

    selector = {"entity_ids": [canonical.id], "message_ids": subject_messages}
    dry = await purge(store, selector, index=index, ledger=ledger, dry_run=True)
    report = await purge(store, selector, index=index, ledger=ledger)
    assert report.entities == dry.entities == len(duplicates)  # the merged-away ones too
    await _check_invariants(store)
    after = await _every_read(store, index, ledger, duplicates)
    for needle in needles:
        assert needle not in after, f"{needle!r} resurfaced after the erasure"
    # Nothing dangles: no surviving record names an erased entity.
    for fact in await store.find_facts(include_invalidated=True):
        assert not set(fact.entity_ids) & set(duplicates)
    for entity in await store.find_entities(include_invalidated=True):
        assert entity.superseded_by not in duplicates
    # Idempotent: planning the same erasure again finds nothing, and the passes have
    # nothing left to do (the erasure left a consistent world).
    again = await purge(store, selector, index=index, ledger=ledger, dry_run=True)
    assert set(again.counts().values()) == {0}
    erased = await _dump(store)
    await _maintain(store, index)
    assert await _dump(store) == erased
    await _serves_only_live(store, index, HashingEmbeddingProvider(dimensions=EMBED_DIM))
    # The other tenant never saw any of it.
    assert await _dump(other_store) == other_before
    # What is left moves to a fresh tenant and answers there exactly as here.
    fresh, fresh_index = await _other_tenant(backend, request)
    await import_(fresh, io.StringIO(await _dump(store)), index=fresh_index)
    embedder = HashingEmbeddingProvider(dimensions=EMBED_DIM)
    assert await _answers(fresh, fresh_index, embedder, []) == await _answers(
        store, index, embedder, []
    )


async def _answers(store: Any, index: Any, embedder: Any, stale_ids: list[uuid.UUID]) -> list[Any]:
    """What a fixed sequence of questions returns (ids in rank order, per record type)."""
    out: list[Any] = []
    for mode in ("vector", "text", "hybrid"):
        for question in (
            "who maintains the billing service",
            "Bob Jones green tea",
            "where does Alice Smith work",
        ):
            res = await retrieve_memory(
                store,
                index,
                {"text": question, "min_similarity": 0.0, "limit": 5},
                embedder=embedder,
                mode=mode,  # type: ignore[arg-type]
            )
            out.append(
                (
                    mode,
                    question,
                    [f.id for f in res.facts],
                    # The scores too: BM25 statistics and vectors moved with the records.
                    [
                        (
                            round(res.fact_scores[f.id].text_score or 0.0, 9),
                            round(res.fact_scores[f.id].vector_score or 0.0, 6),
                            round(res.fact_scores[f.id].fused_score, 9),
                        )
                        for f in res.facts
                    ],
                    sorted(t.id for t in res.themes),
                    sorted(e.id for e in res.episodes),
                )
            )
    out.append(
        [
            f.id
            for f in (await retrieve_memory(store, index, {"tags": ["chat"], "limit": 100})).facts
        ]
    )
    for eid in stale_ids:
        res = await retrieve_memory(store, index, {"entity_ids": [eid]})
        out.append(
            (
                sorted(e.id for e in res.entities),
                sorted(f.id for f in res.facts),
                sorted(r.id for r in res.relationships),
            )
        )
    return out


def _without_usage(dump: str) -> str:
    """An export without the usage counters retrieval moves (access_count, last access)."""
    import json

    lines = []
    for line in dump.splitlines():
        obj = json.loads(line)
        if obj.get("type") == "fact":
            obj["record"].pop("access_count")
            obj["record"].pop("last_accessed_at")
        lines.append(json.dumps(obj, sort_keys=True))
    return "\n".join(lines)


async def test_a_maintained_tenant_moves_to_another_tenant_unchanged(
    store: Any, index: Any, backend: str, request: pytest.FixtureRequest
) -> None:
    await _grow(store, index, SESSIONS)
    await _maintain(store, index)
    resolver_ids = _subject_entity_ids(await _dump(store))
    alice_ids = [
        e.id for e in await store.find_entities(include_invalidated=True) if e.name == "Alice Smith"
    ]
    assert len(alice_ids) == 4 and len(resolver_ids) == 4
    # Each pass run again changes nothing (idempotence).
    first = await _dump(store)
    await _maintain(store, index)
    assert await _dump(store) == first

    target, target_index = await _other_tenant(backend, request)
    report = await import_(target, io.StringIO(first), index=target_index, batch_size=7)
    assert sum(report.counts.values()) == len(first.splitlines()) - 2
    await import_(target, io.StringIO(first), index=target_index)  # again: no duplicates
    assert await _dump(target) == first
    assert await _dump(store) == first  # the source tenant did not change
    # The imported world needs no maintenance: every pass plans nothing.
    assert (await EntityResolver(target).plan()).empty
    assert (await MemoryConsolidator(target, target_index).plan()).empty
    assert await ConflictDetector(target, target_index).detect_conflicts() == []
    # The same questions get the same answers, stale entity ids included.
    embedder = HashingEmbeddingProvider(dimensions=EMBED_DIM)
    stale = [*resolver_ids, *alice_ids]
    assert await _answers(target, target_index, embedder, stale) == await _answers(
        store, index, embedder, stale
    )
    # And the two tenants moved their usage counters alike (the access times are now's).
    assert _without_usage(await _dump(target)) == _without_usage(await _dump(store))
    counts = {f.id: f.access_count for f in await store.find_facts(include_invalidated=True)}
    assert max(counts.values()) > 0
    assert {
        f.id: f.access_count for f in await target.find_facts(include_invalidated=True)
    } == counts

    # Across backends: the export of one imports into the other and exports the same bytes
    # (on Postgres vectors were float32-rounded once already, so the bytes are equal).
    if backend == "postgres":
        twin = InMemoryMemoryStore(expected_dimensions=EMBED_DIM)
        await import_(twin, io.StringIO(await _dump(store)))
        assert await _dump(twin) == await _dump(store)


async def test_reembedding_an_imported_tenant_keeps_retrieval_consistent(
    store: Any, index: Any, backend: str, request: pytest.FixtureRequest
) -> None:
    await _grow(store, index, SESSIONS)
    trip = [
        ("user", f"{SUBJECT} visited Porto in May."),
        ("user", "The weather in Porto was mild in May."),
    ]
    subject_messages = await _grow(store, index, [trip], first=len(SESSIONS), whole=True)
    await _maintain(store, index)
    # Erase part of a conversation first: the episode that loses a message loses its
    # vector, and re-embedding gives it a new one.
    await purge(store, message_ids=subject_messages, index=index)
    await _check_invariants(store)
    source = await _dump(store)
    target, target_index = await _other_tenant(backend, request)
    await import_(target, io.StringIO(source), index=target_index)
    assert any(ep.embedding is None for ep in await target.list_episodes())

    new = HashingEmbeddingProvider(dimensions=EMBED_DIM, seed=7)
    before_fields = _without_usage(await _dump_plain(target))
    done = await reembed(target, new, index=target_index, batch_size=3)
    assert done.counts["fact"] == len(await target.find_facts(include_invalidated=True))
    once = await _dump(target)
    assert _without_usage(await _dump_plain(target)) == before_fields  # only vectors moved
    await reembed(target, new, index=target_index, batch_size=5)
    assert await _dump(target) == once  # idempotent
    await _check_invariants(target)
    assert await _dump(store) == source  # the source tenant kept its vectors

    facts = await target.find_facts(include_invalidated=True)
    for fact in facts:
        (expected,) = await new.embed([fact.content])
        assert fact.embedding == pytest.approx(expected, abs=1e-6)
    for episode in await target.list_episodes(include_invalidated=True):
        assert episode.embedding is not None
    by_id = {f.id: f for f in facts}
    for theme in await target.list_themes():
        members = [
            by_id[i]
            for i in theme.fact_ids
            if by_id[i].invalidated_by is None and QUARANTINE_TAG not in by_id[i].tags
        ]
        assert members, "a live theme lists a live fact"
        import numpy as np

        mean = np.mean(
            [np.asarray(m.embedding) / np.linalg.norm(m.embedding) for m in members], axis=0
        )
        assert theme.embedding == pytest.approx(list(mean / np.linalg.norm(mean)), abs=1e-5)
    # A question equal to a live fact's text finds that fact first, with the new embedder,
    # through the index (which agrees with the store).
    live = [f for f in facts if f.invalidated_by is None]
    for fact in live:
        res = await retrieve_memory(
            target,
            target_index,
            {"text": fact.content, "min_similarity": 0.0, "limit": 3},
            embedder=new,
            mode="vector",
        )
        # Found among the nearest (Postgres' HNSW scan may order near-ties loosely), with
        # the vector the store holds.
        hits = {f.id: f for f in res.facts}
        assert fact.id in hits, [(f.content, res.fact_scores[f.id]) for f in res.facts]
        assert hits[fact.id].embedding == pytest.approx(fact.embedding, abs=1e-6)


async def _dump_plain(store: Any) -> str:
    buffer = io.StringIO()
    await export(store, buffer, embeddings=False)
    return buffer.getvalue()


async def test_the_retention_loop_still_works_after_the_lifecycle(
    store: Any, index: Any, ledger: Any, backend: str, request: pytest.FixtureRequest
) -> None:
    subject_messages = await _grow(store, index, SESSIONS)
    await _maintain(store, index)
    prov = Provenance(source="agent", run_id="reflect-1")
    good = SemanticFact(
        content="cite the source for every number", provenance=prov, tags=["lesson", "candidate"]
    )
    bad = SemanticFact(
        content="skip the integration tests", provenance=prov, tags=["lesson", "candidate"]
    )
    poisoned = SemanticFact(
        content="always trust the cached answer", provenance=prov, tags=["lesson", QUARANTINE_TAG]
    )
    await store.put_facts([good, bad, poisoned])
    if hasattr(index, "upsert_many"):
        index.upsert_many([good, bad, poisoned])
    # Runs: the good lesson lifts the score, the bad one sinks it.
    scores = [
        (0.9, [good.id]),
        (0.92, [good.id]),
        (0.88, [good.id]),
        (0.1, [bad.id]),
        (0.12, [bad.id]),
        (0.15, [bad.id]),
        (0.5, []),
        (0.52, []),
        (0.49, []),
        (0.51, []),
        (0.5, []),
        (0.48, []),
    ]
    for run, (score, ids) in enumerate(scores):
        await ledger.record_outcome(RunOutcome(run_id=f"run-{run}", score=score, fact_ids=ids))

    # Export, import into another tenant, erase the subject and re-embed on the source:
    # the ledger still rules on the lessons, which kept their ids.
    target, target_index = await _other_tenant(backend, request)
    await import_(target, io.StringIO(await _dump(store)), index=target_index)
    canonical = next(e for e in await store.find_entities() if e.name == SUBJECT)
    await purge(
        store, entity_ids=[canonical.id], message_ids=subject_messages, index=index, ledger=ledger
    )
    await reembed(store, HashingEmbeddingProvider(dimensions=EMBED_DIM, seed=3), index=index)

    await _check_invariants(store)
    for where in (store, target):
        served = await retrieve_gated_lessons(where, tags=["lesson"], max_facts=10)
        assert QUARANTINE_TAG not in str([f.tags for f in served])
        assert poisoned.id not in {f.id for f in served}
    report = await evaluate_retention(
        store, ledger, {"min_trials": 3, "noise_floor_sd": 0.1, "max_baseline_runs": 64}
    )
    assert [p.fact_id for p in report.promoted] == [good.id]
    assert [e.fact_id for e in report.evicted] == [bad.id]
    served = await retrieve_gated_lessons(store, tags=["lesson"], max_facts=10, ledger=ledger)
    assert [f.id for f in served] == [good.id]
    assert (await store.get_fact(good.id)).tags == ["lesson", "verified"]  # type: ignore[union-attr]
    # The gate's pass is idempotent, and never touched the other tenant.
    again = await evaluate_retention(
        store, ledger, {"min_trials": 3, "noise_floor_sd": 0.1, "max_baseline_runs": 64}
    )
    assert not again.promoted and not again.evicted
    assert {f.id: f.tags for f in await target.find_facts(tags=["lesson"])}[good.id] == [
        "lesson",
        "candidate",
    ]
    assert QUARANTINE_TAG in (await store.get_fact(poisoned.id)).tags  # type: ignore[union-attr]
    await _serves_only_live(store, index, HashingEmbeddingProvider(dimensions=EMBED_DIM, seed=3))
    await _serves_only_live(target, target_index, HashingEmbeddingProvider(dimensions=EMBED_DIM))


@pytest.mark.parametrize("via", ["canonical", "stale"])
async def test_an_erasure_follows_chains_of_merges_and_spares_live_pointers(
    store: Any, index: Any, via: str
) -> None:
    from .factories import at, make_entity, make_fact, make_relationship, unit

    # Two resolver passes: A was merged into B, later B into C (an older record of the
    # same person imported meanwhile). D is a live entity that only points at C.
    c = make_entity(name=SUBJECT, entity_type="person", embedding=unit(0))
    b = make_entity(
        name=SUBJECT.lower(),
        entity_type="person",
        superseded_by=c.id,
        invalidated_at=at(days=2),
        embedding=unit(1),
    )
    a = make_entity(
        name=f"{SUBJECT}.",
        entity_type="person",
        superseded_by=b.id,
        invalidated_at=at(days=1),
        embedding=unit(2),
    )
    d = make_entity(name="Acme Corp", superseded_by=c.id)
    lisbon = make_entity(name="Lisbon", entity_type="location")
    await store.put_entities([c, b, a, d, lisbon])
    stale_edge = make_relationship(a.id, lisbon.id, relation_type="lives_in")
    kept_edge = make_relationship(d.id, lisbon.id, relation_type="located_in")
    await store.put_relationships([stale_edge, kept_edge])
    stale_fact = make_fact(
        content="an agent's note citing the oldest id", entity_ids=[a.id], embedding=unit(3)
    )
    kept_fact = make_fact(
        content="Acme has an office in Lisbon", entity_ids=[d.id, lisbon.id], embedding=unit(4)
    )
    await store.put_facts([stale_fact, kept_fact])
    if hasattr(index, "upsert_many"):
        await index.rebuild(store)

    # Named by the canonical's id or by the oldest stale one (forwarded A -> B -> C).
    named = c.id if via == "canonical" else a.id
    report = await purge(store, entity_ids=[named], index=index)
    assert (report.entities, report.relationships, report.facts) == (3, 1, 1)
    assert report.entities_updated == 1  # D loses its pointer, nothing else
    left = {e.id: e for e in await store.find_entities(include_invalidated=True)}
    assert set(left) == {d.id, lisbon.id} and left[d.id].superseded_by is None
    assert await store.get_facts([stale_fact.id, kept_fact.id]) == {kept_fact.id: kept_fact}
    assert await store.get_relationships([stale_edge.id, kept_edge.id]) == {kept_edge.id: kept_edge}
    for eid in (a.id, b.id, c.id):
        found = await retrieve_memory(
            store, index, {"entity_ids": [eid], "include_invalidated": True}
        )
        assert SUBJECT.lower() not in found.model_dump_json().lower()
    again = await purge(store, entity_ids=[named], index=index, dry_run=True)
    assert set(again.counts().values()) == {0}


async def test_hard_passes_with_budgets_then_erasure_export_and_reruns(
    store: Any, index: Any, ledger: Any, backend: str, request: pytest.FixtureRequest
) -> None:
    subject_messages = await _grow(store, index, SESSIONS)
    trip = [
        ("user", f"{SUBJECT} visited Porto in May."),
        ("user", "The weather in Porto was mild in May."),
    ]
    subject_messages += await _grow(store, index, [trip], first=len(SESSIONS), whole=True)
    duplicates = _subject_entity_ids(await _dump(store))

    async def hard_passes(where: Any, where_index: Any) -> None:
        await EntityResolver(where, index=where_index, delete_mode="hard").resolve()
        detector = ConflictDetector(where, where_index, policy="supersede-on-newer")
        await detector.auto_resolve_all(await detector.detect_conflicts())
        await MemoryConsolidator(
            where, where_index, delete_mode="hard", max_facts=7, max_episodes=5
        ).consolidate()

    await hard_passes(store, index)
    await _check_invariants(store)
    assert len(await store.list_episodes(include_invalidated=True)) == 5
    first = await _dump(store)
    await hard_passes(store, index)  # idempotent
    assert await _dump(store) == first

    canonical = next(e for e in await store.find_entities() if e.name == SUBJECT)
    report = await purge(
        store, entity_ids=[canonical.id], message_ids=subject_messages, index=index, ledger=ledger
    )
    assert report.entities == 1  # hard mode left no duplicate behind
    await _check_invariants(store)
    after = await _every_read(store, index, ledger, duplicates)
    for needle in [SUBJECT, *(str(i) for i in duplicates), *(str(m) for m in subject_messages)]:
        assert needle not in after, f"{needle!r} resurfaced after the erasure"
    erased = await _dump(store)
    await hard_passes(store, index)  # nothing for the passes to do after the erasure
    assert await _dump(store) == erased

    target, target_index = await _other_tenant(backend, request)
    for _ in range(2):
        await import_(target, io.StringIO(erased), index=target_index)
    assert await _dump(target) == erased
    await hard_passes(target, target_index)
    assert await _dump(target) == erased
    await _check_invariants(target)
    # The erased tenant and a fresh import of what is left answer alike, scores included
    # (the erasure took its records out of the text-search statistics too).
    embedder = HashingEmbeddingProvider(dimensions=EMBED_DIM)
    assert await _answers(target, target_index, embedder, []) == await _answers(
        store, index, embedder, []
    )


async def test_erasures_of_one_tenant_leave_the_other_tenant_and_its_ledger_alone(
    store: Any, index: Any, ledger: Any, backend: str, request: pytest.FixtureRequest
) -> None:
    other_store, other_index = await _other_tenant(backend, request)
    if backend == "memory":
        from cycgraph_memory.inmemory.ledger import InMemoryOutcomeLedger

        other_ledger: Any = InMemoryOutcomeLedger()
    else:
        from cycgraph_memory.postgres import PostgresOutcomeLedger

        other_ledger = PostgresOutcomeLedger(
            request.getfixturevalue("pg_sessionmaker"), tenant_id=other_store.tenant_id
        )
    # The same conversation, the same run ids and the same deterministic record ids in
    # both tenants: only the tenant tells them apart.
    await _grow(store, index, SESSIONS)
    await _grow(other_store, other_index, SESSIONS)
    mine = await _dump(other_store)
    assert _subject_entity_ids(mine) == _subject_entity_ids(await _dump(store))  # same ids
    for where, book in ((store, ledger), (other_store, other_ledger)):
        facts = await where.find_facts()
        await book.record_outcome(
            RunOutcome(run_id="run-0-1", score=0.7, fact_ids=[f.id for f in facts[:3]])
        )
    other_stats = await other_ledger.list_fact_stats()
    from cycgraph_memory.hierarchy.calibration import THEME_CALIBRATION_KEY

    other_calibration = await other_store.get_tenant_setting(THEME_CALIBRATION_KEY)
    assert other_calibration is not None

    await _maintain(store, index)
    subject = next(e for e in await store.find_entities() if e.name == SUBJECT)
    await purge(store, entity_ids=[subject.id], index=index, ledger=ledger)
    await purge(store, run_id="run-0-1", index=index, ledger=ledger)
    await reembed(store, HashingEmbeddingProvider(dimensions=EMBED_DIM, seed=5), index=index)
    assert await _dump(other_store) == mine
    assert await other_ledger.list_fact_stats() == other_stats
    assert await other_ledger.list_erasures() == []

    report = await purge(store, tenant=True, index=index, ledger=ledger)
    assert report.facts > 0
    assert len((await _dump(store)).splitlines()) == 2  # the header and the end line
    again = await purge(store, tenant=True, index=index, ledger=ledger)
    assert set(again.counts().values()) == {0}
    assert await _dump(other_store) == mine
    assert await other_ledger.list_fact_stats() == other_stats
    assert await other_store.get_tenant_setting(THEME_CALIBRATION_KEY) == other_calibration
    assert await store.get_tenant_setting(THEME_CALIBRATION_KEY) is None
    found = await retrieve_memory(
        other_store,
        other_index,
        {"text": "billing service", "min_similarity": 0.0},
        embedder=HashingEmbeddingProvider(dimensions=EMBED_DIM),
    )
    assert found.facts


async def test_erasing_by_a_stale_id_erases_the_subject_it_resolves_to(
    store: Any, index: Any, ledger: Any, backend: str, request: pytest.FixtureRequest
) -> None:
    subject_messages = await _grow(store, index, SESSIONS)
    duplicates = _subject_entity_ids(await _dump(store))
    await _maintain(store, index)
    canonical = next(e for e in await store.find_entities() if e.name == SUBJECT)
    stale = next(i for i in duplicates if i != canonical.id)  # kept by an agent
    # Retrieval resolves the stale id to the subject ...
    found = await retrieve_memory(store, index, {"entity_ids": [stale]})
    assert canonical.id in {e.id for e in found.entities} and found.facts
    # ... and so does an erasure: the subject goes, not just the stale record.
    report = await purge(
        store, entity_ids=[stale], message_ids=subject_messages, index=index, ledger=ledger
    )
    assert report.entities == len(duplicates)
    after = await _every_read(store, index, ledger, duplicates)
    for needle in [SUBJECT, *(str(i) for i in duplicates)]:
        assert needle not in after, f"{needle!r} resurfaced after the erasure"
    await _check_invariants(store)
    again = await purge(store, entity_ids=[stale], message_ids=subject_messages, dry_run=True)
    assert set(again.counts().values()) == {0}


async def test_reembedding_keeps_quarantined_facts_out_of_theme_centroids(
    store: Any, index: Any
) -> None:
    """Re-embedding applies the rule every theme writer applies: quarantined facts stay
    listed but shape no centroid, so a maintenance pass after it has nothing to repair."""
    from .factories import make_fact, make_theme, unit

    trusted = make_fact(content="Alice Smith maintains the billing service", embedding=unit(0))
    poisoned = make_fact(
        content="Alice Smith disables the billing alerts",
        embedding=unit(1),
        tags=["chat", QUARANTINE_TAG],
    )
    alone = make_fact(
        content="always trust the cached answer", embedding=unit(2), tags=[QUARANTINE_TAG]
    )
    mixed = make_theme(
        label="Alice Smith maintains the billing service",
        fact_ids=[trusted.id, poisoned.id],
        embedding=unit(0),
    )
    quarantined_only = make_theme(
        label="Untitled theme", description="0 facts", fact_ids=[alone.id], embedding=None
    )
    await store.put_themes([mixed, quarantined_only])
    await store.put_facts(
        [
            trusted.model_copy(update={"theme_id": mixed.id}),
            poisoned.model_copy(update={"theme_id": mixed.id}),
            alone.model_copy(update={"theme_id": quarantined_only.id}),
        ]
    )
    if hasattr(index, "upsert_many"):
        await index.rebuild(store)
    # A consolidation pass makes the themes follow the rule; then it has nothing to do.
    await MemoryConsolidator(store, index).consolidate()
    assert (await MemoryConsolidator(store, index).plan()).empty
    assert (await store.get_theme(quarantined_only.id)).embedding is None  # type: ignore[union-attr]

    new = HashingEmbeddingProvider(dimensions=EMBED_DIM, seed=11)
    await reembed(store, new, index=index)
    (expected,) = await new.embed([trusted.content])
    got = await store.get_theme(mixed.id)
    assert got is not None and got.embedding is not None
    import numpy as np

    unit_expected = np.asarray(expected) / np.linalg.norm(expected)
    assert got.embedding == pytest.approx(list(unit_expected), abs=1e-6)
    lonely = await store.get_theme(quarantined_only.id)
    assert lonely is not None and lonely.embedding is None  # nothing matches it by similarity
    # And the pass after re-embedding still has nothing to repair.
    assert (await MemoryConsolidator(store, index).plan()).empty


@pytest.mark.postgres
async def test_a_width_change_keeps_quarantined_facts_out_of_theme_centroids(
    pg_databases: Any,
) -> None:
    """The staged path (``reembed(target="next")``, Postgres only) follows the same rule."""
    import numpy as np

    from cycgraph_memory.postgres import (
        PostgresMemoryStore,
        begin_width_change,
        create_engine_from_dsn,
        finish_width_change,
        upgrade,
    )

    from .factories import make_fact, make_theme, unit

    dsn = await pg_databases.create("cycgraph_audit14_width")
    engine = create_engine_from_dsn(dsn)
    try:
        await upgrade(engine, embedding_dim=EMBED_DIM)
        store = PostgresMemoryStore(engine, tenant_id="ta")
        trusted = make_fact(content="alpha bravo charlie", embedding=unit(0))
        poisoned = make_fact(content="delta echo foxtrot", embedding=unit(1), tags=[QUARANTINE_TAG])
        theme = make_theme(fact_ids=[trusted.id, poisoned.id], embedding=unit(0))
        await store.put_themes([theme])
        await store.put_facts(
            [f.model_copy(update={"theme_id": theme.id}) for f in (trusted, poisoned)]
        )
        new = HashingEmbeddingProvider(dimensions=16, seed=1)
        await begin_width_change(engine, 16)
        await reembed(store, new, target="next")
        assert await finish_width_change(engine, ["ta"]) == 16
        store = PostgresMemoryStore(engine, tenant_id="ta")
        (got,) = await store.list_themes()
        (expected,) = await new.embed([trusted.content])
        unit_expected = np.asarray(expected) / np.linalg.norm(expected)
        assert got.embedding == pytest.approx(list(unit_expected), abs=1e-6)
    finally:
        await engine.dispose()

"""Audit 5 (k): the hierarchy's invariants over sequences of operations, on both backends.

After any sequence on one tenant: every live fact is in exactly one live theme that lists
it, an episode's ``fact_ids`` and its facts' ``source_episode_ids`` agree, a message is
stored once, and an invalidated record stays invalidated unless a pass says otherwise.
"""

from __future__ import annotations

import io
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cycgraph_memory import (
    HashingEmbeddingProvider,
    MemoryConsolidator,
    MemoryPipeline,
    Message,
)

DIM = 8  # tests/contract/conftest.py::EMBED_DIM
T0 = datetime(2025, 3, 1, 9, 0, tzinfo=UTC)
SENTENCES = [
    "Alice Smith maintains the billing service.",
    "The billing service depends on Postgres.",
    "Bob Jones works at Acme Corp.",
    "Acme Corp is based in Berlin.",
    "Carol leads the search team.",
    "The search team uses Elasticsearch.",
]


def _messages(k: int, n: int = 3) -> list[Message]:
    """Conversation ``k``: ``n`` messages with fixed ids, a day after conversation k-1."""
    return [
        Message(
            id=uuid.UUID(int=k * 100 + i + 1),
            role="user" if i % 2 == 0 else "assistant",
            content=SENTENCES[(k * n + i) % len(SENTENCES)],
            timestamp=T0 + timedelta(days=k, minutes=i),
        )
        for i in range(n)
    ]


async def _violations(store: Any) -> list[str]:
    """The hierarchy invariants that do not hold in ``store`` (empty when all hold)."""
    out: list[str] = []
    facts = {f.id: f for f in await store.find_facts(include_invalidated=True)}
    themes = await store.list_themes(include_invalidated=True)
    live_themes = {t.id: t for t in themes if t.invalidated_at is None}
    episodes = await store.list_episodes(include_invalidated=True)
    for fact in facts.values():
        if fact.invalidated_by is not None:
            continue
        listing = [t.id for t in live_themes.values() if fact.id in t.fact_ids]
        if fact.theme_id not in live_themes or listing != [fact.theme_id]:
            out.append(f"live fact {fact.id}: theme {fact.theme_id}, listed by {listing}")
    holder: dict[uuid.UUID, uuid.UUID] = {}
    for episode in episodes:
        for message in episode.messages:
            if message.id in holder:
                out.append(f"message {message.id} stored twice")
            holder[message.id] = episode.id
        for fid in episode.fact_ids:
            if fid in facts and episode.id not in facts[fid].source_episode_ids:
                out.append(f"episode {episode.id} lists fact {fid}, not one of its sources")
    ids = {e.id for e in episodes}
    for fact in facts.values():
        out.extend(
            f"fact {fact.id} cites missing episode {e}"
            for e in fact.source_episode_ids
            if e not in ids
        )
    return out


@pytest.mark.parametrize("delete_mode", ["soft", "hard"])
async def test_reingesting_pruned_messages_keeps_stored_facts_as_they_are(
    store: Any, index: Any, delete_mode: str
) -> None:
    """Messages of a pruned episode ingested again re-create neither a forgotten fact
    nor the facts' place in their themes: the stored facts gain the sources back.

    Fact ids derive from the episode id and episode ids from the message ids, so with
    ``delete_mode="hard"`` the same messages came back as the same facts and the write
    replaced the stored ones: a forgotten fact was served again.
    """
    pipeline = MemoryPipeline(store, embedder=HashingEmbeddingProvider(dimensions=DIM), index=index)
    first = await pipeline.ingest(_messages(0), run_id="a")
    await pipeline.ingest(_messages(1), run_id="b")
    gone = first.fact_ids[0]
    forgotten = await store.get_fact(gone)
    await store.put_fact(forgotten.model_copy(update={"invalidated_by": "forgotten"}))
    report = await MemoryConsolidator(
        store, index, max_episodes=1, delete_mode=delete_mode
    ).consolidate()
    assert report.episodes_pruned == 1
    before = await store.get_facts(first.fact_ids)

    await pipeline.ingest(_messages(0), run_id="c")

    after = await store.get_facts(first.fact_ids)
    assert after[gone].invalidated_by == "forgotten"
    for fid, fact in after.items():
        assert fact.theme_id == before[fid].theme_id
        assert fact.provenance == before[fid].provenance
        assert fact.embedding == before[fid].embedding
    assert await _violations(store) == []


async def test_erasing_a_message_of_a_pruned_episode_erases_what_was_derived_from_it(
    store: Any, index: Any
) -> None:
    """A hard consolidation pass deletes old episodes (their messages) but keeps their
    facts, which still cite the messages. Erasing such a message by id must erase the
    facts whose only source it is, and leave no row holding the id (docs/lifecycle.md).

    The plan counted as erased only the messages still stored, so the fact (its text
    quotes the message) survived the erasure with the erased id in its sources.
    """
    from cycgraph_memory import purge

    pipeline = MemoryPipeline(store, embedder=HashingEmbeddingProvider(dimensions=DIM), index=index)
    first = await pipeline.ingest(_messages(0), run_id="a")
    await pipeline.ingest(_messages(1), run_id="b")
    report = await MemoryConsolidator(
        store, index, max_episodes=1, delete_mode="hard"
    ).consolidate()
    assert report.episodes_pruned == 1
    said = uuid.UUID(int=1)  # the first message of conversation 0
    derived = [
        f.id
        for f in (await store.get_facts(first.fact_ids)).values()
        if f.source_message_ids == [said]
    ]
    assert derived

    erased = await purge(store, index=index, message_ids=[said])

    assert erased.facts == len(derived)
    assert await store.get_facts(derived) == {}
    facts = await store.find_facts(include_invalidated=True)
    assert all(said not in f.source_message_ids for f in facts)
    assert await _violations(store) == []
    again = await purge(store, index=index, message_ids=[said], dry_run=True)
    assert (again.facts, again.facts_updated, again.messages) == (0, 0, 0)



async def test_reingesting_pruned_messages_keeps_stored_entities_and_edges(
    store: Any, index: Any
) -> None:
    """Like facts, the entities and edges re-derived from the messages of a hard-deleted
    episode keep their stored records: an invalidated edge stays invalidated, an entity
    keeps its provenance and what it absorbed (they were replaced by fresh copies)."""
    pipeline = MemoryPipeline(store, embedder=HashingEmbeddingProvider(dimensions=DIM), index=index)
    said = ["Bob Jones works at Acme Corp.", "Bob Jones lives in Berlin."]
    conversation = [
        Message(id=uuid.UUID(int=900 + i), role="user", content=text,
                timestamp=T0 + timedelta(minutes=i))
        for i, text in enumerate(said)
    ]
    first = await pipeline.ingest(conversation, run_id="a")
    await pipeline.ingest(_messages(1), run_id="b")
    assert first.relationship_ids and first.entity_ids
    edges = await store.get_relationships(first.relationship_ids)
    await store.put_relationships(
        r.model_copy(update={"invalidated_by": "manual"}) for r in edges.values()
    )
    entities = await store.get_entities(first.entity_ids)
    await store.put_entities(
        e.model_copy(update={"attributes": {**e.attributes, "checked": True}})
        for e in entities.values()
    )
    await MemoryConsolidator(store, index, max_episodes=1, delete_mode="hard").consolidate()
    before = await store.get_entities(first.entity_ids)

    again = await pipeline.ingest(conversation, run_id="c")

    assert again.messages_ingested == len(conversation)
    assert again.entity_ids == [] and again.relationship_ids == []
    edges = await store.get_relationships(first.relationship_ids)
    assert {r.invalidated_by for r in edges.values()} == {"manual"}
    assert await store.get_entities(first.entity_ids) == before
    assert await _violations(store) == []


def test_export_stays_the_function_after_the_graph_export_module_is_imported(
    backend: str,
) -> None:
    """``from cycgraph_memory import export`` is the tenant export (README, docs).

    The package also has a submodule ``cycgraph_memory.export`` (graph export, used by the
    CLI's ``graph`` command); importing it for the first time rebound the package's
    ``export`` attribute to the module, so ``export(store, path)`` then raised
    ``TypeError: 'module' object is not callable``. Run in a fresh interpreter.
    """
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent(
        """
        import cycgraph_memory
        from cycgraph_memory.export import export_graph
        from cycgraph_memory import export
        from cycgraph_memory.lifecycle import export as lifecycle_export
        assert export is lifecycle_export, export
        assert cycgraph_memory.export is lifecycle_export, cycgraph_memory.export
        print("ok")
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"

# --------------------------------------------------------------- interleaved sequences


class _OtherEmbedder:
    """A second deterministic embedder (for ``reembed``): other vectors than hashing."""

    dimensions = DIM

    async def embed(self, texts: Any) -> list[list[float]]:
        import hashlib

        out = []
        for text in texts:
            digest = hashlib.sha256(text.encode()).digest()
            out.append([float(b % 5) - 1.5 for b in digest[:DIM]])
        return out


_OPS = st.one_of(
    st.tuples(st.just("ingest"), st.integers(0, 5), st.integers(1, 4)),
    st.tuples(st.just("resolve")),
    st.tuples(
        st.just("conflicts"),
        st.sampled_from(["supersede-on-newer", "negation-invalidates-positive"]),
    ),
    st.tuples(
        st.just("consolidate"),
        st.integers(2, 12),
        st.integers(1, 4),
        st.sampled_from(["soft", "hard"]),
    ),
    st.tuples(st.just("forget"), st.integers(0, 40)),
    st.tuples(st.just("erase"), st.integers(0, 5), st.integers(0, 3)),
    st.tuples(st.just("reembed")),
    st.tuples(st.just("search"), st.integers(0, len(SENTENCES) - 1)),
)


def _records(facts: Any, themes: Any, episodes: Any) -> tuple[Any, ...]:
    return (
        sorted((f.model_dump(mode="json") for f in facts), key=lambda d: d["id"]),
        sorted((t.model_dump(mode="json") for t in themes), key=lambda d: d["id"]),
        sorted((e.model_dump(mode="json") for e in episodes), key=lambda d: d["id"]),
    )


async def _dump(store: Any) -> tuple[Any, ...]:
    return _records(
        await store.find_facts(include_invalidated=True),
        await store.list_themes(include_invalidated=True),
        await store.list_episodes(include_invalidated=True),
    )


@pytest.fixture
def fresh_tenant(backend: str, request: pytest.FixtureRequest) -> Any:
    """Make a new empty (store, index) pair of the backend: one tenant per example."""
    from cycgraph_memory import InMemoryMemoryIndex, InMemoryMemoryStore

    if backend == "memory":
        return lambda: (
            InMemoryMemoryStore(expected_dimensions=DIM),
            InMemoryMemoryIndex(expected_dimensions=DIM),
        )
    make = request.getfixturevalue("pg_make_store")

    def parts() -> tuple[Any, Any]:
        tenant = f"audit5k-{uuid.uuid4().hex[:12]}"
        return make(tenant), make(tenant, index=True)

    return parts


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(ops=st.lists(_OPS, min_size=1, max_size=7))
async def test_interleaved_operations_keep_the_hierarchy(
    fresh_tenant: Any, ops: list[tuple[Any, ...]]
) -> None:
    """Ingests, passes, forgets, erasures, re-embedding and retrieval in any order: the
    invariants hold after every step, and an export imports into a fresh tenant as the
    same records."""
    from cycgraph_memory import (
        ConflictDetector,
        EntityResolver,
        InMemoryMemoryStore,
        export,
        import_,
        purge,
        reembed,
        retrieve_memory,
    )

    store, index = fresh_tenant()
    embedder = HashingEmbeddingProvider(dimensions=DIM)
    pipeline = MemoryPipeline(store, embedder=embedder, index=index)
    forgotten: set[uuid.UUID] = set()
    for step, op in enumerate(ops):
        kind = op[0]
        if kind == "ingest":
            await pipeline.ingest(_messages(op[1], op[2]), run_id=f"run-{step}")
        elif kind == "resolve":
            await EntityResolver(store).resolve()
        elif kind == "conflicts":
            detector = ConflictDetector(store, index)
            await detector.auto_resolve_all(await detector.detect_conflicts(), op[1])
        elif kind == "consolidate":
            await MemoryConsolidator(
                store, index, max_facts=op[1], max_episodes=op[2], delete_mode=op[3]
            ).consolidate()
        elif kind == "forget":
            live = await store.find_facts()
            if live:
                fact = live[op[1] % len(live)]
                await store.put_fact(fact.model_copy(update={"invalidated_by": "forgotten"}))
                forgotten.add(fact.id)
        elif kind == "erase":
            said = uuid.UUID(int=op[1] * 100 + op[2] + 1)
            await purge(store, index=index, message_ids=[said])
            facts = await store.find_facts(include_invalidated=True)
            assert all(said not in f.source_message_ids for f in facts), ops[: step + 1]
        elif kind == "reembed":
            await reembed(store, _OtherEmbedder(), index=index)
        else:
            await retrieve_memory(
                store, index, {"text": SENTENCES[op[1]]}, embedder=embedder
            )
        assert await _violations(store) == [], ops[: step + 1]
        kept = await store.get_facts(forgotten)  # deleted, or still invalidated
        assert all(f.invalidated_by is not None for f in kept.values()), ops[: step + 1]
    exported = io.StringIO()
    await export(store, exported)
    exported.seek(0)
    fresh = InMemoryMemoryStore(expected_dimensions=DIM)
    await import_(fresh, exported)
    assert await _dump(fresh) == await _dump(store)

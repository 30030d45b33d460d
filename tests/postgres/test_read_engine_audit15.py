"""``read_engine=`` against a replica that is really stale (fifteenth audit pass).

The "replica" is a second database on the server, migrated like the primary and filled
by hand with an older copy of the tenant (same ids, older content, records missing), so
every read shows which engine served it: outside a unit of work the store and the index
read the replica, inside one the primary; and the paths that write from what they read
(re-embedding, an import's final check, the ingest's look-up of stored messages) read the
primary.

Bugs these tests found (each failed before its fix):

* ``reembed`` read the records to re-embed from the read engine: a fact not yet
  replicated kept its old vector, and a fact whose content had changed got the vector of
  its old content, written to the primary;
* ``import_(..., atomic=False)`` checked that the themes its facts cite exist by reading
  the read engine right after committing them on the primary: a valid export failed with
  ``DanglingReferenceError`` until the replica caught up;
* ``MemoryPipeline.ingest`` looked up which messages were already stored on the read
  engine: a message erased on the primary but still on the lagging replica was skipped
  as stored, and re-ingesting it wrote nothing;
* ``memory_stats`` counted the records on the primary and listed the themes on the read
  engine: one report mixed two states of the tenant (and sent its heaviest statement to
  the primary).
"""

from __future__ import annotations

import io
import secrets
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio

from cycgraph_memory import (
    Entity,
    Episode,
    HashingEmbeddingProvider,
    MemoryPipeline,
    Message,
    Provenance,
    SemanticFact,
    Theme,
    export,
    import_,
    memory_stats,
    reembed,
    retrieve_memory,
    utc_now,
)
from cycgraph_memory.errors import ConnectionLostError
from cycgraph_memory.retry import NO_RETRY

from .test_read_engine import Recorder

pytestmark = pytest.mark.postgres

DIM = 8
PROV = Provenance(source="agent")
NOW = utc_now()


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def two_dsns(pg_databases: Any) -> tuple[str, str]:
    from cycgraph_memory.postgres import upgrade

    primary = str(await pg_databases.create("a15_primary"))
    replica = str(await pg_databases.create("a15_replica"))
    await upgrade(primary, embedding_dim=DIM)
    await upgrade(replica, embedding_dim=DIM)
    return primary, replica


class World:
    """A tenant on the primary, its stale copy on the replica, and objects reading both."""

    def __init__(self, primary: Any, replica: Any, tenant: str) -> None:
        from cycgraph_memory.postgres import PostgresMemoryIndex, PostgresMemoryStore

        self.primary, self.replica = Recorder(primary), Recorder(replica)
        self.store = PostgresMemoryStore(primary, tenant_id=tenant, read_engine=replica)
        self.index = PostgresMemoryIndex(primary, tenant_id=tenant, read_engine=replica)
        # Writers of each side (no read engine): how the test lays out the two states.
        self.on_primary = PostgresMemoryStore(primary, tenant_id=tenant)
        self.on_replica = PostgresMemoryStore(replica, tenant_id=tenant)


@pytest_asyncio.fixture(loop_scope="session")
async def world(two_dsns: tuple[str, str]) -> AsyncIterator[World]:
    from cycgraph_memory.postgres import create_engine_from_dsn

    primary = create_engine_from_dsn(two_dsns[0], pool_size=2)
    replica = create_engine_from_dsn(two_dsns[1], pool_size=2)
    w = World(primary, replica, f"a15_{secrets.token_hex(4)}")
    try:
        yield w
    finally:
        await w.on_primary.clear()
        await w.on_replica.clear()
        await primary.dispose()
        await replica.dispose()


def fact(content: str, **kw: Any) -> SemanticFact:
    return SemanticFact(content=content, provenance=PROV, **kw)


async def embed(text: str) -> list[float]:
    [vector] = await HashingEmbeddingProvider(dimensions=DIM).embed([text])
    return vector


async def test_every_read_outside_a_unit_of_work_is_the_replicas_inside_the_primarys(
    world: World,
) -> None:
    store, index = world.store, world.index
    entity = Entity(name="Ada", entity_type="person", provenance=PROV, embedding=await embed("Ada"))
    theme = Theme(label="t", embedding=await embed("x"), provenance=PROV)
    episode = Episode(
        topic="t",
        messages=[Message(role="user", content="hi")],
        provenance=PROV,
        embedding=await embed("x"),
        started_at=NOW,
        ended_at=NOW,
    )
    vector = await embed("Ada writes")
    old = fact(
        "Ada writes poems",
        entity_ids=[entity.id],
        tags=["lesson"],
        embedding=vector,
        source_episode_ids=[episode.id],
    )
    new = old.model_copy(update={"content": "Ada writes compilers"})
    for side in (world.on_replica, world.on_primary):
        await side.put_entities([entity])
        await side.put_themes([theme])
        await side.put_episodes([episode])
    await world.on_replica.put_facts([old])
    await world.on_primary.put_facts([new])
    world.primary.take()
    world.replica.take()

    reads = {
        "get_fact": lambda: store.get_fact(old.id),
        "get_facts": lambda: store.get_facts([old.id]),
        "find_facts": lambda: store.find_facts(tags=["lesson"]),
        "get_facts_for_entities": lambda: store.get_facts_for_entities([entity.id]),
        "search_facts": lambda: index.search_facts(vector, limit=1),
    }

    def content(found: Any) -> str:
        if isinstance(found, dict):
            [found] = found.values()
        if isinstance(found, list):
            [found] = found
        found = getattr(found, "item", found)
        return str(found.content)

    for name, call in reads.items():
        assert content(await call()) == "Ada writes poems", name
        assert world.primary.take() == [], name
        assert world.replica.take(), name
        async with store.transaction():
            assert content(await call()) == "Ada writes compilers", name
        assert world.replica.take() == [], name
        assert world.primary.take(), name
    # The other reads of the contracts: served by the replica alone.
    others = [
        store.get_entity(entity.id),
        store.get_entities([entity.id]),
        store.find_entities(),
        store.get_episode(episode.id),
        store.get_episodes([episode.id]),
        store.list_episodes(),
        store.get_messages([episode.messages[0].id]),
        store.get_theme(theme.id),
        store.get_themes([theme.id]),
        store.list_themes(),
        store.get_relationships_for_entities([entity.id]),
        store.get_relationships_for_entity(entity.id),
        index.search_entities(entity.embedding, limit=1),
        index.search_themes(theme.embedding, limit=1),
        index.search_episodes(episode.embedding, limit=1),
    ]
    for call in others:
        await call
    assert world.primary.take() == []
    served = world.replica.take()
    # What a hot standby runs: queries, and the planner probe of statements.settings.
    read_only = ("SELECT", "WITH", "PREPARE", "EXPLAIN", "EXECUTE", "DEALLOCATE")
    assert [s for s in served if s.split()[0].upper() not in read_only] == []
    assert not any(" FOR UPDATE" in s for s in served)
    # retrieve_memory: the replica's fact is served; only the touch goes to the primary.
    result = await retrieve_memory(store, index, {"tags": ["lesson"]})
    assert [f.content for f in result.facts] == ["Ada writes poems"]
    assert all("set_config" in s or s.startswith("UPDATE facts") for s in world.primary.take())


async def test_bug_reembed_reads_the_records_it_rewrites_on_the_primary(world: World) -> None:
    stale = fact("Ada writes poems", embedding=await embed("zzz"))
    changed = stale.model_copy(update={"content": "Ada writes compilers"})
    unreplicated = fact("Grace debugs moths", embedding=await embed("zzz"))
    await world.on_replica.put_facts([stale])
    await world.on_primary.put_facts([changed, unreplicated])
    world.replica.take()

    report = await reembed(
        world.store,
        HashingEmbeddingProvider(dimensions=DIM),
        record_types=["fact"],
        index=world.index,
    )
    assert report.counts["fact"] == 2
    assert world.replica.take() == [], "re-embedding read the replica"
    found = await world.on_primary.get_facts([changed.id, unreplicated.id])
    assert found[changed.id].embedding == pytest.approx(await embed("Ada writes compilers"))
    assert found[unreplicated.id].embedding == pytest.approx(await embed("Grace debugs moths"))


async def test_bug_a_non_atomic_import_checks_its_themes_on_the_primary(world: World) -> None:
    theme = Theme(label="ops", embedding=await embed("ops"), provenance=PROV)
    cited = fact("Ops owns the pager", theme_id=theme.id, embedding=await embed("ops"))
    await world.on_primary.put_themes([theme])
    await world.on_primary.put_facts([cited])
    buffer = io.StringIO()
    await export(world.on_primary, buffer)
    await world.on_primary.clear()  # the replica never had them either

    buffer.seek(0)
    report = await import_(world.store, buffer, atomic=False)
    assert report.counts["theme"] == 1 and report.counts["fact"] == 1
    imported = await world.on_primary.get_fact(cited.id)
    assert imported is not None and imported.theme_id == theme.id


async def test_bug_ingest_looks_up_stored_messages_on_the_primary(world: World) -> None:
    # Erased on the primary since, still on the lagging replica.
    message = Message(role="user", content="Lin Wu owns the build farm.")
    await world.on_replica.put_episodes(
        [Episode(topic="t", messages=[message], provenance=PROV, started_at=NOW, ended_at=NOW)]
    )
    world.replica.take()
    pipeline = MemoryPipeline(
        world.store, index=world.index, embedder=HashingEmbeddingProvider(dimensions=DIM)
    )
    report = await pipeline.ingest([message])
    assert report.messages_ingested == 1 and report.messages_skipped == 0
    assert set(await world.on_primary.get_messages([message.id])) == {message.id}
    assert world.replica.take() == []


async def test_bug_stats_read_one_side_the_replica(world: World) -> None:
    theme = Theme(label="ops", embedding=await embed("ops"), provenance=PROV)
    await world.on_replica.put_themes([theme])
    await world.on_replica.put_facts([fact("one", theme_id=theme.id)])
    await world.on_primary.put_themes([theme])
    await world.on_primary.put_facts([fact("one", theme_id=theme.id), fact("two"), fact("three")])
    world.primary.take()
    stats = await memory_stats(world.store)
    assert stats.records["fact"].live == 1  # the replica's state, like its theme list
    assert stats.records["theme"].live == 1
    assert world.primary.take() == []


async def test_a_replica_that_is_down_fails_reads_with_a_typed_error(
    world: World, two_dsns: tuple[str, str]
) -> None:
    from cycgraph_memory.postgres import (
        PostgresMemoryIndex,
        PostgresMemoryStore,
        create_engine_from_dsn,
    )

    down = create_engine_from_dsn(
        "postgresql://app:s3cret-pw@/memory?host=/nonexistent/cycgraph-a15"
    )
    tenant = world.on_primary.tenant_id
    store = PostgresMemoryStore(
        world.primary.engine, tenant_id=tenant, read_engine=down, retry=NO_RETRY
    )
    index = PostgresMemoryIndex(world.primary.engine, tenant_id=tenant, read_engine=down)
    kept = fact("kept", tags=["lesson"])
    try:
        await store.put_fact(kept)  # writes: the primary
        for call in (
            lambda: store.get_fact(kept.id),
            lambda: retrieve_memory(store, index, {"tags": ["lesson"]}),
        ):
            with pytest.raises(ConnectionLostError) as caught:
                await call()
            assert "s3cret-pw" not in str(caught.value)
        async with store.transaction():  # units of work never touch the read engine
            assert (await store.get_fact(kept.id)) == kept
    finally:
        await down.dispose()


async def test_detect_conflicts_reads_the_primary_only_when_it_resolves(world: World) -> None:
    from cycgraph_memory import ConflictDetector

    await world.on_replica.put_facts([fact("Ada writes poems")])
    world.replica.take()
    await ConflictDetector(world.store).detect_conflicts()
    assert world.replica.take(), "a read-only detection reads the replica (documented)"
    world.primary.take()
    await ConflictDetector(world.store, auto_resolve_supersession=True).detect_conflicts()
    assert world.replica.take() == [], "what it resolves is read on the primary"


async def test_the_passes_that_write_read_nothing_from_the_replica(world: World) -> None:
    from cycgraph_memory import (
        EntityResolver,
        Memory,
        MemoryConsolidator,
        evaluate_retention,
        purge,
    )
    from cycgraph_memory.postgres import PostgresOutcomeLedger

    # The replica holds a stale copy that would change every decision if it were read.
    await world.on_replica.put_facts(
        [fact("Ada writes poems", tags=["lesson", "candidate"]) for _ in range(3)]
    )
    ledger = PostgresOutcomeLedger(world.primary.engine, tenant_id=world.store.tenant_id)
    memory = Memory(
        world.store,
        world.index,
        embedder=HashingEmbeddingProvider(dimensions=DIM),
        ledger=ledger,
        tenant=world.store.tenant_id,
    )
    world.replica.take()
    report = await memory.add([{"role": "user", "content": "Lin Wu owns the build farm."}])
    assert report.fact_ids
    fid = await memory.remember("Pin the compiler version", idempotency_key="k1")
    await EntityResolver(world.store, index=world.index).resolve()
    await MemoryConsolidator(world.store, world.index).consolidate()
    await evaluate_retention(world.store, ledger)
    assert await memory.remember("Pin the compiler version", idempotency_key="k1") == fid
    await memory.forget([fid])
    await purge(world.store, index=world.index, ledger=ledger, run_id="nobody", dry_run=True)
    await memory.erase(run_id="nobody")
    assert world.replica.take() == []
    await ledger.clear()

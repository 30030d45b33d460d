"""Different operations racing on one tenant: "service processes" on real commits.

Fifteenth audit. The other concurrency modules race one operation against itself
(``test_concurrent_ingest``, ``test_writer_concurrency``) or a write against a delete of a
cited row (``test_fact_references_concurrency``). Here two "processes" (separate store
objects; one case on two engines from the same DSN) run DIFFERENT public operations at
once on one tenant; where the interleaving has to be forced, a store subclass pauses one
operation inside its open transaction (``_Paused``) until the other has started or
finished. After both, the documented invariants are checked (``_check_consistent``): no
fact citing a missing entity, episode or theme, every live fact in exactly one live theme
that lists it, themes listing only stored facts, relationships between stored entities,
provenance on every record, and the index finding every live fact by its own vector.

Real commits (not the rolled-back test connection): each case has its own tenant, cleared
at the end.
"""

from __future__ import annotations

import asyncio
import io
import json
import uuid
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

import numpy as np
import pytest

from cycgraph_memory import QUARANTINE_TAG, InMemoryMemoryStore, Message, RunOutcome
from cycgraph_memory.consolidation import ConflictDetector, EntityResolver, MemoryConsolidator
from cycgraph_memory.embeddings.hashing import HashingEmbeddingProvider
from cycgraph_memory.hierarchy.pipeline import MemoryPipeline
from cycgraph_memory.lifecycle import export, import_, purge, reembed
from cycgraph_memory.records import SemanticFact
from cycgraph_memory.retention import evaluate_retention
from cycgraph_memory.retrieval import retrieve_memory
from cycgraph_memory.retry import NO_RETRY

from ._records import DIM, T0, entity, fact, prov

pytestmark = [pytest.mark.postgres]

NS = uuid.UUID("0d15ea5e-0000-4000-8000-000000000015")
TIMEOUT = 30


def _tenant() -> str:
    return f"race15-{uuid.uuid4().hex[:10]}"


def _paused_store_class() -> type:
    from cycgraph_memory.postgres import PostgresMemoryStore

    class _Paused(PostgresMemoryStore):  # type: ignore[misc]
        """A store that stops in ``method`` (before running it) until ``go`` is set.

        ``reached`` is set when the pause starts: the caller's transaction is open then,
        with everything written before the paused call, and its locks held.
        """

        def __init__(self, *args: Any, pause_in: str, after: int = 0, **kw: Any) -> None:
            self._pause_in = pause_in
            self._calls = 0
            self._after = after
            self.reached = asyncio.Event()
            self.go = asyncio.Event()
            super().__init__(*args, **kw)

        def __getattribute__(self, name: str) -> Any:
            attr = super().__getattribute__(name)
            if name != object.__getattribute__(self, "_pause_in") or not callable(attr):
                return attr

            async def paused(*args: Any, **kw: Any) -> Any:
                self._calls += 1
                if self._calls > self._after and not self.go.is_set():
                    self.reached.set()
                    await self.go.wait()
                return await attr(*args, **kw)

            return paused

    return _Paused


def _paused(engine: Any, tenant: str, method: str, *, after: int = 0) -> Any:
    return _paused_store_class()(engine, tenant_id=tenant, pause_in=method, after=after)


async def _second_started(
    paused: Any, other: Callable[[], Awaitable[Any]], *, settle: float = 0.3
) -> Any:
    """Wait for ``paused`` to reach its pause, start ``other``, let it run, release."""
    try:
        await paused.reached.wait()
        task = asyncio.ensure_future(other())
        await asyncio.sleep(settle)  # ``other`` runs as far as it can meanwhile
    finally:
        paused.go.set()  # never leave the paused operation holding its locks
    return await task


def _messages(key: str, texts: list[str]) -> list[Message]:
    return [
        Message(
            id=uuid.uuid5(NS, f"{key}:{i}"),
            role="user",
            content=t,
            timestamp=T0 + timedelta(minutes=i),
        )
        for i, t in enumerate(texts)
    ]


def _pipeline(store: Any, embedder: Any | None = None) -> MemoryPipeline:
    return MemoryPipeline(
        store, embedder=embedder or HashingEmbeddingProvider(dimensions=DIM), retry=NO_RETRY
    )


def _acme_world(*, older_touched: int = 0) -> tuple[Any, Any, SemanticFact, SemanticFact]:
    """Two near-identical entities (a duplicate to merge) and two conflicting facts citing
    the duplicate (the older one, touched ``older_touched`` times, to be superseded)."""
    acme = entity(name="Acme Corp", embedding=[1.0] + [0.0] * (DIM - 1))
    dupe = entity(
        name="ACME corp",
        embedding=[1.0] + [0.0] * (DIM - 1),
        created_at=T0 + timedelta(days=1),
        updated_at=T0 + timedelta(days=1),
    )
    vec = [0.0, 1.0] + [0.0] * (DIM - 2)
    older = fact(
        content="Acme's HQ is in Boston.",
        embedding=vec,
        entity_ids=[dupe.id],
        access_count=older_touched,
    )
    newer = fact(
        content="Acme's HQ is not in Boston.",
        embedding=vec,
        entity_ids=[dupe.id],
        valid_from=T0 + timedelta(days=2),
    )
    return acme, dupe, older, newer


async def _check_consistent(store: Any, index: Any | None = None) -> dict[str, Any]:
    """The invariants every operation promises to leave behind (whatever interleaved)."""
    facts = await store.find_facts(include_invalidated=True)
    entities = {e.id: e for e in await store.find_entities(include_invalidated=True)}
    episodes = {e.id: e for e in await store.list_episodes(include_invalidated=True)}
    themes = {t.id: t for t in await store.list_themes(include_invalidated=True)}
    rels = await store.find_relationships_for_entities(list(entities), include_invalidated=True)
    fact_ids = {f.id for f in facts}
    for f in facts:
        assert f.provenance is not None and f.provenance.source, f.id
        assert set(f.entity_ids) <= set(entities), f"fact {f.id} cites a missing entity"
        assert set(f.source_episode_ids) <= set(episodes), f"fact {f.id}: missing episode"
        assert f.theme_id is None or f.theme_id in themes, f"fact {f.id}: missing theme"
    for t in themes.values():
        assert set(t.fact_ids) <= fact_ids, f"theme {t.id} lists a missing fact"
    for r in rels:
        assert r.source_id in entities and r.target_id in entities, f"edge {r.id} dangles"
    for record in [*entities.values(), *episodes.values(), *themes.values(), *rels]:
        assert record.provenance is not None and record.provenance.source
    live_themes = {t.id: t for t in themes.values() if t.invalidated_at is None}
    for f in facts:
        if f.invalidated_by is not None or "quarantined" in f.tags or f.theme_id is None:
            continue
        assert f.theme_id in live_themes, f"live fact {f.id} in a dead theme"
        claims = [t.id for t in live_themes.values() if f.id in t.fact_ids]
        assert claims == [f.theme_id], f"live fact {f.id} claimed by {claims}"
    if index is not None:
        for f in facts:
            if f.invalidated_by is not None or f.embedding is None:
                continue
            hits = await index.search_facts(f.embedding, limit=50, min_similarity=0.999)
            assert f.id in {h.item.id for h in hits}, f"live fact {f.id} not findable"
    return {"facts": facts, "entities": entities, "episodes": episodes, "themes": themes}


# ----------------------------------------------------------------- 1. erasure vs ingest


ALICE = ["Alice works at Acme Corp.", "Alice lives in Paris."]


@pytest.mark.parametrize("first", ["ingest", "purge"])
async def test_erasure_of_an_entity_vs_an_ingest_mentioning_it_two_engines(
    pg_engine: Any, pg_dsn: str, first: str
) -> None:
    """Purge of "Alice" and an ingest about Alice, on two engines, either one paused.

    Whichever commits first, the end state is one of the two documented ones: the ingest
    committed first, so the purge erased its Alice facts too; or the purge committed
    first, so the ingest created a live Alice again and its facts cite her. Never a fact
    citing an erased entity, never erased text served by retrieval or export.
    """
    from cycgraph_memory.postgres import (
        PostgresMemoryIndex,
        PostgresMemoryStore,
        create_engine_from_dsn,
    )

    tenant = _tenant()
    other_engine = create_engine_from_dsn(pg_dsn, pool_size=2)
    store = PostgresMemoryStore(pg_engine, tenant_id=tenant)
    try:
        await _pipeline(store).ingest(_messages("seed", ALICE))
        [alice] = [e for e in await store.find_entities() if e.name == "Alice"]
        seeded = {f.id for f in await store.find_facts(entity_id=alice.id)}
        assert seeded
        later = _messages("later", ["Alice moved to Berlin.", "Bob works at Initech."])
        if first == "ingest":
            writer = _paused(pg_engine, tenant, "put_facts")
            eraser = PostgresMemoryStore(other_engine, tenant_id=tenant)
            ingest = asyncio.ensure_future(_pipeline(writer).ingest(later))
            report = await asyncio.wait_for(
                _second_started(writer, lambda: purge(eraser, entity_ids=[alice.id])),
                TIMEOUT,
            )
            await ingest
            # The purge waited for the ingest (THEMES_LOCK) and saw its facts.
            assert report.counts()["facts"] >= len(seeded) + 1
        else:
            eraser = _paused(other_engine, tenant, "apply_purge")
            writer = PostgresMemoryStore(pg_engine, tenant_id=tenant)
            erasing = asyncio.ensure_future(purge(eraser, entity_ids=[alice.id]))
            await asyncio.wait_for(
                _second_started(eraser, lambda: _pipeline(writer).ingest(later)), TIMEOUT
            )
            await erasing
        state = await _check_consistent(store, PostgresMemoryIndex(pg_engine, tenant_id=tenant))
        assert alice.id not in state["entities"]
        assert not seeded & {f.id for f in state["facts"]}
        live_alices = [e for e in state["entities"].values() if e.name == "Alice"]
        berlin = [f for f in state["facts"] if "Berlin" in f.content]
        if first == "ingest":  # erased with everything citing her, the new facts too
            assert live_alices == [] and berlin == []
        else:  # the ingest came after the erasure: a new Alice, cited by its fact
            assert len(live_alices) == 1 and berlin
            assert all(live_alices[0].id in f.entity_ids for f in berlin)
        out = io.StringIO()
        await export(store, out)
        exported = [json.loads(line) for line in out.getvalue().splitlines()]
        fact_texts = [r["record"]["content"] for r in exported if r.get("type") == "fact"]
        assert fact_texts and not [t for t in fact_texts if "Paris" in t or "Acme" in t]
        served = await retrieve_memory(
            store,
            PostgresMemoryIndex(pg_engine, tenant_id=tenant),
            {"text": "Where does Alice live? Acme Paris"},
            embedder=HashingEmbeddingProvider(dimensions=DIM),
        )
        assert not [f for f in served.facts if "Paris" in f.content or "Acme" in f.content]
    finally:
        await store.clear()
        await other_engine.dispose()


# ----------------------------------------------------------------- 5. consolidation vs touch


async def test_consolidation_dedup_does_not_lose_a_concurrent_retrieval_touch(
    pg_engine: Any,
) -> None:
    """A touch committed while consolidation merges the touched duplicates is kept.

    The consolidator re-reads the duplicates it merges and writes the keeper with their
    access counts summed; a ``touch_facts`` committed between that read and the write was
    overwritten (the keeper came out with the counts as read: a lost update). The re-read
    now locks the rows (``get_facts_for_update``): the touch waits for the pass and then
    increments the keeper it wrote.
    """
    from cycgraph_memory.postgres import PostgresMemoryStore

    tenant = _tenant()
    seed = PostgresMemoryStore(pg_engine, tenant_id=tenant)
    vec = [1.0] + [0.0] * (DIM - 1)
    a = fact(
        content="Deploys run on Fridays.",
        embedding=vec,
        access_count=3,
        valid_from=T0 + timedelta(days=1),
    )
    b = fact(content="Deploys run on Fridays!", embedding=vec, access_count=2)
    try:
        await seed.put_facts([a, b])
        worker = _paused(pg_engine, tenant, "put_facts")
        reader = PostgresMemoryStore(pg_engine, tenant_id=tenant)
        consolidator = MemoryConsolidator(worker, None, dedup_threshold=0.95)
        passing = asyncio.ensure_future(consolidator.consolidate())
        await asyncio.wait_for(
            _second_started(worker, lambda: reader.touch_facts([a.id, b.id])), TIMEOUT
        )
        report = await passing
        assert report.facts_deduped == 1
        got = await seed.get_facts([a.id, b.id])
        keeper, loser = got[a.id], got[b.id]  # a is the newer: the keeper
        assert keeper.invalidated_by is None and loser.invalidated_by == str(a.id)
        # 3 + 2 absorbed, + 1 for the touch of the keeper (the loser's own count goes on).
        assert keeper.access_count == 6
        assert loser.access_count == 3  # touched, not resurrected
    finally:
        await seed.clear()


async def test_consolidation_decay_vs_touch_keeps_the_count_and_the_soft_delete(
    pg_engine: Any,
) -> None:
    """A decayed fact touched while the pass writes it keeps the touch and stays deleted."""
    from cycgraph_memory.postgres import PostgresMemoryStore

    tenant = _tenant()
    seed = PostgresMemoryStore(pg_engine, tenant_id=tenant)
    old = [
        fact(
            content=f"old fact {i}",
            embedding=[0.0] * i + [1.0] + [0.0] * (DIM - 1 - i),
            access_count=i,
        )
        for i in range(3)
    ]
    try:
        await seed.put_facts(old)
        worker = _paused(pg_engine, tenant, "put_facts")
        reader = PostgresMemoryStore(pg_engine, tenant_id=tenant)
        consolidator = MemoryConsolidator(worker, None, max_facts=1, dedup_threshold=1.0)
        passing = asyncio.ensure_future(consolidator.consolidate())
        await asyncio.wait_for(
            _second_started(worker, lambda: reader.touch_facts([f.id for f in old])),
            TIMEOUT,
        )
        report = await passing
        assert report.facts_decayed == 2
        got = await seed.get_facts([f.id for f in old])
        assert [got[f.id].access_count for f in old] == [1, 2, 3]
        assert sum(got[f.id].invalidated_by is not None for f in old) == 2
    finally:
        await seed.clear()


# ----------------------------------------------------------------- 2. reembed vs ingest


async def test_reembed_with_a_new_model_vs_an_ingest_with_it(pg_engine: Any) -> None:
    """A model change re-embeds the tenant while an ingest (new model) commits mid-walk.

    After both, no record carries a vector of the old model, and every live fact is
    found by its own vector.
    """
    from cycgraph_memory.postgres import PostgresMemoryIndex, PostgresMemoryStore

    tenant = _tenant()
    store = PostgresMemoryStore(pg_engine, tenant_id=tenant)
    old_model = HashingEmbeddingProvider(dimensions=DIM, seed=0)
    new_model = HashingEmbeddingProvider(dimensions=DIM, seed=7)
    try:
        for k in range(3):
            await _pipeline(store, old_model).ingest(
                _messages(f"old{k}", [f"Team {k} ships on Mondays.", f"Carol {k} owns billing."])
            )
        walker = _paused(pg_engine, tenant, "write_embeddings", after=1)
        writer = PostgresMemoryStore(pg_engine, tenant_id=tenant)
        walking = asyncio.ensure_future(reembed(walker, new_model, batch_size=2))
        await asyncio.wait_for(
            _second_started(
                walker,
                lambda: _pipeline(writer, new_model).ingest(
                    _messages("new", ["Dave joined the platform team.", "Erin runs QA."])
                ),
            ),
            TIMEOUT,
        )
        await walking
        await _check_consistent(store, PostgresMemoryIndex(pg_engine, tenant_id=tenant))
        facts = await store.find_facts(include_invalidated=True)
        [*want] = await new_model.embed([f.content for f in facts])
        for f, v in zip(facts, want, strict=True):
            assert f.embedding is not None
            assert np.allclose(f.embedding, v, atol=1e-5), f"fact {f.content!r}: old vector"
        entities = await store.find_entities(include_invalidated=True)
        for e, v in zip(entities, await new_model.embed([e.name for e in entities]), strict=True):
            assert e.embedding is not None and np.allclose(e.embedding, v, atol=1e-5), e.name
    finally:
        await store.clear()


# ----------------------------------------------------------------- 3. import vs consolidation


async def test_import_into_a_tenant_vs_a_consolidation_pass_on_it(pg_engine: Any) -> None:
    """An atomic import and a dedup/decay pass on the same tenant, the import paused.

    The pass either ran before the import committed (it left the imported records alone)
    or after: in both, themes and facts agree and nothing dangles.
    """
    from cycgraph_memory.postgres import PostgresMemoryIndex, PostgresMemoryStore

    source_tenant, tenant = _tenant(), _tenant()
    source = PostgresMemoryStore(pg_engine, tenant_id=source_tenant)
    store = PostgresMemoryStore(pg_engine, tenant_id=tenant)
    try:
        await _pipeline(source).ingest(
            _messages("src", ["Frank works at Globex.", "Frank works at Globex!", "Grace skis."])
        )
        dump = io.StringIO()
        await export(source, dump)
        await _pipeline(store).ingest(
            _messages("own", ["Heidi works at Umbrella.", "Heidi works at Umbrella!"])
        )
        loader = _paused(pg_engine, tenant, "write_batch", after=2)
        worker = PostgresMemoryStore(pg_engine, tenant_id=tenant)
        dump.seek(0)
        loading = asyncio.ensure_future(import_(loader, dump))
        report = await asyncio.wait_for(
            _second_started(
                loader, lambda: MemoryConsolidator(worker, None, dedup_threshold=0.9).consolidate()
            ),
            TIMEOUT,
        )
        imported = await loading
        assert imported.counts["fact"] == len(await source.find_facts(include_invalidated=True))
        stored = {f.id for f in await store.find_facts(include_invalidated=True)}
        assert {f.id for f in await source.find_facts(include_invalidated=True)} <= stored
        # The pass queued behind the import (``facts`` lock) and saw its records: a
        # second pass finds nothing left to merge.
        again = await MemoryConsolidator(worker, None, dedup_threshold=0.9).consolidate()
        assert again.facts_deduped == 0 and report.facts_deduped >= 1
        await _check_consistent(store, PostgresMemoryIndex(pg_engine, tenant_id=tenant))
    finally:
        await store.clear()
        await source.clear()


# ----------------------------------------------------------------- 6. two passes at once


async def test_entity_resolution_vs_conflict_resolution_serialise(pg_engine: Any) -> None:
    """Entity resolution and conflict resolution at once: both apply, nothing undone.

    Both hold the ``facts`` lock, so the second waits for the first and plans on its
    result: the duplicate entity is merged (its facts cite the keeper) and the older of
    the two conflicting facts is superseded, whichever ran first.
    """
    from cycgraph_memory.postgres import PostgresMemoryIndex, PostgresMemoryStore

    tenant = _tenant()
    store = PostgresMemoryStore(pg_engine, tenant_id=tenant)
    acme, dupe, older, newer = _acme_world()
    try:
        await store.put_entities([acme, dupe])
        await store.put_facts([older, newer])
        resolving = _paused(pg_engine, tenant, "put_facts")
        other = PostgresMemoryStore(pg_engine, tenant_id=tenant)
        index = PostgresMemoryIndex(pg_engine, tenant_id=tenant)
        detector = ConflictDetector(other, index, policy="supersede-on-newer")

        async def resolve_conflicts() -> Any:
            return await detector.auto_resolve_all(await detector.detect_conflicts())

        resolved = asyncio.ensure_future(EntityResolver(resolving).resolve())
        conflicts = await asyncio.wait_for(_second_started(resolving, resolve_conflicts), TIMEOUT)
        assert (await resolved).entities_absorbed == 1
        assert conflicts.resolved == 1
        got = await store.get_facts([older.id, newer.id])
        survivors = [f for f in got.values() if f.invalidated_by is None]
        keeper = next(e for e in await store.find_entities() if e.invalidated_at is None)
        assert all(f.entity_ids == [keeper.id] for f in got.values())
        assert [f.id for f in survivors] == [newer.id]
        assert got[older.id].invalidated_by == str(newer.id)
        await _check_consistent(store, index)
    finally:
        await store.clear()


# ----------------------------------------------------------------- 7. write-once vs purge


async def test_put_facts_once_vs_purge_of_its_run(pg_engine: Any) -> None:
    """``put_facts_once`` under a key while the run it belongs to is purged.

    Either the write committed first and the purge erased it with its key (a retry of
    the key then writes again: the key is free), or the purge ran first and the write
    stands. Never a key recording a fact that no longer exists.
    """
    from cycgraph_memory.postgres import PostgresMemoryStore

    tenant = _tenant()
    store = PostgresMemoryStore(pg_engine, tenant_id=tenant)
    run = "run-15"
    first = fact(content="Lesson: pin the base image.", provenance=prov(run_id=run))
    second = fact(content="Lesson: cache the wheels.", provenance=prov(run_id=run))
    try:
        await store.put_facts([first])
        eraser = _paused(pg_engine, tenant, "apply_purge")
        writer = PostgresMemoryStore(pg_engine, tenant_id=tenant)
        erasing = asyncio.ensure_future(purge(eraser, run_id=run))
        ids, wrote = await asyncio.wait_for(
            _second_started(eraser, lambda: writer.put_facts_once("k-15", [second])),
            TIMEOUT,
        )
        await erasing
        assert wrote and ids == [second.id]
        recorded = await store.writer_key_ids("k-15")
        stored = await store.get_facts([first.id, second.id])
        assert first.id not in stored
        if second.id in stored:
            assert recorded == [second.id]
        else:
            assert recorded is None
            again, wrote_again = await writer.put_facts_once("k-15", [second])
            assert wrote_again and again == [second.id]
    finally:
        await store.clear()


async def test_import_of_a_newer_theme_vs_consolidation_rewriting_it(pg_engine: Any) -> None:
    """An import bringing a new fact into a stored theme, while consolidation cleans it.

    Consolidation read the theme ``[f1, f2]`` and writes it back without the duplicate it
    merged; an import committed in between the theme as ``[f1, f2, f3]`` with ``f3``.
    Before the fix the import did not hold the themes lock: consolidation's write dropped
    ``f3`` from its theme (``f3.theme_id`` named a theme that did not list it). The atomic
    import now holds ``facts`` and ``themes``: it waits for the pass and lands after it.
    """
    from cycgraph_memory.postgres import PostgresMemoryIndex, PostgresMemoryStore
    from cycgraph_memory.records import Theme

    tenant = _tenant()
    store = PostgresMemoryStore(pg_engine, tenant_id=tenant)
    vec = [1.0] + [0.0] * (DIM - 1)
    theme_id = uuid.uuid4()
    f1 = fact(
        content="Builds use Bazel.",
        embedding=vec,
        theme_id=theme_id,
        valid_from=T0 + timedelta(days=1),
    )
    f2 = fact(content="Builds use Bazel!", embedding=vec, theme_id=theme_id)
    f3 = fact(
        content="Releases are tagged.", embedding=[0.0, 1.0] + [0.0] * (DIM - 2), theme_id=theme_id
    )
    x = Theme(
        id=theme_id, label="builds", provenance=prov(), embedding=vec, fact_ids=[f1.id, f2.id]
    )
    try:
        await store.put_themes([x])
        await store.put_facts([f1, f2])
        # The dump: theme X a moment later (it also lists f3) and f3 (f1, f2 are stored).
        newer = InMemoryMemoryStore()
        await newer.put_themes([x.model_copy(update={"fact_ids": [f1.id, f2.id, f3.id]})])
        await newer.put_facts([f1, f2, f3])
        full = io.StringIO()
        await export(newer, full)
        lines = [json.loads(line) for line in full.getvalue().splitlines()]
        kept = [
            line
            for line in lines
            if line.get("type") != "fact" or line["record"]["id"] == str(f3.id)
        ]
        kept[-1]["counts"]["fact"] = 1
        dump = io.StringIO("".join(json.dumps(line) + "\n" for line in kept))
        worker = _paused(pg_engine, tenant, "put_facts")
        loader = PostgresMemoryStore(pg_engine, tenant_id=tenant)
        passing = asyncio.ensure_future(
            MemoryConsolidator(worker, None, dedup_threshold=0.95).consolidate()
        )
        imported = await asyncio.wait_for(
            _second_started(worker, lambda: import_(loader, dump)), TIMEOUT
        )
        assert (await passing).facts_deduped == 1
        assert imported.counts["fact"] == 1
        state = await _check_consistent(store, PostgresMemoryIndex(pg_engine, tenant_id=tenant))
        got = state["themes"][theme_id]
        assert f3.id in got.fact_ids
    finally:
        await store.clear()


# ----------------------------------------------------------------- 4. gate vs erasure / quarantine


async def _gate_setup(engine: Any, tenant: str) -> tuple[Any, SemanticFact]:
    """A candidate lesson (of run ``lesson-run``) whose outcomes promote it."""
    from cycgraph_memory.postgres import PostgresMemoryStore, PostgresOutcomeLedger

    store = PostgresMemoryStore(engine, tenant_id=tenant)
    ledger = PostgresOutcomeLedger(engine, tenant_id=tenant)
    lesson = fact(
        content="Lesson: retry the flaky upload once.",
        tags=["lesson", "candidate"],
        provenance=prov(run_id="lesson-run"),
    )
    await store.put_facts([lesson])
    for i, score in enumerate([0.9, 0.92, 0.88]):
        await ledger.record_outcome(
            RunOutcome(run_id=f"with-{i}", score=score, fact_ids=[lesson.id])
        )
    for i, score in enumerate([0.45, 0.5, 0.55, 0.5, 0.48, 0.52]):
        await ledger.record_outcome(RunOutcome(run_id=f"base-{i}", score=score))
    return ledger, lesson


async def test_gate_pass_vs_quarantine_tagging_of_its_candidate(pg_engine: Any) -> None:
    """A candidate quarantined while the gate pass decides on it is held, never promoted."""
    from cycgraph_memory.postgres import PostgresMemoryStore

    tenant = _tenant()
    store = PostgresMemoryStore(pg_engine, tenant_id=tenant)
    try:
        ledger, lesson = await _gate_setup(pg_engine, tenant)
        gate = _paused(pg_engine, tenant, "get_facts_for_update")
        tagger = PostgresMemoryStore(pg_engine, tenant_id=tenant)
        quarantined = lesson.model_copy(update={"tags": [*lesson.tags, QUARANTINE_TAG]})
        passing = asyncio.ensure_future(evaluate_retention(gate, ledger))
        await asyncio.wait_for(
            _second_started(gate, lambda: tagger.put_facts([quarantined])), TIMEOUT
        )
        report = await passing
        assert report.promoted == []
        assert [h.fact_id for h in report.held] == [lesson.id]
        got = await store.get_fact(lesson.id)
        assert got is not None and QUARANTINE_TAG in got.tags and "candidate" in got.tags
    finally:
        await store.clear()
        await ledger.clear()


@pytest.mark.parametrize("first", ["gate", "purge"])
async def test_gate_pass_vs_erasure_of_its_candidate(pg_engine: Any, first: str) -> None:
    """The gate and a purge of the lesson's run: serialised on the ``facts`` lock.

    Gate first: it promotes, then the purge erases the promoted lesson and redacts the
    audit row naming it. Purge first: the gate finds no candidate. Either way the lesson
    is gone and no audit row names it.
    """
    from cycgraph_memory.postgres import PostgresMemoryStore

    tenant = _tenant()
    store = PostgresMemoryStore(pg_engine, tenant_id=tenant)
    try:
        ledger, lesson = await _gate_setup(pg_engine, tenant)
        if first == "gate":
            gate = _paused(pg_engine, tenant, "put_facts")
            eraser = PostgresMemoryStore(pg_engine, tenant_id=tenant)
            passing = asyncio.ensure_future(evaluate_retention(gate, ledger))
            erased = await asyncio.wait_for(
                _second_started(gate, lambda: purge(eraser, run_id="lesson-run", ledger=ledger)),
                TIMEOUT,
            )
            report = await passing
            assert [p.fact_id for p in report.promoted] == [lesson.id]
        else:
            eraser = _paused(pg_engine, tenant, "apply_purge")
            gate = PostgresMemoryStore(pg_engine, tenant_id=tenant)
            erasing = asyncio.ensure_future(purge(eraser, run_id="lesson-run", ledger=ledger))
            report = await asyncio.wait_for(
                _second_started(eraser, lambda: evaluate_retention(gate, ledger)), TIMEOUT
            )
            erased = await erasing
            assert report.promoted == [] and report.held == [] and report.evicted == []
        assert erased.counts()["facts"] == 1
        assert await store.get_fact(lesson.id) is None
        audit = await ledger.list_gate_audit()
        assert all(e.fact_id != lesson.id for e in audit)
        assert await ledger.get_fact_stats(lesson.id) is None
    finally:
        await store.clear()
        await ledger.clear()


# ----------------------------------------------------------------- 2b. width change vs ingest


async def test_width_change_swap_vs_an_ingest_during_the_fill(
    pg_databases: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An ingest committing while ``finish_width_change`` fills the new column.

    Step 1 (every row has a staged vector) passed before the ingest wrote its rows; the
    swap then dropped their only vector: the ingested facts came out with no embedding,
    found by no vector search. The swap now checks again under the tables' locks and
    refuses (``InvalidInputError``, nothing swapped, old HNSW indexes back); a second
    ``reembed(target="next")`` and ``finish_width_change`` complete the change.
    """
    from cycgraph_memory.errors import InvalidInputError
    from cycgraph_memory.postgres import (
        PostgresMemoryIndex,
        PostgresMemoryStore,
        begin_width_change,
        create_engine_from_dsn,
        finish_width_change,
        reembedding,
        upgrade,
    )

    dsn = await pg_databases.create("cycgraph_race_width")
    engine = create_engine_from_dsn(dsn, pool_size=3)
    tenant = _tenant()
    new = HashingEmbeddingProvider(dimensions=16, seed=3)
    try:
        await upgrade(engine, embedding_dim=DIM)
        store = PostgresMemoryStore(engine, tenant_id=tenant)
        await _pipeline(store).ingest(_messages("before", ["Ivan owns the CDN.", "Judy runs SRE."]))
        await begin_width_change(engine, 16)
        await reembed(store, new, target="next")
        fill = reembedding._fill_and_build
        late = _messages("during", ["Mallory audits access.", "Niaj ships the mobile app."])

        async def fill_while_ingesting(*args: Any, **kw: Any) -> None:
            if late:  # once: a service process ingests (old width) during the fill
                batch = list(late)
                late.clear()
                await _pipeline(PostgresMemoryStore(engine, tenant_id=tenant)).ingest(batch)
            await fill(*args, **kw)

        monkeypatch.setattr(reembedding, "_fill_and_build", fill_while_ingesting)
        with pytest.raises(InvalidInputError, match="written during the width change"):
            await finish_width_change(engine, [tenant])
        index = PostgresMemoryIndex(engine, tenant_id=tenant)
        [mallory] = [f for f in await store.find_facts() if "Mallory" in f.content]
        assert mallory.embedding is not None  # the old width still serves it
        assert (await index.search_facts(mallory.embedding))[0].item.id == mallory.id
        await reembed(store, new, target="next")
        assert await finish_width_change(engine, [tenant]) == 16
        store = PostgresMemoryStore(engine, tenant_id=tenant)
        index = PostgresMemoryIndex(engine, tenant_id=tenant)
        facts = await store.find_facts()
        assert mallory.id in {f.id for f in facts}
        for f in facts:
            assert f.embedding is not None and len(f.embedding) == 16, f.content
            [v] = await new.embed([f.content])
            assert np.allclose(f.embedding, v, atol=1e-5)
        await _check_consistent(store, index)
    finally:
        await engine.dispose()


async def test_width_change_swap_failing_otherwise_rebuilds_the_old_indexes(
    pg_databases: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A swap that fails for another reason than the re-check (here: a deadlock with a
    writer's table lock) leaves the old HNSW indexes rebuilt, as a refused swap does.

    The fill drops the old column's HNSW index; only ``InvalidInputError`` used to rebuild
    it, so a deadlock or a lost connection at the swap left vector search on an exact scan
    until someone rebuilt the index by hand.
    """
    from sqlalchemy import text

    from cycgraph_memory.errors import ConcurrencyError
    from cycgraph_memory.postgres import (
        PostgresMemoryStore,
        begin_width_change,
        create_engine_from_dsn,
        finish_width_change,
        reembedding,
        upgrade,
    )

    dsn = await pg_databases.create("cycgraph_race_width_fail")
    engine = create_engine_from_dsn(dsn, pool_size=3)
    tenant = _tenant()
    new = HashingEmbeddingProvider(dimensions=16, seed=3)

    async def hnsw_indexes() -> set[str]:
        async with engine.connect() as conn:
            rows = await conn.execute(
                text("SELECT indexname FROM pg_indexes WHERE indexdef LIKE '%USING hnsw%'")
            )
            return {r[0] for r in rows}

    try:
        await upgrade(engine, embedding_dim=DIM)
        store = PostgresMemoryStore(engine, tenant_id=tenant)
        await _pipeline(store).ingest(_messages("before", ["Ivan owns the CDN.", "Judy runs SRE."]))
        before = await hnsw_indexes()
        await begin_width_change(engine, 16)
        await reembed(store, new, target="next")
        swap = reembedding._swap

        async def deadlocked(*args: Any, **kw: Any) -> None:
            raise ConcurrencyError("deadlock detected (40P01)")

        monkeypatch.setattr(reembedding, "_swap", deadlocked)
        with pytest.raises(ConcurrencyError):
            await finish_width_change(engine, [tenant])
        old = {name for name in before if name.endswith("_embedding_hnsw")}
        assert old and old <= await hnsw_indexes()
        monkeypatch.setattr(reembedding, "_swap", swap)
        assert await finish_width_change(engine, [tenant]) == 16
        assert old <= await hnsw_indexes()
    finally:
        await engine.dispose()


@pytest.mark.parametrize("operation", ["entity-resolution", "conflict-resolution", "forget"])
async def test_fact_rewriting_passes_vs_touch_keep_the_touch(
    pg_engine: Any, operation: str
) -> None:
    """Each pass that writes back whole facts, paused at its write while a touch runs.

    Before the fix entity and conflict resolution and ``Memory.forget`` wrote the facts
    back as they had read them: the touch committed meanwhile was lost. They re-read the
    rows locked (after the themes lock): the touch waits and is applied after.
    """
    from cycgraph_memory import Memory
    from cycgraph_memory.postgres import PostgresMemoryIndex, PostgresMemoryStore

    tenant = _tenant()
    store = PostgresMemoryStore(pg_engine, tenant_id=tenant)
    acme, dupe, older, newer = _acme_world(older_touched=2)
    try:
        await store.put_entities([acme, dupe])
        await store.put_facts([older, newer])
        worker = _paused(pg_engine, tenant, "put_facts")
        index = PostgresMemoryIndex(pg_engine, tenant_id=tenant)
        reader = PostgresMemoryStore(pg_engine, tenant_id=tenant)

        async def run() -> Any:
            if operation == "entity-resolution":
                return await EntityResolver(worker).resolve()
            if operation == "conflict-resolution":
                detector = ConflictDetector(worker, index, policy="supersede-on-newer")
                return await detector.auto_resolve_all(await detector.detect_conflicts())
            memory = Memory(worker, index, embedder=HashingEmbeddingProvider(dimensions=DIM))
            return await memory.forget([older.id])

        passing = asyncio.ensure_future(run())
        await asyncio.wait_for(
            _second_started(worker, lambda: reader.touch_facts([older.id])), TIMEOUT
        )
        await passing
        got = await store.get_fact(older.id)
        assert got is not None
        assert got.access_count == 3  # 2 + the touch
        if operation == "entity-resolution":
            assert got.entity_ids == [acme.id] and got.invalidated_by is None
        else:
            assert got.invalidated_by is not None  # stays superseded / forgotten
        await _check_consistent(store, index)
    finally:
        await store.clear()


async def test_purge_rewriting_a_surviving_fact_keeps_a_concurrent_touch(pg_engine: Any) -> None:
    """A purge of one of a fact's two source messages, while the fact is touched.

    The fact survives (one source left) and is written back without the erased source.
    Before the fix the purge wrote it as listed by its candidate read, undoing a touch
    committed since (2 instead of 3). The purge now takes the fact's counters from the
    row as locked just before its write.
    """
    from cycgraph_memory.postgres import PostgresMemoryIndex, PostgresMemoryStore

    from ._records import episode

    tenant = _tenant()
    store = PostgresMemoryStore(pg_engine, tenant_id=tenant)
    ep = episode()
    m1, m2 = ep.messages
    kept = fact(
        content="hi and hello were said",
        source_episode_ids=[ep.id],
        source_message_ids=[m1.id, m2.id],
        access_count=2,
    )
    try:
        await store.put_episodes([ep])
        await store.put_facts([kept])
        eraser = _paused(pg_engine, tenant, "apply_purge")
        reader = PostgresMemoryStore(pg_engine, tenant_id=tenant)
        erasing = asyncio.ensure_future(purge(eraser, message_ids=[m1.id]))
        await asyncio.wait_for(
            _second_started(eraser, lambda: reader.touch_facts([kept.id])), TIMEOUT
        )
        report = await erasing
        assert report.counts()["messages"] == 1
        got = await store.get_fact(kept.id)
        assert got is not None and got.source_message_ids == [m2.id]
        assert got.access_count == 3
        await _check_consistent(store, PostgresMemoryIndex(pg_engine, tenant_id=tenant))
    finally:
        await store.clear()


# ----------------------------------------------------- lock order: a pass and a touch queue


async def test_a_pass_locks_its_facts_in_id_order_so_a_touch_never_deadlocks_it(
    pg_engine: Any,
) -> None:
    """``get_facts_for_update`` locks rows in id order, the order the touch locks them in.

    A touch holds the lower fact A; a pass asks for ``[B, A]`` and waits for A before
    it has locked B (locked in the order asked, or the scan's, it would hold B). The touch
    then touches B too: B is free, so it goes on and commits, and the pass reads both
    touched rows. Holding B, the pass and the touch would each wait for the other: a
    deadlock the server breaks by failing one of them.
    """
    from cycgraph_memory.postgres import PostgresMemoryStore

    tenant = _tenant()
    seed = PostgresMemoryStore(pg_engine, tenant_id=tenant)
    a, b = sorted((fact(content="fact one"), fact(content="fact two")), key=lambda f: f.id)
    try:
        # B stored first: a scan meets it before A, so only the id order keeps it unlocked.
        await seed.put_facts([b])
        await seed.put_facts([a])
        toucher = PostgresMemoryStore(pg_engine, tenant_id=tenant, retry=NO_RETRY)
        passer = PostgresMemoryStore(pg_engine, tenant_id=tenant, retry=NO_RETRY)
        holding, release = asyncio.Event(), asyncio.Event()

        async def touch_a_then_b() -> None:
            async with toucher.transaction():
                await toucher.touch_facts([a.id])
                holding.set()
                await release.wait()
                await toucher.touch_facts([b.id])

        async def pass_reads_b_then_a() -> dict[uuid.UUID, SemanticFact]:
            await holding.wait()
            async with passer.transaction():
                return dict(await passer.get_facts_for_update([b.id, a.id]))

        touching = asyncio.ensure_future(touch_a_then_b())
        passing = asyncio.ensure_future(pass_reads_b_then_a())
        try:
            await asyncio.wait_for(holding.wait(), TIMEOUT)
            free = await _free_while_the_pass_waits(pg_engine, tenant, b.id)
        finally:
            # Whatever the check found, both transactions end (a failed check must not
            # leave the touch holding rows the cleanup would wait for).
            release.set()
            done = await asyncio.wait({touching, passing}, timeout=TIMEOUT)
        assert len(free) == 1, "the pass locked B while it waited for A"
        assert not done[1], "a transaction never ended"
        await touching
        read = await passing
        assert [read[a.id].access_count, read[b.id].access_count] == [
            a.access_count + 1,
            b.access_count + 1,
        ]
    finally:
        await seed.clear()


async def _free_while_the_pass_waits(engine: Any, tenant: str, fid: uuid.UUID) -> list[Any]:
    """Wait until a session waits for a row lock; then ``fid``'s row if nobody locks it."""
    from sqlalchemy import text

    async with engine.connect() as probe:
        for _ in range(200):
            waiting = (
                await probe.execute(
                    text(
                        "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = "
                        "'Lock' AND datname = current_database() AND pid <> pg_backend_pid()"
                    )
                )
            ).scalar_one()
            if waiting:
                break
            await asyncio.sleep(0.01)
        assert waiting, "the pass never waited for the touch's row"
        free = (
            await probe.execute(
                text(
                    "SELECT id FROM facts WHERE tenant_id = :t AND id = :b FOR UPDATE SKIP LOCKED"
                ),
                {"t": tenant, "b": fid},
            )
        ).all()
        await probe.rollback()
    return list(free)

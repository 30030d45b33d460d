"""Tenant isolation across every public operation, on one shared Postgres database.

Sixteenth audit pass. ``test_tenant_isolation`` covers the store's getters, listings,
search, touch, upsert, delete and ``clear`` with the same ids in two tenants, and
``test_row_level_security`` the database's own wall. Here the operations a user runs:
two tenants of one database are populated the same way (a conversation ingested by
``MemoryPipeline``, entities, relationships and facts, some with the SAME ids in both,
tagged ``candidate`` / ``verified`` / ``quarantined``, themes, ledger outcomes, a gate
audit entry, the theme calibration, access counts). Tenant B is populated once per module
and snapshotted completely: every row of every table holding ``tenant_id`` (as JSON text,
so access counts, tenant settings, text-search statistics and ledger rows are included),
its export lines, its ledger statistics, baseline, audit log and erasure log. Each test
then runs one operation on a freshly populated tenant A and checks that

* B's snapshot is unchanged byte for byte, and
* nothing of B appears in what the operation returned (no id only B holds, no B text).

Tenant ids that are malformed are refused with ``InvalidTenantError`` by every entry point
taking one, changing nothing. The in-memory backends have no tenant notion (one object per
tenant), so there is no in-memory counterpart; the width change is per database
(``begin_width_change`` / ``finish_width_change`` rewrite every tenant's schema), so it is
not run here (its ``tenants`` argument is checked for malformed ids).
"""

from __future__ import annotations

import asyncio
import io
import json
import re
import secrets
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest
import pytest_asyncio
from sqlalchemy import text

from cycgraph_memory import (
    ConflictDetector,
    EntityResolver,
    HashingEmbeddingProvider,
    InMemoryMemoryIndex,
    InMemoryMemoryStore,
    InvalidInputError,
    InvalidTenantError,
    Memory,
    MemoryConsolidator,
    MemoryPipeline,
    export,
    import_,
    memory_stats,
    purge,
    reembed,
)
from cycgraph_memory.hierarchy.calibration import (
    THEME_CALIBRATION_KEY,
    refit_theme_calibration,
)
from cycgraph_memory.lifecycle.export import export_lines
from cycgraph_memory.records import (
    Conflict,
    Entity,
    GateAuditEntry,
    Message,
    Provenance,
    Relationship,
    RunOutcome,
    SemanticFact,
    Theme,
)
from cycgraph_memory.retention.gate import evaluate_retention
from cycgraph_memory.retrieval.lessons import retrieve_gated_lessons
from cycgraph_memory.retrieval.retrieve import retrieve_memory

from ._records import DIM, T0, ts, unit

pytestmark = [pytest.mark.postgres]

LABELS = {"a": "alphaword", "b": "betaword"}
BAD_TENANTS: list[Any] = ["", " ", "a b", "x" * 65, "t;drop", "tenant'", "ä", "a\x00", None, 7]
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
# Ids both tenants hold (the same record ids in two tenants).
SHARED = {k: uuid.uuid5(uuid.NAMESPACE_URL, f"cycgraph-audit16-tenants/{k}") for k in (
    "alice", "alice2", "billing", "rel", "theme", "cand", "ver", "quar", "pos", "neg",
    "dup1", "dup2", "m1", "m2", "m3", "m4")}


def _conversation() -> list[Message]:
    lines = [
        ("user", "Bob Jones maintains the billing service in Paris."),
        ("assistant", "Noted: Bob Jones maintains the billing service."),
        ("user", "Carol Smith prefers green tea in the morning."),
        ("assistant", "Carol Smith likes green tea."),
    ]
    return [
        Message(id=SHARED[f"m{i + 1}"], role=role, content=content, timestamp=ts(60 * i))
        for i, (role, content) in enumerate(lines)
    ]


def _prov() -> Provenance:
    return Provenance(source="agent", created_at=T0)


def _embedder() -> HashingEmbeddingProvider:
    return HashingEmbeddingProvider(dimensions=DIM)


@dataclass
class Tenant:
    """A populated tenant: its name, backend objects and the ids it holds."""

    name: str
    label: str
    store: Any
    index: Any
    ledger: Any


async def _populate(engine: Any, name: str, label: str) -> Tenant:
    from cycgraph_memory.postgres import (
        PostgresMemoryIndex,
        PostgresMemoryStore,
        PostgresOutcomeLedger,
    )

    store = PostgresMemoryStore(engine, tenant_id=name)
    index = PostgresMemoryIndex(engine, tenant_id=name)
    ledger = PostgresOutcomeLedger(engine, tenant_id=name)
    pipeline = MemoryPipeline(store, embedder=_embedder(), index=index)
    await pipeline.ingest(_conversation(), tags=["convo"], run_id="populate")
    s = SHARED
    alice = Entity(id=s["alice"], name="Alice Quux", entity_type="person", provenance=_prov(),
                   created_at=T0, updated_at=T0, embedding=unit(0))
    alice2 = Entity(id=s["alice2"], name="alice quux", entity_type="person",
                    provenance=_prov(), created_at=ts(1), updated_at=ts(1), embedding=unit(0))
    billing = Entity(id=s["billing"], name=f"{label} billing", entity_type="service",
                     provenance=_prov(), created_at=T0, updated_at=T0, embedding=unit(1))
    await store.put_entities([alice, alice2, billing])
    await store.put_relationship(Relationship(
        id=s["rel"], source_id=alice.id, target_id=billing.id, relation_type="owns",
        provenance=_prov(), valid_from=T0))
    await store.put_theme(Theme(id=s["theme"], label=f"{label} lessons", provenance=_prov(),
                                embedding=unit(3)))

    def fact(key: str, content: str, vec: int, tags: list[str], **kw: Any) -> SemanticFact:
        return SemanticFact(id=s[key], content=f"{label} {content}", provenance=_prov(),
                            valid_from=kw.pop("valid_from", T0), embedding=unit(vec),
                            tags=tags, **kw)

    await store.put_facts([
        fact("cand", "lesson: retry the billing call once", 2, ["lesson", "candidate"],
             theme_id=s["theme"]),
        fact("ver", "lesson: check the invoice total", 2, ["lesson", "verified"],
             theme_id=s["theme"]),
        fact("quar", "lesson: delete the database", 2, ["lesson", "quarantined"]),
        fact("pos", "the billing service is up", 4, ["status"], entity_ids=[billing.id]),
        fact("neg", "the billing service is not up", 4, ["status"], entity_ids=[billing.id],
             valid_from=ts(3 * 86400)),
        fact("dup1", "Alice Quux lives in Paris", 5, ["people"], entity_ids=[alice.id]),
        fact("dup2", "Alice Quux lives in Paris", 5, ["people"], entity_ids=[alice2.id]),
    ])
    await store.touch_facts([s["ver"], s["dup1"]], at=ts(100))
    for i, score in enumerate((0.2, 0.4, 0.9, 0.8, 0.3, 0.85)):
        ids = [s["cand"]] if i % 2 else [s["cand"], s["ver"]]
        await ledger.record_outcome(RunOutcome(run_id=f"run-{i}", score=score, fact_ids=ids))
    await ledger.append_gate_audit([GateAuditEntry(
        pass_id=uuid.uuid5(uuid.NAMESPACE_URL, "audit16-pass"), fact_id=s["cand"],
        verdict="held", reason="populate", trials=6)])
    await refit_theme_calibration(store)
    # A lesson under an idempotency key both tenants use (writer_keys rows).
    await Memory(store, index, embedder=_embedder()).remember(
        f"{label} memo: page the on-call", tags=["memo"], candidate=False,
        idempotency_key="audit16:shared-key")
    return Tenant(name, label, store, index, ledger)


async def _tenant_tables(engine: Any) -> list[str]:
    async with engine.connect() as conn:
        rows = await conn.execute(text(
            "SELECT table_name FROM information_schema.columns WHERE column_name = 'tenant_id'"
            " AND table_schema = current_schema() ORDER BY 1"))
        return [r[0] for r in rows]


async def _rows(engine: Any, tenant: str) -> dict[str, list[str]]:
    """Every row of ``tenant`` in every table with ``tenant_id``, as sorted JSON texts."""
    out: dict[str, list[str]] = {}
    async with engine.connect() as conn:
        for table in await _tenant_tables(engine):
            rows = await conn.execute(text(
                f"SELECT to_jsonb(t)::text FROM {table} t WHERE tenant_id = :t ORDER BY 1"),
                {"t": tenant})
            out[table] = list(rows.scalars())
    return out


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 12)


def _round_baseline(b: Any) -> tuple[int, float | None, float | None]:
    return (b.runs, _round(b.mean_score), _round(b.variance))


async def _snapshot(engine: Any, t: Tenant) -> dict[str, Any]:
    return {
        "rows": await _rows(engine, t.name),
        "export": [line async for line in export_lines(t.store)],
        # Aggregates the server computes in whatever row order it reads: equal to 12
        # decimals, not bit for bit (the rows they come from are compared exactly above).
        "fact_stats": sorted(
            (str(s.fact_id), s.trials, _round(s.mean_score), _round(s.variance))
            for s in await t.ledger.list_fact_stats()
        ),
        "baseline": _round_baseline(await t.ledger.get_baseline()),
        "audit": [e.model_dump_json() for e in await t.ledger.list_gate_audit()],
        "erasures": [e.model_dump_json() for e in await t.ledger.list_erasures()],
        "setting": await t.store.get_tenant_setting(THEME_CALIBRATION_KEY),
        "access": sorted((str(f.id), f.access_count) for f in await t.store.find_facts()),
    }


def _uuids(rows: dict[str, list[str]]) -> set[str]:
    return {m for lines in rows.values() for line in lines for m in _UUID.findall(line)}


class World:
    """B (populated once, snapshotted) and the ids only B holds."""

    def __init__(self, engine: Any, b: Tenant, snap: dict[str, Any], same: set[str]) -> None:
        self.engine = engine
        self.b = b
        self.snap = snap
        self.b_uuids = _uuids(snap["rows"])
        # Ids every tenant populated the same way holds (fixed ones, ids derived from the
        # message ids) are not B's own: the rest are.
        self.b_only = self.b_uuids - same

    async def check(self, a: Tenant, *results: Any) -> None:
        """B unchanged byte for byte; nothing only B holds in ``results`` or in A's rows."""
        assert await _snapshot(self.engine, self.b) == self.snap
        a_rows = await _rows(self.engine, a.name)
        b_only = self.b_only
        for result in (*results, a_rows):
            blob = _text(result)
            assert LABELS["b"] not in blob, blob[:2000]
            leaked = set(_UUID.findall(blob)) & b_only
            assert not leaked, leaked


def _text(obj: Any) -> str:
    if hasattr(obj, "model_dump_json"):
        return str(obj.model_dump_json())
    if isinstance(obj, (list, tuple, set)):
        return "[" + ",".join(_text(o) for o in obj) + "]"
    if isinstance(obj, dict):
        return "{" + ",".join(f"{_text(k)}:{_text(v)}" for k, v in obj.items()) + "}"
    return str(obj)


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def world(pg_engine: Any) -> AsyncIterator[World]:
    b = await _populate(pg_engine, f"iso16-b-{secrets.token_hex(4)}", LABELS["b"])
    snap = await _snapshot(pg_engine, b)
    ref = await _populate(pg_engine, f"iso16-r-{secrets.token_hex(4)}", LABELS["a"])
    same = _uuids(await _rows(pg_engine, ref.name))
    await ref.store.clear()
    await ref.ledger.clear()
    yield World(pg_engine, b, snap, same)
    await b.store.clear()
    await b.ledger.clear()


@pytest_asyncio.fixture(loop_scope="session")
async def a(world: World) -> AsyncIterator[Tenant]:
    tenant = await _populate(world.engine, f"iso16-a-{secrets.token_hex(4)}", LABELS["a"])
    yield tenant
    await tenant.store.clear()
    await tenant.ledger.clear()


# ----------------------------------------------------------------------------- ingest, read


async def test_ingest_same_message_ids_in_a_new_tenant(world: World) -> None:
    from cycgraph_memory.postgres import PostgresMemoryIndex, PostgresMemoryStore

    name = f"iso16-c-{secrets.token_hex(4)}"
    store = PostgresMemoryStore(world.engine, tenant_id=name)
    pipeline = MemoryPipeline(store, embedder=_embedder(),
                              index=PostgresMemoryIndex(world.engine, tenant_id=name))
    # B holds these message ids: a new tenant still stores every one of them.
    report = await pipeline.ingest(_conversation(), tags=["convo"])
    episodes = await store.list_episodes()
    assert sum(len(e.messages) for e in episodes) == 4
    assert report.messages_ingested == 4 and report.messages_skipped == 0
    again = await pipeline.ingest(_conversation())  # skipped in its own tenant only
    assert sum(len(e.messages) for e in await store.list_episodes()) == 4
    assert again.messages_ingested == 0 and again.messages_skipped == 4
    t = Tenant(name, LABELS["a"], store, None, None)
    await world.check(t, report, again, episodes)
    await store.clear()


async def test_ingest_into_a(world: World, a: Tenant) -> None:
    pipeline = MemoryPipeline(a.store, embedder=_embedder(), index=a.index)
    report = await pipeline.ingest(
        [{"role": "user", "content": "Dana Lee owns the billing service now."}],
        tags=["candidate"])
    await world.check(a, report)


@pytest.mark.parametrize("mode", ["vector", "text", "hybrid", None])
async def test_retrieve_memory_modes(world: World, a: Tenant, mode: str | None) -> None:
    queries: list[dict[str, Any]] = [
        {"text": "billing service", "limit": 50, "min_similarity": 0.0},
        {"text": "Alice Quux Paris", "tags": ["people"], "min_similarity": 0.0},
        {"text": "lesson", "include_invalidated": True, "min_similarity": 0.0},
    ]
    results = []
    for q in queries:
        results.append(await retrieve_memory(a.store, a.index, q, embedder=_embedder(),
                                             mode=mode))  # type: ignore[arg-type]
    results.append(await retrieve_memory(
        a.store, a.index, {"entity_ids": [SHARED["alice"], SHARED["billing"]], "max_hops": 3}))
    assert any(r.facts for r in results)
    await world.check(a, results)


async def test_retrieve_gated_lessons(world: World, a: Tenant) -> None:
    lessons = await retrieve_gated_lessons(a.store, tags=["lesson"], ledger=a.ledger,
                                           rest_after_trials=2)
    plain = await retrieve_gated_lessons(a.store, {"tags": ["lesson"]})
    assert {f.id for f in plain} == {SHARED["cand"], SHARED["ver"]}
    assert all(LABELS["a"] in f.content for f in lessons + plain)
    await world.check(a, lessons, plain)


async def test_touch_facts_shared_and_foreign_ids(world: World, a: Tenant) -> None:
    b_only = [uuid.UUID(u) for u in world.b_only]
    touched = await a.store.touch_facts([SHARED["cand"], SHARED["pos"], *b_only], at=ts(500))
    assert (await a.store.get_fact(SHARED["cand"])).access_count == 1
    await world.check(a, touched)


# ----------------------------------------------------------------------------- maintenance


@pytest.mark.parametrize("delete_mode", ["soft", "hard"])
async def test_consolidation(world: World, a: Tenant, delete_mode: str) -> None:
    consolidator = MemoryConsolidator(a.store, a.index, max_facts=3, max_episodes=1,
                                      dedup_threshold=0.9, delete_mode=delete_mode)  # type: ignore[arg-type]
    plan = await consolidator.plan()
    report = await consolidator.consolidate()
    assert report.model_dump() != {}
    auto = await consolidator.auto_consolidate({"max_facts": 1})
    await world.check(a, plan, report, auto)


@pytest.mark.parametrize("delete_mode", ["soft", "hard"])
async def test_entity_resolver(world: World, a: Tenant, delete_mode: str) -> None:
    resolver = EntityResolver(a.store, delete_mode=delete_mode, index=a.index)  # type: ignore[arg-type]
    plan = await resolver.plan()
    report = await resolver.resolve()
    assert len(report.model_dump_json()) > 0
    assert len([e for e in await a.store.find_entities() if e.name.lower() == "alice quux"
                and e.invalidated_at is None]) == 1
    await world.check(a, plan, report)


async def test_conflicts_detect_and_resolve(world: World, a: Tenant) -> None:
    detector = ConflictDetector(a.store, a.index, policy="supersede-on-newer")
    conflicts = await detector.detect_conflicts()
    assert any({c.fact_a.id, c.fact_b.id} == {SHARED["pos"], SHARED["neg"]}
               for c in conflicts)
    report = await detector.auto_resolve_all(conflicts)
    await world.check(a, conflicts, report)


async def test_resolve_conflict_by_hand_including_b_facts(world: World, a: Tenant) -> None:
    detector = ConflictDetector(a.store, a.index)
    conflicts = await detector.detect_conflicts()
    own = [c for c in conflicts if {c.fact_a.id, c.fact_b.id} == {SHARED["pos"], SHARED["neg"]}]
    detail = await detector.resolve_conflict(own[0], "keep_a")
    # A Conflict carrying B's facts (as read from B): resolving it on A's detector writes
    # A's rows of those ids at most, never B's.
    b_pos = await world.b.store.get_fact(SHARED["pos"])
    b_neg = await world.b.store.get_fact(SHARED["neg"])
    foreign = Conflict(fact_a=b_pos, fact_b=b_neg, type=own[0].type,
                       confidence=own[0].confidence)
    await ConflictDetector(a.store, a.index).resolve_conflict(foreign, "keep_b")
    assert (await world.b.store.get_fact(SHARED["pos"])).invalidated_by is None
    # (its detail names B's fact contents: the caller passed them; only the rows count)
    await world.check(a, detail)


async def test_retention_gate(world: World, a: Tenant) -> None:
    report = await evaluate_retention(a.store, a.ledger, {"min_trials": 2})
    audit = await a.ledger.list_gate_audit()
    assert {e.fact_id for e in audit} <= {SHARED["cand"]}
    assert len(audit) >= 1
    await world.check(a, report, audit)


# ----------------------------------------------------------------------------- lifecycle


async def test_purge_by_selector(world: World, a: Tenant) -> None:
    dry = await purge(a.store, entity_ids=[SHARED["alice"]], index=a.index, ledger=a.ledger,
                      dry_run=True)
    report = await purge(a.store, entity_ids=[SHARED["alice"]], message_ids=[SHARED["m1"]],
                         index=a.index, ledger=a.ledger)
    assert await a.store.get_entity(SHARED["alice"]) is None
    b_only = [uuid.UUID(u) for u in world.b_only]
    b_only_entities = [e.id for e in await world.b.store.find_entities()
                       if str(e.id) in {str(u) for u in b_only}]
    foreign = await purge(a.store, entity_ids=b_only_entities or [uuid.uuid4()],
                          index=a.index, ledger=a.ledger)
    erasures = await a.ledger.list_erasures()
    await world.check(a, dry, report, foreign, erasures)


async def test_purge_whole_tenant(world: World, a: Tenant) -> None:
    report = await purge(a.store, tenant=True, index=a.index, ledger=a.ledger)
    assert await a.store.find_facts() == []
    rows = await _rows(world.engine, a.name)
    held = {t: len(r) for t, r in rows.items() if r}
    assert set(held) <= {"erasure_log", "gate_audit_log", "ledger_erased_facts",
                         "tenant_settings", "text_search_corpora"}, held
    await world.check(a, report, await a.ledger.list_erasures())


async def test_reembed(world: World, a: Tenant) -> None:
    before = (await a.store.get_fact(SHARED["cand"])).embedding
    report = await reembed(a.store, HashingEmbeddingProvider(dimensions=DIM, seed=3),
                           index=a.index)
    assert (await a.store.get_fact(SHARED["cand"])).embedding != before
    await world.check(a, report)


async def test_export_and_import(world: World, a: Tenant) -> None:
    buf = io.StringIO()
    exported = await export(a.store, buf)
    lines = buf.getvalue()
    assert LABELS["a"] in lines
    reports = [await import_(a.store, io.StringIO(lines), index=a.index),
               await import_(a.store, io.StringIO(lines), index=a.index, atomic=False)]
    assert all(r.model_dump() for r in reports)
    await world.check(a, exported, reports)
    # B's own export imported into a third tenant: it gets copies (same ids), B is untouched.
    from cycgraph_memory.postgres import PostgresMemoryStore

    copy = PostgresMemoryStore(world.engine, tenant_id=f"iso16-copy-{secrets.token_hex(4)}")
    await import_(copy, io.StringIO("\n".join(world.snap["export"]) + "\n"))
    assert [line async for line in export_lines(copy)] == world.snap["export"]
    assert await _snapshot(world.engine, world.b) == world.snap
    await copy.clear()


async def test_bulk_import(world: World, a: Tenant) -> None:
    from cycgraph_memory.postgres.bulk import bulk_import

    entities = await a.store.find_entities()
    facts = await a.store.find_facts(include_invalidated=True)
    fresh = [f.model_copy(update={"id": uuid.uuid4()}) for f in facts]
    report = await bulk_import(a.store, facts=fresh, entities=entities)
    await world.check(a, report)


async def test_clear_store_index_ledger(world: World, a: Tenant) -> None:
    await a.ledger.clear()
    await a.store.clear()
    if hasattr(a.index, "clear"):
        await a.index.clear()
    assert await a.store.find_facts(include_invalidated=True) == []
    assert (await a.ledger.get_baseline()).runs == 0
    await world.check(a)


async def test_memory_stats(world: World, a: Tenant) -> None:
    stats = await memory_stats(a.store, index=a.index, ledger=a.ledger)
    own = await _rows(world.engine, a.name)
    facts = stats.records["fact"]
    assert facts.live + facts.invalidated + facts.quarantined == len(own["facts"])
    assert facts.quarantined == 1
    assert stats.records["entity"].live == len(own["entities"])
    assert stats.ledger_runs == 6 and stats.pending_candidates == 1
    assert sum(t.facts for t in stats.themes) <= facts.live
    await world.check(a, stats)


async def test_theme_calibration_refit(world: World, a: Tenant) -> None:
    from cycgraph_memory.hierarchy.calibration import TenantThemeCalibrator

    fitted = await refit_theme_calibration(a.store, theme_size=3)
    pipeline = MemoryPipeline(a.store, embedder=_embedder(), index=a.index)
    assert isinstance(pipeline.calibrator, TenantThemeCalibrator)
    await pipeline.ingest([{"role": "user", "content": "Gina prefers the night shift."}])
    got = await a.store.get_tenant_setting(THEME_CALIBRATION_KEY)
    assert got is not None
    await world.check(a, fitted, got)


# ----------------------------------------------------------------------------- facade, CLI


async def test_memory_facade(world: World, a: Tenant, pg_dsn: str) -> None:
    async with await Memory.open(pg_dsn, tenant=a.name, embedder=_embedder()) as memory:
        added = await memory.add([{"role": "user", "content": "Eve runs the billing desk."}])
        found = [await memory.search("billing service", mode=m, limit=50)  # type: ignore[arg-type]
                 for m in ("vector", "text", "hybrid")]
        found.append(await memory.search(entity="Alice Quux"))
        found.append(await memory.search(tags=["lesson"]))
        lesson = await memory.remember("retry once", idempotency_key="k1")
        # B used this key too: A's own lesson under it comes back, not B's.
        again = await memory.remember("ignored", idempotency_key="audit16:shared-key")
        assert LABELS["a"] in (await a.store.get_fact(again)).content
        b_only = [uuid.UUID(u) for u in world.b_only]
        forgot = await memory.forget([SHARED["pos"], *b_only])
        erased = await memory.erase(entity_ids=[SHARED["alice2"]])
        stats = await memory.stats()
    assert lesson not in {uuid.UUID(u) for u in world.b_uuids}
    # B's ids passed to A's forget name no fact of A: reported missing (the caller's own
    # input echoed), nothing forgotten.
    assert forgot.forgotten == [SHARED["pos"]] and set(forgot.missing) == set(b_only)
    await world.check(a, added, found, forgot.forgotten, erased, stats, again)


async def test_integration_callables(world: World, a: Tenant) -> None:
    from cycgraph_memory import memory_retriever, memory_writer, render_memory_section

    retrieve = memory_retriever(a.store, a.index, _embedder())
    got = [await retrieve({"text": "billing lesson", "max_facts": 50}),
           await retrieve({"tags": ["lesson"]}),
           await retrieve({"entity_ids": [str(SHARED["alice"])]})]
    assert any(g["facts"] for g in got)
    write = memory_writer(a.store, index=a.index, embedder=_embedder())
    written = [await write([{"content": f"{LABELS['a']} note {i}", "tags": ["candidate"]}],
                           {"idempotency_key": "audit16:shared-key"}) for i in range(2)]
    assert written[0] == written[1]
    with pytest.raises(InvalidInputError, match="tenant"):
        memory_retriever(a.store, world.b.index, _embedder())
    with pytest.raises(InvalidInputError, match="tenant"):
        memory_writer(a.store, index=world.b.index)
    await world.check(a, got, written, [render_memory_section(g) for g in got])


CLI_COMMANDS: list[list[str]] = [
    ["stats"],
    ["search", "billing service", "--limit", "50"],
    ["search", "--tag", "lesson"],
    ["search", "--entity", "Alice Quux"],
    ["resolve-entities", "--dry-run"],
    ["resolve-entities"],
    ["consolidate", "--dry-run", "--max-facts", "2"],
    ["consolidate", "--max-facts", "2", "--delete-mode", "hard"],
    ["conflicts", "detect"],
    ["conflicts", "resolve", "--policy", "supersede-on-newer"],
    ["gate", "evaluate", "--min-trials", "2"],
    ["gate", "audit"],
    ["export", "graph", "--format", "json"],
]


async def test_cli_commands(world: World, a: Tenant, pg_dsn: str, tmp_path: Any,
                            capsys: pytest.CaptureFixture[str]) -> None:
    from cycgraph_memory.cli import main

    conv = tmp_path / "c.jsonl"
    conv.write_text(json.dumps({"role": "user", "content": "Frank owns billing."}) + "\n")
    outputs = []
    for argv in [["ingest", str(conv), "--tag", "candidate"], *CLI_COMMANDS]:
        code = await asyncio.to_thread(main, ["--dsn", pg_dsn, "--tenant", a.name, "--json",
                                              *argv])
        out = capsys.readouterr()
        assert code == 0, (argv, out.err)
        outputs.append(out.out)
    await world.check(a, outputs)


# ----------------------------------------------------------------------------- bad tenants


@pytest.mark.parametrize("bad", BAD_TENANTS, ids=repr)
async def test_malformed_tenant_refused_everywhere(world: World, pg_dsn: str, bad: Any,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    from cycgraph_memory.cli import main
    from cycgraph_memory.postgres import (
        PostgresMemoryIndex,
        PostgresMemoryStore,
        PostgresOutcomeLedger,
    )
    from cycgraph_memory.postgres.reembedding import finish_width_change
    from cycgraph_memory.postgres.tenant_indexes import (
        dedicate_vector_indexes,
        drop_dedicated_vector_indexes,
    )

    for cls in (PostgresMemoryStore, PostgresMemoryIndex, PostgresOutcomeLedger):
        with pytest.raises(InvalidTenantError):
            cls(world.engine, tenant_id=bad)
    for dsn in (pg_dsn, "memory://"):
        with pytest.raises(InvalidTenantError):
            await Memory.open(dsn, tenant=bad)
    if bad is not None:  # None: the store's tenant
        with pytest.raises(InvalidTenantError):
            Memory(world.b.store, world.b.index, tenant=bad)
        with pytest.raises(InvalidTenantError):  # in memory too (no backend tenant)
            Memory(InMemoryMemoryStore(), InMemoryMemoryIndex(), tenant=bad)
    for fn in (dedicate_vector_indexes, drop_dedicated_vector_indexes):
        with pytest.raises(InvalidTenantError):
            await fn(world.engine, bad)
    with pytest.raises(InvalidTenantError):
        await finish_width_change(world.engine, [world.b.name, bad])
    if isinstance(bad, str) and "\x00" not in bad:
        for argv in (["stats"], ["gate", "audit"], ["search", "x"]):
            code = await asyncio.to_thread(main, ["--dsn", pg_dsn, "--tenant", bad, *argv])
            err = capsys.readouterr().err
            assert code == 1, (argv, err)
            assert "tenant" in err
    assert await _snapshot(world.engine, world.b) == world.snap


# ----------------------------------------------------------------------------- mixed tenants


async def test_objects_of_two_tenants_refused_together(world: World, a: Tenant) -> None:
    """One operation given A's store and B's index or ledger is refused, changing nothing.

    Before the fix, ``retrieve_memory(A's store, B's index)`` (and ``Memory.search``)
    served B's facts, ``evaluate_retention(A's store, B's ledger)`` appended A's verdicts
    to B's audit log and ``memory_stats`` counted B's runs as A's.
    """
    before_a = await _rows(world.engine, a.name)
    b = world.b
    calls: list[Any] = [
        lambda: retrieve_memory(a.store, b.index, {"text": "lesson", "min_similarity": 0.0},
                                embedder=_embedder()),
        lambda: retrieve_gated_lessons(a.store, tags=["lesson"], ledger=b.ledger),
        lambda: memory_stats(a.store, index=b.index),
        lambda: memory_stats(a.store, ledger=b.ledger),
        lambda: evaluate_retention(a.store, b.ledger, {"min_trials": 2}),
        lambda: purge(a.store, entity_ids=[SHARED["alice"]], ledger=b.ledger),
        lambda: purge(a.store, entity_ids=[SHARED["alice"]], index=b.index),
    ]
    for call in calls:
        with pytest.raises(InvalidInputError, match="tenant"):
            await call()
    builders: list[Any] = [
        lambda: MemoryPipeline(a.store, embedder=_embedder(), index=b.index),
        lambda: MemoryConsolidator(a.store, b.index),
        lambda: EntityResolver(a.store, index=b.index),
        lambda: ConflictDetector(a.store, b.index),
        lambda: Memory(a.store, b.index, embedder=_embedder()),
        lambda: Memory(a.store, a.index, ledger=b.ledger),
        lambda: Memory(a.store, a.index, pipeline=MemoryPipeline(b.store)),
        lambda: Memory(a.store, a.index, tenant=b.name),
    ]
    for build in builders:
        with pytest.raises(InvalidInputError, match="tenant"):
            build()
    assert await _rows(world.engine, a.name) == before_a
    # Without an explicit tenant the facade takes the store's (logs and spans name it).
    assert Memory(a.store, a.index, ledger=a.ledger).tenant == a.name
    assert Memory(InMemoryMemoryStore(), InMemoryMemoryIndex()).tenant == "default"
    await world.check(a)


async def test_a_pass_in_progress_does_not_block_b(world: World, a: Tenant) -> None:
    """The pass locks are per tenant: A holding them leaves B's passes free to run."""
    from cycgraph_memory._exclusive import exclusive_passes

    entered = asyncio.Event()
    release = asyncio.Event()

    async def hold() -> None:
        async with exclusive_passes(a.store, "consolidation", "facts", "themes", "purge"):
            entered.set()
            await release.wait()

    holder = asyncio.create_task(hold())
    try:
        await asyncio.wait_for(entered.wait(), 30)
        b = world.b
        # Dry runs: each takes its tenant's lock, reads, writes nothing.
        plan = await asyncio.wait_for(MemoryConsolidator(b.store, b.index).plan(), 30)
        dry = await asyncio.wait_for(
            purge(b.store, entity_ids=[SHARED["alice"]], ledger=b.ledger, dry_run=True), 30)
        assert plan is not None and dry.model_dump()
    finally:
        release.set()
        await holder
    await world.check(a)

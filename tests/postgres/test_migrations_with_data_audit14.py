"""Upgrading a populated database, as a deploying team lives it (fourteenth audit pass).

For every revision ``r`` from 0001 to 0017: a fresh database at ``r`` receives a small,
realistic world (three tenants; entities incl. unicode names and a superseded one; edges
with validity windows; episodes with messages; facts with tags incl. ``quarantined``,
soft-deleted and superseded ones; themes; ledger runs and gate audit rows, writer keys,
tenant settings where ``r`` has the tables) written with plain INSERTs of that revision's
columns only. Then ``upgrade head`` must give, table for table and column for column, what
the CURRENT library writes for the same records into a fresh head database: every stored
value, and every derived one (``search_terms``, the BM25 statistics of 0008, the name keys
of 0017, ...), i.e. each backfill equals what the store and the triggers would have written.
Then ``downgrade`` one revision at a time back to ``r`` keeps the old release's data intact
at every step, and the re-upgrade gives the same world again. The current API (store,
index, ledger, ``retrieve_memory`` in each mode, text search, subgraph, export) then reads
the same answers from both databases, and new writes land identically.

Also: ``upgrade head`` twice is a no-op; row-level security isolates tenants of a database
populated before 0006 / 0016; and the two data-filling revisions (0008, 0017) on 20,000
rows, with a concurrent reader, measured against what docs/operations.md says about them.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import insert, text

pytestmark = pytest.mark.postgres

DIM = 8
REVISIONS = [f"{i:04d}" for i in range(1, 18)]
HEAD = "0018"
TENANTS = ("acme", "globex", "initech")
T0 = datetime(2026, 3, 1, 9, 30, tzinfo=UTC)

DATA_TABLES = (
    "entities",
    "relationships",
    "episodes",
    "episode_messages",
    "facts",
    "themes",
    "outcome_runs",
    "outcome_run_facts",
    "gate_audit_log",
    "writer_keys",
    "text_search_corpora",
    "text_search_terms",
    "erasure_log",
    "ledger_erased_facts",
    "tenant_settings",
    "schema_metadata",
)


def _id(*parts: object) -> uuid.UUID:
    return uuid.uuid5(uuid.NAMESPACE_URL, "a14mig/" + "/".join(map(str, parts)))


def _vec(seed: int) -> list[float]:
    # Exactly representable in float32: the stored vector reads back equal.
    return [((seed * 7 + i * 3) % 11) / 8.0 - 0.5 for i in range(DIM)]


def world(tenant: str, revision: str) -> dict[str, Any]:
    """The records of one tenant an older release could have written at ``revision``."""
    from cycgraph_memory.records import (
        Entity,
        Episode,
        GateAuditEntry,
        Message,
        Provenance,
        Relationship,
        RunOutcome,
        SemanticFact,
        Theme,
    )

    has_grounding = revision >= "0005"  # source_message_ids, message vectors

    def prov(minutes: int, source: str = "agent") -> Provenance:
        return Provenance(source=source, created_at=T0 + timedelta(minutes=minutes))

    def t(minutes: int) -> datetime:
        return T0 + timedelta(minutes=minutes)

    maya = Entity(
        id=_id(tenant, "maya"),
        name="Maya Chen",
        entity_type="person",
        attributes={"role": "SRE", "née": "Müller"},
        embedding=_vec(1),
        provenance=prov(1),
        created_at=t(1),
        updated_at=t(2),
    )
    strasse = Entity(
        id=_id(tenant, "strasse"),
        name="Straße Logistik",
        entity_type="organization",
        attributes={},
        embedding=_vec(2),
        provenance=prov(2),
        created_at=t(2),
        updated_at=t(2),
    )
    acme = Entity(
        id=_id(tenant, "acme"),
        name="The Acme, Corp.",
        entity_type="organization",
        attributes={"ticker": None},
        embedding=None,
        provenance=prov(3),
        created_at=t(3),
        updated_at=t(5),
    )
    sisyphus = Entity(
        id=_id(tenant, "sisyphus"),
        name="ΣΊΣΥΦΟΣ",
        entity_type="concept",
        embedding=_vec(3),
        provenance=prov(4),
        created_at=t(4),
        updated_at=t(4),
    )
    old_maya = Entity(
        id=_id(tenant, "maya-dup"),
        name="maya chen",
        entity_type="person",
        embedding=_vec(1),
        provenance=prov(5),
        created_at=t(5),
        updated_at=t(6),
        invalidated_at=t(6),
        superseded_by=maya.id,
    )
    dash = Entity(  # its name key is "" (nothing alphanumeric)
        id=_id(tenant, "dash"),
        name="—",
        entity_type="thing",
        provenance=prov(6),
        created_at=t(6),
        updated_at=t(6),
    )
    entities = [maya, strasse, acme, sisyphus, old_maya, dash]

    relationships = [
        Relationship(
            id=_id(tenant, "r1"),
            source_id=maya.id,
            target_id=acme.id,
            relation_type="works_at",
            weight=0.75,
            attributes={"since": "2024"},
            valid_from=t(10),
            provenance=prov(10),
        ),
        Relationship(
            id=_id(tenant, "r2"),
            source_id=maya.id,
            target_id=strasse.id,
            relation_type="works_at",
            weight=1.0,
            valid_from=t(-500),
            valid_until=t(9),
            provenance=prov(8),
        ),
        Relationship(
            id=_id(tenant, "r3"),
            source_id=acme.id,
            target_id=sisyphus.id,
            relation_type="related_to",
            weight=0.5,
            valid_from=t(11),
            provenance=prov(11),
            invalidated_by="superseded by r1",
        ),
        Relationship(
            id=_id(tenant, "r4"),
            source_id=old_maya.id,
            target_id=strasse.id,
            relation_type="knows",
            weight=0.25,
            valid_from=t(12),
            provenance=prov(12),
        ),
    ]

    def msg(
        key: str, role: str, content: str, minutes: int, seed: int | None, **metadata: Any
    ) -> Message:
        return Message(
            id=_id(tenant, key),
            role=role,
            content=content,
            timestamp=t(minutes),
            metadata=metadata,
            embedding=_vec(seed) if (seed is not None and has_grounding) else None,
        )

    m1 = msg("m1", "user", f"{tenant}: Maya moved the deploy pipeline to Acme's cluster.", 20, 5)
    m2 = msg(
        "m2",
        "assistant",
        "Noted — Straße Logistik still runs the old one. 東京 too?",
        21,
        None,
        lang="de",
        confidence=0.5,
    )
    m3 = msg("m3", "user", "Yes; the rollback runbook lives in the wiki (naïve café notes).", 22, 6)
    m4 = msg("m4", "user", "Sisyphus keeps pushing the release boulder uphill.", 30, None)
    ep1 = Episode(
        id=_id(tenant, "ep1"),
        topic="Deploy pipeline migration",
        messages=[m1, m2, m3],
        started_at=t(20),
        ended_at=t(22),
        embedding=_vec(7),
        provenance=prov(22),
    )
    ep2 = Episode(
        id=_id(tenant, "ep2"),
        topic="Ünïcode release chatter",
        messages=[m4],
        started_at=t(30),
        ended_at=t(30),
        embedding=None,
        provenance=prov(30),
        invalidated_at=t(40),
    )
    ep3 = Episode(
        id=_id(tenant, "ep3"),
        topic="",
        messages=[],
        started_at=t(50),
        ended_at=t(50),
        provenance=prov(50),
    )

    theme_id = _id(tenant, "th1")

    def fact(key: str, content: str, minutes: int, **kw: Any) -> SemanticFact:
        if not has_grounding:
            kw.pop("source_message_ids", None)
        return SemanticFact(
            id=_id(tenant, key),
            content=content,
            valid_from=t(minutes),
            provenance=prov(minutes, kw.pop("source", "derived")),
            **kw,
        )

    facts = [
        fact(
            "f1",
            "Maya Chen moved the deploy pipeline to the Acme cluster.",
            23,
            entity_ids=[maya.id, acme.id],
            source_episode_ids=[ep1.id],
            source_message_ids=[m1.id],
            theme_id=theme_id,
            embedding=_vec(11),
            tags=["lesson"],
            access_count=3,
            last_accessed_at=t(60),
        ),
        fact(
            "f2",
            "Always run the rollback runbook before a deploy.",
            24,
            entity_ids=[],
            source_episode_ids=[ep1.id],
            source_message_ids=[m3.id, m1.id],
            theme_id=theme_id,
            embedding=_vec(12),
            tags=["candidate", "quarantined"],
        ),
        fact(
            "f3",
            "Straße Logistik runs the old pipeline.",
            25,
            entity_ids=[strasse.id],
            embedding=_vec(13),
            valid_until=t(45),
            invalidated_by="superseded",
        ),
        fact(
            "f4",
            "Die Straße ist schön — naïve café in 東京, ΣΊΣΥΦΟΣ.",
            26,
            entity_ids=[strasse.id, sisyphus.id],
            embedding=None,
            tags=["unicode"],
        ),
        fact(
            "f5",
            "Maya forgot her badge.",
            27,
            entity_ids=[maya.id],
            embedding=_vec(14),
            invalidated_by="forgotten",
            tags=[],
        ),
        fact(
            "f6",
            "Sisyphus pushes releases uphill every Friday.",
            31,
            entity_ids=[sisyphus.id],
            source_episode_ids=[ep2.id],
            embedding=_vec(15),
            tags=["quarantined"],
            access_count=2_000_000_000,
            last_accessed_at=t(61),
        ),
        fact("f7", "The and of a", 32, embedding=None),  # no tokens at all
    ]
    themes = [
        Theme(
            id=theme_id,
            label="Deploys",
            description="How deploys and rollbacks run.",
            fact_ids=[facts[0].id, facts[1].id],
            embedding=_vec(21),
            provenance=prov(70),
        ),
        Theme(
            id=_id(tenant, "th2"),
            label="Ünïcode",
            description="",
            fact_ids=[],
            embedding=None,
            provenance=prov(71),
            invalidated_at=t(72),
        ),
    ]
    out: dict[str, Any] = {
        "entities": entities,
        "relationships": relationships,
        "episodes": [ep1, ep2, ep3],
        "facts": facts,
        "themes": themes,
        "runs": [],
        "audit": [],
        "writer_keys": [],
        "settings": [],
    }
    if revision >= "0003":
        out["runs"] = [
            RunOutcome(
                run_id=f"{tenant}-run-1",
                score=0.75,
                fact_ids=[facts[0].id, facts[1].id],
                recorded_at=t(80),
            ),
            RunOutcome(run_id=f"{tenant}-run-2", score=0.0, fact_ids=[], recorded_at=t(81)),
        ]
        out["audit"] = [
            GateAuditEntry(
                pass_id=_id(tenant, "pass"),
                fact_id=facts[1].id,
                verdict="held",
                reason="insufficient_trials",
                trials=1,
                policy={"min_trials": 5},
                decided_at=t(90),
            ),
            GateAuditEntry(
                pass_id=_id(tenant, "pass"),
                fact_id=facts[0].id,
                verdict="promoted",
                reason=None,
                trials=7,
                policy={},
                decided_at=t(90),
            ),
        ]
    if revision >= "0004":
        out["writer_keys"] = [
            {
                "tenant_id": tenant,
                "idempotency_key": "κλειδί-1",
                "fact_ids": [facts[0].id],
                "created_at": t(23),
            }
        ]
    if revision >= "0010":
        out["settings"] = [
            {
                "tenant_id": tenant,
                "key": "theme_calibration",
                "value": {"assign": 0.5, "merge": 0.75},
                "updated_at": t(95),
            }
        ]
    return out


# --------------------------------------------------------------------------- helpers


async def _columns(engine: Any) -> dict[str, set[str]]:
    async with engine.connect() as conn:
        rows = await conn.execute(
            text(
                "SELECT table_name, column_name FROM information_schema.columns "
                "WHERE table_schema = 'public'"
            )
        )
        out: dict[str, set[str]] = {}
        for table, column in rows:
            out.setdefault(table, set()).add(column)
        return out


def _rows(tenant: str, w: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """Every row of ``w`` as the current store writes it (derived columns included)."""
    from cycgraph_memory.postgres import convert

    return {
        "entities": [convert.entity_to_row(e, tenant) for e in w["entities"]],
        "relationships": [convert.relationship_to_row(r, tenant) for r in w["relationships"]],
        "episodes": [convert.episode_to_row(e, tenant) for e in w["episodes"]],
        "episode_messages": [r for e in w["episodes"] for r in convert.messages_to_rows(e, tenant)],
        "facts": [convert.fact_to_row(f, tenant) for f in w["facts"]],
        "themes": [convert.theme_to_row(t, tenant) for t in w["themes"]],
        "outcome_runs": [
            {
                "tenant_id": tenant,
                "run_id": r.run_id,
                "score": r.score,
                "recorded_at": r.recorded_at,
            }
            for r in w["runs"]
        ],
        "outcome_run_facts": [
            {"tenant_id": tenant, "fact_id": f, "run_id": r.run_id}
            for r in w["runs"]
            for f in r.fact_ids
        ],
        "gate_audit_log": [
            {
                "tenant_id": tenant,
                "pass_id": e.pass_id,
                "fact_id": e.fact_id,
                "verdict": e.verdict,
                "reason": e.reason,
                "trials": e.trials,
                "evidence": None,
                "policy": e.policy,
                "decided_at": e.decided_at,
            }
            for e in w["audit"]
        ],
        "writer_keys": w["writer_keys"],
        "tenant_settings": w["settings"],
    }


async def seed_old(engine: Any, revision: str) -> None:
    """Write the world with plain INSERTs of the columns ``revision`` has (an old release)."""
    from cycgraph_memory.postgres.schema import Base

    columns = await _columns(engine)
    async with engine.begin() as conn:
        for tenant in TENANTS:
            await conn.execute(
                text("SELECT set_config('cycgraph.tenant_id', :t, true)"), {"t": tenant}
            )
            for table, rows in _rows(tenant, world(tenant, revision)).items():
                if not rows:
                    continue
                assert table in columns, (revision, table)
                have = columns[table]
                await conn.execute(
                    insert(Base.metadata.tables[table]),
                    [{k: v for k, v in r.items() if k in have} for r in rows],
                )


async def seed_current(engine: Any, revision: str) -> None:
    """Write the same world through the current API into a head database."""
    from cycgraph_memory.postgres import PostgresMemoryStore, PostgresOutcomeLedger
    from cycgraph_memory.postgres.schema import Base

    for tenant in TENANTS:
        w = world(tenant, revision)
        store = PostgresMemoryStore(engine, tenant_id=tenant)
        ledger = PostgresOutcomeLedger(engine, tenant_id=tenant)
        await store.put_entities(w["entities"])
        await store.put_relationships(w["relationships"])
        await store.put_episodes(w["episodes"])
        await store.put_themes([t.model_copy(update={"fact_ids": []}) for t in w["themes"]])
        await store.put_facts(w["facts"])
        await store.put_themes(w["themes"])
        for run in w["runs"]:
            await ledger.record_outcome(run)
        if w["audit"]:
            await ledger.append_gate_audit(w["audit"])
        async with engine.begin() as conn:
            await conn.execute(
                text("SELECT set_config('cycgraph.tenant_id', :t, true)"), {"t": tenant}
            )
            # No public API writes these two directly (the writer and the pipeline do).
            for table, key in (("writer_keys", "writer_keys"), ("tenant_settings", "settings")):
                if w[key]:
                    await conn.execute(insert(Base.metadata.tables[table]), w[key])


async def dump(engine: Any) -> dict[str, list[dict[str, Any]]]:
    """Every row of every data table that exists, as JSON objects, sorted."""
    columns = await _columns(engine)
    out: dict[str, list[dict[str, Any]]] = {}
    async with engine.connect() as conn:
        for table in DATA_TABLES:
            if table not in columns:
                continue
            rows = (await conn.execute(text(f"SELECT to_jsonb(t)::text FROM {table} t"))).scalars()
            out[table] = sorted(
                (json.loads(r) for r in rows), key=lambda d: json.dumps(d, sort_keys=True)
            )
    return out


def _project(rows: list[dict[str, Any]], keys: set[str]) -> list[dict[str, Any]]:
    return sorted(
        ({k: v for k, v in r.items() if k in keys} for r in rows),
        key=lambda d: json.dumps(d, sort_keys=True),
    )


def _diff(got: dict[str, Any], want: dict[str, Any]) -> str:
    lines = []
    for table in sorted(set(got) | set(want)):
        g, w = got.get(table), want.get(table)
        if g != w:
            lines.append(f"{table}: got {len(g or [])} rows, want {len(w or [])}")
            for a, b in zip(g or [], w or [], strict=False):
                if a != b:
                    keys = {k for k in set(a) | set(b) if a.get(k) != b.get(k)}
                    lines.append(
                        f"  first differing row, columns {sorted(keys)}: "
                        f"got {[a.get(k) for k in sorted(keys)]} "
                        f"want {[b.get(k) for k in sorted(keys)]}"
                    )
                    break
    return "\n".join(lines)


def _prev(revision: str) -> str:
    return f"{int(revision) - 1:04d}"


async def api_view(engine: Any, tenant: str) -> dict[str, Any]:
    """What the current API reads back for one tenant (touches facts: same on both DBs)."""
    from cycgraph_memory.export import export_graph
    from cycgraph_memory.postgres import (
        PostgresMemoryIndex,
        PostgresMemoryStore,
        PostgresOutcomeLedger,
    )
    from cycgraph_memory.retrieval import retrieve_memory

    store = PostgresMemoryStore(engine, tenant_id=tenant)
    index = PostgresMemoryIndex(engine, tenant_id=tenant)
    ledger = PostgresOutcomeLedger(engine, tenant_id=tenant)

    def j(value: Any) -> Any:
        if isinstance(value, list):
            return [j(v) for v in value]
        if hasattr(value, "model_dump"):
            return value.model_dump(mode="json")
        return value

    view: dict[str, Any] = {
        "facts": j(await store.find_facts(include_invalidated=True)),
        "live_facts": [str(f.id) for f in await store.find_facts()],
        "quarantined": [str(f.id) for f in await store.find_facts(tags=["quarantined"])],
        "entities": j(await store.find_entities(include_invalidated=True)),
        "episodes": j(await store.list_episodes(include_invalidated=True)),
        "themes": j(await store.list_themes(include_invalidated=True)),
        "rels": j(
            await store.get_relationships_for_entity(_id(tenant, "maya"), include_invalidated=True)
        ),
        "name_keys": sorted(
            str(e.id)
            for e in await store.find_entities_by_name_keys(
                [
                    ("strasse logistik", "organization"),
                    ("acme corp", "organization"),
                    ("maya chen", "person"),
                ]
            )
        ),
        "export": j(await export_graph(store, include_invalidated=True)),
        "stats": j(await ledger.list_fact_stats()),
        "audit": j(await ledger.list_gate_audit()),
    }
    for q in ("deploy rollback pipeline", "Straße café 東京", "Sisyphus releases"):
        for name, fn in (
            ("f", index.text_search_facts),
            ("m", index.text_search_messages),
            ("e", index.text_search_episodes),
        ):
            view[f"text-{name}-{q}"] = [
                (str(r.item.id), round(r.score, 9)) for r in await fn(q, limit=10)
            ]
    view["knn"] = [
        (str(r.item.id), round(r.score, 6)) for r in await index.search_facts(_vec(11), limit=10)
    ]
    for mode in ("vector", "text", "hybrid"):
        result = await retrieve_memory(
            store,
            index,
            {
                "text": "Maya deploy pipeline Acme",
                "embedding": _vec(11),
                "limit": 10,
                "min_similarity": 0.0,
            },
            mode=mode,
        )
        view[f"retrieve-{mode}"] = _untouched(result.model_dump(mode="json"))
    graph = await retrieve_memory(
        store, index, {"entity_ids": [_id(tenant, "maya")], "max_hops": 2, "limit": 20}
    )
    view["subgraph"] = _untouched(graph.model_dump(mode="json"))
    return view


def _untouched(value: Any) -> Any:
    """``value`` without ``last_accessed_at`` (a retrieval stamps the served facts with the
    time of the call, which differs between the two databases)."""
    if isinstance(value, dict):
        return {k: _untouched(v) for k, v in value.items() if k != "last_accessed_at"}
    if isinstance(value, list):
        return [_untouched(v) for v in value]
    return value


# --------------------------------------------------------------------------- the tests


@pytest.mark.parametrize("revision", REVISIONS)
async def test_populated_database_upgrades_to_what_the_current_library_writes(
    pg_databases: Any, revision: str
) -> None:
    from cycgraph_memory.postgres import (
        PostgresMemoryIndex,
        PostgresMemoryStore,
        create_engine_from_dsn,
        current_revision,
        downgrade,
        upgrade,
    )
    from cycgraph_memory.records import Entity, Episode, Message, Provenance, SemanticFact

    old = create_engine_from_dsn(await pg_databases.create("a14mig_old"))
    ref = create_engine_from_dsn(await pg_databases.create("a14mig_ref"))
    try:
        await upgrade(ref, embedding_dim=DIM)
        await seed_current(ref, revision)
        reference = await dump(ref)

        await upgrade(old, embedding_dim=DIM, revision=revision)
        await seed_old(old, revision)
        at_r = await dump(old)

        await upgrade(old)
        assert await current_revision(old) == HEAD
        migrated = await dump(old)
        assert migrated == reference, _diff(migrated, reference)

        # Step by step back down: the old release's rows are intact at every step.
        step = HEAD
        while step != revision:
            step = _prev(step)
            await downgrade(old, step)
            now = await dump(old)
            for table, rows in at_r.items():
                if table == "schema_metadata":
                    continue  # the migrations' own records (extension origins)
                keys = set(rows[0]) if rows else set()
                if step > "0010":  # 0005's generated tsvector, dropped by 0011
                    keys.discard("search_tsv")
                assert table in now, (step, table)
                want = _project(rows, keys)
                assert _project(now[table], keys) == want, (
                    step,
                    table,
                    _diff({table: _project(now[table], keys)}, {table: want}),
                )
        assert await dump(old) == at_r
        await upgrade(old)
        again = await dump(old)
        assert again == reference, _diff(again, reference)

        # The current API reads the same answers from both databases.
        for tenant in TENANTS:
            got, want = await api_view(old, tenant), await api_view(ref, tenant)
            assert got.keys() == want.keys()
            for key in want:
                assert got[key] == want[key], (tenant, key)
            w = world(tenant, revision)
            assert len(got["facts"]) == len(w["facts"])
            assert [f["id"] for f in got["facts"]] == [
                str(f.id) for f in sorted(w["facts"], key=lambda f: (f.valid_from, f.id))
            ]
            assert sorted(got["quarantined"]) == sorted(
                str(f.id)
                for f in w["facts"]
                if "quarantined" in f.tags and f.invalidated_by is None
            )
            assert got["text-f-Straße café 東京"][0][0] == str(_id(tenant, "f4"))
            assert len(got["name_keys"]) == 3

        # New writes work, identically on both.
        for engine in (old, ref):
            store = PostgresMemoryStore(engine, tenant_id="acme")
            index = PostgresMemoryIndex(engine, tenant_id="acme")
            ent = Entity(
                id=_id("new", "e"),
                name="Ⅻ Club",
                entity_type="organization",
                provenance=Provenance(source="agent", created_at=T0),
                created_at=T0,
                updated_at=T0,
            )
            await store.put_entities([ent])
            msg = Message(
                id=_id("new", "m"), role="user", content="Ⅻ Club hosts deploys", timestamp=T0
            )
            await store.put_episodes(
                [
                    Episode(
                        id=_id("new", "ep"),
                        topic="club",
                        messages=[msg],
                        started_at=T0,
                        ended_at=T0,
                        provenance=Provenance(source="agent", created_at=T0),
                    )
                ]
            )
            await store.put_facts(
                [
                    SemanticFact(
                        id=_id("new", "f"),
                        content="The Ⅻ Club hosts the deploy party.",
                        entity_ids=[ent.id],
                        valid_from=T0,
                        embedding=_vec(30),
                        provenance=Provenance(source="agent", created_at=T0),
                    )
                ]
            )
            hits = await index.text_search_facts("club party", limit=3)
            assert [h.item.id for h in hits] == [_id("new", "f")]
            assert [
                e.id for e in await store.find_entities_by_name_keys([("xii club", "organization")])
            ] == [ent.id]
        after_old, after_ref = _untouched(await dump(old)), _untouched(await dump(ref))
        assert after_old == after_ref, _diff(after_old, after_ref)
    finally:
        await old.dispose()
        await ref.dispose()


async def test_upgrade_head_twice_is_a_no_op(pg_databases: Any) -> None:
    """A second ``upgrade head`` (every replica of a deploy runs it) changes nothing: not
    the data, not the catalog (columns, indexes, triggers, policies, functions), and it
    does not wait for the application's open transactions."""
    from cycgraph_memory.postgres import create_engine_from_dsn, upgrade

    catalog = text(
        "SELECT 'col', table_name || '.' || column_name || ' ' || data_type || ' ' || "
        "is_nullable FROM information_schema.columns WHERE table_schema = 'public' "
        "UNION ALL SELECT 'idx', indexdef FROM pg_indexes WHERE schemaname = 'public' "
        "UNION ALL SELECT 'trg', tgname || ' ' || tgrelid::regclass::text FROM pg_trigger "
        "WHERE NOT tgisinternal "
        "UNION ALL SELECT 'pol', tablename || ' ' || policyname || ' ' || qual FROM pg_policies "
        "UNION ALL SELECT 'fn', pg_get_functiondef(p.oid) FROM pg_proc p "
        "JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = 'public' "
        "AND p.proname LIKE 'cycgraph%' "
        "UNION ALL SELECT 'opt', relname || ' ' || coalesce(array_to_string(reloptions, ','), '')"
        " FROM pg_class WHERE relnamespace = 'public'::regnamespace AND relkind = 'r' "
        "ORDER BY 1, 2"
    )
    engine = create_engine_from_dsn(await pg_databases.create("a14mig_twice"))
    try:
        await upgrade(engine, embedding_dim=DIM, revision="0007")
        await seed_old(engine, "0007")
        await upgrade(engine)
        async with engine.connect() as conn:
            before = (await conn.execute(catalog)).all()
        data = await dump(engine)
        # The serving application holds row locks in an open transaction: a replica's
        # start-up `upgrade head` at head takes no table lock, so it does not wait for it.
        busy = create_engine_from_dsn(engine.url)
        try:
            async with busy.connect() as conn:
                await conn.execute(text("SELECT set_config('cycgraph.tenant_id', 'acme', false)"))
                await conn.execute(text("UPDATE facts SET access_count = access_count"))
                await asyncio.wait_for(upgrade(engine), timeout=30)
                await conn.rollback()
        finally:
            await busy.dispose()
        async with engine.connect() as conn:
            after = (await conn.execute(catalog)).all()
        assert after == before
        assert await dump(engine) == data
    finally:
        await engine.dispose()


@pytest.mark.parametrize("revision", ["0005", "0015"])
async def test_row_level_security_isolates_tenants_of_an_upgraded_database(
    pg_databases: Any, revision: str
) -> None:
    """Populated before row-level security (0005) or before the definer lookups (0015),
    then upgraded: an application role sees and writes only its tenant, in every table,
    through plain SQL and through the store's index lookups."""
    from sqlalchemy.engine import make_url

    from cycgraph_memory.postgres import (
        PostgresMemoryIndex,
        PostgresMemoryStore,
        create_engine_from_dsn,
        upgrade,
    )

    dsn = await pg_databases.create("a14mig_rls")
    owner = create_engine_from_dsn(dsn)
    role = f"a14mig_app_{secrets.token_hex(4)}"
    app = None
    try:
        await upgrade(owner, embedding_dim=DIM, revision=revision)
        await seed_old(owner, revision)
        await upgrade(owner)
        async with owner.begin() as conn:
            for sql in (
                f"CREATE ROLE {role} LOGIN NOSUPERUSER NOBYPASSRLS",
                f'GRANT CONNECT ON DATABASE "{make_url(dsn).database}" TO {role}',
                f"GRANT USAGE ON SCHEMA public TO {role}",
                f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO {role}",
                f"GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA public TO {role}",
            ):
                await conn.execute(text(sql))
        app = create_engine_from_dsn(make_url(dsn).set(username=role, password=None))
        tables = [t for t, cols in (await _columns(owner)).items() if "tenant_id" in cols]
        assert len(tables) >= 14
        async with app.connect() as conn:
            for table in tables:  # no tenant set: nothing visible
                seen = (await conn.execute(text(f"SELECT count(*) FROM {table}"))).scalar_one()
                assert seen == 0, table
        for tenant in TENANTS:
            async with app.begin() as conn:
                await conn.execute(
                    text("SELECT set_config('cycgraph.tenant_id', :t, true)"), {"t": tenant}
                )
                for table in tables:
                    seen = (
                        (await conn.execute(text(f"SELECT DISTINCT tenant_id FROM {table}")))
                        .scalars()
                        .all()
                    )
                    assert seen in ([], [tenant]), (table, seen)
                with pytest.raises(Exception, match="row-level security"):
                    async with conn.begin_nested():
                        await conn.execute(
                            text("INSERT INTO tenant_settings VALUES ('other', 'k', '{}', now())")
                        )
            store = PostgresMemoryStore(app, tenant_id=tenant)
            index = PostgresMemoryIndex(app, tenant_id=tenant)
            hits = await index.text_search_facts("deploy rollback Straße", limit=20)
            assert {h.item.id for h in hits} <= {_id(tenant, f"f{i}") for i in range(1, 8)}
            assert hits
            keys = await store.find_entities_by_name_keys([("strasse logistik", "organization")])
            assert [e.id for e in keys] == [_id(tenant, "strasse")]
            facts = await store.find_facts(entity_id=_id(tenant, "maya"), include_invalidated=True)
            assert {f.id for f in facts} == {_id(tenant, "f1"), _id(tenant, "f5")}
    finally:
        if app is not None:
            await app.dispose()
        async with owner.begin() as conn:
            await conn.execute(text(f"DROP OWNED BY {role}"))
            await conn.execute(text(f"DROP ROLE IF EXISTS {role}"))
        await owner.dispose()


BIG = 20_000


async def _measure(engine: Any, reader: Any, table: str, revision: str) -> dict[str, float]:
    """Upgrade to ``revision`` while a second session reads ``table`` every 20 ms and a
    third watches ``pg_locks``: migration time, longest read, ACCESS EXCLUSIVE seen."""
    from cycgraph_memory.postgres import upgrade

    done = asyncio.Event()
    waits: list[float] = []
    exclusive: list[float] = []

    async def read() -> None:
        async with reader.connect() as conn:
            while not done.is_set():
                start = time.perf_counter()
                await conn.execute(text(f"SELECT tenant_id FROM {table} LIMIT 1"))
                await conn.commit()
                waits.append(time.perf_counter() - start)
                await asyncio.sleep(0.02)

    async def watch() -> None:
        async with reader.connect() as conn:
            while not done.is_set():
                held = (
                    await conn.execute(
                        text(
                            "SELECT count(*) FROM pg_locks WHERE granted AND mode = "
                            f"'AccessExclusiveLock' AND relation = to_regclass('{table}')"
                        )
                    )
                ).scalar_one()
                await conn.commit()
                if held:
                    exclusive.append(time.perf_counter())
                await asyncio.sleep(0.02)

    tasks = [asyncio.create_task(read()), asyncio.create_task(watch())]
    await asyncio.sleep(0.1)
    start = time.perf_counter()
    await upgrade(engine, revision=revision)
    elapsed = time.perf_counter() - start
    done.set()
    await asyncio.gather(*tasks)
    held = (exclusive[-1] - exclusive[0]) if exclusive else 0.0
    return {"migration_s": elapsed, "longest_read_s": max(waits), "exclusive_seen_s": held}


_VECTOR_SQL = (
    "(SELECT array_agg(random() + x * 0 + g * 0)::real[] FROM generate_series(1, 384) x)::vector"
)


@pytest.mark.parametrize(
    "vectors",
    [
        False,
        pytest.param(
            True,
            marks=pytest.mark.skipif(
                not os.environ.get("CYCGRAPH_MEMORY_MIGRATION_VECTORS"),
                reason="~2 min: set CYCGRAPH_MEMORY_MIGRATION_VECTORS=1 (384-d rows)",
            ),
        ),
    ],
)
async def test_filling_revisions_on_20000_rows_and_their_locks(
    pg_databases: Any, vectors: bool
) -> None:
    """0008 (tokens of 20,000 facts) and 0017 (name keys of 20,000 entities) finish in
    seconds, and hold ACCESS EXCLUSIVE on the table for the whole fill, so a concurrent
    reader waits that long: what docs/operations.md ("Migrations are not online") says.
    Figures printed (``-s``); with ``vectors`` the rows carry 384-d vectors and 0007's
    rewrite of ``facts`` is measured too (the table's 384-d rows)."""
    from cycgraph_memory.postgres import create_engine_from_dsn, upgrade

    dsn = await pg_databases.create("a14mig_big")
    engine = create_engine_from_dsn(dsn)
    reader = create_engine_from_dsn(dsn)
    dim, vector = (384, _VECTOR_SQL) if vectors else (DIM, "NULL")
    try:
        await upgrade(engine, embedding_dim=dim, revision="0006" if vectors else "0007")
        async with engine.begin() as conn:
            for table in ("facts", "entities"):
                await conn.execute(text(f"ALTER TABLE {table} NO FORCE ROW LEVEL SECURITY"))
            await conn.execute(
                text(
                    "INSERT INTO facts (tenant_id, id, content, source_episode_ids, entity_ids, "
                    "provenance, valid_from, access_count, tags, source_message_ids, embedding) "
                    "SELECT 'big', gen_random_uuid(), 'Deploy step ' || g || ' of the rollout "
                    "runbook for service ' || (g % 97), '{}', '{}', '{\"source\": \"agent\"}', "
                    f"now(), 0, '{{}}', '{{}}', {vector} FROM generate_series(1, :n) g"
                ),
                {"n": BIG},
            )
            await conn.execute(
                text(
                    "INSERT INTO entities (tenant_id, id, name, entity_type, attributes, "
                    "provenance, created_at, updated_at, embedding) SELECT 'big', "
                    "gen_random_uuid(), 'Service Nº ' || g, 'service', '{}', '{}', now(), "
                    f"now(), {vector} FROM generate_series(1, :n) g"
                ),
                {"n": BIG},
            )
            for table in ("facts", "entities"):
                await conn.execute(text(f"ALTER TABLE {table} FORCE ROW LEVEL SECURITY"))
        if vectors:
            rewrite = await _measure(engine, reader, "facts", "0007")
            print(f"\n0007 on {BIG} facts (384-d): {rewrite}")
        facts = await _measure(engine, reader, "facts", "0008")
        await upgrade(engine, revision="0016")
        entities = await _measure(engine, reader, "entities", "0017")
        print(f"\n0008 on {BIG} facts: {facts}\n0017 on {BIG} entities: {entities}")
        for figures in (facts, entities):
            assert figures["migration_s"] < (120 if vectors else 60)
            # The documented behaviour: readers of the table wait for the whole fill.
            assert figures["exclusive_seen_s"] > 0
            assert figures["longest_read_s"] >= 0.5 * figures["exclusive_seen_s"]
        async with engine.connect() as conn:
            filled = (
                await conn.execute(
                    text(
                        "SELECT count(*) FILTER (WHERE cardinality(search_terms) > 0), "
                        "(SELECT documents FROM text_search_corpora WHERE corpus = 'facts') "
                        "FROM facts"
                    )
                )
            ).one()
        assert tuple(filled) == (BIG, BIG)
    finally:
        await reader.dispose()
        await engine.dispose()


async def test_downgrade_of_0014_restores_the_fill_factor_of_0004(pg_databases: Any) -> None:
    """docs/scaling.md and 0014's docstring said "the default fill factor"; the downgrade
    restores 0004's 80 (what revision 0013 had), and below 0004 the default."""
    from cycgraph_memory.postgres import create_engine_from_dsn, downgrade, upgrade

    options = text("SELECT reloptions FROM pg_class WHERE oid = 'facts'::regclass")
    engine = create_engine_from_dsn(await pg_databases.create("a14mig_ff"))
    try:
        await upgrade(engine, embedding_dim=DIM)
        async with engine.connect() as conn:
            assert (await conn.execute(options)).scalar_one() == ["fillfactor=90"]
        await downgrade(engine, "0013")
        async with engine.connect() as conn:
            assert (await conn.execute(options)).scalar_one() == ["fillfactor=80"]
        await downgrade(engine, "0003")
        async with engine.connect() as conn:
            assert (await conn.execute(options)).scalar_one() is None
    finally:
        await engine.dispose()


async def test_downgrade_to_0001_with_every_table_populated_loses_only_what_docs_say(
    pg_databases: Any,
) -> None:
    """A head database holding data in every table (ledger, audit, writer keys, settings, an
    erasure record, a counter above 2**31 - 1) goes down one revision at a time to 0001 (each
    step succeeds, the base records intact), then back to head: it then holds exactly what
    the current library writes for the world a 0001 release can hold: the documented
    losses (docs/operations.md, "Downgrades") and nothing else."""
    from cycgraph_memory.postgres import create_engine_from_dsn, downgrade, upgrade

    engine = create_engine_from_dsn(await pg_databases.create("a14mig_base"))
    ref = create_engine_from_dsn(await pg_databases.create("a14mig_base_ref"))
    big = _id("acme", "f6")
    try:
        await upgrade(engine, embedding_dim=DIM)
        await seed_current(engine, HEAD)
        async with engine.begin() as conn:
            await conn.execute(text("SELECT set_config('cycgraph.tenant_id', 'acme', true)"))
            await conn.execute(
                text(
                    "INSERT INTO erasure_log (tenant_id, erasure_id, kind, selector_kinds, "
                    "selector_digests, counts, erased_at) VALUES ('acme', :e, 'purge', "
                    "'{entity}', '{abc}', '{\"facts\": 1}', now())"
                ),
                {"e": _id("erasure")},
            )
            await conn.execute(
                text("UPDATE facts SET access_count = 3000000000 WHERE id = :i"), {"i": big}
            )
        at_head = await dump(engine)
        base_tables = ("entities", "relationships", "episodes", "facts", "themes")
        step = HEAD
        while step != "0001":
            step = _prev(step)
            await downgrade(engine, step)
            now = await dump(engine)
            for table in base_tables:
                keys = {"tenant_id", "id", "content", "name", "topic", "label", "valid_from"}
                assert _project(now[table], keys) == _project(at_head[table], keys), (step, table)
        async with engine.connect() as conn:
            count = (
                await conn.execute(text("SELECT access_count FROM facts WHERE id = :i"), {"i": big})
            ).scalar_one()
        assert count == 2_147_483_647  # 0007's downgrade clamps (documented)
        async with engine.begin() as conn:
            await conn.execute(
                text("UPDATE facts SET access_count = 2000000000 WHERE id = :i"), {"i": big}
            )
        await upgrade(engine)
        await upgrade(ref, embedding_dim=DIM)
        await seed_current(ref, "0001")
        got, want = await dump(engine), await dump(ref)
        assert got == want, _diff(got, want)
    finally:
        await engine.dispose()
        await ref.dispose()


async def test_a_release_older_than_0008_serving_during_the_deploy_writes_unsearchable_rows(
    pg_databases: Any,
) -> None:
    """Replicas migrate at start-up while older ones still serve. A fact written by a
    release older than 0008 (no ``search_terms``) into the migrated schema is stored with
    no tokens: text search does not find it. Writing it again through the current store
    repairs it, statistics too. And the other revisions docs/backends.md ("Upgrading a
    deployed schema") lists as breaking older code: 0005, 0011, 0017 (0006: the
    row-level-security test above, nothing visible without the tenant setting)."""
    from cycgraph_memory.postgres import (
        PostgresMemoryIndex,
        PostgresMemoryStore,
        convert,
        create_engine_from_dsn,
        upgrade,
    )
    from cycgraph_memory.postgres.schema import Base

    engine = create_engine_from_dsn(await pg_databases.create("a14mig_rolling"))
    ref = create_engine_from_dsn(await pg_databases.create("a14mig_rolling_ref"))
    try:
        await upgrade(engine, embedding_dim=DIM)
        await upgrade(ref, embedding_dim=DIM)
        await seed_current(engine, HEAD)
        await seed_current(ref, HEAD)
        w = world("acme", HEAD)
        late = w["facts"][0].model_copy(
            update={"id": _id("late"), "content": "Quokka deploys need a rollback plan."}
        )
        old_columns = {c for c in convert.fact_to_row(late, "acme") if c != "search_terms"}
        async with engine.begin() as conn:
            row = convert.fact_to_row(late, "acme")
            await conn.execute(
                insert(Base.metadata.tables["facts"]),
                [{k: v for k, v in row.items() if k in old_columns}],
            )
        store = PostgresMemoryStore(engine, tenant_id="acme")
        index = PostgresMemoryIndex(engine, tenant_id="acme")
        assert await store.get_fact(late.id) == late  # stored, readable
        assert await index.text_search_facts("quokka", limit=5) == []  # but not searchable
        await store.put_facts([late])  # the repair: write it again with the current store
        assert [h.item.id for h in await index.text_search_facts("quokka", limit=5)] == [late.id]
        await PostgresMemoryStore(ref, tenant_id="acme").put_facts([late])
        got, want = _untouched(await dump(engine)), _untouched(await dump(ref))
        assert got == want, _diff(got, want)
        # A release older than 0017 cannot write entities at all (NOT NULL name_key).
        entity = convert.entity_to_row(w["entities"][0], "acme")
        entity.update(id=_id("late-entity"))
        entity.pop("name_key")
        with pytest.raises(Exception, match="name_key"):
            async with engine.begin() as conn:
                await conn.execute(insert(Base.metadata.tables["entities"]), [entity])
        # Older than 0005: its fact writes are refused (source_message_ids, no default).
        row = convert.fact_to_row(late.model_copy(update={"id": _id("older")}), "acme")
        for column in ("search_terms", "source_message_ids"):
            row.pop(column)
        with pytest.raises(Exception, match="source_message_ids"):
            async with engine.begin() as conn:
                await conn.execute(insert(Base.metadata.tables["facts"]), [row])
        # Older than 0008: its text search read search_tsv, which 0011 dropped.
        with pytest.raises(Exception, match="search_tsv"):
            async with engine.connect() as conn:
                await conn.execute(text("SELECT id FROM facts WHERE search_tsv @@ 'deploy'"))
    finally:
        await engine.dispose()
        await ref.dispose()


async def test_0006_refuses_a_message_stored_in_two_episodes_with_a_typed_error(
    pg_databases: Any,
) -> None:
    """A database from before 0006 may hold one message id in two episodes of a tenant;
    0006 refuses to upgrade it. The refusal was a bare ``RuntimeError``, which
    ``cycgraph-memory db upgrade`` did not catch (a traceback, not its one error line):
    now ``DuplicateRecordError``, the schema left at 0005, and the CLI prints one line
    naming the query that finds the copies (exit status 1)."""
    import subprocess
    import sys

    from cycgraph_memory.errors import DuplicateRecordError
    from cycgraph_memory.postgres import create_engine_from_dsn, current_revision, upgrade

    dsn = await pg_databases.create("a14mig_dupmsg")
    engine = create_engine_from_dsn(dsn)
    try:
        await upgrade(engine, embedding_dim=DIM, revision="0005")
        await seed_old(engine, "0005")
        async with engine.begin() as conn:  # m1 of acme's ep1 copied into ep3
            await conn.execute(
                text(
                    "INSERT INTO episode_messages (tenant_id, episode_id, id, position, role, "
                    "content, timestamp, metadata) SELECT tenant_id, :ep3, id, 0, role, "
                    "content, timestamp, metadata FROM episode_messages WHERE id = :m1"
                ),
                {"ep3": _id("acme", "ep3"), "m1": _id("acme", "m1")},
            )
        before = await dump(engine)
        with pytest.raises(DuplicateRecordError, match="more than one episode"):
            await upgrade(engine)
        assert await current_revision(engine) == "0005"
        assert await dump(engine) == before
        result = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, "-m", "cycgraph_memory.cli", "--dsn", dsn, "db", "upgrade"],
            capture_output=True,
            text=True,
            check=False,
        )
        assert result.returncode == 1, result.stderr
        assert "Traceback" not in result.stderr
        assert "more than one episode" in result.stderr
        assert "GROUP BY tenant_id, id HAVING count(*) > 1" in result.stderr
        assert await current_revision(engine) == "0005"
    finally:
        await engine.dispose()

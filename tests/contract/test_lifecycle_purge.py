"""Erasure contract (both backends): purge leaves no trace of the erased data anywhere."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from pydantic import ValidationError

from cycgraph_memory.lifecycle import REDACTED_FACT_ID, PurgeSelector, purge
from cycgraph_memory.records import GateAuditEntry, RunOutcome
from cycgraph_memory.retrieval import retrieve_memory

from .factories import (
    make_entity,
    make_episode,
    make_fact,
    make_message,
    make_relationship,
    make_theme,
    provenance,
    unit,
)

SECRET = "Zanzibarina"


async def _world(store: Any, index: Any, ledger: Any) -> dict[str, Any]:
    alice = make_entity(name=f"{SECRET} Quux", entity_type="person", embedding=unit(0))
    bob = make_entity(name="Bob Stone", entity_type="person", embedding=unit(1))
    paris = make_entity(name="Paris", entity_type="place", embedding=unit(2))
    carol = make_entity(name="Carol", entity_type="person", superseded_by=alice.id)
    m1 = make_message(content=f"{SECRET} Quux moved to Paris", embedding=unit(0))
    m2 = make_message(content="Bob likes green tea", embedding=unit(1))
    m3 = make_message(content="the weather is mild", embedding=unit(3))
    f1 = make_fact(
        content=f"{SECRET} Quux lives in Paris",
        entity_ids=[alice.id, paris.id],
        source_message_ids=[m1.id],
        embedding=unit(0),
        tags=["profile"],
    )
    f2 = make_fact(
        content="Bob likes green tea",
        entity_ids=[bob.id],
        source_message_ids=[m2.id, m1.id],
        embedding=unit(1),
        tags=["profile"],
    )
    f3 = make_fact(content="Mild weather today", source_message_ids=[m3.id], embedding=unit(3))
    ep1 = make_episode(messages=[m1, m2], topic="moving", fact_ids=[f1.id, f2.id],
                       embedding=unit(0))
    ep2 = make_episode(messages=[m3], topic="weather", fact_ids=[f3.id],
                       provenance=provenance(run_id="run-2"))
    t1 = make_theme(label=f"{SECRET} Quux lives in Paris",
                    description=f"2 facts; key terms: {SECRET.lower()}",
                    fact_ids=[f1.id, f2.id], embedding=unit(0))
    f1 = f1.model_copy(update={"theme_id": t1.id})
    f2 = f2.model_copy(update={"theme_id": t1.id})
    await store.put_entities([alice, bob, paris, carol])
    r1 = make_relationship(alice.id, paris.id, relation_type="lives_in")
    r2 = make_relationship(bob.id, paris.id, relation_type="visits")
    await store.put_relationships([r1, r2])
    await store.put_episodes([ep1, ep2])
    await store.put_themes([t1])  # facts may cite only stored themes
    await store.put_facts([f2, f3])
    await store.put_facts_once("writer-key-1", [f1])
    await ledger.record_outcome(RunOutcome(run_id="r1", score=0.8, fact_ids=[f1.id, f2.id]))
    await ledger.append_gate_audit(
        [GateAuditEntry(pass_id=uuid.uuid4(), fact_id=f1.id, verdict="held", trials=1)]
    )
    if hasattr(index, "upsert_many"):
        await index.rebuild(store)
    return {
        "alice": alice, "bob": bob, "paris": paris, "carol": carol, "m1": m1, "m2": m2,
        "m3": m3, "f1": f1, "f2": f2, "f3": f3, "ep1": ep1, "ep2": ep2, "t1": t1,
        "r1": r1, "r2": r2,
    }


def _assert_clean(blob: str, needles: list[str], where: str) -> None:
    for needle in needles:
        assert needle not in blob, f"{needle!r} still found in {where}"


async def _everything_visible(
    store: Any, index: Any, ledger: Any, w: dict[str, Any], *, retrieve: bool = True
) -> str:
    """Every read path, dumped to one string (``retrieve=False``: no usage counters moved)."""
    parts: list[str] = []
    q_vec = unit(0)
    for mode, query in () if not retrieve else (
        ("vector", {"embedding": q_vec, "min_similarity": 0.0}),
        ("text", {"text": f"{SECRET} Quux Paris", "min_similarity": 0.0}),
        ("hybrid", {"text": f"{SECRET} Quux", "embedding": q_vec, "min_similarity": 0.0}),
    ):
        res = await retrieve_memory(
            store, index, {**query, "include_invalidated": True}, mode=mode  # type: ignore[arg-type]
        )
        parts.append(res.model_dump_json())
    for query in () if not retrieve else (
        {"entity_ids": [w["alice"].id, w["paris"].id], "include_invalidated": True},
        {"tags": ["profile"], "include_invalidated": True},
    ):
        parts.append((await retrieve_memory(store, index, query)).model_dump_json())
    for rec in await store.find_entities(include_invalidated=True):
        parts.append(rec.model_dump_json())
    for rec in await store.find_facts(include_invalidated=True):
        parts.append(rec.model_dump_json(exclude={"access_count", "last_accessed_at"}))
    for rec in await store.list_episodes(include_invalidated=True):
        parts.append(rec.model_dump_json())
    for rec in await store.list_themes(include_invalidated=True):
        parts.append(rec.model_dump_json())
    ent_ids = [e.id for e in await store.find_entities(include_invalidated=True)]
    ent_ids += [w["alice"].id]
    for rec in await store.get_relationships_for_entities(ent_ids, include_invalidated=True):
        parts.append(rec.model_dump_json())
    all_msgs = [w[k].id for k in ("m1", "m2", "m3")]
    for rec in (await store.get_messages(all_msgs)).values():
        parts.append(rec.model_dump_json())
    for getter, key in (
        (store.get_entities, "alice"), (store.get_facts, "f1"), (store.get_relationships, "r1"),
    ):
        parts.extend(
            r.model_dump_json(exclude={"access_count", "last_accessed_at"})
            for r in (await getter([w[key].id])).values()
        )
    opts = {"include_invalidated": True, "limit": 50}
    for search in (index.search_entities, index.search_facts, index.search_themes,
                   index.search_episodes):
        for i in range(4):
            parts.extend(
                r.model_dump_json(exclude={"item": {"access_count", "last_accessed_at"}})
                for r in await search(unit(i), opts)
            )
    parts.extend(str(r) for r in await index.search_messages(unit(0), limit=50))
    for name in ("text_search_facts", "text_search_messages", "text_search_episodes"):
        parts.extend(str(r) for r in await getattr(index, name)(f"{SECRET} Quux Paris",
                                                                limit=50))
    parts.append(str(await index.match_entity_names(f"{SECRET} Quux", limit=50)))
    parts.append(str(await ledger.list_fact_stats()))
    parts.append(str(await ledger.list_gate_audit()))
    parts.append(str(await ledger.list_erasures()))
    return "\n".join(parts)


async def _raw_sql_dump(backend: str, request: pytest.FixtureRequest) -> str:
    if backend != "postgres":
        return ""
    from sqlalchemy import text

    maker = request.getfixturevalue("pg_sessionmaker")
    tenant = request.getfixturevalue("pg_tenant")
    parts: list[str] = []
    async with maker() as session:
        await session.execute(
            text("SELECT set_config('cycgraph.tenant_id', :t, true)"), {"t": tenant}
        )
        tables = (
            await session.execute(
                text(
                    "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = "
                    "c.relnamespace WHERE n.nspname = current_schema() AND c.relkind = 'r'"
                )
            )
        ).scalars().all()
        assert {"facts", "episode_messages", "gate_audit_log", "erasure_log"} <= set(tables)
        for table in tables:
            rows = (await session.execute(text(f'SELECT t::text FROM "{table}" t'))).scalars()
            parts.extend(rows)
        await session.rollback()
    return "\n".join(parts)


async def test_purge_a_person_leaves_no_trace(
    store: Any, index: Any, ledger: Any, backend: str, request: pytest.FixtureRequest
) -> None:
    w = await _world(store, index, ledger)
    needles = [SECRET, SECRET.lower()] + [
        str(w[k].id) for k in ("alice", "m1", "f1", "r1")
    ]
    full = await _everything_visible(store, index, ledger, w)
    for needle in needles:
        assert needle in full  # the checks below can fail
    if backend == "postgres":
        raw = await _raw_sql_dump(backend, request)
        for needle in needles:
            assert needle in raw
    before = await _everything_visible(store, index, ledger, w, retrieve=False)
    selector = PurgeSelector(entity_ids=[w["alice"].id], message_ids=[w["m1"].id])
    dry = await purge(store, selector, index=index, ledger=ledger, dry_run=True)
    after_dry = await _everything_visible(store, index, ledger, w, retrieve=False)
    assert after_dry == before  # dry run: no change
    report = await purge(store, selector, index=index, ledger=ledger)
    assert report.model_dump(exclude={"dry_run", "erasure_id"}) == dry.model_dump(
        exclude={"dry_run", "erasure_id"}
    )
    assert (report.entities, report.relationships, report.facts, report.messages) == (1, 1, 1, 1)
    assert (report.themes_updated, report.facts_updated, report.episodes_updated) == (1, 1, 1)
    assert report.entities_updated == 1  # carol.superseded_by pointed at alice
    assert report.idempotency_keys == 1
    assert (report.ledger_links, report.audit_entries_redacted) == (1, 1)
    assert report.erasure_id is not None

    after = await _everything_visible(store, index, ledger, w)
    _assert_clean(after, needles, "a read path")
    _assert_clean(await _raw_sql_dump(backend, request), needles, "a table (raw SQL)")

    # Survivors keep what is theirs, without the erased references.
    f2 = await store.get_fact(w["f2"].id)
    assert f2 is not None and f2.source_message_ids == [w["m2"].id]
    t1 = await store.get_theme(w["t1"].id)
    assert t1 is not None and t1.fact_ids == [w["f2"].id]
    assert t1.label == "Bob likes green tea" and t1.embedding is not None
    ep1 = await store.get_episode(w["ep1"].id)
    assert ep1 is not None and [m.id for m in ep1.messages] == [w["m2"].id]
    assert ep1.fact_ids == [w["f2"].id]
    assert (await store.get_messages([w["m2"].id]))[w["m2"].id].embedding is not None
    assert (await store.get_entity(w["carol"].id)).superseded_by is None  # type: ignore[union-attr]
    stats = await ledger.get_fact_stats(w["f2"].id)
    assert stats is not None and stats.trials == 1
    audit = await ledger.list_gate_audit()
    assert [a.fact_id for a in audit] == [REDACTED_FACT_ID]
    (entry,) = await ledger.list_erasures()
    assert entry.erasure_id == report.erasure_id
    assert entry.selector_kinds == ["entity_ids", "message_ids"]
    assert entry.counts["facts"] == 1 and len(entry.selector_digests) == 2
    # Purging again finds nothing more.
    again = await purge(store, selector, index=index, ledger=ledger, dry_run=True)
    assert again.counts() == {k: 0 for k in again.counts()}


async def test_purge_by_provenance_and_empty_episodes(
    store: Any, index: Any, ledger: Any
) -> None:
    w = await _world(store, index, ledger)
    report = await purge(store, run_id="run-2", index=index, ledger=ledger)
    assert (report.episodes, report.messages, report.facts) == (1, 1, 1)
    assert await store.get_episode(w["ep2"].id) is None
    assert await store.get_fact(w["f3"].id) is None  # its only source is gone
    assert await store.get_messages([w["m3"].id]) == {}
    assert await index.text_search_messages("weather mild", limit=10) == []
    assert await store.get_fact(w["f1"].id) is not None


async def test_message_purge_keeps_facts_with_surviving_sources(
    store: Any, index: Any, ledger: Any
) -> None:
    w = await _world(store, index, ledger)
    report = await purge(store, message_ids=[w["m2"].id], index=index)
    assert (report.messages, report.facts, report.facts_updated) == (1, 0, 1)
    f2 = await store.get_fact(w["f2"].id)
    assert f2 is not None and f2.source_message_ids == [w["m1"].id]


async def test_an_erased_message_leaves_no_text_in_what_survives(
    store: Any, index: Any, ledger: Any
) -> None:
    # The surviving episode's topic quoted the erased message (the segmenter takes the
    # first message's text), its vector was computed with it, and an edge extracted from
    # it quotes it as evidence.
    first = make_message(content=f"{SECRET} fermented the zymurgy batch in Ulaanbaatar")
    second = make_message(content="Helga Brandt owns the search cluster.")
    a, b = make_entity(name="Helga Brandt"), make_entity(name="search cluster")
    episode = make_episode(messages=[first, second], topic=first.content[:30],
                           embedding=unit(0))
    quoted = make_relationship(a.id, b.id, relation_type="uses",
                               attributes={"evidence": first.content,
                                           "message_id": str(first.id)})
    kept = make_relationship(a.id, b.id, relation_type="own",
                             attributes={"evidence": second.content,
                                         "message_id": str(second.id)})
    await store.put_entities([a, b])
    await store.put_episodes([episode])
    await store.put_relationships([quoted, kept])
    if hasattr(index, "upsert_many"):
        await index.rebuild(store)
    report = await purge(store, message_ids=[first.id], index=index)
    assert (report.messages, report.relationships) == (1, 1)
    survived = await store.get_episode(episode.id)
    assert survived is not None
    assert survived.topic == second.content[:30]  # taken again, as long as the old one
    assert survived.embedding is None
    assert [m.id for m in survived.messages] == [second.id]
    assert await store.get_relationship(quoted.id) is None
    assert await store.get_relationship(kept.id) is not None
    assert await index.text_search_episodes("zymurgy Ulaanbaatar", limit=5) == []
    assert await index.text_search_messages("zymurgy Ulaanbaatar", limit=5) == []


async def test_purge_whole_tenant(store: Any, index: Any, ledger: Any) -> None:
    await _world(store, index, ledger)
    await store.put_tenant_setting("theme_calibration", {"assignment_threshold": 0.8})
    await store.put_tenant_setting("other", {"x": 1})
    dry = await purge(store, tenant=True, dry_run=True)
    assert dry.tenant_settings == 2
    assert await store.get_tenant_setting("other") == {"x": 1}
    report = await purge(store, tenant=True, index=index, ledger=ledger)
    assert (report.entities, report.facts, report.episodes, report.themes) == (4, 3, 2, 1)
    assert report.ledger_runs == 1
    assert report.tenant_settings == 2
    assert await store.get_tenant_setting("theme_calibration") is None
    assert await store.get_tenant_setting("other") is None
    assert await store.find_entities(include_invalidated=True) == []
    assert await store.find_facts(include_invalidated=True) == []
    assert await store.list_episodes(include_invalidated=True) == []
    assert await index.search_facts(unit(0), include_invalidated=True) == []
    assert await ledger.list_fact_stats() == []


@pytest.mark.parametrize(
    "bad",
    [{}, {"tenant": True, "run_id": "x"}, {"entity_ids": ["not-a-uuid"]}, {"source": "alien"},
     {"run_id": ""}, {"unknown": 1}],
)
async def test_bad_selectors_are_refused_and_change_nothing(
    store: Any, index: Any, ledger: Any, bad: dict[str, Any]
) -> None:
    w = await _world(store, index, ledger)
    before = await _everything_visible(store, index, ledger, w, retrieve=False)
    with pytest.raises(ValidationError):
        await purge(store, bad, index=index, ledger=ledger)
    assert await _everything_visible(store, index, ledger, w, retrieve=False) == before

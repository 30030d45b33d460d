"""Audit 6 (n): themes after a purge by provenance and after a re-embedding, on both backends.

Every live fact stays in exactly one live theme that lists it (docs/operations.md), also
after ``purge(run_id=...)`` erased the run that created the theme; and a theme's vector
is the centroid of its *live* members whichever pass computed it (consolidation,
``reembed``, purge).
"""

from __future__ import annotations

import uuid
from typing import Any

import numpy as np
import pytest

from cycgraph_memory import (
    HashingEmbeddingProvider,
    MemoryConsolidator,
    MemoryPipeline,
    Message,
    purge,
)
from cycgraph_memory.lifecycle import reembed

from .factories import EMBED_DIM, make_fact, make_theme, provenance, unit, vec
from .test_hierarchy_invariants_audit5 import _messages, _violations

SECRET = "Quaxerbloom"


def _close(a: Any, b: Any) -> bool:
    return a is not None and bool(np.allclose(np.asarray(a), np.asarray(b), atol=1e-6))


def _unit_mean(*vectors: Any) -> Any:
    m = np.asarray(vectors, dtype=np.float64)
    total = (m / np.linalg.norm(m, axis=1, keepdims=True)).sum(axis=0)
    return total / np.linalg.norm(total)


async def _mixed_theme(store: Any) -> dict[str, Any]:
    """A live theme created by run X listing X's fact and two facts of run Y (one live).

    Its label and description quote X's fact, as the clusterer's do.
    """
    fx = make_fact(content=f"{SECRET} owns the blue boat", embedding=unit(0),
                   provenance=provenance(run_id="run-x"))
    fy = make_fact(content="Bob likes green tea", embedding=unit(1),
                   provenance=provenance(run_id="run-y", agent_id="agent-y"))
    fz = make_fact(content="Carol lives in Oslo", embedding=unit(2),
                   provenance=provenance(run_id="run-y"), invalidated_by="forgotten")
    theme = make_theme(label=f"{SECRET} owns the blue boat",
                       description=f"3 facts; key terms: {SECRET.lower()}",
                       fact_ids=[fx.id, fy.id, fz.id], embedding=unit(0),
                       provenance=provenance(run_id="run-x"))
    await store.put_themes([theme])
    await store.put_facts([f.model_copy(update={"theme_id": theme.id}) for f in (fx, fy, fz)])
    return {"fx": fx, "fy": fy, "fz": fz, "theme": theme}


async def test_purging_a_run_keeps_its_theme_while_it_lists_live_facts_of_other_runs(
    store: Any, index: Any
) -> None:
    """``purge(run_id=X)`` deleted a theme created by run X even when it listed live facts
    of other runs: they were left with ``theme_id=None`` in no live theme. The theme is
    now kept, re-attributed to a surviving fact and relabelled (nothing erased stays).
    """
    w = await _mixed_theme(store)

    report = await purge(store, index=index, run_id="run-x")

    assert report.facts == 1 and report.themes == 0 and report.themes_updated == 1
    assert await store.get_facts([w["fx"].id]) == {}
    (theme,) = await store.list_themes(include_invalidated=True)
    assert theme.id == w["theme"].id and theme.invalidated_at is None
    assert theme.fact_ids == [w["fy"].id, w["fz"].id]
    assert theme.provenance == w["fy"].provenance  # its first surviving live fact's
    dump = theme.model_dump_json()
    assert SECRET not in dump and SECRET.lower() not in dump and "run-x" not in dump
    assert theme.label == "Bob likes green tea"
    assert _close(theme.embedding, unit(1))  # the live survivor only
    assert (await store.get_fact(w["fy"].id)).theme_id == theme.id
    assert await _violations(store) == []
    again = await purge(store, index=index, run_id="run-x", dry_run=True)
    assert again.themes == again.themes_updated == again.facts == 0


async def test_purging_a_run_deletes_its_theme_left_with_no_live_fact(
    store: Any, index: Any
) -> None:
    """A theme of the erased run that lists only invalidated survivors still goes."""
    w = await _mixed_theme(store)
    await store.put_fact(w["fy"].model_copy(
        update={"theme_id": w["theme"].id, "invalidated_by": "forgotten"}))

    report = await purge(store, index=index, run_id="run-x")

    assert report.themes == 1
    assert await store.list_themes(include_invalidated=True) == []
    assert await _violations(store) == []


async def test_purging_the_run_that_started_a_theme_leaves_later_runs_facts_themed(
    store: Any, index: Any
) -> None:
    """End to end: run "b"'s facts join the theme run "a"'s ingest created; erasing run
    "a" leaves every live fact of "b" in one live theme that lists it."""
    pipeline = MemoryPipeline(
        store, embedder=HashingEmbeddingProvider(dimensions=EMBED_DIM), index=index
    )
    t0 = _messages(0)[0].timestamp

    def said(base: int, texts: list[str]) -> list[Message]:
        return [
            Message(id=uuid.UUID(int=base + i), role="user", content=c,
                    timestamp=t0.replace(minute=base % 50 + i))
            for i, c in enumerate(texts)
        ]

    await pipeline.ingest(said(1, ["the green tea is hot.", "the green tea is sweet."]),
                          run_id="a")
    await pipeline.ingest(said(11, ["the green tea is warm.", "the green tea is hot again."]),
                          run_id="b")
    facts = {f.id: f for f in await store.find_facts()}
    mixed = [
        t for t in await store.list_themes()
        if t.provenance.run_id == "a"
        and any(facts[i].provenance.run_id == "b" for i in t.fact_ids if i in facts)
    ]
    assert mixed, "run b's facts were expected to join run a's theme"
    assert await _violations(store) == []

    await purge(store, index=index, run_id="a")

    assert await _violations(store) == []
    left = await store.find_facts()
    assert left and all(f.provenance.run_id == "b" for f in left)
    assert all(t.provenance.run_id != "a" for t in await store.list_themes(
        include_invalidated=True))


async def test_reembed_centres_themes_on_their_live_members_as_consolidation_does(
    store: Any, index: Any
) -> None:
    """``reembed`` averaged every listed fact, invalidated ones included, while
    consolidation centres a theme on its live facts: the two disagreed."""
    live = [make_fact(content=c, embedding=unit(i))
            for i, c in enumerate(["alpha bravo charlie", "delta echo foxtrot"])]
    dead = make_fact(content="an invalidated fact", embedding=unit(2), invalidated_by="x")
    theme = make_theme(fact_ids=[live[0].id, dead.id, live[1].id], embedding=unit(5))
    await store.put_themes([theme])
    await store.put_facts([f.model_copy(update={"theme_id": theme.id})
                           for f in (*live, dead)])
    provider = HashingEmbeddingProvider(dimensions=EMBED_DIM, seed=11)

    await reembed(store, provider, record_types=["fact", "theme"])

    new = {f.id: f for f in await store.find_facts(include_invalidated=True)}
    (got,) = await store.list_themes()
    expected = _unit_mean(*(new[f.id].embedding for f in live))
    assert _close(got.embedding, expected)
    # consolidation's centroid of the same theme (a third live fact removed by the pass)
    extra = make_fact(content="golf hotel india", embedding=vec(0.5, 0.25, dim=EMBED_DIM),
                      valid_from=live[0].valid_from.replace(year=2000), theme_id=theme.id)
    await store.put_fact(extra)
    await store.put_themes([got.model_copy(update={"fact_ids": [*got.fact_ids, extra.id]})])
    await MemoryConsolidator(
        store, index, max_facts=2, delete_mode="hard", dedup_threshold=1.0
    ).consolidate()
    (after,) = await store.list_themes()
    assert extra.id not in after.fact_ids
    assert _close(after.embedding, got.embedding)


async def test_reembed_gives_a_theme_without_live_members_no_vector(store: Any) -> None:
    dead = make_fact(content="an invalidated fact", embedding=unit(2), invalidated_by="x")
    theme = make_theme(fact_ids=[dead.id], embedding=unit(2))
    await store.put_themes([theme])
    await store.put_fact(dead.model_copy(update={"theme_id": theme.id}))

    await reembed(store, HashingEmbeddingProvider(dimensions=EMBED_DIM, seed=2),
                  record_types=["theme"])

    (got,) = await store.list_themes()
    assert got.embedding is None


@pytest.mark.postgres
async def test_a_width_change_centres_themes_on_their_live_members(
    backend: str, pg_databases: Any
) -> None:
    """The staged path (``reembed(target="next")``) follows the same rule."""
    if backend != "postgres":
        pytest.skip("a width change is Postgres-only")
    from cycgraph_memory.postgres import (
        PostgresMemoryStore,
        begin_width_change,
        create_engine_from_dsn,
        finish_width_change,
        upgrade,
    )

    dsn = await pg_databases.create("cycgraph_audit6_width")
    engine = create_engine_from_dsn(dsn)
    try:
        await upgrade(engine, embedding_dim=EMBED_DIM)
        store = PostgresMemoryStore(engine, tenant_id="ta")
        live = [make_fact(content=c, embedding=unit(i))
                for i, c in enumerate(["alpha bravo charlie", "delta echo foxtrot"])]
        dead = make_fact(content="an invalidated fact", embedding=unit(2), invalidated_by="x")
        theme = make_theme(fact_ids=[live[0].id, dead.id, live[1].id], embedding=unit(5))
        await store.put_themes([theme])
        await store.put_facts([f.model_copy(update={"theme_id": theme.id})
                               for f in (*live, dead)])
        new = HashingEmbeddingProvider(dimensions=16, seed=1)
        await begin_width_change(engine, 16)
        await reembed(store, new, target="next")
        assert await finish_width_change(engine, ["ta"]) == 16
        store = PostgresMemoryStore(engine, tenant_id="ta")
        (got,) = await store.list_themes()
        assert _close(got.embedding, _unit_mean(*await new.embed([f.content for f in live])))
    finally:
        await engine.dispose()

"""Themes show only what memory serves (audit 9), on both backends.

A theme's label quotes one of its facts and its centroid is their mean. The writers that
stop serving a fact (consolidation's decay and merges, the retention gate's evictions,
conflict resolution, ``Memory.forget``) left the themes listing it as they were, or
re-centred them while keeping the label: a theme kept quoting a decayed, evicted,
invalidated or forgotten fact to every query it matched, and quarantined facts kept
shaping centroids. Each writer now re-centres and relabels those themes from their
servable members (live, not quarantined).
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import pytest

from cycgraph_memory import ConflictDetector, Memory
from cycgraph_memory.consolidation import MemoryConsolidator
from cycgraph_memory.hierarchy.clustering import theme_description, theme_label
from cycgraph_memory.hierarchy.theme_upkeep import UNTITLED_THEME, recentre_theme
from cycgraph_memory.records import (
    QUARANTINE_TAG,
    Conflict,
    MemoryQuery,
    RunOutcome,
    SemanticFact,
    Theme,
)
from cycgraph_memory.retention import evaluate_retention
from cycgraph_memory.retrieval import retrieve_memory

from .factories import at, make_fact, make_theme, vec

A_TEXT = "Deploys go out on Fridays after the standup"
B_TEXT = "The billing service depends on PostgreSQL"
C_TEXT = "The billing service caches invoices in Redis"
D_TEXT = "The billing service logs to Loki"

_runs = itertools.count()
R = 1 / math.sqrt(2)


async def seed(
    store: Any, index: Any, *, a_tags: tuple[str, ...] = (), d: bool = False
) -> tuple[Theme, list[SemanticFact]]:
    """A theme labelled with A (the oldest fact) over A, B, C (and D, older than A)."""
    theme = make_theme(label=theme_label(A_TEXT), description="3 facts",
                       embedding=vec(1.0, 1.0, 1.0))
    facts = [
        make_fact(content=A_TEXT, embedding=vec(0.0, 0.0, 1.0), theme_id=theme.id,
                  valid_from=at(days=1), tags=list(a_tags)),
        make_fact(content=B_TEXT, embedding=vec(1.0), theme_id=theme.id, valid_from=at(days=2)),
        make_fact(content=C_TEXT, embedding=vec(0.0, 1.0), theme_id=theme.id,
                  valid_from=at(days=3)),
    ]
    if d:
        facts.append(make_fact(content=D_TEXT, embedding=vec(0.0, 0.0, 0.0, 1.0),
                               theme_id=theme.id, valid_from=at(days=0)))
    theme = theme.model_copy(update={"fact_ids": [f.id for f in facts]})
    await store.put_theme(theme)
    await store.put_facts(facts)
    await index.rebuild(store)
    return theme, facts


async def assert_repaired_from_b_and_c(store: Any, theme: Theme) -> Theme:
    """The theme is centred on B and C and quotes B (two members tie: the first wins)."""
    stored = await store.get_theme(theme.id)
    assert stored is not None and stored.invalidated_at is None
    assert stored.label == theme_label(B_TEXT)
    assert stored.description == theme_description([B_TEXT, C_TEXT], 2)
    assert stored.embedding == pytest.approx(vec(R, R), abs=1e-6)
    return stored


async def served_labels(store: Any, index: Any) -> list[str]:
    result = await retrieve_memory(
        store, index, MemoryQuery(embedding=vec(1.0, 1.0, 1.0), min_similarity=0.1)
    )
    return [t.label for t in result.themes]


async def test_consolidation_decay_relabels_the_theme_it_re_centres(
    store: Any, index: Any
) -> None:
    theme, facts = await seed(store, index)
    consolidator = MemoryConsolidator(store, index, max_facts=2, clock=lambda: at(days=30))
    report = await consolidator.consolidate()
    assert report.facts_decayed == 1 and report.themes_cleaned_up == 1
    stored = await assert_repaired_from_b_and_c(store, theme)
    assert stored.fact_ids == [facts[1].id, facts[2].id]
    assert await served_labels(store, index) == [theme_label(B_TEXT)]
    again = await consolidator.consolidate()
    assert again.themes_cleaned_up == 0 and again.facts_decayed == 0


async def test_consolidation_keeps_quarantined_facts_out_of_a_re_centred_theme(
    store: Any, index: Any
) -> None:
    # A was quarantined after it joined the theme; D decays, so the theme is re-centred.
    theme, facts = await seed(store, index, a_tags=(QUARANTINE_TAG,), d=True)
    report = await MemoryConsolidator(
        store, index, max_facts=2, clock=lambda: at(days=30)
    ).consolidate()
    assert report.facts_decayed == 1  # D; A is quarantined, outside the pass
    stored = await assert_repaired_from_b_and_c(store, theme)
    assert stored.fact_ids == [facts[0].id, facts[1].id, facts[2].id]  # A stays listed
    assert (await store.get_facts([facts[0].id]))[facts[0].id].tags == [QUARANTINE_TAG]


async def test_consolidation_repairs_a_theme_quoting_a_fact_quarantined_later(
    store: Any, index: Any
) -> None:
    theme, _facts = await seed(store, index, a_tags=(QUARANTINE_TAG,))
    consolidator = MemoryConsolidator(store, index, debug=True)
    report = await consolidator.consolidate()
    # Repaired (one theme write) but not "cleaned up": the spec's themesCleanedUp counts
    # themes whose fact_ids were updated, and this one lists the same facts (audit 10).
    assert report.themes_cleaned_up == 0 and report.facts_decayed == 0
    assert [(m.type, m.id) for m in report.mutation_log or []] == [("theme_updated", theme.id)]
    await assert_repaired_from_b_and_c(store, theme)
    assert await served_labels(store, index) == [theme_label(B_TEXT)]
    assert (await consolidator.consolidate()).themes_cleaned_up == 0


async def test_gate_eviction_relabels_the_theme_quoting_the_lesson(
    store: Any, index: Any, ledger: Any
) -> None:
    theme, facts = await seed(store, index, a_tags=("lesson", "candidate"))
    assert await served_labels(store, index) == [theme_label(A_TEXT)]
    for score, cited in [(0.1, True), (0.12, True), (0.08, True),
                         *((s, False) for s in (0.45, 0.5, 0.55, 0.5, 0.48, 0.52))]:
        await ledger.record_outcome(RunOutcome(
            run_id=f"run-{next(_runs)}", score=score,
            fact_ids=[facts[0].id] if cited else [],
        ))
    report = await evaluate_retention(store, ledger)
    assert [(e.fact_id, e.reason) for e in report.evicted] == [
        (facts[0].id, "eval-gate:harmful")
    ]
    stored = await assert_repaired_from_b_and_c(store, theme)
    assert stored.fact_ids == theme.fact_ids  # still listed: an audit query reaches it
    await index.rebuild(store)  # the in-memory index keeps its own copies
    labels = await served_labels(store, index)
    assert labels == [theme_label(B_TEXT)]
    assert all(A_TEXT not in label for label in labels)


async def test_conflict_resolution_relabels_the_loser_s_theme(store: Any, index: Any) -> None:
    theme, facts = await seed(store, index)
    winner = make_fact(content="Deploys no longer go out on Fridays", valid_from=at(days=9))
    await store.put_fact(winner)
    detector = ConflictDetector(store, index)
    conflict = Conflict(fact_a=facts[0], fact_b=winner, type="negation", confidence=0.8)
    plan = await detector.plan_resolution([conflict], "supersede-on-newer")
    assert [m.reason for m in plan.mutations] == ["fact_invalidated", "theme_updated"]
    assert (await store.get_theme(theme.id)) == theme  # planning writes nothing
    detail = await detector.resolve_conflict(conflict, "keep_b")
    assert detail.action == "keep_b"
    await assert_repaired_from_b_and_c(store, theme)
    assert (await detector.plan_resolution([conflict], "supersede-on-newer")).empty


async def test_forget_relabels_and_retires_a_theme_left_with_no_live_fact(
    store: Any, index: Any
) -> None:
    theme, facts = await seed(store, index)
    memory = Memory(store, index)
    await memory.forget([facts[0].id])
    await assert_repaired_from_b_and_c(store, theme)
    assert await served_labels(store, index) == [theme_label(B_TEXT)]
    await memory.forget([facts[1].id, facts[2].id])
    stored = await store.get_theme(theme.id)
    assert stored is not None and stored.invalidated_at is not None  # soft-deleted
    assert await served_labels(store, index) == []


async def test_forget_with_only_quarantined_members_left_quotes_nothing(
    store: Any, index: Any
) -> None:
    theme, facts = await seed(store, index)
    await store.put_facts([
        f.model_copy(update={"tags": [QUARANTINE_TAG]}) for f in facts[1:]
    ])
    await Memory(store, index).forget([facts[0].id])
    stored = await store.get_themes([theme.id])
    assert stored[theme.id].invalidated_at is None  # B and C are live, held for review
    assert stored[theme.id].label == UNTITLED_THEME
    assert stored[theme.id].embedding is None  # no longer matched by similarity
    assert stored[theme.id].description == "0 facts"
    assert await served_labels(store, index) == []


def test_recentre_theme_shows_servable_members_only() -> None:
    theme = make_theme(label="old")
    members = [
        make_fact(content=A_TEXT, embedding=vec(1.0), invalidated_by="forgotten"),
        make_fact(content=D_TEXT, embedding=vec(1.0), tags=[QUARANTINE_TAG]),
        make_fact(content=C_TEXT, embedding=vec(0.0, 1.0)),
    ]
    out = recentre_theme(theme, members)
    assert out.label == theme_label(C_TEXT)
    assert out.embedding == pytest.approx(vec(0.0, 1.0))
    assert out.description == theme_description([C_TEXT], 1)
    assert out.fact_ids == [m.id for m in members]

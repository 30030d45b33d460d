"""Ingest pipeline audit (round 3), on both backends: checks written from the spec alone.

Each test states the documented behaviour it checks; the ones named after a bug failed
before the fix that came with them.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from cycgraph_memory import Message, Provenance
from cycgraph_memory.embeddings.hashing import HashingEmbeddingProvider
from cycgraph_memory.hierarchy.calibration import THEME_CALIBRATION_KEY
from cycgraph_memory.hierarchy.clustering import ConsolidatingThemeClusterer
from cycgraph_memory.hierarchy.extractors.rules import RuleBasedExtractor
from cycgraph_memory.hierarchy.pipeline import MemoryPipeline

from .factories import EMBED_DIM, at

SAID = [
    ("user", "Alice Smith maintains the billing service at Acme Corp."),
    ("assistant", "The billing service depends on Postgres for its ledger."),
    ("user", "Bob Jones manages the platform team at Acme Corp."),
    ("assistant", "The platform team uses Kubernetes for every deployment."),
]


def _messages(offset_minutes: int = 0) -> list[Message]:
    return [
        Message(role=role, content=text, timestamp=at() + timedelta(minutes=offset_minutes + i))
        for i, (role, text) in enumerate(SAID)
    ]


def _pipeline(store: Any, **kwargs: Any) -> MemoryPipeline:
    kwargs.setdefault("extractor", RuleBasedExtractor())
    return MemoryPipeline(store, embedder=HashingEmbeddingProvider(dimensions=EMBED_DIM),
                          **kwargs)


async def _everything(store: Any) -> list[Any]:
    records: list[Any] = [
        *await store.list_episodes(include_invalidated=True),
        *await store.find_facts(include_invalidated=True),
        *await store.find_entities(include_invalidated=True),
        *await store.list_themes(include_invalidated=True),
    ]
    for entity in await store.find_entities(include_invalidated=True):
        records += await store.get_relationships_for_entity(
            entity.id, direction="outgoing", include_invalidated=True
        )
    return records


# --------------------------------------------------------------------------- provenance


async def test_bug_new_themes_carry_the_ingest_provenance(store: Any) -> None:
    """Spec: provenance on every record; docs/pipeline.md: run_id, node_id, agent_id and
    source go into the provenance of *every new record* an ingest writes. New themes came
    back with a bare ``Provenance(source="derived")``: which run built a theme was lost."""
    report = await _pipeline(store).ingest(
        _messages(), run_id="run-7", node_id="reflect", agent_id="agent-3", source="agent"
    )
    assert report.theme_ids
    records = await _everything(store)
    kinds = {type(r).__name__ for r in records}
    assert {"Episode", "SemanticFact", "Entity", "Relationship", "Theme"} <= kinds
    for record in records:
        p = record.provenance
        assert (p.source, p.run_id, p.node_id, p.agent_id) == (
            "agent", "run-7", "reflect", "agent-3"), (type(record).__name__, p)


async def test_bug_new_themes_take_the_provenance_template(store: Any) -> None:
    """A ``provenance=`` template reaches new themes too (tool_name included)."""
    template = Provenance(source="tool", run_id="run-t", tool_name="importer")
    await _pipeline(store).ingest(_messages(), provenance=template)
    themes = await store.list_themes()
    assert themes
    for theme in themes:
        p = theme.provenance
        assert (p.source, p.run_id, p.tool_name) == ("tool", "run-t", "importer")


async def test_bug_a_new_general_theme_carries_the_ingest_provenance(store: Any) -> None:
    """Without an embedder every fact goes to the tenant's "General" theme; the ingest
    that creates it wrote it with a bare ``Provenance(source="derived")``."""
    pipeline = MemoryPipeline(store, extractor=RuleBasedExtractor())
    await pipeline.ingest(_messages(), run_id="run-g", node_id="n-g", source="human")
    [general] = await store.list_themes()
    assert general.label == "General"
    p = general.provenance
    assert (p.source, p.run_id, p.node_id) == ("human", "run-g", "n-g")
    # a later run only adds facts to it: the theme keeps the run that created it
    await pipeline.ingest(_messages(offset_minutes=60), run_id="run-h")
    [after] = await store.list_themes()
    assert after.id == general.id and after.provenance.run_id == "run-g"
    assert len(after.fact_ids) > len(general.fact_ids)


async def test_an_updated_existing_theme_keeps_its_origin(store: Any) -> None:
    """A theme a later run only adds facts to is not a new record: its provenance (the run
    that created it) is kept, while the new facts carry the later run."""
    pipeline = _pipeline(store, clusterer=ConsolidatingThemeClusterer(-1.0, 1.0))
    await pipeline.ingest(_messages(), run_id="run-1")
    [theme] = await store.list_themes()
    await pipeline.ingest(_messages(offset_minutes=60)[:2], run_id="run-2")
    [after] = await store.list_themes()
    assert after.id == theme.id and len(after.fact_ids) > len(theme.fact_ids)
    assert after.provenance.run_id == "run-1"
    new_facts = [f for f in await store.find_facts() if f.id not in set(theme.fact_ids)]
    assert new_facts and {f.provenance.run_id for f in new_facts} == {"run-2"}


# --------------------------------------------------------------------------- all-or-nothing


@pytest.mark.parametrize(
    "method", ["put_episodes", "put_entities", "put_relationships", "put_themes", "put_facts"]
)
async def test_a_write_failing_midway_leaves_nothing(
    store: Any, method: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ingest writes everything in one transaction: a failure at any write leaves no
    record, no message and no calibration record behind, and a retry then stores it all."""
    messages = _messages()

    async def broken(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("disk full")

    monkeypatch.setattr(store, method, broken)
    with pytest.raises(RuntimeError, match="disk full"):
        await _pipeline(store).ingest(messages, run_id="run-1")
    monkeypatch.undo()
    assert await _everything(store) == []
    assert await store.get_messages([m.id for m in messages]) == {}
    getter = getattr(store, "get_tenant_setting", None)
    if getter is not None:
        assert await getter(THEME_CALIBRATION_KEY) is None

    report = await _pipeline(store).ingest(messages, run_id="run-1")
    assert report.messages_ingested == len(messages) and report.messages_skipped == 0
    assert set(await store.get_messages([m.id for m in messages])) == {m.id for m in messages}


async def test_a_clusterer_raising_leaves_nothing(store: Any) -> None:
    class Broken(ConsolidatingThemeClusterer):
        async def cluster(self, facts: Any, existing_themes: Any = None) -> Any:
            raise RuntimeError("clusterer down")

    with pytest.raises(RuntimeError, match="clusterer down"):
        await _pipeline(store, clusterer=Broken()).ingest(_messages())
    assert await _everything(store) == []


async def test_reingest_after_a_new_run_adds_nothing_and_keeps_the_first_provenance(
    store: Any,
) -> None:
    messages = _messages()
    pipeline = _pipeline(store)
    first = await pipeline.ingest(messages, run_id="run-1", tags=["lesson"])
    before = sorted((type(r).__name__, str(r.id)) for r in await _everything(store))
    again = await pipeline.ingest(list(reversed(messages)), run_id="run-2", tags=["other"])
    assert again.messages_skipped == len(messages) and again.messages_ingested == 0
    assert again.fact_ids == again.episode_ids == again.theme_ids == []
    after = await _everything(store)
    assert sorted((type(r).__name__, str(r.id)) for r in after) == before
    assert {r.provenance.run_id for r in after} == {"run-1"}
    assert all(f.tags == ["lesson"] for f in await store.find_facts())
    assert first.fact_ids

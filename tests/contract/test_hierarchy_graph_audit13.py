"""Knowledge graph and hierarchy pipeline audit (round 13), on both backends.

Black-box checks written from the spec's "Knowledge graph", "Hierarchy pipeline" and API
sections: provenance on every record an ingest writes (with each of the three
extractors), a stored theme merged away by an ingest is soft-deleted and its facts follow
the survivor (centroid recomputed), edge weights stay in [0, 1] (default 1) and windows
ordered on every write, and a stage failing mid-ingest leaves the store unchanged.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import pytest
from pydantic import ValidationError

from cycgraph_memory import Message
from cycgraph_memory.embeddings.hashing import HashingEmbeddingProvider
from cycgraph_memory.hierarchy import (
    ConsolidatingThemeClusterer,
    LLMExtractor,
    MemoryPipeline,
    RuleBasedExtractor,
    SimpleEpisodeSegmenter,
    SimpleSemanticExtractor,
)
from cycgraph_memory.records import Episode, ExtractionResult, Relationship

from .factories import EMBED_DIM, at, make_entity, make_relationship

SAID = [
    "Alice Smith works at Acme Corp on the billing service.",
    "The billing service depends on Postgres for its ledger.",
    "Bob Jones manages the platform team at Acme Corp.",
]

LLM_REPLY = json.dumps(
    {
        "facts": [{"content": "Alice Smith works at Acme Corp", "entities": ["Alice", "Acme"]}],
        "entities": [
            {"name": "Alice", "type": "person"},
            {"name": "Acme", "type": "organization"},
            {"name": "billing service", "type": "concept"},
            {"name": "Postgres", "type": "tool"},
            {"name": "Bob", "type": "person"},
        ],
        "relationships": [
            {"source": "Alice", "target": "Acme", "relation": "work_at", "weight": 1.7},
            {"source": "Bob", "target": "Acme", "relation": "manage", "weight": -0.3},
            {"source": "billing service", "target": "Postgres", "relation": "depend_on"},
        ],
    }
)


def _messages(hours_apart: float = 0) -> list[Message]:
    step = timedelta(hours=hours_apart) if hours_apart else timedelta(minutes=1)
    return [
        Message(role="user", content=text, timestamp=at() + i * step) for i, text in enumerate(SAID)
    ]


async def _reply(prompt: str) -> str:
    return LLM_REPLY


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


def _extractor(kind: str) -> Any:
    if kind == "simple":
        return SimpleSemanticExtractor()
    if kind == "rules":
        return RuleBasedExtractor()
    return LLMExtractor(_reply)


# --------------------------------------------------------------------------- provenance


@pytest.mark.parametrize("kind", ["simple", "rules", "llm"])
async def test_every_record_an_ingest_writes_carries_the_ingest_provenance(
    store: Any, kind: str
) -> None:
    """'Every record knows its origin ... and optionally which run and node produced it':
    episodes, facts, entities, relationships and themes alike, whichever extractor."""
    pipeline = MemoryPipeline(
        store,
        embedder=HashingEmbeddingProvider(dimensions=EMBED_DIM),
        extractor=_extractor(kind),
    )
    report = await pipeline.ingest(
        _messages(), source="tool", run_id="run-13", node_id="node-13", agent_id="agent-13"
    )
    records = await _everything(store)
    kinds = {type(r).__name__ for r in records}
    expected = {"Episode", "SemanticFact", "Theme"}
    if kind != "simple":
        expected |= {"Entity", "Relationship"}
    assert kinds == expected
    assert len(records) == (
        len(report.episode_ids)
        + len(report.fact_ids)
        + len(report.entity_ids)
        + len(report.relationship_ids)
        + len(report.theme_ids)
    )
    for record in records:
        p = record.provenance
        assert (p.source, p.run_id, p.node_id, p.agent_id) == (
            "tool",
            "run-13",
            "node-13",
            "agent-13",
        ), record


# --------------------------------------------------------------------------- themes


def _plane(x: float, y: float) -> list[float]:
    n = math.hypot(x, y)
    return [x / n, y / n] + [0.0] * (EMBED_DIM - 2)


_VECTORS = {"alpha": _plane(1, 0), "beta": _plane(0.6, 0.8), "gamma": _plane(0.8, 0.6)}


class _KeywordEmbedder:
    """Embeds a text by the first keyword it contains (else a vector orthogonal to all)."""

    dimensions = EMBED_DIM

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        other = [0.0, 0.0, 1.0] + [0.0] * (EMBED_DIM - 3)
        return [next((v for k, v in _VECTORS.items() if k in t.lower()), other) for t in texts]


def _cos(a: Sequence[float], b: Sequence[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True)) / (
        math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b))
    )


async def test_a_stored_theme_merged_away_is_soft_deleted_and_its_facts_follow(
    store: Any,
) -> None:
    """ConsolidatingThemeClusterer merges themes at or above mergeThreshold and recomputes
    their centroids; 'a previously persisted theme absent from the returned array was
    merged away'. Soft delete: the merged-away theme stays stored, invalidated, out of the
    default listing, and every fact it held now points at the survivor."""
    pipeline = MemoryPipeline(
        store,
        embedder=_KeywordEmbedder(),
        segmenter=SimpleEpisodeSegmenter(),
        extractor=SimpleSemanticExtractor(),
        clusterer=ConsolidatingThemeClusterer(assignment_threshold=0.99, merge_threshold=0.7),
        ground_facts=False,
    )
    reports = []
    for i, word in enumerate(["alpha", "beta", "gamma"]):
        message = Message(role="user", content=f"{word} topic", timestamp=at(days=i))
        reports.append(await pipeline.ingest([message]))
    # alpha and beta (cosine 0.6 < 0.7) stay apart; gamma (0.96 with beta) joins beta's
    # theme, whose new centroid is 0.707 from alpha's: the two stored themes merge.
    assert [r.themes_merged_away for r in reports[:2]] == [[], []]
    (gone,) = reports[2].themes_merged_away
    assert gone in {reports[0].theme_ids[0], reports[1].theme_ids[0]}
    (survivor,) = await store.list_themes()
    assert survivor.id != gone
    facts = await store.find_facts()
    assert len(facts) == 3
    assert {f.theme_id for f in facts} == {survivor.id}
    assert set(survivor.fact_ids) == {f.id for f in facts}
    mean = [sum(c) / 3 for c in zip(*_VECTORS.values(), strict=True)]
    assert survivor.embedding is not None and _cos(survivor.embedding, mean) > 0.9999
    stored_gone = {t.id: t for t in await store.list_themes(include_invalidated=True)}[gone]
    assert stored_gone.invalidated_at is not None


# --------------------------------------------------------------------------- edges


async def test_llm_edge_weights_are_stored_clamped_into_0_1_with_default_1(store: Any) -> None:
    """Relationship.weight is 'Edge weight (0-1, default 1)': a model's out-of-range
    weights are clamped, a missing one is 1, on both backends."""
    pipeline = MemoryPipeline(
        store,
        embedder=HashingEmbeddingProvider(dimensions=EMBED_DIM),
        extractor=LLMExtractor(_reply),
    )
    report = await pipeline.ingest(_messages())
    edges = (await store.get_relationships(report.relationship_ids)).values()
    names = {e.id: e.name for e in await store.find_entities()}
    weights = {(names[e.source_id], e.relation_type, names[e.target_id]): e.weight for e in edges}
    assert weights == {
        ("Alice", "work_at", "Acme"): 1.0,
        ("Bob", "manage", "Acme"): 0.0,
        ("billing service", "depend_on", "Postgres"): 1.0,
    }


@pytest.mark.parametrize("weight", [1.0000001, -0.0000001, 2.0, -1.0])
@pytest.mark.parametrize("batch", [False, True])
async def test_an_edge_weight_outside_0_1_is_refused_on_write(
    store: Any, weight: float, batch: bool
) -> None:
    """Weights outside [0, 1] are refused even when smuggled past the model's validation,
    and the store is left as it was."""
    a, b = make_entity(name="A"), make_entity(name="B")
    await store.put_entities([a, b])
    with pytest.raises(ValidationError):
        make_relationship(a.id, b.id, weight=weight)
    bad = make_relationship(a.id, b.id).model_copy(update={"weight": weight})
    with pytest.raises(ValidationError):
        if batch:
            await store.put_relationships([make_relationship(a.id, b.id), bad])
        else:
            await store.put_relationship(bad)
    assert await store.get_relationships_for_entity(a.id, include_invalidated=True) == []


@pytest.mark.parametrize("weight", [0.0, 1.0])
async def test_the_ends_of_the_weight_range_are_stored_exactly(store: Any, weight: float) -> None:
    a, b = make_entity(name="A"), make_entity(name="B")
    await store.put_entities([a, b])
    edge = make_relationship(a.id, b.id, weight=weight)
    await store.put_relationship(edge)
    got = await store.get_relationship(edge.id)
    assert got is not None and got.weight == weight


async def test_an_edge_defaults_to_weight_1(store: Any) -> None:
    a, b = make_entity(name="A"), make_entity(name="B")
    await store.put_entities([a, b])
    edge = make_relationship(a.id, b.id)
    fields = edge.model_dump(exclude={"weight"})
    plain = Relationship(**fields)
    await store.put_relationship(plain)
    got = await store.get_relationship(plain.id)
    assert got is not None and got.weight == 1.0


@pytest.mark.parametrize("batch", [False, True])
async def test_an_edge_window_ending_before_it_starts_is_refused_on_write(
    store: Any, batch: bool
) -> None:
    """valid_until is when the edge 'ceased to be valid': never before valid_from, on a
    first write or when an edge is closed (re-put) later."""
    a, b = make_entity(name="A"), make_entity(name="B")
    await store.put_entities([a, b])
    edge = make_relationship(a.id, b.id, valid_from=at(days=10))
    await store.put_relationship(edge)
    with pytest.raises(ValidationError):
        edge.valid_until = at(days=9)
    closed_early = edge.model_copy(update={"valid_until": at(days=9)})
    with pytest.raises(ValidationError):
        if batch:
            await store.put_relationships([closed_early])
        else:
            await store.put_relationship(closed_early)
    got = await store.get_relationship(edge.id)
    assert got is not None and got.valid_until is None
    closed = edge.model_copy(update={"valid_until": at(days=10)})
    await store.put_relationship(closed)
    got = await store.get_relationship(edge.id)
    assert got is not None and got.valid_until == at(days=10)


# --------------------------------------------------------------------------- atomicity


class _FailsOnSecondEpisode:
    def __init__(self) -> None:
        self.calls = 0
        self.inner = RuleBasedExtractor()

    async def extract(self, episode: Episode) -> ExtractionResult:
        self.calls += 1
        if self.calls == 2:
            raise RuntimeError("extractor crashed")
        return await self.inner.extract(episode)


class _DownEmbedder:
    dimensions = EMBED_DIM

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        raise RuntimeError("embedder down")


class _DownSegmenter:
    async def segment(self, messages: Sequence[Message]) -> list[Episode]:
        raise RuntimeError("segmenter down")


@pytest.mark.parametrize("stage", ["segmenter", "extractor", "embedder"])
async def test_a_stage_failing_mid_ingest_writes_nothing(store: Any, stage: str) -> None:
    """A stage raising part-way (the second episode's extraction, the embedder, the
    segmenter) leaves no record and no message behind; the same ingest then succeeds."""
    kwargs: dict[str, Any] = {
        "embedder": HashingEmbeddingProvider(dimensions=EMBED_DIM),
        "segmenter": SimpleEpisodeSegmenter(),
        "extractor": RuleBasedExtractor(),
    }
    kwargs[stage] = {
        "segmenter": _DownSegmenter(),
        "extractor": _FailsOnSecondEpisode(),
        "embedder": _DownEmbedder(),
    }[stage]
    messages = _messages(hours_apart=1)  # three episodes
    with pytest.raises(RuntimeError, match=r"down|crashed"):
        await MemoryPipeline(store, **kwargs).ingest(messages, run_id="run-1")
    assert await _everything(store) == []
    assert await store.get_messages([m.id for m in messages]) == {}

    report = await MemoryPipeline(
        store,
        embedder=HashingEmbeddingProvider(dimensions=EMBED_DIM),
        segmenter=SimpleEpisodeSegmenter(),
        extractor=RuleBasedExtractor(),
    ).ingest(messages, run_id="run-1")
    assert report.messages_ingested == 3 and len(report.episode_ids) == 3
    assert set(await store.get_messages([m.id for m in messages])) == {m.id for m in messages}


async def test_reingesting_with_another_extractor_adds_nothing(store: Any) -> None:
    """Re-ingesting the same messages is idempotent whatever extractor the second
    pipeline uses: the messages are already stored."""
    messages = _messages()
    embedder = HashingEmbeddingProvider(dimensions=EMBED_DIM)
    await MemoryPipeline(store, embedder=embedder, extractor=RuleBasedExtractor()).ingest(messages)
    before = sorted(str(r.id) for r in await _everything(store))
    again = await MemoryPipeline(store, embedder=embedder, extractor=LLMExtractor(_reply)).ingest(
        [m.model_copy() for m in messages]
    )
    assert again.messages_ingested == 0 and again.messages_skipped == len(messages)
    assert sorted(str(r.id) for r in await _everything(store)) == before


# --------------------------------------------------------------------------- levels 0, 1, 3


@pytest.mark.parametrize("with_index", [False, True])
async def test_facts_without_embeddings_share_one_general_theme_across_ingests(
    store: Any, index: Any, with_index: bool
) -> None:
    """'Facts without embeddings fall back to a single "General" theme': ingests by fresh
    pipelines (no embedder) keep adding to the one stored General theme."""
    for day in range(3):
        pipeline = MemoryPipeline(
            store,
            extractor=RuleBasedExtractor(),
            index=index if with_index else None,
        )
        message = Message(
            role="user",
            content=f"Alice Smith works at Acme Corp on project number {day}.",
            timestamp=at(days=day),
        )
        await pipeline.ingest([message])
    themes = await store.list_themes(include_invalidated=True)
    assert [t.label for t in themes] == ["General"]
    facts = await store.find_facts()
    assert len(facts) >= 3
    assert {f.theme_id for f in facts} == {themes[0].id}
    assert set(themes[0].fact_ids) == {f.id for f in facts}


async def test_a_stored_episode_holds_its_messages_in_time_order_with_their_span(
    store: Any,
) -> None:
    """Episode.messages are 'ordered by timestamp'; started_at / ended_at are the first
    and last message's; a message's metadata comes back as given, on both backends."""
    said = [
        (3, "The billing service depends on Postgres for its ledger."),
        (1, "Alice Smith works at Acme Corp on the billing service."),
        (2, "Bob Jones manages the platform team at Acme Corp."),
    ]
    messages = [
        Message(
            role="user",
            content=text,
            timestamp=at(minute * 60),
            metadata={"turn": minute, "tool_call": {"id": f"c{minute}", "args": [1, None]}},
        )
        for minute, text in said
    ]
    report = await MemoryPipeline(
        store,
        embedder=HashingEmbeddingProvider(dimensions=EMBED_DIM),
        segmenter=SimpleEpisodeSegmenter(),
        extractor=RuleBasedExtractor(),
    ).ingest(messages)
    (episode_id,) = report.episode_ids
    episode = await store.get_episode(episode_id)
    assert episode is not None
    assert [m.timestamp for m in episode.messages] == [at(60), at(120), at(180)]
    assert (episode.started_at, episode.ended_at) == (at(60), at(180))
    assert [m.metadata for m in episode.messages] == [
        {"turn": i, "tool_call": {"id": f"c{i}", "args": [1, None]}} for i in (1, 2, 3)
    ]
    assert episode.topic == "Alice Smith works at Acme Corp on the billing service."
    assert set(episode.fact_ids) == {
        f.id for f in await store.find_facts() if episode.id in f.source_episode_ids
    }


@pytest.mark.parametrize("with_index", [False, True])
async def test_a_stored_theme_joined_by_later_ingests_is_re_centred_on_all_its_facts(
    store: Any, index: Any, with_index: bool
) -> None:
    """Theme.embedding is the 'Centroid of member facts': after facts of three ingests join
    one stored theme, its centroid is the mean of all three, not of the last batch."""
    pipeline = MemoryPipeline(
        store,
        embedder=_KeywordEmbedder(),
        index=index if with_index else None,
        segmenter=SimpleEpisodeSegmenter(),
        extractor=SimpleSemanticExtractor(),
        clusterer=ConsolidatingThemeClusterer(assignment_threshold=0.5, merge_threshold=0.99),
        ground_facts=False,
    )
    for i, word in enumerate(["alpha", "gamma", "beta"]):
        await pipeline.ingest([Message(role="user", content=f"{word} note", timestamp=at(days=i))])
    (theme,) = await store.list_themes(include_invalidated=True)
    facts = await store.find_facts()
    assert set(theme.fact_ids) == {f.id for f in facts} and len(facts) == 3
    mean = [sum(c) / 3 for c in zip(*_VECTORS.values(), strict=True)]
    assert theme.embedding is not None and _cos(theme.embedding, mean) > 0.9999


class _OneEdgeModel:
    """An LLM that declares Alice and Bob and one ``manage`` edge between them."""

    def __init__(self, source: str, target: str) -> None:
        self.source, self.target = source, target

    async def complete(self, prompt: str) -> str:
        return json.dumps(
            {
                "facts": [{"content": f"{self.source} manages {self.target}."}],
                "entities": [
                    {"name": "Alice", "type": "person"},
                    {"name": "Bob", "type": "person"},
                ],
                "relationships": [
                    {"source": self.source, "target": self.target, "relation": "manage"}
                ],
            }
        )


async def test_edges_are_directed_across_ingests(store: Any) -> None:
    """'Relationships are directed': Bob -> Alice said in a later ingest is an edge of its
    own beside Alice -> Bob, while Alice -> Bob said again is not stored twice."""
    embedder = HashingEmbeddingProvider(dimensions=EMBED_DIM)
    said = [
        ("Alice", "Bob", "Alice manages Bob on the platform team."),
        ("Bob", "Alice", "Bob manages Alice on the billing team."),
        ("Alice", "Bob", "Alice still manages Bob on the platform team."),
    ]
    for day, (source, target, text) in enumerate(said):
        pipeline = MemoryPipeline(
            store, embedder=embedder, extractor=LLMExtractor(_OneEdgeModel(source, target))
        )
        await pipeline.ingest([Message(role="user", content=text, timestamp=at(days=day))])
    people = {e.name: e.id for e in await store.find_entities()}
    assert set(people) == {"Alice", "Bob"}
    out = {
        name: [
            (r.relation_type, r.target_id)
            for r in await store.get_relationships_for_entity(
                entity_id, direction="outgoing", include_invalidated=True
            )
        ]
        for name, entity_id in people.items()
    }
    assert out == {"Alice": [("manage", people["Bob"])], "Bob": [("manage", people["Alice"])]}


async def test_a_stored_edge_a_later_run_ends_is_closed_not_removed_and_keeps_its_origin(
    store: Any,
) -> None:
    """'Temporal invalidation soft-deletes old facts rather than removing them': the
    edge "no longer works at" ends gets valid_until = when it was said, stays stored, is
    served as history, and still names the run that asserted it."""
    pipeline = MemoryPipeline(
        store,
        embedder=HashingEmbeddingProvider(dimensions=EMBED_DIM),
        extractor=RuleBasedExtractor(),
    )
    first = await pipeline.ingest(
        [
            Message(
                role="user",
                content="Alice Smith works at Acme Corp as an engineer.",
                timestamp=at(),
            )
        ],
        run_id="run-1",
    )
    (edge_id,) = first.relationship_ids
    second = await pipeline.ingest(
        [
            Message(
                role="user",
                content="Alice Smith no longer works at Acme Corp.",
                timestamp=at(days=30),
            )
        ],
        run_id="run-2",
    )
    assert second.relationship_ids == [edge_id] and second.entity_ids == []
    edge = await store.get_relationship(edge_id)
    assert edge is not None
    assert (edge.valid_from, edge.valid_until) == (at(), at(days=30))
    assert edge.invalidated_by is None and edge.provenance.run_id == "run-1"
    assert edge.weight == 1.0
    (alice,) = [e for e in await store.find_entities() if e.name == "Alice Smith"]
    assert [r.id for r in await store.get_relationships_for_entity(alice.id)] == [edge_id]

"""Issue 21: negation and ended relations on every tier, the chat graph, batch extraction."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from cycgraph_memory.embeddings.hashing import HashingEmbeddingProvider
from cycgraph_memory.hierarchy.extractors import LLMExtractor, RuleBasedExtractor
from cycgraph_memory.hierarchy.extractors._polarity import locate_claim
from cycgraph_memory.hierarchy.extractors.closing import close_ended_relationships
from cycgraph_memory.hierarchy.pipeline import MemoryPipeline
from cycgraph_memory.inmemory import InMemoryMemoryStore
from cycgraph_memory.records import (
    Entity,
    Episode,
    Message,
    Provenance,
    Relationship,
    RelationshipFilter,
)

from ._tiers import extractor_tiers

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)


def _episode(*turns: tuple[str, str] | tuple[str, str, str]) -> Episode:
    messages = [
        Message(
            role=t[0],  # type: ignore[arg-type]
            content=t[1],
            timestamp=T0 + timedelta(minutes=i),
            metadata={"name": t[2]} if len(t) == 3 else {},
        )
        for i, t in enumerate(turns)
    ]
    return Episode(
        topic="t",
        messages=messages,
        started_at=T0,
        ended_at=messages[-1].timestamp,
        provenance=Provenance(source="system"),
    )


def _edges(result: Any) -> dict[tuple[str, str, str], Relationship]:
    names = {e.id: e.name for e in result.entities}
    return {
        (names[r.source_id], r.relation_type, names[r.target_id]): r for r in result.relationships
    }


@pytest.mark.parametrize("extractor", extractor_tiers(), ids=lambda e: type(e).__name__)
async def test_no_longer_closes_the_open_edge_and_asserts_nothing_open(extractor: Any) -> None:
    result = await extractor.extract(
        _episode(
            ("user", "Helen Marsh works at Tidewater Software."),
            (
                "user",
                "Tidewater Software said that Helen Marsh no longer works at Tidewater Software.",
            ),
        )
    )
    edge = _edges(result)[("Helen Marsh", "work_at", "Tidewater Software")]
    assert edge.valid_from == T0
    assert edge.valid_until == T0 + timedelta(minutes=1)
    assert "ended" not in edge.attributes


@pytest.mark.parametrize("extractor", extractor_tiers(), ids=lambda e: type(e).__name__)
async def test_an_ended_claim_alone_is_only_a_marker(extractor: Any) -> None:
    result = await extractor.extract(
        _episode(("user", "Since version 4.2, Lattice no longer uses Elasticsearch."))
    )
    for edge in result.relationships:
        assert edge.valid_until is not None and edge.attributes.get("ended") is True


@pytest.mark.parametrize("extractor", extractor_tiers(), ids=lambda e: type(e).__name__)
async def test_chat_graph_links_the_speaker(extractor: Any) -> None:
    result = await extractor.extract(
        _episode(
            ("user", "we adopted a greyhound named Biscuit on saturday", "Maya"),
            ("user", "nice! are you coming to the Harwood Flower Show?", "Jordan"),
            ("user", "yes! and my sister Ife is coming too", "Maya"),
            ("user", "we didn't adopt the cat though", "Maya"),
        )
    )
    edges = _edges(result)
    assert ("Maya", "own", "Biscuit") in edges
    assert ("Maya", "sibling_of", "Ife") in edges
    assert ("Maya", "attend", "Harwood Flower Show") in edges
    assert edges[("Maya", "sibling_of", "Ife")].valid_from == T0 + timedelta(minutes=2)
    types = {e.name: e.entity_type for e in result.entities}
    assert types["Biscuit"] == "animal" and types["Harwood Flower Show"] == "event"
    assert not any(t[2].lower() == "cat" for t in edges)


def test_locate_claim_reads_negation_questions_and_ended() -> None:
    said = [
        ("Are you still working for Kestrel Games?", "Priya"),
        ("Nope, I left Kestrel in January.", "Tom"),
        ("Porthaven FC confirmed that striker Jonas Eklund did not sign a new contract.", None),
    ]
    assert locate_claim(said, "Tom", "Kestrel Games", "work_at") == ("ended", 1)
    assert locate_claim(said, "Porthaven FC", "Jonas Eklund", "sign") == ("negated", 2)
    assert locate_claim(said, "Priya", "Kestrel Games", "join") == ("negated", 0)
    assert locate_claim(said, "Tom", "Lisbon", "move_to") is None


class _Scripted:
    def __init__(self, reply: dict[str, Any]) -> None:
        self.reply = json.dumps(reply)

    async def complete(self, prompt: str) -> str:
        return self.reply


async def test_llm_post_check_drops_denied_and_closes_ended() -> None:
    reply = {
        "facts": [{"content": "news", "entities": []}],
        "entities": [
            {"name": "Northwind Logistics", "type": "organization"},
            {"name": "Palisade Capital", "type": "organization"},
            {"name": "Olga Brandt", "type": "person"},
            {"name": "Visa", "type": "organization"},
        ],
        "relationships": [
            {"source": "Palisade Capital", "relation": "acquire", "target": "Northwind Logistics"},
            {"source": "Olga Brandt", "relation": "join", "target": "Palisade Capital"},
            {"source": "Olga Brandt", "relation": "lead", "target": "Northwind Logistics"},
            {"source": "Olga Brandt", "relation": "work_at", "target": "Visa"},
        ],
    }
    extractor = LLMExtractor(_Scripted(reply))
    result = await extractor.extract(
        _episode(
            ("user", "Northwind Logistics refused a takeover offer from Palisade Capital."),
            ("user", "Chief executive Olga Brandt is not joining Palisade Capital."),
            ("user", "Olga Brandt, formerly of Visa, runs Northwind Logistics."),
        )
    )
    edges = _edges(result)
    assert set(edges) == {
        ("Olga Brandt", "lead", "Northwind Logistics"),
        ("Olga Brandt", "work_at", "Visa"),
    }
    assert edges[("Olga Brandt", "work_at", "Visa")].attributes.get("ended") is True
    assert edges[("Olga Brandt", "lead", "Northwind Logistics")].valid_from == T0 + timedelta(
        minutes=2
    )
    assert extractor.stats.negated_dropped == 2


async def test_close_ended_relationships_closes_stored_edges_and_creates_none() -> None:
    store = InMemoryMemoryStore()
    prov = Provenance(source="system")
    a, b, c = (Entity(name=n, entity_type="person", provenance=prov) for n in "ABC")
    await store.put_entities([a, b, c])
    stored = Relationship(
        source_id=a.id, target_id=b.id, relation_type="work_at", valid_from=T0, provenance=prov
    )
    await store.put_relationships([stored])
    when = T0 + timedelta(days=3)
    markers = [
        Relationship(
            source_id=x.id,
            target_id=y.id,
            relation_type="work_at",
            valid_from=when,
            valid_until=when,
            attributes={"ended": True},
            provenance=prov,
        )
        for x, y in ((a, b), (a, c))
    ]
    out = await close_ended_relationships(store, markers)
    assert [(r.id, r.valid_until) for r in out] == [(stored.id, when)]


async def test_pipeline_closes_a_stored_edge_from_a_later_batch() -> None:
    store = InMemoryMemoryStore()
    pipeline = MemoryPipeline(
        store, embedder=HashingEmbeddingProvider(dimensions=8), extractor=RuleBasedExtractor()
    )

    def msg(text: str, when: datetime) -> Message:
        return Message(id=uuid.uuid4(), role="user", content=text, timestamp=when)

    await pipeline.ingest([msg("Helen Marsh works at Tidewater Software.", T0)])
    later = T0 + timedelta(days=30)
    await pipeline.ingest([msg("Helen Marsh no longer works at Tidewater Software.", later)])
    marsh = next(e for e in await store.find_entities() if e.name == "Helen Marsh")
    edges = await store.get_relationships_for_entity(
        marsh.id, RelationshipFilter(direction="outgoing", relation_type="work_at")
    )
    assert len(edges) == 1
    assert edges[0].valid_until == later
    assert not any(r.attributes.get("ended") for r in edges)

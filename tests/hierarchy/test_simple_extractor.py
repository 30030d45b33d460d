from __future__ import annotations

import uuid
from datetime import UTC, datetime

from cycgraph_memory.contracts import SemanticExtractor
from cycgraph_memory.hierarchy.extractors.simple import (
    FACT_ID_NAMESPACE,
    SimpleSemanticExtractor,
)
from cycgraph_memory.records import Episode, Message, Provenance

T0 = datetime(2026, 3, 1, tzinfo=UTC)
NOW = datetime(2026, 3, 5, tzinfo=UTC)


def episode(topic: str) -> Episode:
    return Episode(
        id=uuid.UUID("11111111-1111-4111-8111-111111111111"),
        topic=topic,
        messages=[Message(role="user", content=topic, timestamp=T0)],
        started_at=T0,
        ended_at=T0,
        provenance=Provenance(source="agent", agent_id="a1", run_id="run-1", node_id="n1"),
    )


async def test_one_fact_from_topic() -> None:
    ep = episode("Deploy the billing service on Fridays")
    result = await SimpleSemanticExtractor(clock=lambda: NOW).extract(ep)
    [fact] = result.facts
    assert fact.content == "Deploy the billing service on Fridays"
    assert fact.source_episode_ids == [ep.id]
    assert fact.valid_from == T0
    assert fact.provenance.source == "derived"
    assert fact.provenance.agent_id == "a1"
    assert fact.provenance.run_id == "run-1"
    assert fact.provenance.node_id == "n1"
    assert fact.provenance.created_at == NOW
    assert fact.id == uuid.uuid5(FACT_ID_NAMESPACE, f"simple-fact:{ep.id}:0")
    assert ep.fact_ids == [fact.id]
    assert result.entities == [] and result.relationships == []


async def test_blank_topic_yields_no_fact() -> None:
    ep = episode("   ")
    ep.fact_ids = [uuid.uuid4()]
    result = await SimpleSemanticExtractor().extract(ep)
    assert result.facts == []
    assert ep.fact_ids == []


async def test_reextraction_is_idempotent() -> None:
    ep = episode("a topic")
    first = await SimpleSemanticExtractor().extract(ep)
    second = await SimpleSemanticExtractor().extract(ep)
    assert first.facts[0].id == second.facts[0].id


def test_satisfies_protocol() -> None:
    assert isinstance(SimpleSemanticExtractor(), SemanticExtractor)

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from cycgraph_memory.contracts import SemanticExtractor
from cycgraph_memory.hierarchy.extractors.rules import RuleBasedExtractor
from cycgraph_memory.hierarchy.extractors.simple import FACT_ID_NAMESPACE
from cycgraph_memory.records import Episode, Message, Provenance

T0 = datetime(2026, 3, 1, 9, 30, tzinfo=UTC)
NOW = datetime(2026, 3, 9, tzinfo=UTC)
EPISODE_ID = uuid.UUID("22222222-2222-4222-8222-222222222222")

PARAGRAPH = (
    "Yesterday I had a long call with Maria Lopez from Initech. "
    "Maria works at Initech as head of platform, and she reports to Peter Gibbons. "
    "Their team uses Kubernetes and depends on PostgreSQL for billing. "
    "Peter moved to Austin last year but still manages the infra group. "
    "Initech acquired Hooli Labs in March, which brought Gavin Belson into the company. "
    "We talked about costs for a while. ok. "
    "Gavin thinks the migration to Terraform will take a quarter."
)


def episode(*messages: tuple[str, str]) -> Episode:
    return Episode(
        id=EPISODE_ID,
        topic="t",
        messages=[Message(role=r, content=c, timestamp=T0) for r, c in messages],  # type: ignore[arg-type]
        started_at=T0,
        ended_at=T0,
        provenance=Provenance(source="agent", agent_id="bot", run_id="run-9", node_id="n-2"),
    )


async def test_natural_paragraph() -> None:
    ep = episode(("user", PARAGRAPH))
    result = await RuleBasedExtractor(clock=lambda: NOW).extract(ep)
    assert [f.content for f in result.facts] == [
        "Yesterday I had a long call with Maria Lopez from Initech.",
        "Maria works at Initech as head of platform, and she reports to Peter Gibbons.",
        "Their team uses Kubernetes and depends on PostgreSQL for billing.",
        "Peter moved to Austin last year but still manages the infra group.",
        "Initech acquired Hooli Labs in March, which brought Gavin Belson into the company.",
        "We talked about costs for a while.",
        "Gavin thinks the migration to Terraform will take a quarter.",
    ]
    assert 3 <= len(result.facts) <= 10
    assert [(e.name, e.entity_type) for e in result.entities] == [
        ("Maria Lopez", "person"),
        ("Initech", "organization"),
        ("Peter Gibbons", "person"),
        ("Kubernetes", "tool"),
        ("PostgreSQL", "tool"),
        ("Austin", "location"),
        ("infra group", "organization"),  # a lowercase noun-phrase endpoint
        ("Hooli Labs", "organization"),
        ("Gavin Belson", "person"),
        ("Terraform", "tool"),
    ]
    names = {e.id: e.name for e in result.entities}
    assert [
        (names[r.source_id], r.relation_type, names[r.target_id]) for r in result.relationships
    ] == [
        ("Maria Lopez", "work_at", "Initech"),
        ("Maria Lopez", "report_to", "Peter Gibbons"),
        ("Peter Gibbons", "move_to", "Austin"),
        ("Peter Gibbons", "manage", "infra group"),
        ("Initech", "acquire", "Hooli Labs"),
    ]
    # per-episode merging: "Maria" / "Peter" / "Gavin" join the full names
    maria = next(e for e in result.entities if e.name == "Maria Lopez")
    assert maria.attributes == {"aliases": ["Maria"]}
    assert maria.id == uuid.uuid5(FACT_ID_NAMESPACE, f"rules-entity:{EPISODE_ID}:maria lopez")
    # the second fact mentions Maria, Initech and (via "she") Peter Gibbons
    assert set(result.facts[1].entity_ids) == {
        e.id for e in result.entities if e.name in {"Maria Lopez", "Initech", "Peter Gibbons"}
    }
    assert ep.fact_ids == [f.id for f in result.facts]


async def test_provenance_ids_and_timestamps() -> None:
    ep = episode(("user", "Alice Smith works at Acme Corp. She lives in Berlin these days."))
    result = await RuleBasedExtractor(clock=lambda: NOW).extract(ep)
    records = [*result.facts, *result.entities, *result.relationships]
    for record in records:
        assert record.provenance.source == "derived"
        assert record.provenance.run_id == "run-9"
        assert record.provenance.node_id == "n-2"
        assert record.provenance.agent_id == "bot"
        assert record.provenance.created_at == NOW
        assert record.provenance.confidence is not None
        assert 0.0 < record.provenance.confidence <= 1.0
    for fact in result.facts:
        assert fact.valid_from == T0
        assert fact.source_episode_ids == [EPISODE_ID]
    assert result.facts[0].id == uuid.uuid5(FACT_ID_NAMESPACE, f"rules-fact:{EPISODE_ID}:0")
    for rel in result.relationships:
        assert rel.valid_from == T0
        assert rel.weight == 1.0
    [work, live] = result.relationships
    assert work.provenance.confidence == 0.75
    assert live.provenance.confidence == 0.65  # pronoun subject costs confidence
    assert work.attributes == {
        "evidence": "Alice Smith works at Acme Corp.",
        "message_id": str(ep.messages[0].id),
        "speaker": "user",
    }


async def test_reextraction_yields_same_ids() -> None:
    first = await RuleBasedExtractor().extract(episode(("user", PARAGRAPH)))
    second = await RuleBasedExtractor().extract(episode(("user", PARAGRAPH)))
    assert [f.id for f in first.facts] == [f.id for f in second.facts]
    assert [e.id for e in first.entities] == [e.id for e in second.entities]
    assert [r.id for r in first.relationships] == [r.id for r in second.relationships]


async def test_fact_cap_prefers_relations_and_entities() -> None:
    filler = [f"This is filler sentence number {n} without names." for n in range(12)]
    text = " ".join([*filler[:6], "Alice Smith works at Acme Corp.", *filler[6:]])
    result = await RuleBasedExtractor(max_facts=3).extract(episode(("user", text)))
    assert [f.content for f in result.facts] == [
        "This is filler sentence number 0 without names.",
        "This is filler sentence number 1 without names.",
        "Alice Smith works at Acme Corp.",
    ]
    default = await RuleBasedExtractor().extract(episode(("user", text)))
    assert len(default.facts) == 10


async def test_min_sentence_length_and_questions() -> None:
    ep = episode(("user", "Short one. Is Redis fast enough for us? Redis is a fast cache server."))
    result = await RuleBasedExtractor(min_sentence_length=12).extract(ep)
    assert [f.content for f in result.facts] == ["Redis is a fast cache server."]
    result = await RuleBasedExtractor(min_sentence_length=0).extract(ep)
    assert [f.content for f in result.facts] == ["Short one.", "Redis is a fast cache server."]


async def test_roles_tool_and_system_skipped_by_default() -> None:
    ep = episode(
        ("system", "You are a helpful assistant working for Acme Corp."),
        ("tool", '{"owner": "Bob Jones", "repo": "Falcon"}'),
        ("assistant", "Alice Smith maintains Falcon these days."),
    )
    result = await RuleBasedExtractor().extract(ep)
    assert [e.name for e in result.entities] == ["Alice Smith", "Falcon"]
    widened = await RuleBasedExtractor(roles=["system", "assistant"]).extract(ep)
    assert [e.name for e in widened.entities] == ["Acme Corp", "Alice Smith", "Falcon"]


async def test_empty_episode() -> None:
    ep = episode(("user", "ok"))
    ep.fact_ids = [uuid.uuid4()]
    result = await RuleBasedExtractor().extract(ep)
    assert result.facts == [] and result.entities == [] and result.relationships == []
    assert ep.fact_ids == []


@pytest.mark.parametrize(
    "kwargs",
    [
        {"min_sentence_length": -1},
        {"max_facts": 0},
        {"roles": ["robot"]},
        {"min_sentence_length": 2.5},
    ],
)
def test_invalid_options(kwargs: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        RuleBasedExtractor(**kwargs)  # type: ignore[arg-type]


def test_satisfies_protocol() -> None:
    assert isinstance(RuleBasedExtractor(), SemanticExtractor)
    assert RuleBasedExtractor().min_sentence_length == 20


@given(st.text(max_size=300))
@settings(max_examples=200, deadline=None)
def test_arbitrary_text_never_raises(text: str) -> None:
    text = text.replace("\x00", "")
    ep = episode(("user", text))
    result = asyncio.run(RuleBasedExtractor(min_sentence_length=0).extract(ep))
    assert len(result.facts) <= 10
    ids = {e.id for e in result.entities}
    for rel in result.relationships:
        assert rel.source_id in ids and rel.target_id in ids
        assert rel.source_id != rel.target_id
    for fact in result.facts:
        assert set(fact.entity_ids) <= ids

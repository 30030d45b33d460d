"""Contract: ended relations said the way people chat close the stored edge (both backends).

A store already holds ``Alice Smith -[work_at]-> Acme Corp`` (open). One later message, in
the shapes a person writes it, must close that edge (and add what else it says), or, when
it only asks, doubts or plans the move, leave it open. Run on the default free tiers (the
rule tier, and the parser tier when its extra is installed) with each backend.

Seventh audit pass: a second sentence after "... Acme Corp." lost the whole first
sentence on the parser tier ("Corp." parsed as its final punctuation); a label before the
message ("Update:", "P.S.") stayed in the fact; "left Acme and now works at Globex" ended
the Globex job too; "might quit Acme", "I doubt she left Acme" closed the edge.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from cycgraph_memory import HashingEmbeddingProvider, MemoryPipeline, Message
from cycgraph_memory.hierarchy.grounding import without_grounding

from .factories import EMBED_DIM
from .tiers import tier_extractor

T0 = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)
T1 = datetime(2026, 12, 15, 9, 0, tzinfo=UTC)


def _extractor(tier: str) -> Any:
    return tier_extractor(tier)


@pytest.fixture(params=["rule", "parser"])
def tier(request: pytest.FixtureRequest) -> str:
    return str(request.param)


async def _after(
    store: Any, index: Any, tier: str, text: str
) -> tuple[dict[tuple[str, str], Any], list[str]]:
    """Ingest the stored job, then ``text``; Alice's outgoing edges and the new facts' text."""
    pipeline = MemoryPipeline(
        store,
        index=index,
        extractor=_extractor(tier),
        embedder=HashingEmbeddingProvider(dimensions=EMBED_DIM),
    )
    await pipeline.ingest(
        [Message(role="user", content="Alice Smith works at Acme Corp.", timestamp=T0)]
    )
    report = await pipeline.ingest([Message(role="user", content=text, timestamp=T1)])
    entities = {e.id: e for e in await store.find_entities()}
    alice = next(e for e in entities.values() if e.name == "Alice Smith")
    edges = {
        (r.relation_type, entities[r.target_id].name): r
        for r in await store.get_relationships_for_entity(alice.id, direction="outgoing")
    }
    facts = await store.get_facts(report.fact_ids)
    return edges, [without_grounding(f.content) for f in facts.values()]


@pytest.mark.parametrize(
    "text",
    [
        "Alice Smith no longer works at Acme Corp. She joined Globex Inc as CTO this month.",
        "Alice Smith left Acme Corp. She starts at Globex Inc on Monday.",
        "Alice Smith quit Acme Corp. Bob Jones is taking over her team.",
        "so Alice Smith doesn't work at Acme Corp anymore. wild right",
        "Alice Smith resigned from Acme Corp. Nobody saw that coming.",
    ],
)
async def test_an_ending_followed_by_another_sentence_closes_the_edge(
    store: Any, index: Any, tier: str, text: str
) -> None:
    edges, _ = await _after(store, index, tier, text)
    assert edges[("work_at", "Acme Corp")].valid_until == T1


async def test_a_job_at_a_corp_followed_by_another_sentence_is_stored(
    store: Any, index: Any, tier: str
) -> None:
    edges, _ = await _after(
        store, index, tier, "Alice Smith joined Globex Inc. She likes it there."
    )
    assert edges[("join", "Globex Inc")].valid_until is None
    assert edges[("work_at", "Acme Corp")].valid_until is None  # nothing ended


@pytest.mark.parametrize(
    "text",
    [
        "Update: Alice Smith no longer works at Acme Corp.",
        "Note - Alice Smith no longer works at Acme Corp.",
        "Heads up: Alice Smith left Acme Corp.",
        "P.S. Alice Smith no longer works at Acme Corp.",
        "Re: Alice Smith no longer works at Acme Corp.",
        "Quick update: Alice Smith quit Acme Corp.",
        "FYI: Alice Smith no longer works at Acme Corp.",
        "thanks! Edit: Alice Smith no longer works at Acme Corp.",
    ],
)
async def test_a_discourse_label_neither_blocks_the_ending_nor_enters_the_fact(
    store: Any, index: Any, tier: str, text: str
) -> None:
    edges, facts = await _after(store, index, tier, text)
    assert edges[("work_at", "Acme Corp")].valid_until == T1
    ending = [f for f in facts if "Acme Corp" in f]
    assert ending and all(f.startswith("Alice Smith") for f in ending), facts


@pytest.mark.parametrize(
    ("text", "new"),
    [
        ("Alice Smith left Acme Corp and now works at Globex Inc.", ("work_at", "Globex Inc")),
        ("Alice Smith left Acme Corp and works at Globex Inc now.", ("work_at", "Globex Inc")),
        ("Alice Smith quit Acme Corp and joined Globex Inc.", ("join", "Globex Inc")),
        (
            "Alice Smith no longer works at Acme Corp and now works at Globex Inc.",
            ("work_at", "Globex Inc"),
        ),
        ("Alice Smith left Acme Corp and she works at Globex Inc now.", ("work_at", "Globex Inc")),
        ("Alice Smith left Acme Corp, and joined Globex Inc last week.", ("join", "Globex Inc")),
    ],
)
async def test_the_second_clause_of_a_move_is_kept_open(
    store: Any, index: Any, tier: str, text: str, new: tuple[str, str]
) -> None:
    edges, _ = await _after(store, index, tier, text)
    assert edges[("work_at", "Acme Corp")].valid_until == T1
    assert edges[new].valid_until is None
    if text.endswith("last week."):  # a past event dated after its object: then
        monday = datetime(T1.year, T1.month, T1.day, tzinfo=UTC) - timedelta(days=T1.weekday())
        assert edges[new].valid_from == monday - timedelta(days=7)
    else:
        assert edges[new].valid_from == T1


async def test_coordinated_objects_of_one_departure_both_end(
    store: Any, index: Any, tier: str
) -> None:
    # "left Acme Corp and Globex Inc": one departure from both (no new clause).
    edges, _ = await _after(
        store, index, tier, "Alice Smith left Acme Corp and Globex Inc last year."
    )
    assert edges[("work_at", "Acme Corp")].valid_until == T1
    assert ("work_at", "Globex Inc") not in edges  # an ended marker writes no edge


@pytest.mark.parametrize(
    "text",
    [
        "does Alice Smith still work at Acme Corp?",
        "does Alice Smith still work at Acme Corp",
        "Has Alice Smith left Acme Corp?",
        "Alice Smith might leave Acme Corp.",
        "Alice Smith might quit Acme Corp.",
        "Alice Smith may quit Acme Corp and join Globex Inc.",
        "Alice Smith will leave Acme Corp next year.",
        "Alice Smith will quit Acme Corp next year.",
        "Alice Smith will no longer work at Acme Corp after March.",
        "Alice Smith wants to quit Acme Corp.",
        "Alice Smith could quit Acme Corp any day now.",
        "I doubt Alice Smith left Acme Corp.",
        "Maybe Alice Smith quit Acme Corp, not sure.",
        "It is not true that Alice Smith no longer works at Acme Corp.",
    ],
)
async def test_a_question_a_doubt_or_a_plan_ends_nothing(
    store: Any, index: Any, tier: str, text: str
) -> None:
    edges, _ = await _after(store, index, tier, text)
    assert edges[("work_at", "Acme Corp")].valid_until is None

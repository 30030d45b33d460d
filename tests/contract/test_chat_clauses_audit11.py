"""Contract: chat clauses the free tiers used to drop reach the store (both backends).

Eleventh audit pass (clauses). "i don't live in Ottawa anymore either, moved to Montreal"
closes the stored Ottawa edge and stores the move (the "do" negation stays in its own
clause; before, the move was dropped); "yeah quit Shopify in december, joined a studio
called Pixelfern" closes the speaker's stored Shopify job on December 1 (the message's
December before it) and stores the join (before: nothing on the rule tier, no ending on
the parser tier); "btw my wife Noor just got promoted at Airbnb" stores Noor's job on the
parser tier too; "Raj left Shopify, he works at Google now" closes Raj's job and stores
his Google job (before: nothing on the parser tier); "Tom is CEO of Monzo" stores
``lead`` (before: nothing). Negated and
hedged forms store none of these. Rule and parser tiers.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from .tiers import ingest_said, tier_extractor

EARLIER = datetime(2025, 3, 1, 9, 0, tzinfo=UTC)
T = datetime(2026, 6, 15, 20, 0, tzinfo=UTC)
DECEMBER = datetime(2025, 12, 1, tzinfo=UTC)


def _extractor(tier: str) -> Any:
    return tier_extractor(tier)


@pytest.fixture(params=["rule", "parser"])
def tier(request: pytest.FixtureRequest) -> str:
    return str(request.param)


async def _stored(
    store: Any, index: Any, tier: str, *said: tuple[datetime, str]
) -> dict[tuple[str, str, str], Any]:
    """Ingest each (time, text) said by Lu; every stored edge as (source, relation, target)."""
    return await ingest_said(store, index, _extractor(tier), said, "Lu")


async def test_a_negation_stays_in_its_clause(store: Any, index: Any, tier: str) -> None:
    edges = await _stored(
        store,
        index,
        tier,
        (EARLIER, "I live in Ottawa."),
        (T, "i don't live in Ottawa anymore either, moved to Montreal"),
    )
    assert set(edges) == {("Lu", "live_in", "Ottawa"), ("Lu", "move_to", "Montreal")}
    home, move = edges[("Lu", "live_in", "Ottawa")], edges[("Lu", "move_to", "Montreal")]
    assert (home.valid_from, home.valid_until) == (EARLIER, T)
    assert (move.valid_from, move.valid_until) == (T, None)


async def test_a_subjectless_departure_is_the_speakers(store: Any, index: Any, tier: str) -> None:
    edges = await _stored(
        store,
        index,
        tier,
        (EARLIER, "I work at Shopify."),
        (T, "yeah quit Shopify in december, joined a studio called Pixelfern"),
    )
    assert set(edges) == {("Lu", "work_at", "Shopify"), ("Lu", "join", "Pixelfern")}
    job, join = edges[("Lu", "work_at", "Shopify")], edges[("Lu", "join", "Pixelfern")]
    assert (job.valid_from, job.valid_until) == (EARLIER, DECEMBER)
    assert (join.valid_from, join.valid_until) == (T, None)


async def test_a_pronoun_after_a_named_departure_is_that_person(
    store: Any, index: Any, tier: str
) -> None:
    # Before the fix the parser tier stored nothing here (spaCy's small model tags a
    # sentence-opening "Raj" as an adverb) and ended the speaker's job on "Raj left Shopify".
    edges = await _stored(
        store,
        index,
        tier,
        (EARLIER, "Raj works at Shopify."),
        (T, "Raj left Shopify, he works at Google now"),
    )
    assert set(edges) == {("Raj", "work_at", "Shopify"), ("Raj", "work_at", "Google")}
    old, new = edges[("Raj", "work_at", "Shopify")], edges[("Raj", "work_at", "Google")]
    assert (old.valid_from, old.valid_until) == (EARLIER, T)
    assert (new.valid_from, new.valid_until) == (T, None)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("btw my wife Noor just got promoted at Airbnb", ("Noor", "work_at", "Airbnb")),
        ("Tom is CEO of Monzo", ("Tom", "lead", "Monzo")),
        ("Tom is the founder of Monzo", ("Tom", "found", "Monzo")),
    ],
)
async def test_fillers_and_roles_of_store_the_edge(
    store: Any, index: Any, tier: str, text: str, expected: tuple[str, str, str]
) -> None:
    edges = await _stored(store, index, tier, (T, text))
    assert expected in edges
    assert set(edges) <= {expected, ("Lu", "spouse_of", "Noor")}
    assert (edges[expected].valid_from, edges[expected].valid_until) == (T, None)


@pytest.mark.parametrize(
    "text",
    [
        "i don't live in Ottawa, might move to Montreal",
        "never quit Shopify, might join a studio called Pixelfern",
        "btw Noor didn't get promoted at Airbnb",
        "Tom isn't CEO of Monzo",
        "Tom might be the founder of Monzo",
        'my sister said "Tom is CEO of Monzo"',
    ],
)
async def test_negated_hedged_and_quoted_forms_store_none(
    store: Any, index: Any, tier: str, text: str
) -> None:
    edges = await _stored(store, index, tier, (T, text))
    assert not any(r in {"work_at", "join", "move_to", "lead", "found"} for _, r, _ in edges)

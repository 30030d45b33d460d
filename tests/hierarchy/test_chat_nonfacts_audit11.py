"""Chat that is no fact, quoted speech and relative dates, per tier (eleventh audit pass).

Documented in extraction.md: a hypothetical ("I almost moved to Berlin"), a bet or a guess
("i bet Nadia works at Stripe", "probably moving to Glasgow") stores nothing; a claim inside
a quotation is someone else's words, never the speaker's ('Kai texted me "I quit
Deloitte"'); "<n> years / months / weeks / days ago" dates a past event or a departure, and
a leading "until" date ends a past state ("until 2 years ago I worked at Acme"); a stative
claim in the simple past set in the speaker's childhood ("when i was a kid we lived in
Manila") is ended; a tie named with "my" ("I might bring my girlfriend Tayo") holds under a
modal or a condition. Each case below (controls aside) was misread before on at least one
free tier (bench/data/extraction_corpus_v4.json found them).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from cycgraph_memory.hierarchy.extractors._dates import resolve_since, resolve_until
from cycgraph_memory.hierarchy.extractors._polarity import locate_claim, quotations, quoted_claim
from cycgraph_memory.hierarchy.grounding import resolve_first_person

from ._tiers import extractor_tiers, said_by

T = datetime(2026, 6, 15, 20, 0, tzinfo=UTC)

Edges = dict[tuple[str, str, str], tuple[bool, datetime, datetime | None]]


async def _edges(extractor: object, text: str) -> Edges:
    """(source, relation, target) -> (ended marker, valid_from, valid_until); Dan says it."""
    return {
        key: (r.attributes.get("ended") is True, r.valid_from, r.valid_until)
        for key, r in await said_by(extractor, text, T)
    }


OPEN = (False, T, None)
ENDED_AT_T = (True, T, T)

CASES: list[tuple[str, Edges]] = [
    # Not facts: hypotheticals, bets, plans that are not firm, wishes, conditions.
    ("I would work at Google if they paid more", {}),
    ("I almost moved to Berlin last year for a job at Zalando", {}),
    ("we nearly moved to Berlin", {}),
    ("i bet Nadia works at Stripe, she knows everything about payments", {}),
    ("I'm probably moving to Glasgow in the spring", {}),
    ("she probably works at Stripe", {}),
    ("I wish I lived in Lisbon", {}),
    ("if I ever get a dog I'm naming it Waffles", {}),
    # Quoted speech: the quote's "I" is not the speaker; what it says is not stored.
    ('my sister Mei said "I quit Acme"', {("Dan", "sibling_of", "Mei"): OPEN}),
    (
        'my roommate Kai just texted me "I quit Deloitte" with zero context',
        {("Dan", "live_with", "Kai"): OPEN},
    ),
    ('my boss said "we\'re moving the whole team to Austin" in standup today', {}),
    ("she told me \u201cI'm moving to Seattle\u201d once and never did", {}),
    ('she said "I quit my job at Acme"', {}),
    # Relative dates against the message's time.
    (
        "3 years ago I moved to Denver",
        {("Dan", "move_to", "Denver"): (False, datetime(2023, 6, 15, 20, 0, tzinfo=UTC), None)},
    ),
    (
        "I moved to Denver 3 years ago",
        {("Dan", "move_to", "Denver"): (False, datetime(2023, 6, 15, 20, 0, tzinfo=UTC), None)},
    ),
    (
        "Alice joined Acme Corp 2 days ago",
        {("Alice", "join", "Acme Corp"): (False, T - timedelta(days=2), None)},
    ),
    (
        "until 2 years ago I worked at Acme",
        {("Dan", "work_at", "Acme"): (True, datetime(2024, 6, 15, 20, 0, tzinfo=UTC), T)},
    ),
    (
        "I worked at Acme until 2 years ago",
        {("Dan", "work_at", "Acme"): (True, datetime(2024, 6, 15, 20, 0, tzinfo=UTC), T)},
    ),
    (
        "until 2020 I lived in Paris",
        {("Dan", "live_in", "Paris"): (True, datetime(2020, 1, 1, tzinfo=UTC), T)},
    ),
    (
        "I left Acme 3 months ago",
        {("Dan", "work_at", "Acme"): (True, datetime(2026, 3, 15, 20, 0, tzinfo=UTC), T)},
    ),
    (
        "Alice has lived in Berlin since 2 years ago",
        {("Alice", "live_in", "Berlin"): (False, datetime(2024, 6, 15, 20, 0, tzinfo=UTC), None)},
    ),
    # Past states the speaker has grown out of.
    ("when i was a kid we lived in Manila", {("Dan", "live_in", "Manila"): ENDED_AT_T}),
    ("we lived in Manila when i was a kid", {("Dan", "live_in", "Manila"): ENDED_AT_T}),
    ("we lived in Manila when i was in college", {("Dan", "live_in", "Manila"): ENDED_AT_T}),
    ("as a kid I lived in Lagos", {("Dan", "live_in", "Lagos"): ENDED_AT_T}),
    # Known limits (extraction.md): the frame must be in the claim's sentence; a leading
    # "until" needs a date; a quote of one's own words is not read as the speaker's.
    ("when I was a kid. we lived in Manila", {("Dan", "live_in", "Manila"): OPEN}),
    ("until recently I worked at Acme", {("Dan", "work_at", "Acme"): OPEN}),
    ('I told him "I work at Google now"', {}),
    (
        "growing up I lived in Lagos, now I live in Berlin",
        {("Dan", "live_in", "Lagos"): ENDED_AT_T, ("Dan", "live_in", "Berlin"): OPEN},
    ),
    # A tie named with "my" holds whatever the clause says of the person; only a denial of
    # the tie itself drops it. Inside a quotation it is not the speaker's.
    (
        "I might bring my girlfriend Tayo if she can get off work",
        {("Dan", "partner_of", "Tayo"): OPEN},
    ),
    ("if my sister Ife comes we should get dinner", {("Dan", "sibling_of", "Ife"): OPEN}),
    (
        "I might join my brother Lars at Fjord Labs next year, but nothing is decided.",
        {("Dan", "sibling_of", "Lars"): OPEN},
    ),
    ("she's not my sister Ife lol", {}),
    ('he said "my sister Ife found a dog"', {}),
    ('Kai texted "we adopted a greyhound named Biscuit"', {}),
    # Controls: read as before.
    ("a few years ago I moved to Denver", {("Dan", "move_to", "Denver"): OPEN}),
    ("I worked at Acme until 5pm", {("Dan", "work_at", "Acme"): OPEN}),
    ("until March I work at Acme", {("Dan", "work_at", "Acme"): OPEN}),
    ("we lived in Manila", {("Dan", "live_in", "Manila"): OPEN}),
    ("when i was a kid we didn't live in Manila", {}),
    ("you bet I work at Google", {("Dan", "work_at", "Google"): OPEN}),
    ("I quit Acme", {("Dan", "work_at", "Acme"): ENDED_AT_T}),
]


@pytest.mark.parametrize("extractor", extractor_tiers(), ids=lambda e: type(e).__name__)
@pytest.mark.parametrize(("text", "expected"), CASES, ids=[c[0][:48] for c in CASES])
async def test_chat_nonfacts_quotes_and_relative_dates(
    extractor: object, text: str, expected: Edges
) -> None:
    assert await _edges(extractor, text) == expected


def test_quotations_pair_marks_and_run_an_unclosed_quote_to_the_end() -> None:
    assert quotations('she said "I quit" and "left"') == [(10, 16), (23, 27)]
    assert quotations('she said "I quit. I am done.') == [(10, 28)]
    assert quotations("I quit\u201d she said") == [(0, 6)]
    assert quotations("no quotes here, it's Kai's") == []


def test_a_claim_is_quoted_only_with_both_mentions_inside_one_quotation() -> None:
    text = 'Kai said "I quit Acme" to Bo'
    i, acme, kai = text.index("I "), text.index("Acme"), text.index("Kai")
    assert quoted_claim(text, (i, i + 1), (acme, acme + 4))
    assert not quoted_claim(text, (kai, kai + 3), (acme, acme + 4))
    name = 'Bo works at "Acme"'
    assert not quoted_claim(name, (0, 2), (name.index("Acme"), name.index("Acme") + 4))


@pytest.mark.parametrize(
    ("phrase", "expected"),
    [
        ("3 years ago", datetime(2023, 6, 15, 20, 0, tzinfo=UTC)),
        ("two weeks ago", datetime(2026, 6, 1, 20, 0, tzinfo=UTC)),
        ("a couple of months ago", datetime(2026, 4, 15, 20, 0, tzinfo=UTC)),
        ("5 days ago", datetime(2026, 6, 10, 20, 0, tzinfo=UTC)),
        ("about 1 year ago", datetime(2025, 6, 15, 20, 0, tzinfo=UTC)),
        ("a few years ago", None),
    ],
)
def test_a_count_ago_is_that_long_before_the_message(
    phrase: str, expected: datetime | None
) -> None:
    assert resolve_until(phrase, T) == expected
    assert resolve_since(phrase, T) == expected


def test_a_month_ago_from_the_31st_is_the_last_day_of_the_shorter_month() -> None:
    said = datetime(2026, 3, 31, 12, 0, tzinfo=UTC)
    assert resolve_until("1 month ago", said) == datetime(2026, 2, 28, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("text", "source", "target", "relation", "expected"),
    [
        (
            'my roommate Kai just texted me "I quit Deloitte" lol',
            "Dan",
            "Deloitte",
            "work_at",
            "negated",
        ),
        # The source named outside its own quote: a claim reported of Kai, read as Kai's.
        ('Kai said "I work at Deloitte"', "Kai", "Deloitte", "work_at", "asserted"),
        ("i bet Nadia works at Stripe", "Nadia", "Stripe", "work_at", "negated"),
        (
            "I almost moved to Berlin last year for a job at Zalando",
            "Dan",
            "Zalando",
            "work_at",
            "negated",
        ),
        ("I'm probably moving to Glasgow in the spring", "Dan", "Glasgow", "move_to", "negated"),
        ("if i ever get a dog i'm naming it Waffles", "Dan", "Waffles", "own", "negated"),
        # Controls: a name in quotes on its own, a subject further back with no hedge.
        ("we adopted a dog named Waffles", "Dan", "Waffles", "own", "asserted"),
        ('Nadia works at "Stripe" now', "Nadia", "Stripe", "work_at", "asserted"),
        (
            "I finally took a really good job last year at Zalando",
            "Dan",
            "Zalando",
            "work_at",
            "asserted",
        ),
        ("I quit Deloitte", "Dan", "Deloitte", "work_at", "ended"),
    ],
)
def test_the_llm_post_check_reads_quotes_and_hedges_as_the_free_tiers(
    text: str, source: str, target: str, relation: str, expected: str
) -> None:
    assert locate_claim([(text, "Dan")], source, target, relation) == (expected, 0)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('she said "I quit my job"', 'she said "I quit my job"'),
        (
            'my roommate Kai just texted me "I quit Deloitte" lol',
            'Leo\'s roommate Kai just texted Leo "I quit Deloitte" lol',
        ),
        (
            "Mei was like \u201cI work at Spotify now\u201d",
            "Mei was like \u201cI work at Spotify now\u201d",
        ),
        ('I told him "I love it"', 'Leo told him "I love it"'),
        ("I prefer tea", "Leo prefers tea"),
    ],
)
def test_grounding_leaves_a_quoted_first_person_as_written(text: str, expected: str) -> None:
    assert resolve_first_person(text, "Leo") == expected

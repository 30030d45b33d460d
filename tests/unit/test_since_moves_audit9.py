"""Ninth audit pass: "since" dates, periods, moves in either order and what an ending closes.

Unit level (``_until``, ``_frames``, ``closing``, the rule and parser tiers on one episode);
the behaviour on a store is pinned by ``tests/contract/test_temporal_chat_audit9.py``.
"""

from __future__ import annotations

import asyncio
import random
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from cycgraph_memory import RuleBasedExtractor
from cycgraph_memory.hierarchy.extractors._frames import (
    MOVED_FROM,
    MOVED_INTO,
    MOVED_TO,
    PLACE_FROM,
    PLACE_TO,
    departed_from,
    frames,
)
from cycgraph_memory.hierarchy.extractors._until import (
    coarse_since,
    resolve_since,
    since_of,
    until_of,
)
from cycgraph_memory.hierarchy.extractors.closing import (
    close_ended_relationships,
    closed_relations,
)
from cycgraph_memory.inmemory import InMemoryMemoryStore
from cycgraph_memory.records import Episode, Message, Provenance, Relationship

SAID = datetime(2026, 12, 15, 9, 0, tzinfo=UTC)


def _d(year: int, month: int, day: int = 1) -> datetime:
    return datetime(year, month, day, tzinfo=UTC)


def _since(sentence: str, obj: str, link: str = " has worked at ") -> str | None:
    return since_of(sentence, sentence.index(obj) + len(obj), link)


@pytest.mark.parametrize(
    ("sentence", "obj", "expected"),
    [
        ("Alice has worked at Acme Corp since 2021", "Acme Corp", "2021"),
        ("bob's been at Globex since march lol", "Globex", "march lol"),
        ("carla has lived in Berlin since last year", "Berlin", "last year"),
        ("been at Hooli ever since may 2019 tbh", "Hooli", "may 2019 tbh"),
        ("at Hooli since May", "Hooli", "May"),
        ("at Hooli, since 3rd of May 2024", "Hooli", "3rd of May 2024"),
        # Causal, unplaceable or a schedule: no start date.
        ("uses Vim since it's faster", "Vim", None),
        ("uses Vim since may be it is faster", "Vim", None),
        ("at Hooli since he was 5", "Hooli", None),
        ("at Hooli since then", "Hooli", None),
        ("at Hooli since forever lol", "Hooli", None),
        ("at Hooli since 9am", "Hooli", None),
        ("at Hooli since this morning", "Hooli", None),
        ("at Hooli, which is great", "Hooli", None),
        # A period: its end is read by ``until_of`` (past claims) or not at all.
        ("works at Hooli since 2019 to 2021", "Hooli", None),
        ("works at Hooli ever since 1999-2003", "Hooli", None),
    ],
)
def test_since_of(sentence: str, obj: str, expected: str | None) -> None:
    assert _since(sentence, obj) == expected


@pytest.mark.parametrize(
    "link",
    [" will work at ", " 'll be at ", " might work at ", " won't be at ", " had been at ",
     "'d been at "],
)
def test_since_of_a_claim_not_yet_real_is_none(link: str) -> None:
    sentence = f"Alice{link}Acme since 2021"
    assert since_of(sentence, len(f"Alice{link}Acme"), link) is None


@pytest.mark.parametrize(
    ("phrase", "expected"),
    [
        ("2021", _d(2021, 1)),
        ("march lol", _d(2026, 3)),
        ("last year", _d(2025, 1)),
        ("may 2019 tbh", _d(2019, 5)),
        ("Dec 20", _d(2025, 12, 20)),  # not yet this year: the one before
        ("2027", None),  # after the message: not placed
    ],
)
def test_resolve_since(phrase: str, expected: datetime | None) -> None:
    assert resolve_since(phrase, SAID) == expected


@pytest.mark.parametrize(
    ("phrase", "coarse"),
    [
        ("march", True),
        ("2021", True),
        ("last year", True),
        ("last month", True),
        ("yesterday", False),
        ("today", False),
        ("last week", False),
        ("May 3", False),
    ],
)
def test_coarse_since(phrase: str, coarse: bool) -> None:
    assert coarse_since(phrase) is coarse


@pytest.mark.parametrize(
    ("sentence", "expected"),
    [
        ("Dave worked at Hooli from 2019 until 2021", "2021"),
        ("Dave worked at Hooli since 2019 till march", "march"),
        ("Dave just worked at Hooli ever since 2019 until 2021", "2021"),
        ("Dave worked at Hooli from 2019 to 2021.", "2021"),
        ("Dave worked at Hooli from 2019-2021", "2021"),
        ("Dave worked at Hooli from home until 5pm", None),
        ("Dave worked at Hooli from Boston to Denver", None),
        ("Dave worked at Hooli from 9 to 5", None),
    ],
)
def test_until_of_a_period(sentence: str, expected: str | None) -> None:
    """A period after the object ended the claim, but only "until" right after it was read."""
    assert until_of(sentence, sentence.index("Hooli") + 5, " worked at ") == expected


def _spans(sentence: str, *names: str) -> list[tuple[int, int, str]]:
    return [(sentence.index(n), sentence.index(n) + len(n), n) for n in names]


_PLACES = {"Boston", "Denver"}


def _frames_of(sentence: str, *names: str) -> list[tuple[str, str, str]]:
    return frames(
        sentence,
        _spans(sentence, *names),
        lambda n: n not in _PLACES and n != "Carol",
        lambda n: n in _PLACES,
    )


def test_frames_read_a_move_in_either_order() -> None:
    assert _frames_of("Carol moved from Initech to Globex", "Carol", "Initech", "Globex") == [
        ("Carol", MOVED_FROM, "Initech"),
        ("Carol", MOVED_TO, "Globex"),
    ]
    assert _frames_of("Carol switched to Globex from Initech", "Carol", "Globex", "Initech") == [
        ("Carol", MOVED_FROM, "Initech"),
        ("Carol", MOVED_INTO, "Globex"),
    ]
    assert _frames_of("Carol jumped ship to Globex from Initech", "Carol", "Globex", "Initech")
    # "went to B from A" is a trip.
    assert _frames_of("Carol went to Globex from Initech", "Carol", "Globex", "Initech") == []


def test_frames_read_a_move_between_places_only_as_a_change_of_home() -> None:
    assert _frames_of("Carol moved to Denver from Boston", "Carol", "Denver", "Boston") == [
        ("Carol", PLACE_FROM, "Boston"),
        ("Carol", PLACE_TO, "Denver"),
    ]
    assert _frames_of("Carol relocated from Boston to Denver", "Carol", "Boston", "Denver") == [
        ("Carol", PLACE_FROM, "Boston"),
        ("Carol", PLACE_TO, "Denver"),
    ]
    # A trip, a mixed pair: nothing.
    assert _frames_of("Carol went from Boston to Denver", "Carol", "Boston", "Denver") == []
    assert _frames_of("Carol moved from Boston to Globex", "Carol", "Boston", "Globex") == []
    # Without a place test (the old call), places are no move at all.
    sentence = "Carol moved from Boston to Denver"
    assert frames(sentence, _spans(sentence, "Carol", "Boston", "Denver"), lambda n: False) == []


@pytest.mark.parametrize(
    ("sentence", "name", "departed"),
    [
        ("Alice moved to Globex from Initech", "Initech", True),
        ("so Alice just switched over to Globex from Initech lol", "Initech", True),
        ("Dan moved to Denver from Boston", "Boston", True),
        ("Alice moved from Initech to Globex", "Initech", True),
        ("Alice went to Globex from Initech", "Initech", False),
        ("Alice moved to globex from Initech", "Initech", False),  # no name before "from"
        ("Alice works at Initech", "Initech", False),
    ],
)
def test_departed_from(sentence: str, name: str, departed: bool) -> None:
    start = sentence.index(name)
    assert departed_from(sentence, start, start + len(name)) is departed


def test_closed_relations() -> None:
    assert closed_relations("work_at") == ("work_at", "join")
    assert closed_relations("live_in") == ("live_in", "move_to")
    assert closed_relations("use") == ("use",)


def _rel(relation: str, valid_from: datetime, *, ended: bool = False, **ids: uuid.UUID) -> Any:
    return Relationship(
        source_id=ids["source"],
        target_id=ids["target"],
        relation_type=relation,
        attributes={"ended": True} if ended else {},
        valid_from=valid_from,
        valid_until=valid_from if ended else None,
        provenance=Provenance(source="agent"),
    )


def test_a_work_at_marker_closes_a_join_edge_of_the_batch_and_nothing_else() -> None:
    alice, acme, globex = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    t0, t1 = SAID - timedelta(days=30), SAID
    joined = _rel("join", t0, source=alice, target=acme)
    other = _rel("join", t0, source=alice, target=globex)
    uses = _rel("use", t0, source=alice, target=acme)
    marker = _rel("work_at", t1, ended=True, source=alice, target=acme)
    out = asyncio.run(
        close_ended_relationships(InMemoryMemoryStore(), [joined, other, uses, marker])
    )
    by_id = {r.id: r for r in out}
    assert by_id[joined.id].valid_until == t1
    assert by_id[other.id].valid_until is None  # another organisation
    assert by_id[uses.id].valid_until is None  # another relation
    assert marker.id not in by_id


def _extract(extractor: Any, *texts: str) -> list[tuple[str, str, str, datetime, Any]]:
    messages = [Message(role="user", content=t, timestamp=SAID) for t in texts]
    episode = Episode(
        topic="t", messages=messages, started_at=SAID, ended_at=SAID,
        provenance=Provenance(source="agent"),
    )
    result = asyncio.run(extractor.extract(episode))
    names = {e.id: e.name for e in result.entities}
    return [
        (names[r.source_id], r.relation_type, names[r.target_id], r.valid_from, r.valid_until)
        for r in result.relationships
    ]


_PARSER: list[Any] = []


def _tier(name: str) -> Any:
    if name == "rule":
        return RuleBasedExtractor()
    from cycgraph_memory.hierarchy.extractors.parser import ParserExtractor, parser_available

    if not parser_available():  # pragma: no cover - the parser extra is absent
        pytest.skip("the parser extra is not installed")
    if not _PARSER:
        _PARSER.append(ParserExtractor())
    return _PARSER[0]


@pytest.fixture(params=["rule", "parser"])
def extractor(request: pytest.FixtureRequest) -> Any:
    return _tier(str(request.param))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Carla Diaz has been at Initech since 2019 tbh", _d(2019, 1)),
        ("Carla Diaz has been at Initech since yesterday", None),  # a visit as well as a job
        ("Carla Diaz has been at Initech", None),
        ("Carla Diaz has been with Bob Lee since 2019", None),  # a person is no employer
    ],
)
def test_be_at_since_holds_a_job_only_over_a_month_or_longer(
    extractor: Any, text: str, expected: datetime | None
) -> None:
    jobs = [e for e in _extract(extractor, text) if e[1] == "work_at"]
    assert [(e[3], e[4]) for e in jobs] == ([] if expected is None else [(expected, None)])


def test_an_until_after_a_name_of_several_words_ends_the_claim(extractor: Any) -> None:
    """The parser tier read "until" after the name's head token ("Bank"), found "of
    America until March", and stored the ended job open."""
    got = _extract(extractor, "Dave worked at Bank of America until March.")
    assert [(e[1], e[2], e[3], e[4]) for e in got] == [
        ("work_at", "Bank of America", _d(2026, 3), SAID)
    ]


def test_a_since_after_a_name_of_several_words_dates_the_claim(extractor: Any) -> None:
    got = _extract(extractor, "Alice has worked at Bank of America since 2021")
    assert [(e[1], e[2], e[3], e[4]) for e in got] == [
        ("work_at", "Bank of America", _d(2021, 1), None)
    ]


def test_a_period_ends_the_claim_at_its_end(extractor: Any) -> None:
    got = _extract(extractor, "Dave worked at Hooli from 2019 to 2021.")
    assert [(e[1], e[2], e[3], e[4]) for e in got] == [("work_at", "Hooli", _d(2021, 1), SAID)]


def test_a_later_since_moves_the_open_edge_back(extractor: Any) -> None:
    got = _extract(
        extractor,
        "Alice Smith works at Acme Corp.",
        "Alice Smith has worked at Acme Corp since 2021",
    )
    assert [(e[1], e[3], e[4]) for e in got] == [("work_at", _d(2021, 1), None)]


def test_a_since_on_an_ended_claim_is_not_its_start(extractor: Any) -> None:
    # "had owned ... since 1962" ended; its marker stops when it was said.
    got = _extract(extractor, "The Marlow family had owned Marlow Dairy since 1962.")
    assert all(e[4] is not None for e in got)
    assert all(e[3] == SAID for e in got)


_TEXT = (
    "alice Alice Smith bob Bob's she he i we they it Acme Acme Corp Globex Initech Boston "
    "Denver Berlin Tinyville Vim has have had 's 've been is was were works worked working "
    "lives lived living at in with to from since until till ever moved switched went jumped "
    "ship relocated hopped over back left quit joined no longer not anymore n't will might "
    "march may May 2021 2019 2027 last this year month week yesterday today 9am then forever "
    "lol tbh idk , . ? ! - and but because the a of Bank America"
)
_WORDS = _TEXT.split()


def test_fuzz_random_chat_fragments_never_fail_nor_invert_a_window(extractor: Any) -> None:
    """Random fragments of the words these rules read: no exception, no window that ends
    before it starts, no start after the message."""
    rng = random.Random(9)
    texts = [
        " ".join(rng.choice(_WORDS) for _ in range(rng.randint(3, 14))) for _ in range(300)
    ]
    for start in range(0, len(texts), 20):
        for r in _extract(extractor, *texts[start : start + 20]):
            assert r[3] <= SAID
            assert r[4] is None or r[3] <= r[4] <= SAID


@pytest.mark.parametrize(
    ("sentence", "polarity"),
    [
        ("Alice Smith might quit Acme Corp", "negated"),
        ("i doubt Alice Smith left Acme Corp", "negated"),
        ("maybe Alice Smith quit Acme Corp idk", "negated"),
        ("Alice Smith wants to quit Acme Corp", "negated"),
        ("Alice Smith will no longer work at Acme Corp", "negated"),
        ("Alice Smith left Acme Corp", "ended"),
        ("Alice Smith quit Acme Corp and might join Globex", "ended"),
        # A relative clause is asserted on its own, under a denial of the main clause.
        ("Bob Lee is not related to Alice Smith, who left Acme Corp", "ended"),
    ],
)
def test_the_llm_post_check_reads_a_doubted_ending_as_the_free_tiers(
    sentence: str, polarity: str
) -> None:
    from cycgraph_memory.hierarchy.extractors._polarity import locate_claim

    assert locate_claim([(sentence, None)], "Alice Smith", "Acme Corp", "work_at") == (
        polarity, 0
    )

from __future__ import annotations

import asyncio
import itertools
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from cycgraph_memory.hierarchy.segmenters import (
    EPISODE_ID_NAMESPACE,
    SimpleEpisodeSegmenter,
    truncate_topic,
)
from cycgraph_memory.records import Message, Provenance

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
FIXED_NOW = datetime(2026, 3, 2, tzinfo=UTC)


def msg(content: str, offset_ms: int, role: str = "user") -> Message:
    return Message(role=role, content=content, timestamp=T0 + timedelta(milliseconds=offset_ms))


async def test_empty_input_yields_no_episodes() -> None:
    assert await SimpleEpisodeSegmenter().segment([]) == []


async def test_single_message() -> None:
    m = msg("hello there", 0)
    [episode] = await SimpleEpisodeSegmenter().segment([m])
    assert episode.topic == "hello there"
    assert episode.started_at == episode.ended_at == T0
    assert [x.id for x in episode.messages] == [m.id]
    assert episode.provenance.source == "system"
    assert episode.fact_ids == []


async def test_gap_exactly_threshold_stays_in_episode() -> None:
    seg = SimpleEpisodeSegmenter(gap_threshold_ms=1000)
    episodes = await seg.segment([msg("a", 0), msg("b", 1000), msg("c", 2000)])
    assert [[m.content for m in e.messages] for e in episodes] == [["a", "b", "c"]]


async def test_gap_threshold_plus_one_ms_splits() -> None:
    seg = SimpleEpisodeSegmenter(gap_threshold_ms=1000)
    episodes = await seg.segment([msg("a", 0), msg("b", 1001), msg("c", 2001)])
    assert [[m.content for m in e.messages] for e in episodes] == [["a"], ["b", "c"]]
    assert episodes[1].started_at == T0 + timedelta(milliseconds=1001)
    assert episodes[1].ended_at == T0 + timedelta(milliseconds=2001)


async def test_default_threshold_is_five_minutes() -> None:
    seg = SimpleEpisodeSegmenter()
    assert seg.gap_threshold_ms == 300_000
    assert seg.max_topic_length == 100
    episodes = await seg.segment([msg("a", 0), msg("b", 300_000), msg("c", 600_001)])
    assert [len(e.messages) for e in episodes] == [2, 1]


async def test_unsorted_input_is_sorted_with_stable_ties() -> None:
    seg = SimpleEpisodeSegmenter(gap_threshold_ms=1000)
    late, tie_a, tie_b, early = msg("late", 5000), msg("tie-a", 0), msg("tie-b", 0), msg("e", 10)
    episodes = await seg.segment([late, tie_a, tie_b, early])
    assert [[m.content for m in e.messages] for e in episodes] == [
        ["tie-a", "tie-b", "e"],
        ["late"],
    ]
    assert episodes[0].topic == "tie-a"


async def test_input_messages_not_mutated_and_copied() -> None:
    m = msg("hi", 0)
    [episode] = await SimpleEpisodeSegmenter().segment([m])
    episode.messages[0].content = "changed"
    assert m.content == "hi"


def test_truncate_topic_exact_outputs() -> None:
    assert truncate_topic("short  text\n here", 100) == "short text here"
    assert truncate_topic("abcdefghij", 10) == "abcdefghij"
    # the cut "the quick" already ends a word; "the quick brow" moves back to "the quick"
    assert truncate_topic("the quick brown fox", 10) == "the quick "
    assert truncate_topic("the quick brown fox", 15) == "the quick brown"
    assert truncate_topic("abcdefghijklmnop", 10) == "abcdefghij"
    assert truncate_topic("anything", 1) == "a"
    for n in range(1, 25):
        assert len(truncate_topic("the quick brown fox jumps over the lazy dog", n)) <= n
    with pytest.raises(ValueError):
        truncate_topic("x", 0)


async def test_topic_truncated_in_episode() -> None:
    seg = SimpleEpisodeSegmenter(max_topic_length=15)
    [episode] = await seg.segment([msg("We should move the billing service to Postgres", 0)])
    content = "We should move the billing service to Postgres"
    assert episode.topic == content[:15] == "We should move "


async def test_topic_skips_blank_first_message() -> None:
    [episode] = await SimpleEpisodeSegmenter().segment([msg("   ", 0), msg("real topic", 1)])
    assert episode.topic == "real topic"


async def test_deterministic_ids_from_message_ids() -> None:
    a, b = msg("a", 0), msg("b", 10)
    seg = SimpleEpisodeSegmenter()
    [first] = await seg.segment([a, b])
    [second] = await seg.segment([b, a])
    expected = uuid.uuid5(
        EPISODE_ID_NAMESPACE, "episode:" + ",".join(sorted([str(a.id), str(b.id)]))
    )
    assert first.id == second.id == expected


async def test_random_ids_when_disabled() -> None:
    a = msg("a", 0)
    seg = SimpleEpisodeSegmenter(deterministic_ids=False)
    [first] = await seg.segment([a])
    [second] = await seg.segment([a])
    assert first.id != second.id
    assert first.id.version == 4


async def test_provenance_template_and_clock() -> None:
    template = Provenance(source="agent", agent_id="bot", run_id="run-7")
    seg = SimpleEpisodeSegmenter(gap_threshold_ms=1, provenance=template, clock=lambda: FIXED_NOW)
    episodes = await seg.segment([msg("a", 0), msg("b", 10)])
    assert len(episodes) == 2
    for e in episodes:
        assert e.provenance.source == "agent"
        assert e.provenance.run_id == "run-7"
        assert e.provenance.created_at == FIXED_NOW
    assert episodes[0].provenance is not episodes[1].provenance


@pytest.mark.parametrize(
    "kwargs",
    [
        {"gap_threshold_ms": 0},
        {"gap_threshold_ms": -5},
        {"max_topic_length": 0},
        {"gap_threshold_ms": 1.5},
        {"max_topic_length": "10"},
    ],
)
def test_invalid_options_rejected(kwargs: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        SimpleEpisodeSegmenter(**kwargs)  # type: ignore[arg-type]


def test_satisfies_protocol() -> None:
    from cycgraph_memory.contracts import EpisodeSegmenter

    assert isinstance(SimpleEpisodeSegmenter(), EpisodeSegmenter)


@given(
    offsets=st.lists(st.integers(min_value=0, max_value=10_000), max_size=30),
    threshold=st.integers(min_value=1, max_value=3_000),
)
@settings(max_examples=150, deadline=None)
def test_segmentation_properties(offsets: list[int], threshold: int) -> None:
    messages = [msg(str(i), off) for i, off in enumerate(offsets)]
    seg = SimpleEpisodeSegmenter(gap_threshold_ms=threshold, max_messages=None)
    episodes = asyncio.run(seg.segment(messages))
    flat = [m.id for e in episodes for m in e.messages]
    expected = [m.id for m in sorted(messages, key=lambda m: m.timestamp)]
    assert flat == expected
    limit = timedelta(milliseconds=threshold)
    for e in episodes:
        stamps = [m.timestamp for m in e.messages]
        assert all(b - a <= limit for a, b in itertools.pairwise(stamps))
        assert (e.started_at, e.ended_at) == (stamps[0], stamps[-1])
    for before, after in itertools.pairwise(episodes):
        assert after.started_at - before.ended_at > limit

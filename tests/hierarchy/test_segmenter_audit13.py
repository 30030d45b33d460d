"""SimpleEpisodeSegmenter audit (round 13): gapThresholdMs is any positive number of
milliseconds; tests named after a bug failed before the fix that came with them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from cycgraph_memory.hierarchy import SimpleEpisodeSegmenter
from cycgraph_memory.records import Message

T0 = datetime(2025, 1, 1, tzinfo=UTC)


def _messages(*offsets: timedelta) -> list[Message]:
    return [
        Message(role="user", content=f"message {i}", timestamp=T0 + offset)
        for i, offset in enumerate(offsets)
    ]


@pytest.mark.parametrize("gap_ms", [10**20, 2**63, 2**200])
async def test_bug_a_threshold_longer_than_any_gap_never_splits(gap_ms: int) -> None:
    """Before the fix, a threshold beyond what ``timedelta`` holds was accepted when the
    segmenter was built and every ``segment`` call then failed with OverflowError."""
    segmenter = SimpleEpisodeSegmenter(gap_threshold_ms=gap_ms)
    assert segmenter.gap_threshold_ms == gap_ms
    messages = [
        Message(role="user", content="first", timestamp=datetime(1, 1, 2, tzinfo=UTC)),
        Message(role="user", content="last", timestamp=datetime(9999, 12, 30, tzinfo=UTC)),
    ]
    (episode,) = await segmenter.segment(messages)
    assert [m.content for m in episode.messages] == ["first", "last"]


async def test_a_long_threshold_still_splits_on_a_longer_gap() -> None:
    ten_years_ms = 10 * 365 * 24 * 3600 * 1000
    segmenter = SimpleEpisodeSegmenter(gap_threshold_ms=ten_years_ms)
    episodes = await segmenter.segment(
        _messages(
            timedelta(0),
            timedelta(milliseconds=ten_years_ms),  # exactly the threshold: same episode
            timedelta(milliseconds=2 * ten_years_ms + 1),  # one ms longer: splits
        )
    )
    assert [[m.content for m in e.messages] for e in episodes] == [
        ["message 0", "message 1"],
        ["message 2"],
    ]

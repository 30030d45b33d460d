"""Acceptance audit 9: the pipeline, consolidation and the retention loop, from the spec.

Written as an outside checker would, from the spec's promises (defaults, orderings,
budgets, boundaries), on both backends wherever storage is involved. The tests named
``test_bug_...`` failed before the fix that came with them.
"""

from __future__ import annotations

import itertools
import uuid
from datetime import UTC, datetime, timedelta
from fractions import Fraction
from typing import Any

import pytest
from pydantic import ValidationError

from cycgraph_memory import MAX_TEXT_LENGTH, MemoryConsolidator, Message
from cycgraph_memory.hierarchy.extractors.llm import LLMExtractor
from cycgraph_memory.hierarchy.pipeline import MemoryPipeline
from cycgraph_memory.hierarchy.segmenters import SimpleEpisodeSegmenter
from cycgraph_memory.inmemory.ledger import InMemoryOutcomeLedger
from cycgraph_memory.retention import simulate_gate
from cycgraph_memory.retrieval.lessons import retrieve_gated_lessons
from cycgraph_memory.statistics import normal_quantile, required_trials

from .factories import make_fact, unit

_runs = itertools.count()

# Far from 1970 a float timestamp has no microsecond resolution (its step is ~30 us in
# year 9999 and ~8 us in year 1): two instants a microsecond apart become one float.
FAR_FUTURE = datetime(9999, 12, 30, tzinfo=UTC)
FAR_PAST = datetime(1200, 6, 1, tzinfo=UTC)
MICRO = timedelta(microseconds=1)
# Ids chosen so that the id tie-break alone would pick the *older* fact.
OLDER_ID = uuid.UUID(int=1)
NEWER_ID = uuid.UUID(int=2)


@pytest.fixture
def ledger(backend: str, request: pytest.FixtureRequest) -> Any:
    if backend == "memory":
        return InMemoryOutcomeLedger()
    from cycgraph_memory.postgres import PostgresOutcomeLedger

    return PostgresOutcomeLedger(
        request.getfixturevalue("pg_sessionmaker"), tenant_id=request.getfixturevalue("pg_tenant")
    )


# --------------------------------------------------------------------------- orderings


@pytest.mark.parametrize("when", [FAR_FUTURE, FAR_PAST], ids=["year9999", "year1200"])
async def test_bug_the_newest_near_duplicate_is_kept_a_microsecond_apart(
    store: Any, when: datetime
) -> None:
    # Spec: the keeper is the most recent valid_from, then the smallest id. Before: valid_from
    # was compared as a float timestamp, so a microsecond apart far from 1970 was a tie and
    # the smaller id (here the older fact) was kept.
    older = make_fact(id=OLDER_ID, content="Alice likes tea", embedding=unit(0), valid_from=when)
    newer = make_fact(
        id=NEWER_ID, content="Alice likes tea.", embedding=unit(0), valid_from=when + MICRO
    )
    await store.put_facts([older, newer])
    report = await MemoryConsolidator(store, clock=lambda: when + timedelta(days=1)).consolidate()
    assert report.facts_deduped == 1
    assert [f.id for f in await store.find_facts()] == [NEWER_ID]
    absorbed = await store.get_fact(OLDER_ID)
    assert absorbed is not None and absorbed.invalidated_by == str(NEWER_ID)


@pytest.mark.parametrize("when", [FAR_FUTURE, FAR_PAST], ids=["year9999", "year1200"])
async def test_bug_decay_prunes_the_older_of_two_equal_scores_a_microsecond_apart(
    store: Any, when: datetime
) -> None:
    # Decay ties go to the older valid_from first (then the smaller id). Before: the
    # float timestamps tied and the smaller id (here the newer fact) was pruned.
    older = make_fact(id=NEWER_ID, content="the deploy runs at noon", valid_from=when)
    newer = make_fact(id=OLDER_ID, content="the backup runs at night", valid_from=when + MICRO)
    await store.put_facts([older, newer])
    report = await MemoryConsolidator(
        store, max_facts=1, clock=lambda: when + timedelta(days=1)
    ).consolidate()
    assert report.facts_decayed == 1
    assert [f.id for f in await store.find_facts()] == [newer.id]


@pytest.mark.parametrize("when", [FAR_FUTURE, FAR_PAST], ids=["year9999", "year1200"])
async def test_bug_gated_lessons_are_newest_first_a_microsecond_apart(
    store: Any, when: datetime
) -> None:
    # Verified lessons are served newest first (valid_from descending, then id), and so
    # are candidates without a ledger. Before: a float timestamp tie put the older first.
    older = make_fact(id=OLDER_ID, content="lesson one", tags=["lesson"], valid_from=when)
    newer = make_fact(id=NEWER_ID, content="lesson two", tags=["lesson"], valid_from=when + MICRO)
    old_c = make_fact(
        id=uuid.UUID(int=3), content="candidate one", tags=["lesson", "candidate"],
        valid_from=when,
    )
    new_c = make_fact(
        id=uuid.UUID(int=4), content="candidate two", tags=["lesson", "candidate"],
        valid_from=when + MICRO,
    )
    await store.put_facts([older, newer, old_c, new_c])
    got = await retrieve_gated_lessons(store, tags=["lesson"], max_facts=2, candidate_slots=1)
    assert [f.id for f in got] == [NEWER_ID, new_c.id]
    got = await retrieve_gated_lessons(store, tags=["lesson"], max_facts=4, candidate_slots=2)
    assert [f.id for f in got] == [NEWER_ID, OLDER_ID, new_c.id, old_c.id]


# --------------------------------------------------------------------------- simulator


@pytest.mark.parametrize(
    "lesson_id",
    ["a\x00b", "x" * (MAX_TEXT_LENGTH - len("simulated lesson ") + 1)],
    ids=["nul", "too-long"],
)
async def test_bug_a_lesson_id_no_fact_can_carry_is_refused_before_any_run(
    store: Any, ledger: Any, lesson_id: str
) -> None:
    # The id becomes the stored fact's content. Before: the config was accepted, runs 0-2
    # were simulated and recorded in the backend's ledger, then the lesson's arrival at
    # run 3 failed with a SemanticFact ValidationError.
    calls: list[int] = []

    async def backend() -> tuple[Any, Any]:
        calls.append(1)
        return store, ledger

    config = {
        "lessons": [{"id": lesson_id, "true_effect": 0.1, "arrives_at_run": 3}],
        "runs": 5,
        "seed": 1,
    }
    with pytest.raises(ValidationError, match="simulated lesson"):
        await simulate_gate(config, backend=backend)
    assert calls == []
    assert (await ledger.get_baseline()).runs == 0
    assert await store.find_facts(include_invalidated=True) == []


async def test_the_longest_storable_lesson_id_runs(store: Any, ledger: Any) -> None:
    lesson_id = "x" * (MAX_TEXT_LENGTH - len("simulated lesson "))

    async def backend() -> tuple[Any, Any]:
        return store, ledger

    result = await simulate_gate(
        {"lessons": [{"id": lesson_id, "true_effect": 0.1, "arrives_at_run": 1}],
         "runs": 3, "seed": 1},
        backend=backend,
    )
    assert [x.id for x in result.lessons] == [lesson_id]
    (fact,) = await store.find_facts()
    assert fact.content == "simulated lesson " + lesson_id


# --------------------------------------------------------------------------- requiredTrials


def test_required_trials_spec_values() -> None:
    # 2 ((z_0.9 + z_0.8) sd / effect)^2, rounded up (docs/retention.md: 3 and 37).
    assert required_trials(0.2, 0.1) == 3
    assert required_trials(0.05, 0.1) == 37
    assert required_trials({"effect": 0.1, "sd": 0.1}) == 10
    # Halving the SD cuts it by about 4; the sign of the effect does not matter.
    assert required_trials(-0.05, 0.05) == required_trials(0.05, 0.05) == 10


@pytest.mark.parametrize("sd", [1e-7, 1e-12, 1e-300])
def test_bug_an_effect_far_above_the_noise_needs_one_run_not_zero(sd: float) -> None:
    # Before: 2 (z sd / effect)^2 below 1e-12 was rounded up from a negative number to 0.
    assert required_trials(1.0, sd) == 1
    assert required_trials({"effect": 0.5, "sd": sd}) == 1


@pytest.mark.parametrize(("effect", "sd"), [(1e-155, 1.0), (1e-200, 0.1), (1e-300, 1e300)])
def test_bug_a_tiny_effect_gives_a_huge_count_not_an_overflow(effect: float, sd: float) -> None:
    # Before: OverflowError (an untyped error) from squaring the ratio.
    n = required_trials(effect, sd)
    assert isinstance(n, int)
    z = Fraction(normal_quantile(0.9) + normal_quantile(0.8))
    exact = 2 * (z * Fraction(sd) / Fraction(effect)) ** 2
    assert n > 10**300
    assert abs(Fraction(n) - exact) <= 1
    # A ten times smaller effect needs a hundred times more runs.
    assert abs(Fraction(required_trials(effect / 10, sd), 100 * n) - 1) < Fraction(1, 10**9)


# --------------------------------------------------------------------------- LLMExtractor

SAID = [
    "Alice Smith maintains the billing service at Acme Corp.",
    "The billing service depends on Postgres for its ledger.",
    "Bob Jones manages the platform team at Acme Corp.",
    "The platform team uses Kubernetes for every deployment.",
    "Carol Diaz works at Initech in Berlin.",
]


def _messages() -> list[Message]:
    start = datetime(2025, 1, 1, 12, tzinfo=UTC)
    return [
        Message(role="user", content=text, timestamp=start + timedelta(seconds=i))
        for i, text in enumerate(SAID)
    ]


async def _down(prompt: str) -> str:
    raise ConnectionError("provider down")


@pytest.mark.parametrize("cap", [1, 2, 3])
async def test_bug_max_facts_per_episode_caps_the_fallback_too(store: Any, cap: int) -> None:
    # Spec: maxFactsPerEpisode is the cap on facts extracted per episode, and on any
    # failure LLMExtractor falls back to the free tier. Before: with the provider down the
    # default fallback used its own cap (10), so five sentences gave five facts.
    extractor = LLMExtractor(_down, max_facts_per_episode=cap)
    (episode,) = await SimpleEpisodeSegmenter().segment(_messages())
    result = await extractor.extract(episode)
    assert len(result.facts) == cap
    assert episode.fact_ids == [f.id for f in result.facts]
    assert extractor.stats.fallbacks == 1

    pipeline = MemoryPipeline(store, extractor=LLMExtractor(_down, max_facts_per_episode=cap))
    report = await pipeline.ingest(_messages())
    assert len(report.episode_ids) == 1
    assert len(await store.find_facts()) == len(report.fact_ids) == cap


async def test_a_cap_above_the_free_tiers_keeps_their_own(store: Any) -> None:
    extractor = LLMExtractor(_down)  # the spec's default cap, 20
    (episode,) = await SimpleEpisodeSegmenter().segment(_messages())
    assert len((await extractor.extract(episode)).facts) == len(SAID)

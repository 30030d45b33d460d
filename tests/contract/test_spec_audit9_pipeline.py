"""Acceptance audit 9: the pipeline, consolidation and the retention loop, from the spec.

Written as an outside checker would, from the spec's promises (defaults, orderings,
budgets, boundaries), on both backends wherever storage is involved. The tests named
``test_bug_...`` failed before the fix that came with them.
"""

from __future__ import annotations

import asyncio
import itertools
import uuid
from datetime import UTC, datetime, timedelta
from fractions import Fraction
from typing import Any

import pytest
from pydantic import ValidationError

from cycgraph_memory import (
    MAX_TEXT_LENGTH,
    QUARANTINE_TAG,
    ConflictDetector,
    MemoryConsolidator,
    Message,
    RunOutcome,
)
from cycgraph_memory.errors import InvalidTypeError
from cycgraph_memory.hierarchy.clustering import ConsolidatingThemeClusterer, SimpleThemeClusterer
from cycgraph_memory.hierarchy.extractors.llm import LLMExtractor
from cycgraph_memory.hierarchy.extractors.rules import RuleBasedExtractor
from cycgraph_memory.hierarchy.pipeline import MemoryPipeline
from cycgraph_memory.hierarchy.segmenters import SimpleEpisodeSegmenter
from cycgraph_memory.inmemory import InMemoryMemoryStore
from cycgraph_memory.retention import evaluate_retention, plan_retention, simulate_gate
from cycgraph_memory.retrieval.lessons import retrieve_gated_lessons
from cycgraph_memory.statistics import normal_quantile, required_trials

from .factories import make_entity, make_episode, make_fact, make_theme, unit

_runs = itertools.count()

# Far from 1970 a float timestamp has no microsecond resolution (its step is ~30 us in
# year 9999 and ~8 us in year 1): two instants a microsecond apart become one float.
FAR_FUTURE = datetime(9999, 12, 30, tzinfo=UTC)
FAR_PAST = datetime(1200, 6, 1, tzinfo=UTC)
MICRO = timedelta(microseconds=1)
# Ids chosen so that the id tie-break alone would pick the *older* fact.
OLDER_ID = uuid.UUID(int=1)
NEWER_ID = uuid.UUID(int=2)


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


class _Clock:
    """A monotonic clock the test moves by hand (seconds)."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize("failure", ["raises", "garbage", "wrong-shape", "not-a-str", "timeout"])
async def test_every_provider_failure_stores_what_the_free_tier_stores(
    store: Any, backend: str, failure: str
) -> None:
    # Spec: on any failure (parse error, thrown error, timeout) LLMExtractor falls back to
    # the rule-based tier; after maxConsecutiveFailures (3) the breaker skips the provider.
    calls: list[str] = []

    async def provider(prompt: str) -> Any:
        calls.append(prompt)
        if failure == "raises":
            raise RuntimeError("503")
        if failure == "timeout":
            await asyncio.sleep(10)
        return {"garbage": "{facts: [", "wrong-shape": '{"facts": "none"}'}.get(failure)

    gap = timedelta(minutes=10)  # four episodes: the default gap threshold is 5 minutes
    start = datetime(2025, 1, 1, 12, tzinfo=UTC)
    messages = [
        Message(role="user", content=text, timestamp=start + i * gap)
        for i, text in enumerate(SAID[:4])
    ]
    extractor = LLMExtractor(provider, timeout_ms=20, fallback=RuleBasedExtractor())
    report = await MemoryPipeline(store, extractor=extractor).ingest(messages)
    assert len(report.episode_ids) == 4
    assert len(calls) == 3  # the fourth episode skipped the provider
    assert extractor.breaker_state == "open"
    stats = extractor.stats
    assert (stats.llm_failures, stats.skipped_by_breaker, stats.fallbacks) == (3, 1, 4)
    assert stats.timeouts == (3 if failure == "timeout" else 0)

    reference = InMemoryMemoryStore()
    await MemoryPipeline(reference, extractor=RuleBasedExtractor()).ingest(messages)
    assert sorted(f.content for f in await store.find_facts()) == sorted(
        f.content for f in await reference.find_facts()
    )


async def test_the_breaker_recovers_after_its_cooldown_through_the_pipeline(store: Any) -> None:
    healthy = False
    calls = 0
    reply = (
        '{"facts": [{"content": "Carol Diaz works at Initech", '
        '"entities": ["Carol Diaz", "Initech"]}], '
        '"entities": [{"name": "Carol Diaz", "type": "person"}, '
        '{"name": "Initech", "type": "company"}], '
        '"relationships": [{"source": "Carol Diaz", "relation": "works at", '
        '"target": "Initech"}]}'
    )

    async def provider(prompt: str) -> str:
        nonlocal calls
        calls += 1
        if not healthy:
            raise ConnectionError("down")
        return reply

    clock = _Clock()
    extractor = LLMExtractor(
        provider, max_consecutive_failures=2, breaker_cooldown_ms=60_000, clock=clock
    )
    pipeline = MemoryPipeline(store, extractor=extractor)
    start = datetime(2025, 1, 1, 12, tzinfo=UTC)

    def said(minute: int, text: str) -> list[Message]:
        return [Message(role="user", content=text, timestamp=start + timedelta(minutes=minute))]

    await pipeline.ingest(said(0, SAID[0]))
    await pipeline.ingest(said(10, SAID[1]))
    assert (calls, extractor.breaker_state) == (2, "open")
    healthy = True
    clock.now = 59.999  # not yet: still skipped
    await pipeline.ingest(said(20, SAID[2]))
    assert calls == 2
    clock.now = 60.0  # exactly the cooldown: one trial call, which succeeds
    assert extractor.breaker_state == "half_open"
    report = await pipeline.ingest(said(30, "Carol Diaz works at Initech in Berlin."))
    assert (calls, extractor.breaker_state, extractor.consecutive_failures) == (3, "closed", 0)
    facts = await store.get_facts(report.fact_ids)
    assert [f.provenance.source for f in facts.values()] == ["derived"]
    assert any(f.content.endswith("Carol Diaz works at Initech") for f in facts.values())
    (edge,) = await store.get_relationships_for_entity(
        next(iter(facts.values())).entity_ids[0], direction="outgoing"
    )
    assert edge.relation_type == "works_at"


# --------------------------------------------------------------------------- budgets


@pytest.mark.parametrize("mode", ["soft", "hard"])
async def test_a_fact_budget_of_zero_prunes_every_fact_but_the_quarantined(
    store: Any, mode: str
) -> None:
    now = datetime(2025, 6, 1, tzinfo=UTC)
    facts = [
        make_fact(content=f"fact {i}", embedding=unit(i), valid_from=now - timedelta(days=i))
        for i in range(3)
    ]
    poisoned = make_fact(content="poisoned", tags=[QUARANTINE_TAG], valid_from=now)
    theme = make_theme(fact_ids=[f.id for f in facts], embedding=unit(0))
    await store.put_theme(theme)
    await store.put_facts([*facts, poisoned])
    report = await MemoryConsolidator(store, max_facts=0, delete_mode=mode, clock=lambda: now
                                      ).consolidate()
    assert (report.facts_decayed, report.themes_removed, report.total_reclaimed) == (3, 1, 4)
    assert [f.id for f in await store.find_facts()] == [poisoned.id]
    assert await store.get_fact(poisoned.id) == poisoned
    assert await store.list_themes() == []
    again = await MemoryConsolidator(store, max_facts=0, delete_mode=mode, clock=lambda: now
                                     ).consolidate()
    assert again.total_reclaimed == 0


async def test_an_episode_budget_is_exact_and_zero_prunes_them_all(store: Any) -> None:
    start = datetime(2025, 1, 1, tzinfo=UTC)
    # stored newest first; equal started_at are ordered by id
    episodes = [
        make_episode(id=uuid.UUID(int=10 - i), started_at=start + timedelta(days=i // 2),
                     ended_at=start + timedelta(days=i // 2), messages=[])
        for i in range(5)
    ]
    await store.put_episodes(episodes[::-1])
    assert (await MemoryConsolidator(store, max_episodes=5).consolidate()).episodes_pruned == 0
    assert (await MemoryConsolidator(store, max_episodes=2).consolidate()).episodes_pruned == 3
    oldest_first = sorted(episodes, key=lambda e: (e.started_at, str(e.id)))
    assert [e.id for e in await store.list_episodes()] == [e.id for e in oldest_first[3:]]
    assert (await MemoryConsolidator(store, max_episodes=0).consolidate()).episodes_pruned == 2
    assert await store.list_episodes() == []
    assert len(await store.list_episodes(include_invalidated=True)) == 5


async def test_decay_ties_go_to_the_older_then_the_smaller_id(store: Any) -> None:
    day = datetime(2025, 1, 1, tzinfo=UTC)
    same = [make_fact(id=uuid.UUID(int=i), content=f"same {i}", valid_from=day)
            for i in (7, 3, 5)]
    younger = make_fact(id=uuid.UUID(int=1), content="younger", valid_from=day + MICRO)
    await store.put_facts([*same, younger])
    consolidator = MemoryConsolidator(store, max_facts=2, clock=lambda: day + timedelta(days=30))
    assert (await consolidator.consolidate()).facts_decayed == 2
    assert sorted(f.id for f in await store.find_facts()) == [younger.id, uuid.UUID(int=7)]


# --------------------------------------------------------------------------- conflicts


async def test_two_conflicting_facts_said_at_the_same_instant(store: Any) -> None:
    alice = make_entity(name="Alice")
    await store.put_entity(alice)
    when = datetime(2025, 3, 1, tzinfo=UTC)
    pos = make_fact(id=uuid.UUID(int=2), content="Alice works at Acme",
                    entity_ids=[alice.id], valid_from=when)
    neg = make_fact(id=uuid.UUID(int=1), content="Alice does not work at Acme",
                    entity_ids=[alice.id], valid_from=when)
    await store.put_facts([pos, neg])
    # Equal valid_from: fact_a is the smaller id; never a supersession (0 days apart).
    detector = ConflictDetector(store, supersession_day_threshold=0)
    (conflict,) = await detector.detect_conflicts()
    assert (conflict.type, conflict.fact_a.id, conflict.fact_b.id) == ("negation", neg.id, pos.id)
    plan = await detector.plan_resolution([conflict], "supersede-on-newer")
    assert [d.action for d in plan.report.details] == ["keep_b"]  # "newer" = (valid_from, id)
    report = await detector.auto_resolve_all([conflict], "negation-invalidates-positive")
    assert report.resolved == 1
    kept, lost = await store.get_fact(neg.id), await store.get_fact(pos.id)
    assert kept is not None and kept.invalidated_by is None
    assert lost is not None and lost.invalidated_by == str(neg.id)


# --------------------------------------------------------------------------- the gate


async def _record(ledger: Any, scores: list[float], fact_ids: list[uuid.UUID]) -> None:
    for score in scores:
        await ledger.record_outcome(
            RunOutcome(run_id=f"audit9-{next(_runs)}", score=score, fact_ids=fact_ids)
        )


async def test_the_gate_boundaries(store: Any, ledger: Any) -> None:
    never = make_fact(content="never retrieved", tags=["lesson", "candidate"])
    few = make_fact(content="two trials", tags=["lesson", "candidate"])
    flat = make_fact(content="no effect", tags=["lesson", "candidate"])
    await store.put_facts([never, few, flat])
    await _record(ledger, [0.5] * 6, [])
    await _record(ledger, [0.5] * 2, [few.id])
    await _record(ledger, [0.5] * 5, [flat.id])
    report = await evaluate_retention(store, ledger)
    held = {h.fact_id: (h.trials, h.reason) for h in report.held}
    assert held == {
        never.id: (0, "insufficient_trials"),
        few.id: (2, "insufficient_trials"),
        flat.id: (5, "no_verdict"),  # all-equal outcomes: no lift either way
    }
    assert report.promoted == report.evicted == []
    # maxTrials closes the window of a verdict-less candidate with enough trials only.
    report = await evaluate_retention(store, ledger, {"max_trials": 5, "noise_floor_sd": 0.0})
    assert [(e.fact_id, e.reason) for e in report.evicted] == [(flat.id, "eval-gate:no_lift")]
    assert {h.fact_id for h in report.held} == {never.id, few.id}
    evicted = await store.get_fact(flat.id)
    assert evicted is not None and evicted.invalidated_by == "eval-gate:no_lift"


async def test_a_candidate_in_every_run_has_no_baseline(store: Any, ledger: Any) -> None:
    always = make_fact(content="always injected", tags=["lesson", "candidate"])
    await store.put_fact(always)
    await _record(ledger, [0.9, 0.95, 0.85, 0.9], [always.id])
    report = await evaluate_retention(store, ledger, {"max_baseline_runs": 1})
    assert [(h.fact_id, h.reason) for h in report.held] == [
        (always.id, "insufficient_baseline")
    ]


async def test_fdr_control_over_many_candidates(store: Any, ledger: Any) -> None:
    # Thirty candidates with lifts from 0 to 0.29: BH promotes no more than testing each
    # alone, every promoted lift beats every held one, and both backends agree.
    lessons = [
        make_fact(content=f"lesson {i}", tags=["lesson", "candidate"],
                  valid_from=datetime(2025, 1, 1, tzinfo=UTC) + timedelta(seconds=i))
        for i in range(30)
    ]
    await store.put_facts(lessons)
    await _record(ledger, [0.49, 0.51] * 20, [])
    for i, lesson in enumerate(lessons):
        await _record(ledger, [0.49 + 0.01 * i, 0.51 + 0.01 * i] * 3, [lesson.id])
    policy = {"sequential_control": "none"}
    alone = plan_with(lessons, await ledger.get_gate_inputs([f.id for f in lessons]),
                      {**policy, "multiple_comparison": "none"})
    report = await evaluate_retention(store, ledger, policy)
    promoted = {p.fact_id for p in report.promoted}
    assert 0 < len(promoted) < alone
    lift = {p.fact_id: p.evidence.lift for p in report.promoted if p.evidence}
    held = [h.evidence.lift for h in report.held if h.evidence]
    assert min(lift.values()) > max(held)
    assert report.evicted == []


def plan_with(lessons: list[Any], inputs: Any, policy: dict[str, Any]) -> int:
    stats, baseline = inputs
    decisions = plan_retention(lessons, stats, baseline, policy)
    return sum(d.verdict == "promoted" for d in decisions)


async def test_quarantined_lessons_never_resurface_through_gated_retrieval(store: Any) -> None:
    verified = make_fact(content="quarantined lesson", tags=["lesson", QUARANTINE_TAG])
    candidate = make_fact(content="quarantined candidate",
                          tags=["lesson", "candidate", QUARANTINE_TAG])
    await store.put_facts([verified, candidate])
    assert await retrieve_gated_lessons(store, tags=["lesson"]) == []
    assert await retrieve_gated_lessons(store, tags=[QUARANTINE_TAG]) == []
    assert await retrieve_gated_lessons(
        store, tags=["lesson"], candidate_tag=QUARANTINE_TAG, candidate_slots=10
    ) == []


# --------------------------------------------------------------------------- plug-in hooks


@pytest.mark.parametrize(
    "make",
    [
        lambda: LLMExtractor(_down, clock=5),
        lambda: LLMExtractor(_down, now="now"),
        lambda: LLMExtractor(_down, fallback=object()),
        lambda: LLMExtractor({"provider": _down, "clock": 0}),
        lambda: SimpleThemeClusterer(now=5),
        lambda: SimpleThemeClusterer({"id_factory": "uuid4"}),
        lambda: ConsolidatingThemeClusterer(id_factory=5),
        lambda: SimpleEpisodeSegmenter(clock=5),
        lambda: SimpleEpisodeSegmenter(embedder=object()),
    ],
    ids=["llm-clock", "llm-now", "llm-fallback", "llm-mapping-clock", "simple-now",
         "simple-id-factory", "consolidating-id-factory", "segmenter-clock",
         "segmenter-embedder"],
)
def test_bug_a_hook_that_cannot_be_called_is_refused_when_built(make: Any) -> None:
    # Before: accepted, then a plain TypeError / AttributeError on first use: for the
    # LLMExtractor's clock, exactly when the breaker opened because the provider was down,
    # which failed the ingest it was meant to keep going.
    with pytest.raises(InvalidTypeError):
        make()


async def test_bug_a_bad_breaker_clock_no_longer_fails_the_ingest_when_the_provider_is_down(
    store: Any,
) -> None:
    with pytest.raises(InvalidTypeError, match="clock"):
        LLMExtractor(_down, max_consecutive_failures=1, clock=5)  # type: ignore[arg-type]
    extractor = LLMExtractor(_down, max_consecutive_failures=1, clock=_Clock())
    report = await MemoryPipeline(store, extractor=extractor).ingest(_messages())
    assert extractor.breaker_state == "open"
    assert len(await store.find_facts()) == len(report.fact_ids) > 0

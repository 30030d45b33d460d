"""Hierarchy pipeline audit (round 3): acceptance checks written from the spec alone.

Each test states the documented behaviour it checks; the ones named ``test_bug_...``
failed before the fix that came with them.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import uuid
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import numpy as np
import pytest

from cycgraph_memory import Episode, Message, Provenance, SemanticFact
from cycgraph_memory.hierarchy.calibration import (
    ThemeCalibration,
    calibrate_theme_thresholds,
    fit_theme_calibration,
)
from cycgraph_memory.hierarchy.clustering import (
    ConsolidatingThemeClusterer,
    SimpleThemeClusterer,
)
from cycgraph_memory.hierarchy.extractors.llm import LLM_EXTRACTOR_NAMESPACE, LLMExtractor
from cycgraph_memory.hierarchy.extractors.simple import SimpleSemanticExtractor
from cycgraph_memory.hierarchy.pipeline import MemoryPipeline
from cycgraph_memory.hierarchy.segmenters import SimpleEpisodeSegmenter
from cycgraph_memory.inmemory import InMemoryMemoryStore
from cycgraph_memory.records import MAX_TAGS, MAX_TEXT_LENGTH

T0 = datetime(2025, 3, 1, 9, 0, tzinfo=UTC)


def _msg(minutes: float, text: str = "Alice Smith works at Acme Corp.", **kw: Any) -> Message:
    return Message(role=kw.pop("role", "user"), content=text,
                   timestamp=T0 + timedelta(minutes=minutes), **kw)


def _episode(text: str = "Alice Smith works at Acme Corp.", **prov: Any) -> Episode:
    m = _msg(0, text)
    return Episode(topic=text[:100], messages=[m], started_at=m.timestamp,
                   ended_at=m.timestamp, provenance=Provenance(source="agent", **prov))


class _Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


GOOD = json.dumps({
    "facts": [{"content": "Alice Smith works at Acme Corp.",
               "entities": ["Alice Smith", "Acme Corp"]}],
    "entities": [{"name": "Alice Smith", "type": "person"},
                 {"name": "Acme Corp", "type": "organization"}],
    "relationships": [{"source": "Alice Smith", "relation": "work_at", "target": "Acme Corp"}],
})


# --------------------------------------------------------------------------- segmentation


async def test_naive_timestamps_are_utc_when_mixed_with_aware_ones() -> None:
    """Naive timestamps are taken as UTC, so they order and gap correctly against aware
    ones in another zone."""
    plus2 = timezone(timedelta(hours=2))
    naive = Message(role="user", content="naive noon", timestamp=datetime(2025, 3, 1, 12, 0))
    # 13:04 at +02:00 is 11:04 UTC: 56 minutes *before* the naive message
    early = Message(role="user", content="early",
                    timestamp=datetime(2025, 3, 1, 13, 4, tzinfo=plus2))
    # 14:04 at +02:00 is 12:04 UTC: 4 minutes after it, within the 5-minute gap
    late = Message(role="user", content="late",
                   timestamp=datetime(2025, 3, 1, 14, 4, tzinfo=plus2))
    episodes = await SimpleEpisodeSegmenter().segment([late, naive, early])
    assert [[m.content for m in e.messages] for e in episodes] == [
        ["early"], ["naive noon", "late"]]
    assert all(e.started_at.tzinfo is not None for e in episodes)
    assert episodes[1].started_at == datetime(2025, 3, 1, 12, 0, tzinfo=UTC)


async def test_equal_timestamps_and_a_gap_at_exactly_the_threshold() -> None:
    """Equal timestamps keep input order; a gap equal to the threshold does not split,
    one microsecond more does; episodes come out in time order covering every message."""
    a, b, c = _msg(0, "a"), _msg(0, "b"), _msg(0, "c")
    d = _msg(5, "d")  # exactly 5 minutes after c
    e = Message(role="user", content="e",
                timestamp=d.timestamp + timedelta(minutes=5, microseconds=1))
    seg = SimpleEpisodeSegmenter(gap_threshold_ms=300_000, max_messages=None,
                                 max_characters=None)
    episodes = await seg.segment([e, b, d, a, c])
    # input order among the equal timestamps is b, a, c
    assert [[m.content for m in ep.messages] for ep in episodes] == [
        ["b", "a", "c", "d"], ["e"]]
    assert [ep.topic for ep in episodes] == ["b", "e"]
    assert episodes[0].started_at == a.timestamp and episodes[0].ended_at == d.timestamp


async def test_single_message_and_size_bounds_keep_order() -> None:
    [only] = await SimpleEpisodeSegmenter().segment([_msg(0, "just one")])
    assert only.topic == "just one" and only.started_at == only.ended_at
    many = [_msg(i / 60, f"m{i}") for i in range(10)]  # one second apart
    parts = await SimpleEpisodeSegmenter(max_messages=4).segment(list(reversed(many)))
    # ten messages, at most four per episode: the fewest equal parts, 4/3/3, in order
    assert [[m.content for m in p.messages] for p in parts] == [
        ["m0", "m1", "m2", "m3"], ["m4", "m5", "m6"], ["m7", "m8", "m9"]]


# --------------------------------------------------------------------------- simple tier


async def test_simple_extractor_one_fact_per_episode_with_full_provenance() -> None:
    messages = [_msg(0, "Deploys run on Fridays."), _msg(1, "ok"),
                _msg(30, "The cache is Redis."), _msg(90, "Backups are nightly.")]
    seg = SimpleEpisodeSegmenter(provenance=Provenance(
        source="agent", run_id="run-1", node_id="node-1", agent_id="agent-1"))
    extractor = SimpleSemanticExtractor()
    episodes = await seg.segment(messages)
    assert len(episodes) == 3
    for episode in episodes:
        result = await extractor.extract(episode)
        [fact] = result.facts
        assert result.entities == [] and result.relationships == []
        assert fact.content == episode.topic
        assert fact.source_episode_ids == [episode.id]
        assert episode.fact_ids == [fact.id]
        assert fact.valid_from == episode.started_at
        p = fact.provenance
        assert (p.source, p.run_id, p.node_id, p.agent_id) == (
            "derived", "run-1", "node-1", "agent-1")


async def test_ingest_with_the_simple_tier_writes_one_fact_per_episode() -> None:
    store = InMemoryMemoryStore()
    pipeline = MemoryPipeline(store, extractor=SimpleSemanticExtractor(), ground_facts=False)
    messages = [_msg(0, "Deploys run on Fridays."), _msg(30, "The cache is Redis.")]
    report = await pipeline.ingest(messages, run_id="run-9", tags=["lesson"])
    assert len(report.episode_ids) == len(report.fact_ids) == 2
    facts = {f.id: f for f in await store.find_facts()}
    for episode in await store.list_episodes():
        [fid] = episode.fact_ids
        assert facts[fid].source_episode_ids == [episode.id]
        assert facts[fid].tags == ["lesson"] and facts[fid].provenance.run_id == "run-9"


# --------------------------------------------------------------------------- LLM tier


async def test_many_concurrent_healthy_episodes_never_trip_the_breaker() -> None:
    async def provider(prompt: str) -> str:
        await asyncio.sleep(0.001)
        return GOOD

    x = LLMExtractor(provider, fallback=SimpleSemanticExtractor(), max_consecutive_failures=1)
    results = await asyncio.gather(*(x.extract(_episode(f"Alice Smith {i}.")) for i in range(40)))
    assert x.breaker_state == "closed"
    s = x.stats
    assert (s.llm_calls, s.llm_successes, s.fallbacks, s.breaker_trips) == (40, 40, 0, 0)
    assert all(len(r.relationships) == 1 for r in results)


async def test_breaker_opens_after_n_failures_then_skips_then_half_opens() -> None:
    clock = _Clock()
    calls: list[str] = []
    healthy = False

    async def provider(prompt: str) -> str:
        calls.append(prompt)
        if not healthy:
            raise ConnectionError("down")
        return GOOD

    x = LLMExtractor(provider, fallback=SimpleSemanticExtractor(), clock=clock,
                     max_consecutive_failures=3, breaker_cooldown_ms=10_000)
    for _ in range(3):
        result = await x.extract(_episode())
        assert result.relationships == []  # the fallback's result
    assert x.breaker_state == "open" and len(calls) == 3
    for _ in range(5):  # while open: no provider call at all
        await x.extract(_episode())
    assert len(calls) == 3 and x.stats.skipped_by_breaker == 5
    clock.t = 9.999
    await x.extract(_episode())
    assert len(calls) == 3
    clock.t = 10.0
    assert x.breaker_state == "half_open"
    healthy = True
    result = await x.extract(_episode())
    assert len(calls) == 4 and x.breaker_state == "closed"
    assert len(result.relationships) == 1


@pytest.mark.parametrize("reply", [
    "not json at all",
    '{"facts": "nope"}',
    '{"facts": [{"content": 5}]}',
    json.dumps({"facts": [{"content": "ok"}],
                "entities": [{"name": "x" * 2000, "type": "person"}]}),
])
async def test_no_record_of_a_broken_reply_reaches_the_store(reply: str) -> None:
    async def provider(prompt: str) -> str:
        return reply

    store = InMemoryMemoryStore()
    x = LLMExtractor(provider, fallback=SimpleSemanticExtractor())
    await MemoryPipeline(store, extractor=x).ingest([_msg(0, "Deploys run on Fridays.")])
    facts = await store.find_facts()
    assert len(facts) == 1 and "Deploys run on Fridays." in facts[0].content
    assert x.stats.llm_failures == 1 and x.stats.fallbacks == 1
    [episode] = await store.list_episodes()
    llm_fact_id = uuid.uuid5(LLM_EXTRACTOR_NAMESPACE, "\x1f".join((str(episode.id), "fact", "0")))
    assert facts[0].id != llm_fact_id


async def test_bug_cancelling_a_late_call_does_not_free_the_half_open_trial() -> None:
    """Docs: once the cooldown has passed *one* trial call is allowed and concurrent
    episodes use the fallback. Cancelling a call admitted before the breaker opened
    released the trial's slot, so a second trial ran beside the first."""
    clock = _Clock()
    calls: list[str] = []
    fail = False

    async def provider(prompt: str) -> str:
        calls.append(prompt)
        if fail:
            raise ConnectionError("down")
        await asyncio.Event().wait()  # hangs until cancelled
        return GOOD

    x = LLMExtractor(provider, fallback=SimpleSemanticExtractor(), clock=clock,
                     max_consecutive_failures=1, breaker_cooldown_ms=1_000,
                     timeout_ms=10**9)
    late = asyncio.create_task(x.extract(_episode("late call")))
    await asyncio.sleep(0)
    fail = True
    await x.extract(_episode())  # fails: the breaker opens
    assert x.breaker_state == "open"
    clock.t = 5.0
    fail = False
    trial = asyncio.create_task(x.extract(_episode("the trial")))
    await asyncio.sleep(0)
    assert len(calls) == 3
    late.cancel()
    await asyncio.gather(late, return_exceptions=True)
    other = await asyncio.wait_for(x.extract(_episode("while the trial runs")), 5)
    assert other.relationships == []  # the fallback: no second trial
    assert len(calls) == 3
    trial.cancel()
    await asyncio.gather(trial, return_exceptions=True)


async def test_bug_a_late_failure_does_not_reopen_a_half_open_breaker() -> None:
    """Only the trial decides the half-open breaker. A call admitted while the breaker was
    closed that fails during the trial re-opened it (a new cooldown and a trip counted)
    although the trial then succeeded."""
    clock = _Clock()
    release_late = asyncio.Event()
    release_trial = asyncio.Event()

    async def provider(prompt: str) -> str:
        if "late call" in prompt:
            await release_late.wait()
            raise ConnectionError("late failure")
        if "the trial" in prompt:
            await release_trial.wait()
            return GOOD
        raise ConnectionError("down")

    x = LLMExtractor(provider, fallback=SimpleSemanticExtractor(), clock=clock,
                     max_consecutive_failures=1, breaker_cooldown_ms=1_000)
    late = asyncio.create_task(x.extract(_episode("late call")))
    await asyncio.sleep(0)
    await x.extract(_episode("fails now"))  # the breaker opens
    assert x.stats.breaker_trips == 1
    clock.t = 5.0
    trial = asyncio.create_task(x.extract(_episode("the trial")))
    await asyncio.sleep(0)
    release_late.set()
    await late  # the late failure arrives while the trial is in flight
    assert x.breaker_state == "half_open" and x.stats.breaker_trips == 1
    release_trial.set()
    result = await trial
    assert len(result.relationships) == 1 and x.breaker_state == "closed"


async def test_bug_a_reply_with_many_tags_does_not_fail_the_ingest() -> None:
    """An ingest's tags go onto every new fact. A model reply tagging a fact with the
    maximum number of tags made ``ingest(tags=...)`` raise a ValidationError (the reply
    broke the ingest instead of being bounded); the ingest's own tags must land."""
    reply = json.dumps({"facts": [{"content": "Alice Smith works at Acme Corp.",
                                   "tags": [f"t{i}" for i in range(MAX_TAGS)]}]})

    async def provider(prompt: str) -> str:
        return reply

    store = InMemoryMemoryStore()
    pipeline = MemoryPipeline(store, extractor=LLMExtractor(
        provider, fallback=SimpleSemanticExtractor()))
    await pipeline.ingest([_msg(0)], tags=["lesson", "graph:g1"])
    [fact] = await store.find_facts()
    assert len(fact.tags) == MAX_TAGS
    assert fact.tags[-2:] == ["lesson", "graph:g1"]
    assert fact.tags[:MAX_TAGS - 2] == [f"t{i}" for i in range(MAX_TAGS - 2)]


async def test_bug_grounding_never_grows_a_fact_past_the_text_limit() -> None:
    """Grounding prefixes the speaker and date and resolves "I"/"my" to the speaker's
    name. On a long first-person fact that grew the text past MAX_TEXT_LENGTH and the
    ingest raised a ValidationError; the fact now keeps its own text."""
    text = ("I think my team and I said I would. " * 3000)[:99_000]
    reply = json.dumps({"facts": [{"content": text}]})

    async def provider(prompt: str) -> str:
        return reply

    store = InMemoryMemoryStore()
    pipeline = MemoryPipeline(store, extractor=LLMExtractor(
        provider, fallback=SimpleSemanticExtractor()))
    message = _msg(0, text, metadata={"name": "Bartholomew Featherstonehaugh"})
    await pipeline.ingest([message])
    [fact] = await store.find_facts()
    assert len(fact.content) <= MAX_TEXT_LENGTH
    assert fact.content == text.strip()
    assert fact.source_message_ids == [message.id]


# --------------------------------------------------------------------------- clustering


def _ids() -> Any:
    counter = itertools.count(1)
    return lambda: uuid.UUID(int=next(counter))


def _fact(name: str, embedding: list[float] | None) -> SemanticFact:
    return SemanticFact(content=name, embedding=embedding,
                        provenance=Provenance(source="agent"))


async def test_greedy_assignment_on_hand_made_vectors() -> None:
    """Input order, most similar centroid, inclusive threshold, new theme otherwise, and
    the centroid moves as members join (so a later fact compares with the mean)."""
    c = 0.8  # cos(36.87 deg)
    facts = [
        _fact("a", [1.0, 0.0]),
        _fact("b", [c, 0.6]),  # similarity 0.8 to a: joins at threshold 0.8
        _fact("c", [0.0, 1.0]),  # similarity to the centroid of a+b is 0.316: new theme
        _fact("d", [0.6, c]),  # 0.8 to c, 0.949 to a+b's centroid: joins a+b
        _fact("e", None),  # no embedding: General
    ]
    themes = await SimpleThemeClusterer(0.8, id_factory=_ids()).cluster(facts)
    members = [[f.content for f in facts if f.id in set(t.fact_ids)] for t in themes]
    assert members == [["a", "b", "d"], ["c"], ["e"]]
    assert themes[2].label == "General"
    assert all(t.fact_ids for t in themes)
    for fact in facts:
        assert fact.theme_id in {t.id for t in themes}


def _reference(vectors: np.ndarray, assign: float, merge: float,
               cap: int | None) -> list[list[int]]:
    """Brute force of the documented algorithm (centroid linkage)."""
    clusters: list[tuple[np.ndarray, list[int]]] = []
    for i, v in enumerate(vectors):
        u = v / np.linalg.norm(v)
        sims = [float((s / np.linalg.norm(s)) @ u) for s, _ in clusters]
        best = int(np.argmax(sims)) if sims else -1
        if best >= 0 and sims[best] >= assign - 1e-9:
            clusters[best][0][:] += u
            clusters[best][1].append(i)
        else:
            clusters.append((u.copy(), [i]))
    alive = list(range(len(clusters)))
    while len(alive) > 1:
        pairs = [(float((clusters[a][0] / np.linalg.norm(clusters[a][0]))
                        @ (clusters[b][0] / np.linalg.norm(clusters[b][0]))), a, b)
                 for a, b in itertools.combinations(alive, 2)]
        sim, a, b = max(pairs, key=lambda p: p[0])
        if sim < merge - 1e-9 and not (cap is not None and len(alive) > cap):
            break
        clusters[a][0][:] += clusters[b][0]
        clusters[a][1].extend(clusters[b][1])
        alive.remove(b)
    return sorted(sorted(clusters[k][1]) for k in alive)


@pytest.mark.parametrize("seed", range(40))
async def test_assign_then_merge_matches_a_brute_force_reference(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n, dim = int(rng.integers(2, 20)), int(rng.integers(2, 5))
    vectors = rng.normal(size=(n, dim))
    assign, merge = float(rng.uniform(0.3, 0.9)), float(rng.uniform(0.5, 0.95))
    cap = None if seed % 2 else 3
    facts = [_fact(f"f{i}", vectors[i].tolist()) for i in range(n)]
    themes = await ConsolidatingThemeClusterer(assign, merge, cap, id_factory=_ids()).cluster(
        facts)
    index = {f.id: i for i, f in enumerate(facts)}
    got = sorted(sorted(index[f] for f in t.fact_ids) for t in themes)
    assert got == _reference(vectors, assign, merge, cap)
    assert all(t.fact_ids for t in themes)  # no theme left empty
    for fact in facts:
        [owner] = [t for t in themes if fact.id in t.fact_ids]
        assert fact.theme_id == owner.id


async def test_clustering_is_deterministic_for_a_given_input() -> None:
    rng = np.random.default_rng(7)
    vectors = rng.normal(size=(30, 6)).tolist()

    async def run() -> list[tuple[str, str, list[uuid.UUID], list[float] | None]]:
        facts = [SemanticFact(id=uuid.UUID(int=1000 + i), content=f"fact {i}", embedding=v,
                              provenance=Provenance(source="agent", created_at=T0))
                 for i, v in enumerate(vectors)]
        clusterer = ConsolidatingThemeClusterer(0.3, 0.6, id_factory=_ids(), now=lambda: T0)
        themes = await clusterer.cluster(facts)
        return [(t.label, t.description, t.fact_ids, t.embedding) for t in themes]

    assert await run() == await run()


# --------------------------------------------------------------------------- calibration


def test_calibration_is_deterministic_and_within_its_documented_band() -> None:
    rng = np.random.default_rng(3)
    vectors = rng.normal(size=(120, 16)).tolist()
    first = fit_theme_calibration(vectors, facts=1000)
    assert fit_theme_calibration(vectors, facts=1000) == first
    assert -1.0 <= first.assignment_threshold <= first.merge_threshold <= 1.0
    unit = np.asarray(vectors) / np.linalg.norm(vectors, axis=1, keepdims=True)
    sims = (unit @ unit.T)[np.triu_indices(len(vectors), k=1)]
    # quantiles 1 - 40/1000 and 1 - 40/4000 of the pairwise similarities
    assert first.assignment_threshold == pytest.approx(float(np.quantile(sims, 0.96)))
    assert first.merge_threshold == pytest.approx(float(np.quantile(sims, 0.99)))
    # a small tenant: both quantiles are clipped to the median (floor 0.5)
    small = fit_theme_calibration(vectors, facts=20)
    median = float(np.quantile(sims, 0.5))
    assert small.assignment_threshold == pytest.approx(median)
    assert small.merge_threshold == pytest.approx(median)
    # a huge tenant: clipped at the 0.9995 ceiling
    huge = fit_theme_calibration(vectors, facts=10**9)
    assert huge.assignment_threshold == pytest.approx(float(np.quantile(sims, 0.9995)))
    assert isinstance(huge, ThemeCalibration) and huge.fitted_at == 10**9
    plain = calibrate_theme_thresholds(vectors)
    assert plain == calibrate_theme_thresholds(vectors)
    assert plain.pairs == len(sims)

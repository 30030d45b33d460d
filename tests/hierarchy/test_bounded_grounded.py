"""Bounded segmentation, grounded facts and the pipeline's use of them (both backends)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pytest
from pydantic import ValidationError

from cycgraph_memory.embeddings.hashing import HashingEmbeddingProvider
from cycgraph_memory.hierarchy.grounding import (
    contextualize,
    ground_facts,
    informativeness,
    is_filler,
    resolve_first_person,
    speaker_of,
    third_person,
)
from cycgraph_memory.hierarchy.pipeline import MemoryPipeline
from cycgraph_memory.hierarchy.segmenters import SimpleEpisodeSegmenter, topic_cuts
from cycgraph_memory.inmemory import InMemoryMemoryIndex, InMemoryMemoryStore
from cycgraph_memory.records import Episode, Message, Provenance, SemanticFact

T0 = datetime(2024, 1, 8, 19, 5, tzinfo=UTC)


def msg(content: str, i: int, role: str = "user", **kw: Any) -> Message:
    return Message(role=role, content=content, timestamp=T0 + timedelta(seconds=30 * i), **kw)


def unit(i: int, dim: int = 4) -> list[float]:
    v = [0.0] * dim
    v[i] = 1.0
    return v


# ----------------------------------------------------------------------------- segmentation


async def test_max_messages_splits_into_near_equal_parts() -> None:
    messages = [msg(f"m{i}", i) for i in range(10)]
    episodes = await SimpleEpisodeSegmenter(max_messages=4).segment(messages)
    assert [len(e.messages) for e in episodes] == [4, 3, 3]
    assert [m.id for e in episodes for m in e.messages] == [m.id for m in messages]
    seventeen = [msg(f"m{i}", i) for i in range(17)]
    default = await SimpleEpisodeSegmenter.bounded().segment(seventeen)
    assert [len(e.messages) for e in default] == [6, 6, 5]  # bounded(): max 8 -> 3 parts
    unbounded = await SimpleEpisodeSegmenter(max_messages=None).segment(messages)
    assert len(unbounded) == 1
    # The spec's segmenter, built with its defaults, splits on time gaps only.
    assert len(await SimpleEpisodeSegmenter().segment(seventeen)) == 1


async def test_spec_defaults_split_on_time_gaps_only() -> None:
    # The spec: "groups messages into episodes by time gap. Any pause longer than the
    # threshold starts a new episode." Forty long messages 30 s apart, with vectors
    # on two topics: one episode with the defaults; bounded() cuts by size and topic.
    messages = [msg(("a" if i < 20 else "b") * 300 + str(i), i,
                    embedding=unit(0 if i < 20 else 1)) for i in range(40)]
    seg = SimpleEpisodeSegmenter({"gap_threshold_ms": 5 * 60 * 1000})
    assert seg.max_messages is None and seg.max_characters is None
    [episode] = await seg.segment(messages)
    assert [m.id for m in episode.messages] == [m.id for m in messages]
    bounded = await SimpleEpisodeSegmenter.bounded(5 * 60 * 1000).segment(messages)
    assert len(bounded) > 2 and all(len(e.messages) <= 8 for e in bounded)
    assert all(sum(len(m.content) for m in e.messages) <= 2_000 for e in bounded)
    # A topic cut needs topic_shifts (on with an embedder, or asked for).
    shifts = SimpleEpisodeSegmenter(topic_shifts=True, min_messages=2)
    assert [len(e.messages) for e in await shifts.segment(messages)] == [20, 20]


async def test_max_characters_cuts_before_the_overflowing_message() -> None:
    messages = [msg("x" * 40, 0), msg("y" * 40, 1), msg("z" * 30, 2), msg("w" * 100, 3)]
    episodes = await SimpleEpisodeSegmenter(max_characters=100).segment(messages)
    assert [[m.content[0] for m in e.messages] for e in episodes] == [["x", "y"], ["z"], ["w"]]


async def test_bad_bounds_are_rejected() -> None:
    for kwargs in ({"max_messages": 0}, {"max_characters": 0}, {"topic_window": 0},
                   {"topic_shift_z": -1.0}, {"min_messages": 0}):
        with pytest.raises(ValidationError):
            SimpleEpisodeSegmenter(**kwargs)  # type: ignore[arg-type]


def test_topic_cuts_exact_positions() -> None:
    # three topics of 4 messages each: cuts exactly at the boundaries
    rows = [unit(0)] * 4 + [unit(1)] * 4 + [unit(2)] * 4
    assert topic_cuts(np.asarray(rows), window=2, z=1.0, min_size=3) == [4, 8]
    # one topic: no cut; too short: no cut
    assert topic_cuts(np.asarray([unit(0)] * 8), window=2, z=1.0, min_size=3) == []
    assert topic_cuts(np.asarray([unit(0), unit(1)]), window=2, z=1.0, min_size=3) == []
    # min_size keeps parts large enough: the boundary at 2 is not taken
    rows = [unit(0)] * 2 + [unit(1)] * 6
    assert topic_cuts(np.asarray(rows), window=2, z=1.0, min_size=3) == []


async def test_topic_shift_uses_message_vectors() -> None:
    messages = [msg(f"a{i}", i, embedding=unit(0)) for i in range(4)]
    messages += [msg(f"b{i}", 4 + i, embedding=unit(1)) for i in range(4)]
    seg = SimpleEpisodeSegmenter(max_messages=None, min_messages=2, topic_shifts=True)
    episodes = await seg.segment(messages)
    assert [[m.content for m in e.messages] for e in episodes] == [
        ["a0", "a1", "a2", "a3"], ["b0", "b1", "b2", "b3"],
    ]
    # the same messages without vectors and without an embedder: one episode
    bare = [m.model_copy(update={"embedding": None}) for m in messages]
    assert len(await seg.segment(bare)) == 1


async def test_segmenter_copies_do_not_alias_inputs() -> None:
    m = msg("hello there", 0, metadata={"name": "Maya", "tags": ["a"]}, embedding=unit(0))
    [episode] = await SimpleEpisodeSegmenter().segment([m])
    copy = episode.messages[0]
    assert copy == m
    assert copy.metadata is not m.metadata and copy.embedding is not m.embedding


# ----------------------------------------------------------------------------- grounding


def test_speaker_and_pronouns() -> None:
    assert speaker_of(msg("x", 0, metadata={"name": "Maya"})) == "Maya"
    assert speaker_of(msg("x", 0, metadata={"speaker": "Sol"})) == "Sol"
    assert speaker_of(msg("x", 0, role="assistant")) == "assistant"
    assert resolve_first_person("i think my dog likes me, I'm sure", "Maya") == (
        "Maya thinks Maya's dog likes Maya, Maya is sure"
    )
    assert resolve_first_person("iPhone and Iris stay", "Maya") == "iPhone and Iris stay"


@pytest.mark.parametrize(("said", "stored"), [
    ("I prefer vegetarian restaurants", "Maya prefers vegetarian restaurants"),
    ("i really really like tea", "Maya really really likes tea"),
    ("I don't eat meat", "Maya doesn't eat meat"),
    ("I have two kids and I go running", "Maya has two kids and Maya goes running"),
    ("I study law, I watch TV, I play guitar",
     "Maya studies law, Maya watches TV, Maya plays guitar"),
    ("If I ever move to Paris", "If Maya ever moves to Paris"),
    ("I LOVE IT", "Maya LOVES IT"),
    # Not a present-tense verb of the list, or an inverted subject: as written.
    ("do I need a visa? can I go?", "do Maya need a visa? can Maya go?"),
    ("I went to Paris, I quit Globex, I used to live there",
     "Maya went to Paris, Maya quit Globex, Maya used to live there"),
    ("I will go, I'd like, I, for one, like it",
     "Maya will go, Maya would like, Maya, for one, like it"),
    ("Iris likes it", "Iris likes it"),
])
def test_a_present_verb_after_i_agrees_with_the_speaker(said: str, stored: str) -> None:
    assert resolve_first_person(said, "Maya") == stored


def test_third_person_forms() -> None:
    assert [third_person(v) for v in ("prefer", "miss", "teach", "fix", "go", "study", "play",
                                      "have", "Don't", "LIKE")] == [
        "prefers", "misses", "teaches", "fixes", "goes", "studies", "plays", "has",
        "Doesn't", "LIKES"]


def test_fillers_and_informativeness() -> None:
    names = ["Caroline", "Melanie"]
    for filler in ("Hey Caroline!", "Thanks, Melanie!", "ok cool, talk later", "lol", "thx :)"):
        assert is_filler(filler, names), filler
    for content in ("we adopted a retired greyhound", "biscuit got a medal too"):
        assert not is_filler(content, names), content
    assert informativeness("Thanks so much, we adopted a greyhound") == 2  # adopt, greyhound


def test_ground_facts_by_containment_then_overlap() -> None:
    m1 = msg("so i finally did it. we adopted a greyhound from the rescue", 0)
    m2 = msg("Greyhounds sleep a lot.", 1, role="assistant")
    episode = Episode(topic="t", messages=[m1, m2], started_at=T0, ended_at=T0,
                      provenance=Provenance(source="system"))
    prov = Provenance(source="derived")
    contained = SemanticFact(content="We adopted a  greyhound from the rescue", provenance=prov)
    overlap = SemanticFact(content="greyhounds sleep quite a lot", provenance=prov)
    unrelated = SemanticFact(content="kubernetes billing migration", provenance=prov)
    preset = SemanticFact(content="x y", source_message_ids=[m2.id], provenance=prov)
    ground_facts(episode, [contained, overlap, unrelated, preset])
    assert contained.source_message_ids == [m1.id]
    assert overlap.source_message_ids == [m2.id]
    assert unrelated.source_message_ids == []
    assert preset.source_message_ids == [m2.id]
    fact = SemanticFact(content="i adopted my greyhound", provenance=prov)
    assert contextualize(fact, msg("x", 0, metadata={"name": "Maya"})) == (
        "Maya on 2024-01-08: Maya adopted Maya's greyhound"
    )


# ----------------------------------------------------------------------------- pipeline


@pytest.fixture(params=["memory", "postgres"])
def store(request: pytest.FixtureRequest) -> Any:
    if request.param == "memory":
        return InMemoryMemoryStore()
    return request.getfixturevalue("pg_store")


def _conversation() -> list[Message]:
    lines = [
        ("user", "Maya", "hey"),
        ("assistant", "Sol", "Hi Maya! What's on your mind?"),
        ("user", "Maya", "we adopted a retired greyhound named Biscuit from the rescue."),
        ("assistant", "Sol", "Congratulations! Greyhounds are famously gentle dogs."),
        ("user", "Maya", "my unit switched me to night shifts starting next month."),
        ("user", "Maya", "thanks, gotta run"),
    ]
    return [
        Message(id=uuid.uuid5(uuid.NAMESPACE_URL, f"m{i}"), role=role, content=text,
                timestamp=T0 + timedelta(seconds=30 * i), metadata={"name": name})
        for i, (role, name, text) in enumerate(lines)
    ]


async def test_pipeline_grounds_facts_and_embeds_messages(store: Any) -> None:
    embedder = HashingEmbeddingProvider(dimensions=8)
    pipeline = MemoryPipeline(store, embedder=embedder)
    messages = _conversation()
    report = await pipeline.ingest(messages)
    assert all(m.embedding is None for m in messages)  # the caller's objects are untouched
    facts = list((await store.get_facts(report.fact_ids)).values())
    contents = sorted(f.content for f in facts)
    assert any(c.startswith("Maya on 2024-01-08: ") and "greyhound" in c for c in contents)
    assert any("Maya's unit switched Maya to night shifts" in c for c in contents)
    assert not any("gotta run" in c or c.endswith(": hey") for c in contents)
    ids = {m.id: m for m in messages}
    for fact in facts:
        assert len(fact.source_message_ids) == 1
        source = ids[fact.source_message_ids[0]]
        assert fact.content.startswith(f"{source.metadata['name']} on 2024-01-08: ")
    stored = await store.get_messages([m.id for m in messages])
    vectors = await embedder.embed([m.content for m in messages])
    for m, v in zip(messages, vectors, strict=True):
        assert stored[m.id].embedding == pytest.approx(v, abs=1e-6)
    by_id = dict(zip([m.id for m in messages], vectors, strict=True))
    episodes = list((await store.get_episodes(report.episode_ids)).values())
    assert sum(len(e.messages) for e in episodes) == len(messages)
    for episode in episodes:
        rows = np.asarray([by_id[m.id] for m in episode.messages])
        mean = (rows / np.linalg.norm(rows, axis=1, keepdims=True)).mean(axis=0)
        assert episode.embedding == pytest.approx((mean / np.linalg.norm(mean)).tolist(), abs=1e-6)
    assert sorted(f for e in episodes for f in e.fact_ids) == sorted(report.fact_ids)


async def test_pipeline_without_grounding_keeps_extractor_facts() -> None:
    store = InMemoryMemoryStore()
    pipeline = MemoryPipeline(store, embedder=HashingEmbeddingProvider(dimensions=8),
                              ground_facts=False)
    report = await pipeline.ingest(_conversation())
    facts = (await store.get_facts(report.fact_ids)).values()
    assert all(f.source_message_ids == [] for f in facts)
    assert not any(f.content.startswith("Maya on") for f in facts)


async def test_index_searches_pipeline_messages_by_vector_and_text() -> None:
    store = InMemoryMemoryStore()
    embedder = HashingEmbeddingProvider(dimensions=64)
    index = InMemoryMemoryIndex()
    await MemoryPipeline(store, embedder=embedder, index=index).ingest(_conversation())
    [query] = await embedder.embed(["we adopted a retired greyhound named Biscuit"])
    hits = await index.search_messages(query, limit=1)
    assert hits[0].item.id == uuid.uuid5(uuid.NAMESPACE_URL, "m2")
    text_hits = await index.text_search_messages("night shifts", limit=3)
    assert [h.item.id for h in text_hits] == [uuid.uuid5(uuid.NAMESPACE_URL, "m4")]
    rebuilt = InMemoryMemoryIndex()
    await rebuilt.rebuild(store)
    assert [h.item.id for h in await rebuilt.search_messages(query, limit=1)] == [
        hits[0].item.id
    ]

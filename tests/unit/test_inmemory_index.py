"""In-memory-only behaviour of InMemoryMemoryIndex and InMemoryMemoryStore."""

from __future__ import annotations

import logging
import math
import uuid
import warnings
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from cycgraph_memory import (
    EmbeddingDimensionMismatchError,
    Entity,
    Episode,
    InvalidInputError,
    Provenance,
    SemanticFact,
    Theme,
)
from cycgraph_memory.errors import InvalidTypeError
from cycgraph_memory.inmemory import (
    IN_MEMORY_INDEX_WARN_THRESHOLD,
    InMemoryIndexScaleWarning,
    InMemoryMemoryIndex,
    InMemoryMemoryStore,
)
from cycgraph_memory.similarity import cosine_similarity

PROV = Provenance(source="agent")
T0 = datetime(2025, 1, 1, tzinfo=UTC)


def fact(embedding: list[float] | None, **kw: Any) -> SemanticFact:
    return SemanticFact(content="c", provenance=PROV, embedding=embedding, **kw)


def e(i: int, dim: int = 4) -> list[float]:
    v = [0.0] * dim
    v[i] = 1.0
    return v


# ------------------------------------------------------------------ incremental sync


async def test_upsert_search_remove() -> None:
    ix = InMemoryMemoryIndex(expected_dimensions=4)
    a, b = fact(e(0)), fact(e(1))
    ix.upsert(a)
    ix.upsert(b)
    assert len(ix) == 2
    assert [r.item.id for r in await ix.search_facts(e(0), limit=1)] == [a.id]
    assert ix.remove(a.id) is True
    assert ix.remove(str(a.id)) is False
    assert len(ix) == 1
    assert [r.item.id for r in await ix.search_facts(e(0))] == [b.id]


async def test_upsert_replaces_and_dropping_embedding_unindexes() -> None:
    ix = InMemoryMemoryIndex()
    a = fact(e(0), tags=["x"])
    ix.upsert(a)
    moved = a.model_copy(update={"embedding": e(1), "tags": ["y"]})
    ix.upsert(moved)
    assert len(ix) == 1
    (hit,) = await ix.search_facts(e(1))
    assert hit.score == pytest.approx(1.0) and hit.item.tags == ["y"]
    assert await ix.search_facts(e(1), tags=["x"]) == []
    ix.upsert(a.model_copy(update={"embedding": None}))
    assert len(ix) == 0
    assert await ix.search_facts(e(1)) == []


async def test_upsert_many_mixed_types_and_last_wins() -> None:
    ix = InMemoryMemoryIndex(expected_dimensions=4)
    f = fact(e(0))
    ent = Entity(name="n", entity_type="t", provenance=PROV, embedding=e(1))
    th = Theme(label="l", provenance=PROV, embedding=e(2))
    ep = Episode(topic="t", started_at=T0, ended_at=T0, provenance=PROV, embedding=e(3))
    ix.upsert_many([f, ent, th, ep, f.model_copy(update={"content": "last"})])
    assert len(ix) == 4
    assert (await ix.search_facts(e(0)))[0].item.content == "last"
    assert (await ix.search_entities(e(1)))[0].item.id == ent.id
    assert (await ix.search_themes(e(2)))[0].item.id == th.id
    assert (await ix.search_episodes(e(3)))[0].item.id == ep.id
    assert ix.remove(ep.id) is True
    assert await ix.search_episodes(e(3)) == []


async def test_upsert_copies_record() -> None:
    ix = InMemoryMemoryIndex()
    a = fact(e(0), tags=["x"])
    ix.upsert(a)
    a.tags.append("y")
    (hit,) = await ix.search_facts(e(0))
    assert hit.item.tags == ["x"]


def test_upsert_rejects_other_types() -> None:
    ix = InMemoryMemoryIndex()
    with pytest.raises(TypeError):
        ix.upsert("nope")  # type: ignore[arg-type]


async def test_clear_forgets_entries_and_learned_dimension() -> None:
    ix = InMemoryMemoryIndex()
    ix.upsert(fact([1.0, 2.0]))
    assert ix.dimensions == 2
    ix.clear()
    assert len(ix) == 0 and ix.dimensions is None
    ix.upsert(fact([1.0, 2.0, 3.0]))
    assert ix.dimensions == 3


# ------------------------------------------------------------------ dimensions


async def test_learned_dimension_enforced() -> None:
    ix = InMemoryMemoryIndex()
    assert await ix.search_facts([1.0, 2.0, 3.0]) == []  # nothing to compare with yet
    ix.upsert(fact([1.0, 0.0]))
    with pytest.raises(EmbeddingDimensionMismatchError):
        ix.upsert(Entity(name="n", entity_type="t", provenance=PROV, embedding=[1.0]))
    with pytest.raises(EmbeddingDimensionMismatchError) as info:
        await ix.search_themes([1.0, 0.0, 0.0])
    assert (info.value.expected, info.value.actual) == (2, 3)
    assert "query" in info.value.context


async def test_expected_dimension_mismatch_leaves_index_unchanged() -> None:
    ix = InMemoryMemoryIndex(expected_dimensions=4)
    good = fact(e(0))
    ix.upsert(good)
    with pytest.raises(EmbeddingDimensionMismatchError) as info:
        ix.upsert_many([fact(e(1)), fact([1.0, 2.0])])
    assert (info.value.expected, info.value.actual) == (4, 2)
    assert len(ix) == 1
    with pytest.raises(EmbeddingDimensionMismatchError):
        await ix.search_facts([1.0] * 5)
    with pytest.raises(EmbeddingDimensionMismatchError):
        await ix.search_facts([1.0])  # even against an empty table


async def test_rebuild_mismatch_keeps_previous_contents() -> None:
    store = InMemoryMemoryStore()  # accepts any dimension
    ix = InMemoryMemoryIndex(expected_dimensions=4)
    good = fact(e(0))
    await store.put_fact(good)
    await ix.rebuild(store)
    await store.put_fact(fact([1.0, 2.0, 3.0]))
    with pytest.raises(EmbeddingDimensionMismatchError):
        await ix.rebuild(store)
    assert [r.item.id for r in await ix.search_facts(e(0))] == [good.id]


async def test_rebuild_relearns_dimension_when_not_configured() -> None:
    ix = InMemoryMemoryIndex()
    ix.upsert(fact([1.0, 0.0]))
    store = InMemoryMemoryStore()
    await store.put_fact(fact([0.0, 0.0, 1.0]))
    await ix.rebuild(store)
    assert ix.dimensions == 3


async def test_bad_query_vectors() -> None:
    ix = InMemoryMemoryIndex(expected_dimensions=2)
    ix.upsert(fact([1.0, 0.0]))
    with pytest.raises(InvalidInputError):
        await ix.search_facts([math.nan, 0.0])
    with pytest.raises(InvalidInputError):
        await ix.search_facts([])
    with pytest.raises(InvalidInputError):
        await ix.search_facts([[1.0, 0.0]])  # type: ignore[list-item]


def test_bad_constructor_arguments() -> None:
    with pytest.raises(InvalidInputError):
        InMemoryMemoryIndex(expected_dimensions=0)
    with pytest.raises(InvalidInputError):
        InMemoryMemoryStore(expected_dimensions=0)


async def test_store_without_expected_dimensions_accepts_any_length() -> None:
    store = InMemoryMemoryStore()
    assert store.expected_dimensions is None
    await store.put_facts([fact([1.0]), fact([1.0, 2.0])])
    assert len(await store.find_facts()) == 2


# ------------------------------------------------------------------ numerics


async def test_zero_query_and_huge_values() -> None:
    ix = InMemoryMemoryIndex()
    a, b = fact([7e18, 7e18]), fact([-1e-300, 0.0])
    ix.upsert_many([a, b])
    res = await ix.search_facts([1.0, 1.0])
    assert [r.item.id for r in res] == [a.id, b.id]
    assert res[0].score == pytest.approx(1.0, abs=1e-6)
    assert res[1].score == pytest.approx(-math.sqrt(0.5), abs=1e-6)
    zero = await ix.search_facts([0.0, 0.0])
    assert [r.score for r in zero] == [0.0, 0.0]
    assert [r.item.id for r in zero] == sorted([a.id, b.id], key=str)


async def test_ties_at_top_k_boundary_resolve_by_id() -> None:
    ix = InMemoryMemoryIndex()
    best = fact([1.0, 0.0])
    tied = [fact([1.0, 1.0]) for _ in range(20)]
    ix.upsert_many([*tied, best])
    for limit in (1, 2, 5, 21):
        res = await ix.search_facts([1.0, 0.0], limit=limit)
        expected = [best.id, *sorted((f.id for f in tied), key=str)][:limit]
        assert [r.item.id for r in res] == expected


vectors = st.lists(
    st.floats(min_value=-4, max_value=4, allow_nan=False, width=16), min_size=3, max_size=3
)
ops = st.lists(
    st.tuples(
        st.sampled_from(["put", "put", "put", "remove"]),
        st.integers(0, 11),
        vectors,
        st.booleans(),
        st.sets(st.sampled_from(["a", "b", "c"]), max_size=2),
    ),
    max_size=40,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    ops=ops,
    query=vectors,
    limit=st.integers(1, 12),
    tags=st.one_of(st.none(), st.lists(st.sampled_from(["a", "b", "c"]), max_size=2)),
    exclude=st.one_of(st.none(), st.lists(st.sampled_from(["a", "b", "c"]), max_size=1)),
    include_invalidated=st.booleans(),
)
async def test_matches_brute_force_reference(
    ops: list[tuple[str, int, list[float], bool, set[str]]],
    query: list[float],
    limit: int,
    tags: list[str] | None,
    exclude: list[str] | None,
    include_invalidated: bool,
) -> None:
    ids = [uuid.UUID(int=(i * 7919 + 13) << 80) for i in range(12)]
    ix = InMemoryMemoryIndex(expected_dimensions=3)
    model: dict[uuid.UUID, SemanticFact] = {}
    for op, slot, v, dead, tagset in ops:
        fid = ids[slot]
        if op == "remove":
            assert ix.remove(fid) == (fid in model)
            model.pop(fid, None)
        else:
            f = fact(v, id=fid, tags=sorted(tagset), invalidated_by="x" if dead else None)
            ix.upsert(f)
            model[fid] = f
    assert len(ix) == len(model)
    res = await ix.search_facts(
        query,
        limit=limit,
        tags=tags,
        exclude_tags=exclude,
        include_invalidated=include_invalidated,
    )
    candidates = [
        f
        for f in model.values()
        if (include_invalidated or f.invalidated_by is None)
        and (not tags or set(tags) & set(f.tags))
        and not (exclude and set(exclude) & set(f.tags))
    ]
    ref = {f.id: cosine_similarity(query, f.embedding or []) for f in candidates}
    assert len(res) == min(limit, len(candidates))
    got_scores = [r.score for r in res]
    assert got_scores == sorted(got_scores, reverse=True)
    for r in res:
        assert r.score == pytest.approx(ref[r.item.id], abs=1e-5)
    # the returned set is a correct top-k up to float32 rounding
    if res:
        kth = res[-1].score
        better = [i for i, s in ref.items() if s > kth + 1e-5]
        assert set(better) <= {r.item.id for r in res}


# ------------------------------------------------------------------ scale warning


def _bulk_facts(n: int) -> list[SemanticFact]:
    rng = np.random.default_rng(1)
    vs = rng.standard_normal((n, 2)).tolist()
    return [
        SemanticFact.model_construct(
            id=uuid.uuid4(),
            content="c",
            source_episode_ids=[],
            entity_ids=[],
            theme_id=None,
            embedding=v,
            provenance=PROV,
            valid_from=T0,
            valid_until=None,
            invalidated_by=None,
            access_count=0,
            last_accessed_at=None,
            tags=[],
        )
        for v in vs
    ]


def test_scale_warning_once(caplog: pytest.LogCaptureFixture) -> None:
    ix = InMemoryMemoryIndex(expected_dimensions=2)
    facts = _bulk_facts(IN_MEMORY_INDEX_WARN_THRESHOLD + 2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ix.upsert_many(facts[:IN_MEMORY_INDEX_WARN_THRESHOLD])
        assert not [w for w in caught if issubclass(w.category, InMemoryIndexScaleWarning)]
        with caplog.at_level(logging.WARNING, logger="cycgraph_memory.inmemory.index"):
            ix.upsert(facts[-1])
            ix.upsert(facts[-2])
    scale = [w for w in caught if issubclass(w.category, InMemoryIndexScaleWarning)]
    assert len(scale) == 1
    assert issubclass(InMemoryIndexScaleWarning, UserWarning)
    # Reported once: as the warning, not also as a log record.
    assert [r for r in caplog.records if "O(n)" in r.getMessage()] == []


async def test_scale_warning_on_rebuild_and_silenced() -> None:
    store = InMemoryMemoryStore()
    facts = _bulk_facts(IN_MEMORY_INDEX_WARN_THRESHOLD + 1)
    store._facts = {f.id: f for f in facts}  # bulk-load without 10k copies
    with pytest.warns(InMemoryIndexScaleWarning):
        await InMemoryMemoryIndex().rebuild(store)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        quiet = InMemoryMemoryIndex(silence_scale_warning=True)
        await quiet.rebuild(store)
    assert len(quiet) == IN_MEMORY_INDEX_WARN_THRESHOLD + 1


@pytest.mark.parametrize("flag", ["no", 0, 1, None])
def test_scale_warning_flag_must_be_a_bool(flag: object) -> None:
    # bool("no") is True: a string flag silently meant the opposite of what was written
    with pytest.raises(InvalidTypeError):
        InMemoryMemoryIndex(silence_scale_warning=flag)  # type: ignore[arg-type]


# ------------------------------------------------------------------ record copies


def test_copy_record_is_deep_and_equal() -> None:
    from cycgraph_memory import Message
    from cycgraph_memory.inmemory._common import copy_record

    ep = Episode(
        topic="t",
        started_at=T0,
        ended_at=T0,
        provenance=Provenance(source="tool", tool_name="x"),
        embedding=[1.0, 2.0],
        fact_ids=[uuid.uuid4()],
        messages=[Message(role="user", content="hi", metadata={"k": [1]})],
    )
    dup = copy_record(ep)
    assert dup == ep and dup is not ep
    assert dup.model_fields_set == ep.model_fields_set
    assert dup.messages[0] is not ep.messages[0]
    assert dup.provenance is not ep.provenance
    dup.messages[0].metadata["k"].append(2)
    dup.messages.append(Message(role="user", content="more"))
    assert dup.embedding is not None
    dup.embedding[0] = 9.0
    dup.fact_ids.clear()
    dup.provenance.tool_name = "y"
    assert ep.messages[0].metadata == {"k": [1]} and len(ep.messages) == 1
    assert ep.embedding == [1.0, 2.0] and len(ep.fact_ids) == 1
    assert ep.provenance.tool_name == "x"
    ent = Entity(name="n", entity_type="t", provenance=PROV, attributes={"a": {"b": [1]}})
    dup_ent = copy_record(ent)
    dup_ent.attributes["a"]["b"].append(2)
    assert ent.attributes == {"a": {"b": [1]}}
    with pytest.raises(ValidationError):  # copies still validate assignment
        dup_ent.name = ""


def test_backends_satisfy_protocols() -> None:
    from cycgraph_memory import MemoryIndex, MemoryStore, SupportsTouchFacts

    store: MemoryStore = InMemoryMemoryStore()
    index: MemoryIndex = InMemoryMemoryIndex()
    assert isinstance(store, MemoryStore) and isinstance(store, SupportsTouchFacts)
    assert isinstance(index, MemoryIndex)


async def test_rebuild_keeps_one_copy_per_record_for_vector_and_text_search() -> None:
    # The text-search side used to re-read every fact with its embedding as a list of
    # floats: a second full copy (3.4 GB instead of 1.8 GB at 100,000 facts).
    store = InMemoryMemoryStore()
    with_vector = SemanticFact(content="alpha beta", provenance=PROV,
                               embedding=[0.1, 0.2, 0.30000000000000004])
    without = SemanticFact(content="alpha gamma", provenance=PROV)
    await store.put_facts([with_vector, without])
    index = InMemoryMemoryIndex()
    await index.rebuild(store)
    held = index._facts.records[index._facts.pos[with_vector.id]]
    assert index._text_facts[with_vector.id] is held
    hits = await index.text_search_facts("alpha", limit=10)
    by_id = {h.item.id: h.item for h in hits}
    assert set(by_id) == {with_vector.id, without.id}
    # Results still carry the exact embedding, as a fresh list.
    assert by_id[with_vector.id].embedding == [0.1, 0.2, 0.30000000000000004]
    assert type(by_id[with_vector.id].embedding) is list
    by_id[with_vector.id].embedding.append(9.9)  # a copy: the index is unaffected
    again = await index.search_facts([0.1, 0.2, 0.30000000000000004], limit=1)
    assert again[0].item.embedding == [0.1, 0.2, 0.30000000000000004]


def _episode_with_vectors(dim: int = 4) -> Episode:
    from cycgraph_memory import Message

    messages = [
        Message(role="user", content=f"message {i}", timestamp=T0, embedding=e(i % dim, dim))
        for i in range(3)
    ]
    return Episode(
        topic="t",
        messages=messages,
        started_at=T0,
        ended_at=T0,
        provenance=PROV,
        embedding=e(0, dim),
    )


async def test_stored_episodes_index_their_message_vectors_and_share_nothing() -> None:
    for validated in (True, False):
        ix = InMemoryMemoryIndex()
        episode = _episode_with_vectors()
        if validated:
            ix.upsert_stored_many([episode])
        else:
            ix.upsert_many([episode])
        # The caller's records are left as they were (vectors included).
        assert [m.embedding for m in episode.messages] == [e(0), e(1), e(2)]
        hits = await ix.search_messages(e(1))
        assert hits[0].item.id == episode.messages[1].id
        assert hits[0].item.embedding is None  # results carry no vectors
        episode.messages[1].content = "changed"
        (found,) = await ix.search_episodes(e(0))
        assert found.item.messages[1].content == "message 1"
        assert all(m.embedding is None for m in found.item.messages)


async def test_stored_episode_message_vector_of_the_wrong_size_writes_nothing() -> None:
    ix = InMemoryMemoryIndex(expected_dimensions=4)
    episode = _episode_with_vectors()
    episode.messages[2].embedding = [1.0, 0.0]
    with pytest.raises(EmbeddingDimensionMismatchError):
        ix.upsert_stored_many([fact(e(0)), episode])
    assert len(ix) == 0
    assert await ix.search_messages(e(0)) == []

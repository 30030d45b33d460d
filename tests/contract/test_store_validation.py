"""MemoryStore / MemoryIndex contract: bad input fails the same way on both backends.

Every case below is fed to the in-memory and to the Postgres backend; each must raise the
SAME error type and leave the store exactly as it was. Records are also smuggled past
pydantic with ``model_copy(update=...)`` (which skips validation): the stores re-validate.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from pydantic import ValidationError

from cycgraph_memory import InvalidInputError, InvalidTypeError, Message
from cycgraph_memory._validate import MAX_JSON_DEPTH
from cycgraph_memory.records import MAX_ACCESS_COUNT, MAX_TYPE_LENGTH

from .factories import (
    make_entity,
    make_episode,
    make_fact,
    make_message,
    make_relationship,
    make_theme,
    provenance,
    unit,
)

NAN = float("nan")
INF = float("inf")
LONE = "\ud800"


def _nested(depth: int) -> dict[str, Any]:
    root: dict[str, Any] = {}
    node = root
    for _ in range(depth - 1):
        node["k"] = {}
        node = node["k"]
    return root


def _bypass(record: Any, **update: Any) -> Any:
    """The record with ``update`` applied WITHOUT validation."""
    return record.model_copy(update=update)


class _Fixture:
    """Known stored records, so each case can aim at them and the store can be compared."""

    def __init__(self) -> None:
        self.a = make_entity(name="A")
        self.b = make_entity(name="B")
        self.edge = make_relationship(self.a.id, self.b.id)
        self.fact = make_fact(embedding=unit(0), tags=["t"])
        self.episode = make_episode()
        self.theme = make_theme()

    async def load(self, store: Any) -> None:
        await store.put_entities([self.a, self.b])
        await store.put_relationship(self.edge)
        await store.put_fact(self.fact)
        await store.put_episode(self.episode)
        await store.put_theme(self.theme)

    async def snapshot(self, store: Any) -> tuple[Any, ...]:
        return (
            await store.find_entities(include_invalidated=True),
            await store.get_relationships_for_entity(self.a.id, include_invalidated=True),
            await store.find_facts(include_invalidated=True),
            await store.list_episodes(include_invalidated=True),
            await store.list_themes(include_invalidated=True),
        )


Case = Callable[[Any, Any, _Fixture], Awaitable[Any]]
CASES: dict[str, tuple[type[Exception], Case]] = {}


def case(name: str, error: type[Exception]) -> Callable[[Case], Case]:
    def register(fn: Case) -> Case:
        CASES[name] = (error, fn)
        return fn

    return register


# ---------------------------------------------------------------- JSON attributes / metadata

for label, value in {
    "nul-in-string": {"a": "x\x00y"},
    "nul-in-key": {"a\x00": 1},
    "nan": {"a": NAN},
    "inf": {"a": [1.0, -INF]},
    "lone-surrogate-value": {"a": LONE},
    "lone-surrogate-key": {LONE: 1},
    "non-json-object": {"a": object()},
    "non-json-set": {"a": {1, 2}},
    "non-json-bytes": {"a": b"raw"},
    "non-json-tuple": {"a": (1, 2)},
    "int-key": {"a": {1: "x"}},
    "int-beyond-64-bits": {"a": 2**64},
    "too-deep": _nested(MAX_JSON_DEPTH + 1),
    "very-deep": _nested(5_000),
}.items():

    def _make(value: Any) -> tuple[Case, Case, Case]:
        async def entity_attrs(store: Any, index: Any, fx: _Fixture) -> None:
            await store.put_entity(_bypass(fx.a, attributes=value))

        async def edge_attrs(store: Any, index: Any, fx: _Fixture) -> None:
            await store.put_relationship(_bypass(fx.edge, attributes=value))

        async def message_metadata(store: Any, index: Any, fx: _Fixture) -> None:
            msg = _bypass(make_message(), metadata=value)
            await store.put_episode(_bypass(fx.episode, messages=[msg]))

        return entity_attrs, edge_attrs, message_metadata

    for kind, fn in zip(("entity", "relationship", "message"), _make(value), strict=True):
        case(f"{kind}-attributes-{label}", ValidationError)(fn)


def test_json_values_are_refused_at_construction_too() -> None:
    with pytest.raises(ValidationError):
        make_entity(attributes=_nested(10_000))  # a validation error, not RecursionError
    with pytest.raises(ValidationError):
        make_message(metadata={"x": NAN})
    assert make_entity(attributes=_nested(MAX_JSON_DEPTH)).attributes == _nested(MAX_JSON_DEPTH)


# ---------------------------------------------------------------- text fields


@case("fact-content-nul", ValidationError)
async def _c1(store: Any, index: Any, fx: _Fixture) -> None:
    await store.put_fact(_bypass(fx.fact, content="a\x00b"))


@case("fact-tag-lone-surrogate", ValidationError)
async def _c2(store: Any, index: Any, fx: _Fixture) -> None:
    await store.put_fact(_bypass(fx.fact, tags=["ok", "bad" + LONE]))


@case("fact-tag-lone-surrogate-constructed", ValidationError)
async def _c3(store: Any, index: Any, fx: _Fixture) -> None:
    await store.put_fact({**fx.fact.model_dump(), "tags": [LONE]})


@case("message-content-lone-surrogate", ValidationError)
async def _c4(store: Any, index: Any, fx: _Fixture) -> None:
    msg = _bypass(make_message(), content="hi " + LONE)
    await store.put_episode(_bypass(fx.episode, messages=[msg]))


@case("episode-topic-nul", ValidationError)
async def _c5(store: Any, index: Any, fx: _Fixture) -> None:
    await store.put_episode(_bypass(fx.episode, topic="\x00"))


@case("entity-type-10mb", ValidationError)
async def _c6(store: Any, index: Any, fx: _Fixture) -> None:
    await store.put_entity(_bypass(fx.a, entity_type="x" * 10_000_000))


@case("entity-type-one-too-long", ValidationError)
async def _c7(store: Any, index: Any, fx: _Fixture) -> None:
    await store.put_entity({**fx.a.model_dump(), "entity_type": "x" * (MAX_TYPE_LENGTH + 1)})


@case("relation-type-too-long", ValidationError)
async def _c8(store: Any, index: Any, fx: _Fixture) -> None:
    await store.put_relationship(_bypass(fx.edge, relation_type="r" * 100_000))


@case("entity-name-too-long", ValidationError)
async def _c9(store: Any, index: Any, fx: _Fixture) -> None:
    await store.put_entity(_bypass(fx.a, name="n" * 100_000))


@case("theme-label-lone-surrogate", ValidationError)
async def _c10(store: Any, index: Any, fx: _Fixture) -> None:
    await store.put_theme(_bypass(fx.theme, label=LONE))


@case("provenance-run-id-nul", ValidationError)
async def _c11(store: Any, index: Any, fx: _Fixture) -> None:
    await store.put_fact(_bypass(fx.fact, provenance=_bypass(provenance(), run_id="\x00")))


@case("invalidated-by-lone-surrogate", ValidationError)
async def _c12(store: Any, index: Any, fx: _Fixture) -> None:
    await store.put_relationship(_bypass(fx.edge, invalidated_by=LONE))


# ---------------------------------------------------------------- numbers


@case("access-count-beyond-32-bits", ValidationError)
async def _n1(store: Any, index: Any, fx: _Fixture) -> None:
    await store.put_fact(_bypass(fx.fact, access_count=MAX_ACCESS_COUNT + 1))


@case("access-count-negative", ValidationError)
async def _n2(store: Any, index: Any, fx: _Fixture) -> None:
    await store.put_fact(_bypass(fx.fact, access_count=-1))


@case("weight-nan", ValidationError)
async def _n3(store: Any, index: Any, fx: _Fixture) -> None:
    await store.put_relationship(_bypass(fx.edge, weight=NAN))


@case("confidence-above-one", ValidationError)
async def _n4(store: Any, index: Any, fx: _Fixture) -> None:
    await store.put_entity(_bypass(fx.a, provenance=_bypass(provenance(), confidence=5.0)))


for _name, _call in {
    "find-facts": lambda s: s.find_facts(offset=2**63),
    "find-entities": lambda s: s.find_entities(offset=2**63),
    "list-episodes": lambda s: s.list_episodes({"offset": 2**63}),
    "list-themes": lambda s: s.list_themes(offset=2**64),
    "relationships-for-entity": lambda s: s.get_relationships_for_entity(
        uuid.uuid4(), offset=2**63
    ),
}.items():

    def _offset(call: Any) -> Case:
        async def run(store: Any, index: Any, fx: _Fixture) -> None:
            await call(store)

        return run

    case(f"offset-beyond-63-bits-{_name}", ValidationError)(_offset(_call))


# ---------------------------------------------------------------- structure


@case("duplicate-message-ids", ValidationError)
async def _s1(store: Any, index: Any, fx: _Fixture) -> None:
    m = make_message()
    await store.put_episode(_bypass(fx.episode, messages=[m, Message(**m.model_dump())]))


@case("window-reversed", ValidationError)
async def _s2(store: Any, index: Any, fx: _Fixture) -> None:
    await store.put_fact(_bypass(fx.fact, valid_until=fx.fact.valid_from.replace(year=2000)))


@case("nan-embedding-fact", ValidationError)
async def _s3(store: Any, index: Any, fx: _Fixture) -> None:
    await store.put_fact(_bypass(fx.fact, embedding=[NAN] * len(unit(0))))


@case("inf-embedding-entity", ValidationError)
async def _s4(store: Any, index: Any, fx: _Fixture) -> None:
    await store.put_entity(_bypass(fx.a, embedding=[INF, *unit(0)[1:]]))


@case("embedding-beyond-float32", ValidationError)
async def _s7(store: Any, index: Any, fx: _Fixture) -> None:
    await store.put_fact({**fx.fact.model_dump(), "embedding": [1e39, *unit(0)[1:]]})


@case("embedding-beyond-float32-bypass", ValidationError)
async def _s8(store: Any, index: Any, fx: _Fixture) -> None:
    await store.put_episode(_bypass(fx.episode, embedding=[-1e39, *unit(0)[1:]]))


@case("touch-at-overflows-utc", InvalidInputError)
async def _s9(store: Any, index: Any, fx: _Fixture) -> None:
    from datetime import datetime, timedelta, timezone

    await store.touch_facts([fx.fact.id], at=datetime.min.replace(
        tzinfo=timezone(timedelta(hours=5))))


@case("empty-embedding-theme", ValidationError)
async def _s5(store: Any, index: Any, fx: _Fixture) -> None:
    await store.put_theme(_bypass(fx.theme, embedding=[]))


@case("bulk-with-one-bad", ValidationError)
async def _s6(store: Any, index: Any, fx: _Fixture) -> None:
    await store.put_facts([make_fact(), _bypass(make_fact(), content="")])


# ---------------------------------------------------------------- wrong Python types


for _label, _bad in {"none": None, "int": 42, "bytes": uuid.uuid4().bytes}.items():

    def _ids(bad: Any) -> list[Case]:
        async def get_one(store: Any, index: Any, fx: _Fixture) -> None:
            await store.get_fact(bad)

        async def get_many(store: Any, index: Any, fx: _Fixture) -> None:
            await store.get_entities([fx.a.id, bad])

        async def delete(store: Any, index: Any, fx: _Fixture) -> None:
            await store.delete_entity(bad)

        async def for_entity(store: Any, index: Any, fx: _Fixture) -> None:
            await store.get_relationships_for_entity(bad)

        async def touch(store: Any, index: Any, fx: _Fixture) -> None:
            await store.touch_facts([fx.fact.id, bad])

        async def messages(store: Any, index: Any, fx: _Fixture) -> None:
            await store.get_messages([bad])

        return [get_one, get_many, delete, for_entity, touch, messages]

    for _fn in _ids(_bad):
        case(f"id-{_label}-{_fn.__name__}", InvalidTypeError)(_fn)


@case("ids-not-iterable", InvalidTypeError)
async def _t1(store: Any, index: Any, fx: _Fixture) -> None:
    await store.get_facts(None)


@case("put-many-not-iterable", InvalidTypeError)
async def _t2(store: Any, index: Any, fx: _Fixture) -> None:
    await store.put_entities(42)


@case("put-wrong-record", InvalidTypeError)
async def _t3(store: Any, index: Any, fx: _Fixture) -> None:
    await store.put_theme(fx.fact)


@case("touch-at-string", InvalidTypeError)
async def _t4(store: Any, index: Any, fx: _Fixture) -> None:
    await store.touch_facts([fx.fact.id], at="yesterday")


@case("options-wrong-type", InvalidTypeError)
async def _t5(store: Any, index: Any, fx: _Fixture) -> None:
    await store.find_facts(["tags"])


@case("malformed-id-string", InvalidInputError)
async def _t6(store: Any, index: Any, fx: _Fixture) -> None:
    await store.get_entity("not-a-uuid")


# ---------------------------------------------------------------- index queries


@case("index-text-query", InvalidTypeError)
async def _i1(store: Any, index: Any, fx: _Fixture) -> None:
    await index.search_facts("who maintains billing?")


@case("index-bytes-query", InvalidTypeError)
async def _i2(store: Any, index: Any, fx: _Fixture) -> None:
    await index.search_entities(b"\x00\x01")


@case("index-none-query", InvalidTypeError)
async def _i3(store: Any, index: Any, fx: _Fixture) -> None:
    await index.search_themes(None)


@case("index-strings-in-vector", InvalidTypeError)
async def _i4(store: Any, index: Any, fx: _Fixture) -> None:
    await index.search_episodes(["0.1"] * len(unit(0)))


@case("index-nan-query", InvalidInputError)
async def _i5(store: Any, index: Any, fx: _Fixture) -> None:
    await index.search_facts([NAN] * len(unit(0)))


@case("index-query-beyond-float32", InvalidInputError)
async def _i7(store: Any, index: Any, fx: _Fixture) -> None:
    await index.search_facts([1e39, *unit(0)[1:]])


@case("index-empty-query", InvalidInputError)
async def _i6(store: Any, index: Any, fx: _Fixture) -> None:
    await index.search_facts([])


@pytest.mark.parametrize("name", sorted(CASES))
async def test_bad_input_fails_alike_and_changes_nothing(
    name: str, store: Any, index: Any
) -> None:
    error, fn = CASES[name]
    fx = _Fixture()
    await fx.load(store)
    before = await fx.snapshot(store)
    with pytest.raises(Exception) as info:
        await fn(store, index, fx)
    assert type(info.value) is error, repr(info.value)
    assert await fx.snapshot(store) == before


async def test_nan_embedding_never_reaches_the_index(store: Any, index: Any) -> None:
    """The acceptance-test scenario: a NaN vector smuggled in must not surface at -1.0."""
    fx = _Fixture()
    await fx.load(store)
    poisoned = _bypass(make_fact(), embedding=[NAN] * len(unit(0)))
    with pytest.raises(ValidationError):
        await store.put_fact(poisoned)
    if hasattr(index, "upsert"):
        with pytest.raises(ValidationError):
            index.upsert(poisoned)
    await index.rebuild(store)
    hits = await index.search_facts(unit(0), limit=10, min_similarity=0.5)
    assert [(h.item.id, h.score) for h in hits] == [(fx.fact.id, 1.0)]


async def test_touch_saturates_at_the_column_limit(store: Any) -> None:
    fact = make_fact(access_count=MAX_ACCESS_COUNT - 1)
    await store.put_fact(fact)
    await store.touch_facts([fact.id])
    await store.touch_facts([fact.id])
    got = await store.get_fact(fact.id)
    assert got is not None and got.access_count == MAX_ACCESS_COUNT


def test_invalid_type_error_is_a_type_error_and_ours() -> None:
    assert issubclass(InvalidTypeError, TypeError)
    assert issubclass(InvalidTypeError, InvalidInputError)


async def test_zero_vectors_score_zero_on_both_backends(
    store: Any, index: Any, backend: str
) -> None:
    """Cosine similarity with a zero vector is 0.0 (the spec's rule), never NaN."""
    zero = [0.0] * len(unit(0))
    stored_zero = make_fact(embedding=zero)
    normal = make_fact(embedding=unit(0))
    await store.put_facts([stored_zero, normal])
    await index.rebuild(store)
    # pgvector's HNSW index does not index a zero vector: on Postgres a stored zero vector
    # is served (with score 0) only when the planner scans exactly.
    optional = {stored_zero.id} if backend == "postgres" else set()

    hits = await index.search_facts(zero, limit=5, min_similarity=0.0)
    assert all(h.score == 0.0 for h in hits)
    assert {h.item.id for h in hits} | optional == {stored_zero.id, normal.id}
    assert await index.search_facts(zero, limit=5, min_similarity=0.1) == []
    hits = await index.search_facts(unit(0), limit=5, min_similarity=0.0)
    got = [(h.item.id, h.score) for h in hits]
    assert got == [(normal.id, 1.0), (stored_zero.id, 0.0)] or (
        optional and got == [(normal.id, 1.0)]
    )

"""Adversarial audit, sixth round (both backends): hostile arguments of the read paths.

Each test failed before its fix:

* a text search whose query is not a ``str`` raised ``AttributeError`` (Postgres, and in
  memory once the index held a document) instead of ``InvalidTypeError``;
* ``memory_stats(candidate_tag=...)`` with a NUL or a lone surrogate raised
  ``StorageError`` on Postgres (the in-memory store counted 0); one over ``MAX_TAG_LENGTH``
  was accepted although no fact can carry it;
* ``memory_stats(top=2**63)`` raised ``StorageError`` on Postgres (SQL ``LIMIT`` is 64-bit)
  while the in-memory store listed every tag;
* ``OutcomeLedger.erase_facts(run_ids=[...])`` naming a run id with a NUL or a lone
  surrogate raised ``StorageError`` on Postgres; in memory it matches no run;
* ``RetentionPolicy`` accepted a ``verified_tag`` / ``candidate_tag`` no fact can carry
  (129 characters, a NUL): the gate pass did all its reading and deciding, then failed
  writing the promoted fact;
* ``put_tenant_setting`` / ``get_tenant_setting`` with a NUL or a lone surrogate in the key
  or in a string of the value, ``exclusive(name)`` with one in the name, and
  ``find_entities_by_name_keys`` with one in a key raised ``StorageError`` on Postgres
  while the in-memory store accepted them (settings, locks) or matched nothing (names).
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from pydantic import ValidationError

from cycgraph_memory.errors import InvalidInputError, InvalidTypeError
from cycgraph_memory.inspection import memory_stats
from cycgraph_memory.records import MAX_TAG_LENGTH, RunOutcome
from cycgraph_memory.retention import RetentionPolicy, evaluate_retention

from .factories import make_entity, make_fact

NOT_A_TAG = ["a\x00b", "a\ud800b", "x" * (MAX_TAG_LENGTH + 1)]


@pytest.mark.parametrize("query", [123, None, b"widgets", ["widgets"]])
async def test_text_search_refuses_a_query_that_is_not_a_str(
    store: Any, index: Any, backend: str, query: Any
) -> None:
    await store.put_fact(make_fact(content="Acme sells widgets"))
    if backend == "memory":
        await index.rebuild(store)
    for method in ("text_search_facts", "text_search_messages", "text_search_episodes"):
        with pytest.raises(InvalidTypeError):
            await getattr(index, method)(query)
    assert [r.item.content for r in await index.text_search_facts("widgets")] == [
        "Acme sells widgets"
    ]


@pytest.mark.parametrize("tag", NOT_A_TAG)
async def test_memory_stats_refuses_a_candidate_tag_no_fact_can_carry(
    store: Any, tag: str
) -> None:
    await store.put_fact(make_fact(tags=["candidate"]))
    with pytest.raises(InvalidInputError):
        await memory_stats(store, candidate_tag=tag)
    assert (await memory_stats(store)).pending_candidates == 1


@pytest.mark.parametrize("top", [2**63, 2**64])
async def test_memory_stats_top_beyond_64_bits_lists_every_tag(store: Any, top: int) -> None:
    await store.put_fact(make_fact(tags=["a_b", "a%b"]))
    await store.put_fact(make_fact(tags=["a_b"]))
    stats = await memory_stats(store, top=top)
    assert stats.tags == {"a_b": 2, "a%b": 1}


@pytest.mark.parametrize("run_id", ["a\x00b", "a\ud800b", "%", "r_n"])
async def test_ledger_erasure_of_an_impossible_run_id_matches_no_run(
    ledger: Any, run_id: str
) -> None:
    fact_id = uuid.uuid4()
    await ledger.record_outcome(RunOutcome(run_id="run", score=0.5, fact_ids=[fact_id]))
    erased = await ledger.erase_facts([], [run_id])
    assert (erased.ledger_links, erased.ledger_runs) == (0, 0)
    assert (await ledger.get_fact_stats(fact_id)).trials == 1
    assert (await ledger.get_baseline()).runs == 1


@pytest.mark.parametrize("field", ["candidate_tag", "verified_tag"])
@pytest.mark.parametrize("tag", NOT_A_TAG)
def test_retention_policy_refuses_a_tag_no_fact_can_carry(field: str, tag: str) -> None:
    with pytest.raises(ValidationError):
        RetentionPolicy(**{field: tag})
    RetentionPolicy(**{field: "t" * MAX_TAG_LENGTH})  # at the limit: a valid tag


async def test_gate_pass_with_an_unstorable_verified_tag_fails_before_any_work(
    store: Any, ledger: Any
) -> None:
    good = make_fact(tags=["lesson", "candidate"])
    await store.put_fact(good)
    for i, score in enumerate([0.9, 0.92, 0.88]):
        await ledger.record_outcome(RunOutcome(run_id=f"g{i}", score=score, fact_ids=[good.id]))
    for i, score in enumerate([0.45, 0.5, 0.55, 0.5, 0.48, 0.52]):
        await ledger.record_outcome(RunOutcome(run_id=f"b{i}", score=score))
    reads = 0
    real = ledger.get_baseline

    async def counted(*args: Any, **kwargs: Any) -> Any:
        nonlocal reads
        reads += 1
        return await real(*args, **kwargs)

    ledger.get_baseline = counted
    with pytest.raises(ValidationError):
        await evaluate_retention(store, ledger, {"verified_tag": "v" * (MAX_TAG_LENGTH + 1)})
    assert reads == 0  # refused before the pass read anything
    assert await store.get_fact(good.id) == good
    assert await ledger.list_gate_audit() == []


UNSTORABLE = ["a\x00b", "a\ud800b"]


@pytest.mark.parametrize("bad", UNSTORABLE)
async def test_tenant_settings_refuse_unstorable_strings_alike(store: Any, bad: str) -> None:
    await store.put_tenant_setting("k", {"x": 1})
    for key, value in ((bad, {"x": 1}), ("k", {"x": bad}), ("k", {bad: 1}),
                       ("k", {"x": [1, {"y": bad}]})):
        with pytest.raises(InvalidInputError):
            await store.put_tenant_setting(key, value)
    with pytest.raises(InvalidInputError):
        await store.get_tenant_setting(bad)
    assert await store.get_tenant_setting("k") == {"x": 1}


@pytest.mark.parametrize("bad", UNSTORABLE)
async def test_exclusive_refuses_an_unstorable_lock_name_alike(store: Any, bad: str) -> None:
    with pytest.raises(InvalidInputError):
        async with store.exclusive(bad):
            raise AssertionError("entered")
    with pytest.raises(InvalidTypeError):
        async with store.exclusive(5):
            raise AssertionError("entered")
    async with store.exclusive("a_b%"):
        await store.put_fact(make_fact())
    assert len(await store.find_facts()) == 1


@pytest.mark.parametrize("bad", UNSTORABLE)
async def test_entity_name_keys_that_no_entity_can_hold_match_nothing(
    store: Any, bad: str
) -> None:
    acme = make_entity(name="Acme", entity_type="organization")
    await store.put_entity(acme)
    assert await store.find_entities_by_name_keys([(bad, "organization")]) == []
    assert await store.find_entities_by_name_keys([("acme", bad)]) == []
    found = await store.find_entities_by_name_keys(
        [(bad, "organization"), ("acme", "organization")]
    )
    assert [e.id for e in found] == [acme.id]


@pytest.mark.parametrize("name", ["Straße", "Ⅻ Club", "a²b", "ΣΊΣΥΦΟΣ", "ﬁnance Ltd."])
async def test_name_key_lookup_finds_casefolded_and_nfkc_names(store: Any, name: str) -> None:
    """The stored key is the library's own (NFKC + case folding), on both backends.

    Postgres once compared a SQL stand-in (``lower()`` without NFKC or folding) and
    never found 'Straße' (key 'strasse') again; ingest then wrote a duplicate entity.
    """
    from cycgraph_memory.normalize import normalize_entity_name

    entity = make_entity(name=name, entity_type="organization")
    await store.put_entity(entity)
    found = await store.find_entities_by_name_keys(
        [(normalize_entity_name(name), "organization")]
    )
    assert [e.id for e in found] == [entity.id]
    upper = name.upper()
    assert normalize_entity_name(upper) == normalize_entity_name(name)
    found = await store.find_entities_by_name_keys(
        [(normalize_entity_name(upper), "organization")]
    )
    assert [e.id for e in found] == [entity.id]

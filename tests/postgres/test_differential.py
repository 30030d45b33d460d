"""Differential test: random, often hostile, values go to BOTH backends; outcomes must agree.

For each generated value the in-memory store and the Postgres store either both accept it
(and return equal records) or both refuse it with the same error type, leaving no trace.
Values are smuggled past construction with ``model_copy(update=...)`` so the stores' own
validation is what is tested. Seeded, so a failure names a reproducible case.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from cycgraph_memory.inmemory import InMemoryMemoryStore

from ._records import entity, fact, prov

pytestmark = pytest.mark.postgres

CHARS = ["a", "Z", " ", "\x00", "\ud800", "\udfff", "é", "😀", "\u2028", "\\", '"', "\x7f"]


def _text(rng: random.Random) -> str:
    return "".join(rng.choice(CHARS) for _ in range(rng.randint(0, 4)))


def _scalar(rng: random.Random) -> Any:
    return rng.choice([
        None, True, False, 0, -1, 2**31, 2**63 - 1, 2**63, -(2**63), -(2**63) - 1, 10**30,
        0.5, -0.0, 1e-300, 3.25e15, float("nan"), float("inf"), -float("inf"),
        _text(rng), _text(rng), b"bytes", (1, 2), {1, 2}, object(),
    ])


def _json(rng: random.Random, depth: int) -> Any:
    roll = rng.random()
    if depth <= 0 or roll < 0.5:
        return _scalar(rng)
    if roll < 0.75:
        return [_json(rng, depth - 1) for _ in range(rng.randint(0, 3))]
    keys: list[Any] = [_text(rng) for _ in range(rng.randint(0, 3))]
    if rng.random() < 0.1:
        keys.append(rng.choice([1, None, 2.5]))
    return {k: _json(rng, depth - 1) for k in keys}


def _deep(depth: int) -> dict[str, Any]:
    root: dict[str, Any] = {}
    node = root
    for _ in range(depth - 1):
        node["d"] = {}
        node = node["d"]
    return root


async def _outcome(store: Any, put: str, getter: str, record: Any) -> Any:
    try:
        await getattr(store, put)(record)
    except Exception as exc:  # the type is the outcome compared across backends
        assert await getattr(store, getter)(record.id) is None
        return type(exc)
    return await getattr(store, getter)(record.id)


async def test_random_attributes_and_text_agree(pg_store: Any) -> None:
    rng = random.Random(20261202)
    memory = InMemoryMemoryStore()
    refused = accepted = 0
    for i in range(400):
        if i % 50 == 0:
            value: Any = _deep(rng.choice([31, 32, 33, 200]))
        else:
            value = {_text(rng) or "k": _json(rng, rng.randint(0, 5))}
        which = i % 4
        if which == 0:
            record, put, get = entity().model_copy(update={"attributes": value}), "put_entity", \
                "get_entity"
        elif which == 1:
            record, put, get = entity().model_copy(update={"name": _text(rng) or "n"}), \
                "put_entity", "get_entity"
        elif which == 2:
            record, put, get = fact().model_copy(update={"tags": [_text(rng) or "t"]}), \
                "put_fact", "get_fact"
        else:
            record, put, get = fact().model_copy(
                update={"provenance": prov().model_copy(update={"run_id": _text(rng)})}
            ), "put_fact", "get_fact"
        mine = await _outcome(memory, put, get, record)
        theirs = await _outcome(pg_store, put, get, record)
        assert mine == theirs, (i, which, repr(value)[:200], mine, theirs)
        if isinstance(mine, type):
            refused += 1
        else:
            accepted += 1
    # The generator must exercise both sides of the wall.
    assert refused > 50 and accepted > 50, (refused, accepted)

"""Ids compared by their 128-bit value sort exactly as their text form (the documented order)."""

from __future__ import annotations

import random
import uuid

import pytest

from cycgraph_memory.retrieval.fusion import rrf_fuse


def test_int_order_is_text_order() -> None:
    rng = random.Random(7)
    ids = [uuid.UUID(int=rng.getrandbits(128)) for _ in range(2000)]
    ids += [uuid.UUID(int=i) for i in (0, 1, 9, 10, 15, 16, 2**128 - 1)]
    assert sorted(ids, key=lambda i: i.int) == sorted(ids, key=str)


def test_ids_read_from_postgres_order_and_compare_like_plain_ones() -> None:
    # The Postgres backend hands out asyncpg's uuid.UUID subclass as it decoded it.
    DriverUUID = pytest.importorskip("asyncpg.pgproto.pgproto").UUID
    rng = random.Random(8)
    plain = [uuid.UUID(int=rng.getrandbits(128)) for _ in range(200)]
    driver = [DriverUUID(u.bytes) for u in plain]
    assert [i.int for i in driver] == [i.int for i in plain]
    assert driver == plain and {hash(i) for i in driver} == {hash(i) for i in plain}
    assert [str(i) for i in driver] == [str(i) for i in plain]


def test_fusion_ties_break_by_id_text() -> None:
    ids = [uuid.UUID(int=n) for n in (0xA0, 0x0B, 0x1F, 0xF0)]
    fused = rrf_fuse({"a": [(ids[0], 1.0)], "b": [(ids[1], 1.0)], "c": [(ids[2], 1.0)],
                      "d": [(ids[3], 1.0)]})
    assert [h.id for h in fused] == sorted(ids, key=str)

"""bench/reference_workload.py is a faithful port: the reference's check values at N=1,000."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

from cycgraph_memory import InMemoryMemoryIndex, InMemoryMemoryStore, retrieve_memory

BENCH = Path(__file__).resolve().parents[2] / "bench" / "reference_workload.py"


@pytest.fixture(scope="module")
def ref() -> ModuleType:
    spec = importlib.util.spec_from_file_location("reference_workload", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["reference_workload"] = module
    spec.loader.exec_module(module)
    return module


def test_mulberry32_blocks_equal_scalar_draws(ref: ModuleType) -> None:
    a, b = ref.Mulberry32(12345), ref.Mulberry32(12345)
    scalar = [a() for _ in range(1000)]
    assert b.block(600).tolist() + b.block(400).tolist() == scalar
    assert scalar[0] == 0.9797282677609473
    assert a.state == b.state


def test_reference_check_values(ref: ModuleType) -> None:
    w = ref.generate(1000)
    f0 = w.facts[0]
    assert f0.embedding[:2] == [0.015541116425587871, 0.043245853730304006]
    assert [str(i)[-3:] for i in f0.entity_ids] == ["025", "05d"]
    assert [f.tags for f in w.facts[:3]] == [
        ["graph:g5", "verified"], ["graph:g6"], ["lesson", "graph:g18"]
    ]
    assert sum(r.valid_until is not None for r in w.relationships) == 23
    assert w.embedding_queries[0][1] == 980
    assert (len(w.entities), len(w.themes), len(w.relationships)) == (100, 10, 200)
    assert len(w.embedding_queries) == len(w.entity_queries) == 200
    assert str(w.themes[3].id) == "00000004-0000-4000-8000-000000000003"


async def test_own_fact_is_returned_on_the_reference_workload(ref: ModuleType) -> None:
    w = ref.generate(1000)
    store, index = InMemoryMemoryStore(), InMemoryMemoryIndex()
    await store.put_entities(w.entities)
    await store.put_themes(w.themes)
    await store.put_facts(w.facts)
    await store.put_relationships(w.relationships)
    await index.rebuild(store)
    hits = 0
    for vector, j in w.embedding_queries[:50]:
        result = await retrieve_memory(
            store, index, {"embedding": vector, "limit": 20, "min_similarity": 0.5}
        )
        hits += any(f.id == w.facts[j].id for f in result.facts)
        assert result.facts[0].id == w.facts[j].id
    assert hits == 50

"""pgvector kNN specifics: filtered searches fill ``limit``, whole records, ef_search."""

from __future__ import annotations

import math
import uuid
from typing import Any

import pytest
from sqlalchemy import text

from cycgraph_memory.records import QUARANTINE_TAG

from ._records import entity, fact, ts

pytestmark = pytest.mark.postgres


def _vec(angle: float) -> list[float]:
    return [math.cos(angle), math.sin(angle), 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]


async def _force_hnsw(sm: Any) -> None:
    # Small tables would be scanned exactly; make the HNSW index the only ordered path.
    async with sm() as s, s.begin():
        for guc in ("enable_seqscan", "enable_bitmapscan", "enable_sort"):
            await s.execute(text(f"SET LOCAL {guc} = off"))


@pytest.mark.parametrize("exact_below", [0, 20_000], ids=["hnsw", "exact"])
async def test_filtered_knn_returns_limit_rows(
    pg_store: Any, pg_make_store: Any, pg_tenant: str, pg_sessionmaker: Any, exact_below: int
) -> None:
    # exact_below=0: the HNSW index (iterative scan); 20,000: this small tenant exactly.
    pg_index = pg_make_store(pg_tenant, index=True, exact_below=exact_below)
    # 300 quarantined facts sit right next to the query; 40 clean ones are farther away.
    # Ids ascend in list order: upserts write rows in key order, and an HNSW graph depends
    # on insertion order, so this keeps the order the expectations were written for.
    ids = iter(sorted(uuid.uuid4() for _ in range(540)))
    near = [fact(id=next(ids), embedding=_vec(0.001 * i), tags=[QUARANTINE_TAG])
            for i in range(300)]
    far = [fact(id=next(ids), embedding=_vec(0.5 + 0.01 * i), tags=["lesson"])
           for i in range(40)]
    invalid = [fact(id=next(ids), embedding=_vec(0.0005 * i), invalidated_by="x")
               for i in range(200)]
    await pg_store.put_facts(near + far + invalid)
    await pg_index.rebuild(pg_store, analyze=True)
    await _force_hnsw(pg_sessionmaker)
    q = _vec(0.0)
    res = await pg_index.search_facts(q, limit=25, exclude_tags=[QUARANTINE_TAG], ef_search=10)
    if exact_below:
        assert [r.item.id for r in res] == [f.id for f in far[:25]]
    else:
        # An HNSW graph's levels are drawn at random per build, so the approximate walk
        # may swap a neighbour near the cut: what is pinned is that the filter still
        # fills the limit with clean facts, best first, nearly all of the true top 25.
        far_ids = {f.id for f in far}
        assert len(res) == 25 and all(r.item.id in far_ids for r in res)
        assert [r.score for r in res] == sorted((r.score for r in res), reverse=True)
        assert len({r.item.id for r in res} & {f.id for f in far[:25]}) >= 23
    res = await pg_index.search_facts(q, limit=30, tags=["lesson"])
    assert len(res) == 30 and all(r.item.tags == ["lesson"] for r in res)
    assert [r.score for r in res] == sorted((r.score for r in res), reverse=True)
    res = await pg_index.search_facts(q, limit=5, include_invalidated=True)
    assert len(res) == 5


async def test_index_scan_is_used(pg_store: Any, pg_sessionmaker: Any) -> None:
    await pg_store.put_facts([fact(embedding=_vec(0.01 * i)) for i in range(50)])
    await _force_hnsw(pg_sessionmaker)
    async with pg_sessionmaker() as s:
        plan = "\n".join(
            (await s.execute(text(
                "EXPLAIN SELECT id FROM facts WHERE tenant_id = 'x' "
                "ORDER BY embedding <=> '[1,0,0,0,0,0,0,0]'::vector(8) LIMIT 5"
            ))).scalars().all()
        )
    assert "ix_facts_embedding_hnsw" in plan, plan


async def test_search_returns_whole_records_and_cosine(pg_store: Any, pg_index: Any) -> None:
    e = entity(attributes={"k": "v"}, embedding=[1.0, 1.0, 0, 0, 0, 0, 0, 0])
    f = fact(tags=["a", "b"], entity_ids=[e.id], valid_until=ts(9),
             embedding=[1.0, 0, 0, 0, 0, 0, 0, 0])
    await pg_store.put_entity(e)
    await pg_store.put_fact(f)
    [hit] = await pg_index.search_entities([1.0, 0, 0, 0, 0, 0, 0, 0])
    assert hit.item == e and hit.score == pytest.approx(math.sqrt(0.5))
    [hit] = await pg_index.search_facts([2.0, 0, 0, 0, 0, 0, 0, 0], min_similarity=0.99)
    assert hit.item == f and hit.score == pytest.approx(1.0)
    assert await pg_index.search_facts([0, 1.0, 0, 0, 0, 0, 0, 0], min_similarity=0.5) == []


async def test_ef_search_validation(pg_sessionmaker: Any) -> None:
    from cycgraph_memory.errors import InvalidInputError
    from cycgraph_memory.postgres import DEFAULT_EF_SEARCH, PostgresMemoryIndex

    assert PostgresMemoryIndex(pg_sessionmaker).ef_search == DEFAULT_EF_SEARCH == 100
    with pytest.raises(InvalidInputError):
        PostgresMemoryIndex(pg_sessionmaker, ef_search=0)


async def test_rebuild_analyze_must_be_a_real_bool(pg_index: Any) -> None:
    # "no" was truthy: it ran ANALYZE (which needs table ownership) instead of skipping it.
    from cycgraph_memory.errors import InvalidTypeError

    for value in ("no", 1, None):
        with pytest.raises(InvalidTypeError, match="analyze"):
            await pg_index.rebuild(analyze=value)
    await pg_index.rebuild(analyze=False)

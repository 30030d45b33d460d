"""Plans of the statements an ingest sends: their work follows the batch, not the tenant.

The batched theme kNN parses each query vector once, not once per theme, and takes the
HNSW branch for a tenant past ``exact_below`` facts.

``search_themes_many`` sends every fact's vector in one statement. If the vectors travel
as text and are cast inside the per-query ``LATERAL`` subquery, an exact scan (what a
tenant with few facts gets) parses the same vector again for every theme row it visits,
so the statement's cost grows with the tenant's themes (measured: 3.7 -> 172 ms per call
over 260 calls of the growth bench). The plan is the shape checked here: the distance
inside the subquery compares against the already-typed query vector. An exact scan of a
big tenant's themes still grows with the themes it keeps opening (21 -> 49 ms per call
at 100,000 facts): past ``exact_below`` the per-query subquery is an HNSW index scan.

Ingest-time entity resolution (``find_entities_by_name_keys``) reads the entities whose
name key matches through the ``(tenant_id, entity_type, name key)`` index, not every
entity of the tenant with those types.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import numpy as np
import pytest
from sqlalchemy import event, text

from cycgraph_memory.postgres import PostgresMemoryIndex
from cycgraph_memory.records import Entity, Provenance, Theme, utc_now

pytestmark = pytest.mark.postgres

DIM = 8  # the test schema's width


def _nodes(plan: dict[str, Any]) -> list[dict[str, Any]]:
    out = [plan]
    for child in plan.get("Plans", ()):
        out.extend(_nodes(child))
    return out


@asynccontextmanager
async def _sent(pg_engine: Any, *needles: str) -> AsyncIterator[list[tuple[str, Any]]]:
    """The statements (with their parameters) sent inside the block that contain ``needles``."""
    captured: list[tuple[str, Any]] = []

    def capture(conn: Any, cursor: Any, statement: str, parameters: Any, *_: Any) -> None:
        if all(n in statement for n in needles):
            captured.append((statement, parameters))

    event.listen(pg_engine.sync_engine, "before_cursor_execute", capture)
    try:
        yield captured
    finally:
        event.remove(pg_engine.sync_engine, "before_cursor_execute", capture)


async def _theme_knn_plan(
    index: Any, pg_engine: Any, pg_sessionmaker: Any, pg_tenant: str, queries: list[Any]
) -> tuple[list[dict[str, Any]], list[list[tuple[uuid.UUID, float]]]]:
    """Run ``search_themes_many``; EXPLAIN ANALYZE the statement it sent (same settings)."""
    async with _sent(pg_engine, "WITH ORDINALITY", "themes") as captured:
        found = await index.search_themes_many(queries, limit=4)
    [(statement, parameters)] = captured
    async with pg_sessionmaker() as session:
        await session.execute(
            text("SELECT set_config('cycgraph.tenant_id', :t, true),"
                 " set_config('hnsw.iterative_scan', 'relaxed_order', true)"),
            {"t": pg_tenant},
        )
        conn = await session.connection()
        raw = await conn.exec_driver_sql(
            "EXPLAIN (ANALYZE, VERBOSE, FORMAT JSON) " + statement, parameters
        )
        doc = raw.scalar_one()
    plan = (json.loads(doc) if isinstance(doc, str) else doc)[0]["Plan"]
    return _nodes(plan), found


def _branch_reads(nodes: list[dict[str, Any]]) -> tuple[int, int]:
    """Loops of the exact and of the HNSW branch that read theme rows (see ``nearest``)."""
    [append] = [n for n in nodes if n["Node Type"] == "Append"]
    exact, walk = append["Plans"]
    return tuple(  # type: ignore[return-value]
        sum(int(n.get("Actual Loops", 0)) for n in _nodes(branch)
            if n.get("Relation Name") == "themes" and n.get("Actual Rows", 0) > 0)
        for branch in (exact, walk)
    )


async def _stored_themes(pg_store: Any, rng: np.random.Generator, n: int = 60) -> None:
    prov = Provenance(source="derived", created_at=utc_now())
    themes = [
        Theme(id=uuid.uuid4(), label=f"t{i}", embedding=rng.normal(size=DIM).tolist(),
              provenance=prov)
        for i in range(n)
    ]
    await pg_store.put_themes(themes)


async def test_theme_knn_casts_the_query_vectors_once(
    pg_store: Any, pg_index: Any, pg_engine: Any, pg_sessionmaker: Any, pg_tenant: str
) -> None:
    rng = np.random.default_rng(7)
    await _stored_themes(pg_store, rng)
    queries = [rng.normal(size=DIM).tolist() for _ in range(3)]
    nodes, found = await _theme_knn_plan(pg_index, pg_engine, pg_sessionmaker, pg_tenant,
                                         queries)
    assert [len(hits) for hits in found] == [4, 4, 4]
    # a small tenant: the exact branch reads its themes, once per query; the HNSW one
    # never reads a row
    exact, walk = _branch_reads(nodes)
    assert exact == len(queries) and walk == 0
    # Every expression evaluated per theme row (below the per-query subquery) compares
    # against q.v as it is; the only cast of the vectors is the parameter's, once per call.
    per_row = [n for n in nodes if n.get("Node Type") != "Function Scan"
               and n.get("Node Type") != "Nested Loop"]
    for node in per_row:
        order_by = node.get("Order By", ())
        exprs = [*node.get("Output", ()), *node.get("Sort Key", ()),
                 *([order_by] if isinstance(order_by, str) else order_by)]
        assert not any("q.v)::" in e or "::vector" in e for e in exprs), (node["Node Type"], exprs)
    assert any("<=> q.v" in e for n in per_row for e in n.get("Output", ()))


async def test_theme_knn_of_a_big_tenant_runs_the_hnsw_branch(
    pg_store: Any, pg_index: Any, pg_engine: Any, pg_sessionmaker: Any, pg_tenant: str
) -> None:
    rng = np.random.default_rng(8)
    await _stored_themes(pg_store, rng, 3000)
    async with pg_sessionmaker() as session:
        await session.execute(text("ANALYZE themes"))
    queries = [rng.normal(size=DIM).tolist() for _ in range(3)]
    # exact_below=0: the tenant counts as past the exact threshold whatever its size
    big = PostgresMemoryIndex(pg_sessionmaker, tenant_id=pg_tenant, exact_below=0)
    nodes, found = await _theme_knn_plan(big, pg_engine, pg_sessionmaker, pg_tenant, queries)
    # The HNSW branch runs, once per query, and the exact one reads nothing. (Which access
    # path the planner takes inside the branch follows its costs: on 3,000 rows of 8
    # dimensions it may prefer the B-tree and a sort; at 8,245 themes of 384 dimensions
    # of a 100,000-fact tenant it walked the HNSW index.)
    exact, walk = _branch_reads(nodes)
    assert exact == 0 and walk == len(queries)
    # the walk finds what the exact scan finds on so few themes
    exact = await pg_index.search_themes_many(queries, limit=4)
    assert [[h[0] for h in hits] for hits in found] == [[h[0] for h in hits] for hits in exact]


async def test_entity_name_lookup_reads_only_the_matches(
    pg_store: Any, pg_sessionmaker: Any, pg_tenant: str, pg_engine: Any
) -> None:
    prov = Provenance(source="derived", created_at=utc_now())
    people = [Entity(id=uuid.uuid4(), name=f"Person Number {i}", entity_type="person",
                     provenance=prov) for i in range(3000)]
    await pg_store.put_entities(people)
    async with _sent(pg_engine, "FROM entities", "name_key") as captured:
        found = await pg_store.find_entities_by_name_keys(
            {("person number 7", "person"), ("person number 42", "person")}
        )
    assert sorted(e.name for e in found) == ["Person Number 42", "Person Number 7"]
    [(statement, parameters)] = captured
    async with pg_sessionmaker() as session:
        await session.execute(text("ANALYZE entities"))
        conn = await session.connection()
        raw = await conn.exec_driver_sql(
            "EXPLAIN (ANALYZE, FORMAT JSON) " + statement, parameters
        )
        doc = raw.scalar_one()
        plan = (json.loads(doc) if isinstance(doc, str) else doc)[0]["Plan"]
    nodes = _nodes(plan)
    reads = [n for n in nodes if n.get("Relation Name") == "entities"]
    assert reads and all(n.get("Index Name") == "ix_entities_tenant_id_name_key"
                         for n in reads), [(n["Node Type"], n.get("Index Name")) for n in reads]
    # rows the scan looked at: the candidates of the asked keys, not the tenant's 3,000
    assert sum(int(n.get("Actual Rows", 0)) + int(n.get("Rows Removed by Filter", 0))
               for n in reads) <= 8

"""Plans of the statements an ingest sends: their work follows the batch, not the tenant.

The batched theme kNN parses each query vector once, not once per theme.

``search_themes_many`` sends every fact's vector in one statement. If the vectors travel
as text and are cast inside the per-query ``LATERAL`` subquery, an exact scan (what the
planner picks while a tenant has few themes) parses the same vector again for every theme
row it visits, so the statement's cost grows with the tenant's themes (measured: 3.7 ->
172 ms per call over 260 calls of the growth bench). The plan is the shape checked here:
the distance inside the subquery compares against the already-typed query vector.

Ingest-time entity resolution (``find_entities_by_name_keys``) reads the entities whose
name key matches through the ``(tenant_id, entity_type, name key)`` index, not every
entity of the tenant with those types.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import numpy as np
import pytest
from sqlalchemy import text

from cycgraph_memory.postgres.ingest_lookups import _THEMES_KNN_MANY
from cycgraph_memory.records import Entity, Provenance, Theme, utc_now

pytestmark = pytest.mark.postgres

DIM = 8  # the test schema's width


def _nodes(plan: dict[str, Any]) -> list[dict[str, Any]]:
    out = [plan]
    for child in plan.get("Plans", ()):
        out.extend(_nodes(child))
    return out


async def test_theme_knn_casts_the_query_vectors_once(
    pg_store: Any, pg_sessionmaker: Any, pg_tenant: str
) -> None:
    rng = np.random.default_rng(7)
    prov = Provenance(source="derived", created_at=utc_now())
    themes = [
        Theme(id=uuid.uuid4(), label=f"t{i}", embedding=rng.normal(size=DIM).tolist(),
              provenance=prov)
        for i in range(60)
    ]
    await pg_store.put_themes(themes)
    queries = ["[" + ",".join(repr(float(x)) for x in rng.normal(size=DIM)) + "]"
               for _ in range(3)]
    async with pg_sessionmaker() as session:
        await session.execute(
            text("SELECT set_config('cycgraph.tenant_id', :t, true)"), {"t": pg_tenant}
        )
        raw = (
            await session.execute(
                text("EXPLAIN (ANALYZE, VERBOSE, FORMAT JSON) "
                     + _THEMES_KNN_MANY.format(dim=DIM)),
                {"queries": queries, "tenant": pg_tenant, "k": 4},
            )
        ).scalar_one()
    plan = (json.loads(raw) if isinstance(raw, str) else raw)[0]["Plan"]
    nodes = _nodes(plan)
    scans = [n for n in nodes if n.get("Relation Name") == "themes"]
    assert scans, "the statement reads the themes table"
    assert sum(int(n["Actual Loops"]) for n in scans) == len(queries)  # one scan per query
    # Every expression evaluated per theme row (below the per-query subquery) compares
    # against q.v as it is; the only cast of the vectors is the unnest's, once per call.
    per_row = [n for n in nodes if n.get("Node Type") != "Function Scan"
               and n.get("Node Type") != "Nested Loop"]
    for node in per_row:
        order_by = node.get("Order By", ())
        exprs = [*node.get("Output", ()), *node.get("Sort Key", ()),
                 *([order_by] if isinstance(order_by, str) else order_by)]
        assert not any("q.v)::" in e or "::vector" in e for e in exprs), (node["Node Type"], exprs)
    assert any("<=> q.v" in e for n in per_row for e in n.get("Output", ()))


async def test_entity_name_lookup_reads_only_the_matches(
    pg_store: Any, pg_sessionmaker: Any, pg_tenant: str, pg_engine: Any
) -> None:
    from sqlalchemy import event

    prov = Provenance(source="derived", created_at=utc_now())
    people = [Entity(id=uuid.uuid4(), name=f"Person Number {i}", entity_type="person",
                     provenance=prov) for i in range(3000)]
    await pg_store.put_entities(people)
    captured: list[tuple[str, Any]] = []

    def capture(conn: Any, cursor: Any, statement: str, parameters: Any, *_: Any) -> None:
        if "FROM entities" in statement and "regexp_replace" in statement:
            captured.append((statement, parameters))

    event.listen(pg_engine.sync_engine, "before_cursor_execute", capture)
    try:
        found = await pg_store.find_entities_by_name_keys(
            {("person number 7", "person"), ("person number 42", "person")}
        )
    finally:
        event.remove(pg_engine.sync_engine, "before_cursor_execute", capture)
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
    assert reads and all(n.get("Index Name") == "ix_entities_tenant_id_entity_type_name_key"
                         for n in reads), [(n["Node Type"], n.get("Index Name")) for n in reads]
    # rows the scan looked at: the candidates of the asked keys, not the tenant's 3,000
    assert sum(int(n.get("Actual Rows", 0)) + int(n.get("Rows Removed by Filter", 0))
               for n in reads) <= 8

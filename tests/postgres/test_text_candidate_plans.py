"""BM25 candidates on Postgres: a word in most documents is not read through its posting list.

``bm25_ranked`` takes a rare term's candidates from the GIN index and a common term's
(``df * df > RARE_TERM_FACTOR * candidates * N``) from a scan that stops at
``candidates`` matches. These tests pin that shape (the rows the GIN index hands out,
read from ``EXPLAIN (ANALYZE, FORMAT JSON)``), not a timing, and that the answer is the
same ranking the in-memory index computes.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import text

from cycgraph_memory.postgres import statements
from cycgraph_memory.postgres.bm25 import RARE_TERM_FACTOR, TEXT_CANDIDATES
from cycgraph_memory.textsearch import BM25Index, query_terms

pytestmark = pytest.mark.postgres

# Enough documents holding "common" for it to be common: df = N and
# N * N > RARE_TERM_FACTOR * TEXT_CANDIDATES * N.
DOCUMENTS = RARE_TERM_FACTOR * TEXT_CANDIDATES + 100

_INSERT = """
INSERT INTO facts (tenant_id, id, content, source_episode_ids, entity_ids, provenance,
                   valid_from, access_count, tags, source_message_ids, search_terms)
SELECT :tenant, md5(:tenant || i::text)::uuid, 'common word number ' || i, '{}', '{}',
       '{"source": "agent", "created_at": "2025-06-01T09:30:00+00:00"}'::jsonb,
       timestamptz '2025-01-01' + i * interval '1 minute', 0, '{}', '{}',
       ARRAY['common', 'word', 'number', i::text]
FROM generate_series(10, :n + 9) AS i
"""


def _nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", ()):
        yield from _nodes(child)


async def _plan(conn: Any, stmt: Any, params: dict[str, Any]) -> dict[str, Any]:
    """The ``EXPLAIN (ANALYZE, FORMAT JSON)`` plan of ``stmt`` run with ``params``."""
    compiled = stmt.compile(dialect=conn.dialect)
    values = compiled.construct_params(params)
    args = [values[name] for name in compiled.positiontup]
    driver = (await conn.get_raw_connection()).driver_connection
    raw = await driver.fetchval(f"EXPLAIN (ANALYZE, FORMAT JSON) {compiled}", *args)
    plan: dict[str, Any] = (json.loads(raw) if isinstance(raw, str) else raw)[0]["Plan"]
    return plan


def _rows_handed_out(plan: dict[str, Any], node_types: set[str], index: Any) -> int:
    """Rows the index scans of ``node_types`` on an index ``index(name)`` accepts handed out."""
    return sum(
        int(n.get("Actual Rows", 0) * n.get("Actual Loops", 1))
        for n in _nodes(plan)
        if n.get("Node Type") in node_types and index(str(n.get("Index Name", "")))
    )


async def _gin_rows(conn: Any, stmt: Any, params: dict[str, Any]) -> int:
    """Rows the ``search_terms`` GIN index handed out while running ``stmt``."""
    return _rows_handed_out(
        await _plan(conn, stmt, params), {"Bitmap Index Scan"},
        lambda name: name == "ix_facts_tenant_id_search_terms_gin",
    )


async def test_a_common_word_is_not_read_through_its_posting_list(
    pg_sessionmaker: Any, pg_index: Any, pg_tenant: str
) -> None:
    rare_id = uuid.uuid4()
    async with pg_sessionmaker() as session, session.begin():
        conn = await session.connection()
        await conn.execute(text(_INSERT), {"tenant": pg_tenant, "n": DOCUMENTS})
        await conn.execute(text(
            "INSERT INTO facts (tenant_id, id, content, source_episode_ids, entity_ids, "
            "provenance, valid_from, access_count, tags, source_message_ids, search_terms) "
            "VALUES (:tenant, :id, 'a common zebra', '{}', '{}', "
            "'{\"source\": \"agent\", \"created_at\": \"2025-06-01T09:30:00+00:00\"}', "
            "'2024-01-01', 0, '{}', '{}', ARRAY['common', 'zebra'])"
        ), {"tenant": pg_tenant, "id": rare_id})

    stmt = statements.text_ranked("facts", live=True)
    terms = query_terms("the common zebra")
    assert terms == ["common", "zebra"]
    params = {"tenant": pg_tenant, "limit": 5, "bm25_terms": terms}
    async with pg_sessionmaker() as session, session.begin():
        conn = await session.connection()
        gin_rows = await _gin_rows(conn, stmt, params)
    # The rare word's posting list (one row) and the all-terms intersection (one row);
    # not the common word's DOCUMENTS + 1 rows.
    assert gin_rows <= 2

    hits = await pg_index.text_search_facts("the common zebra", limit=5)
    assert hits[0].item.id == rare_id
    assert len(hits) == 5


async def test_rare_words_rank_every_match_as_in_memory(
    pg_sessionmaker: Any, pg_index: Any, pg_tenant: str
) -> None:
    # Every query word held by at most TEXT_CANDIDATES rows: all matches are ranked, so
    # the order is the in-memory BM25 order (ties by id). (The stored terms are the
    # tokens of the content: numbers of two digits or more.)
    async with pg_sessionmaker() as session, session.begin():
        conn = await session.connection()
        await conn.execute(text(_INSERT), {"tenant": pg_tenant, "n": 150})
    rows = []
    async with pg_sessionmaker() as session:
        conn = await session.connection()
        rows = (await conn.execute(
            text("SELECT id, content FROM facts WHERE tenant_id = :t"), {"t": pg_tenant}
        )).all()
    memory = BM25Index()
    for fact_id, content in rows:
        memory.add(fact_id, content)
    question = "common number 17 27 117"
    expected = memory.search(question, 10)
    hits = await pg_index.text_search_facts(question, limit=10)
    assert [h.item.id for h in hits] == [doc for doc, _ in expected]
    for hit, (_, score) in zip(hits, expected, strict=True):
        assert hit.score == score  # the same arithmetic, summed in the same order


async def _fact_index_rows(conn: Any, stmt: Any, params: dict[str, Any]) -> int:
    """Rows every index of ``facts`` handed out while running ``stmt``."""
    return _rows_handed_out(
        await _plan(conn, stmt, params), {"Bitmap Index Scan", "Index Scan", "Index Only Scan"},
        lambda name: name.startswith(("ix_facts", "pk_facts")),
    )


async def test_a_rare_word_reads_only_this_tenants_postings(
    pg_sessionmaker: Any, pg_index: Any, pg_tenant: str
) -> None:
    # Another tenant holds the word in 2,000 rows; this tenant in one of its 501. The
    # array GIN indexes lead with tenant_id (migration 0015), so no index scan hands out
    # the word's 2,001 postings over every tenant: the planner reads either this tenant's
    # posting of the word or, at this size, the tenant's own rows.
    other = f"{pg_tenant}-other"
    mine = uuid.uuid4()
    insert = (
        "INSERT INTO facts (tenant_id, id, content, source_episode_ids, entity_ids, "
        "provenance, valid_from, access_count, tags, source_message_ids, search_terms) "
        "SELECT :tenant, gen_random_uuid(), :content, '{}', '{}', "
        "'{\"source\": \"agent\", \"created_at\": \"2025-06-01T09:30:00+00:00\"}', "
        "'2024-01-01', 0, '{}', '{}', string_to_array(:content, ' ') "
        "FROM generate_series(1, :n)"
    )
    async with pg_sessionmaker() as session, session.begin():
        conn = await session.connection()
        await conn.execute(text("SELECT set_config('cycgraph.tenant_id', :t, true)"),
                           {"t": other})
        await conn.execute(text(insert), {"tenant": other, "n": 2_000, "content": "zebra"})
    async with pg_sessionmaker() as session, session.begin():
        conn = await session.connection()
        await conn.execute(text(insert), {"tenant": pg_tenant, "n": 500, "content": "a horse"})
        await conn.execute(text(
            "INSERT INTO facts (tenant_id, id, content, source_episode_ids, entity_ids, "
            "provenance, valid_from, access_count, tags, source_message_ids, search_terms) "
            "VALUES (:tenant, :id, 'one zebra', '{}', '{}', "
            "'{\"source\": \"agent\", \"created_at\": \"2025-06-01T09:30:00+00:00\"}', "
            "'2024-01-01', 0, '{}', '{}', ARRAY['one', 'zebra'])"
        ), {"tenant": pg_tenant, "id": mine})
        await conn.execute(text("ANALYZE facts"))
    stmt = statements.text_ranked("facts", live=True)
    params = {"tenant": pg_tenant, "limit": 5, "bm25_terms": ["zebra"]}
    try:
        async with pg_sessionmaker() as session, session.begin():
            conn = await session.connection()
            read = await _fact_index_rows(conn, stmt, params)
        # Each of the two candidate branches (the word's rows, the rows with every word)
        # reads at most this tenant's 501 rows; never the other tenant's 2,000 postings.
        assert read <= 2 * 501 + 6, read
        hits = await pg_index.text_search_facts("zebra", limit=5)
        assert [h.item.id for h in hits] == [mine]
    finally:
        async with pg_sessionmaker() as session, session.begin():
            conn = await session.connection()
            await conn.execute(text("SELECT set_config('cycgraph.tenant_id', :t, true)"),
                               {"t": other})
            await conn.execute(text("DELETE FROM facts WHERE tenant_id = :t"), {"t": other})

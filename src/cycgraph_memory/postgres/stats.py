"""Counts and index sizes computed in the database (for ``memory_stats``)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import text

from cycgraph_memory.inspection import RecordCounts, TenantCounts
from cycgraph_memory.records import MAX_OFFSET, QUARANTINE_TAG

__all__ = ["index_sizes", "record_counts"]

# One statement: one aggregate per table, all filtered by the tenant (and by RLS).
_COUNTS = text(
    """
    SELECT
      (SELECT count(*) FROM facts f WHERE f.tenant_id = :t AND f.invalidated_by IS NULL
         AND NOT (:q = ANY(f.tags))) AS fact_live,
      (SELECT count(*) FROM facts f WHERE f.tenant_id = :t AND f.invalidated_by IS NOT NULL)
         AS fact_invalidated,
      (SELECT count(*) FROM facts f WHERE f.tenant_id = :t AND f.invalidated_by IS NULL
         AND :q = ANY(f.tags)) AS fact_quarantined,
      (SELECT count(*) FROM facts f WHERE f.tenant_id = :t AND f.invalidated_by IS NULL
         AND NOT (:q = ANY(f.tags)) AND :c = ANY(f.tags)) AS candidates,
      (SELECT count(*) FROM entities e WHERE e.tenant_id = :t AND e.invalidated_at IS NULL
         AND e.superseded_by IS NULL) AS entity_live,
      (SELECT count(*) FROM entities e WHERE e.tenant_id = :t
         AND (e.invalidated_at IS NOT NULL OR e.superseded_by IS NOT NULL))
         AS entity_invalidated,
      (SELECT count(*) FROM relationships r WHERE r.tenant_id = :t
         AND r.invalidated_by IS NULL) AS relationship_live,
      (SELECT count(*) FROM relationships r WHERE r.tenant_id = :t
         AND r.invalidated_by IS NOT NULL) AS relationship_invalidated,
      (SELECT count(*) FROM episodes p WHERE p.tenant_id = :t AND p.invalidated_at IS NULL)
         AS episode_live,
      (SELECT count(*) FROM episodes p WHERE p.tenant_id = :t
         AND p.invalidated_at IS NOT NULL) AS episode_invalidated,
      (SELECT count(*) FROM episode_messages m JOIN episodes p
         ON p.tenant_id = m.tenant_id AND p.id = m.episode_id
         WHERE m.tenant_id = :t AND p.invalidated_at IS NULL) AS message_live,
      (SELECT count(*) FROM episode_messages m JOIN episodes p
         ON p.tenant_id = m.tenant_id AND p.id = m.episode_id
         WHERE m.tenant_id = :t AND p.invalidated_at IS NOT NULL) AS message_invalidated
    """
)

_TAGS = text(
    """
    SELECT tag, count(*) AS n
    FROM facts f, unnest(f.tags) AS tag
    WHERE f.tenant_id = :t AND f.invalidated_by IS NULL
    GROUP BY tag
    ORDER BY n DESC, tag COLLATE "C"
    LIMIT :top
    """
)

_INDEX_SIZES = text(
    """
    SELECT c.relname AS name, pg_relation_size(c.oid) AS bytes
    FROM pg_class c
    JOIN pg_am am ON am.oid = c.relam
    JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE c.relkind = 'i' AND am.amname IN ('hnsw', 'gin')
      AND n.nspname = current_schema()
    ORDER BY c.relname
    """
)


async def record_counts(backend: Any, *, candidate_tag: str, top: int) -> TenantCounts:
    """Count the tenant's records and tags in the database (two statements)."""
    params = {"t": backend.tenant_id, "q": QUARANTINE_TAG, "c": candidate_tag}
    async with backend._read() as session:  # the read engine, like the rest of the stats
        row = (await session.execute(_COUNTS, params)).mappings().one()
        # SQL LIMIT is 64-bit; a larger ``top`` means "every tag", as in memory.
        limit = min(top, MAX_OFFSET)
        tags = (await session.execute(_TAGS, {"t": backend.tenant_id, "top": limit})).all()
    records = {
        "entity": RecordCounts(live=row["entity_live"], invalidated=row["entity_invalidated"]),
        "relationship": RecordCounts(
            live=row["relationship_live"], invalidated=row["relationship_invalidated"]
        ),
        "episode": RecordCounts(live=row["episode_live"], invalidated=row["episode_invalidated"]),
        "message": RecordCounts(live=row["message_live"], invalidated=row["message_invalidated"]),
        "fact": RecordCounts(
            live=row["fact_live"],
            invalidated=row["fact_invalidated"],
            quarantined=row["fact_quarantined"],
        ),
    }
    return TenantCounts(
        records=records,
        tags={str(tag): int(n) for tag, n in tags},
        pending_candidates=int(row["candidates"]),
    )


async def index_sizes(backend: Any) -> dict[str, int]:
    """On-disk bytes of the HNSW and GIN indexes (shared by every tenant of the database)."""
    async with backend._session() as session:
        rows = (await session.execute(_INDEX_SIZES)).all()
    return {str(name): int(size) for name, size in rows}

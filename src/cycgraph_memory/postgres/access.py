"""Fact access counters on writes: ``fact_access`` follows the facts a write stores.

Since migration 0016 a fact's ``access_count`` and ``last_accessed_at`` live in
``fact_access`` (one row per fact whose counters are not the defaults, 0 and NULL), so a
retrieval's touch never rewrites a fact row. A write of facts replaces their counters
with the records' own, as it replaces every other field: :func:`put_access` upserts the
rows of the facts with counters and deletes those of the REPLACED facts without any (a
new fact has no row to delete, so an ingest of new facts with default counters costs no
statement at all).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from functools import lru_cache
from typing import Any

from sqlalchemy import TextClause, text
from sqlalchemy.ext.asyncio import AsyncSession

from cycgraph_memory.records import SemanticFact

__all__ = ["access_rows", "put_access"]


def _has_counters(fact: SemanticFact) -> bool:
    return fact.access_count != 0 or fact.last_accessed_at is not None


def access_rows(facts: Iterable[SemanticFact], tenant: str) -> list[dict[str, Any]]:
    """``fact_access`` rows of the facts whose counters are not the defaults."""
    return [
        {"tenant_id": tenant, "fact_id": f.id, "access_count": f.access_count,
         "last_accessed_at": f.last_accessed_at}
        for f in facts if _has_counters(f)
    ]


_UPSERT = """INSERT INTO fact_access (tenant_id, fact_id, access_count, last_accessed_at)
    SELECT CAST(:tenant AS text), i, c, t
    FROM unnest(CAST(:ids AS uuid[]), CAST(:counts AS bigint[]),
                CAST(:ats AS timestamptz[])) AS u(i, c, t)
    ORDER BY i
    ON CONFLICT (tenant_id, fact_id) DO UPDATE SET
        access_count = EXCLUDED.access_count, last_accessed_at = EXCLUDED.last_accessed_at"""

_DELETE = """DELETE FROM fact_access
    WHERE tenant_id = CAST(:tenant AS text) AND fact_id = ANY(CAST(:gone AS uuid[]))"""


@lru_cache(maxsize=4)
def _statement(upsert: bool, delete: bool) -> TextClause:
    """The upsert, the delete, or both (the delete as a CTE: disjoint ids)."""
    if upsert and delete:
        return text(f"WITH gone AS ({_DELETE} RETURNING fact_id)\n{_UPSERT}")
    return text(_UPSERT if upsert else _DELETE)


async def put_access(
    session: AsyncSession,
    tenant: str,
    facts: Sequence[SemanticFact],
    replaced: Iterable[uuid.UUID] = (),
) -> None:
    """Make the stored counters of ``facts`` theirs, in at most one statement.

    Args:
        session: The write's session (same transaction as the fact rows).
        tenant: The tenant.
        facts: The facts just written (a repeated id: the last one wins, as in the write).
        replaced: The ids among them that were already stored (their counter rows, if
            any, are deleted when the new record has default counters).
    """
    latest = {f.id: f for f in facts}
    keep = sorted((f for f in latest.values() if _has_counters(f)), key=lambda f: f.id)
    kept = {f.id for f in keep}
    gone = sorted({i for i in replaced if i in latest and i not in kept})
    if not keep and not gone:
        return
    params: dict[str, Any] = {"tenant": tenant}
    if keep:
        params.update(
            ids=[f.id for f in keep],
            counts=[f.access_count for f in keep],
            ats=[f.last_accessed_at for f in keep],
        )
    if gone:
        params["gone"] = gone
    await session.execute(_statement(bool(keep), bool(gone)), params)

"""Lookups by key that keep an ingest's cost independent of the tenant's size.

``IngestSearch``, a mixin of :class:`~cycgraph_memory.postgres.PostgresMemoryIndex`:
``search_themes_many``, the nearest themes of every fact of a batch in one statement.

``IngestLookups``, a mixin of :class:`~cycgraph_memory.postgres.PostgresMemoryStore`:

* ``find_relationships_between``: the stored edges with given ``(source, target,
  relation_type)`` triples, one statement on the ``(tenant_id, source_id)`` index, so
  ingest-time resolution checks the edges of a batch without reading every edge of a
  well-connected entity;
* ``get_tenant_setting`` / ``put_tenant_setting``: small JSON records per tenant in
  ``tenant_settings`` (migration 0010), e.g. the calibrated theme thresholds.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Iterable, Mapping, Sequence
from functools import lru_cache
from typing import Any

from sqlalchemy import Table, and_, or_, select
from sqlalchemy.dialects.postgresql import insert as pg_insert

from cycgraph_memory._settings import check_setting, check_setting_key
from cycgraph_memory.inmemory._common import SCORE_FLOOR_TOLERANCE
from cycgraph_memory.postgres import convert, statements
from cycgraph_memory.postgres._base import PostgresBackend, PostgresIndexMixin, parse_id
from cycgraph_memory.postgres.schema import (
    MAX_VECTOR_HNSW_DIM,
    RelationshipRow,
    TenantSettingRow,
)
from cycgraph_memory.records import Relationship, SearchOptions, utc_now

__all__ = ["SETTINGS", "IngestLookups", "IngestSearch"]

RELATIONSHIPS: Table = RelationshipRow.__table__  # type: ignore[assignment]
SETTINGS: Table = TenantSettingRow.__table__  # type: ignore[assignment]

_TRIPLES_PER_STATEMENT = 500


@lru_cache(maxsize=1)
def _setting_upsert() -> Any:
    """Insert or replace one tenant setting (built once). Parameters: the row's columns."""
    s = SETTINGS
    stmt = pg_insert(s)
    return stmt.on_conflict_do_update(
        index_elements=[s.c.tenant_id, s.c.key],
        set_={"value": stmt.excluded.value, "updated_at": stmt.excluded.updated_at},
    )


class IngestLookups(PostgresBackend):
    """Key lookups used by ``MemoryPipeline`` (mixin of the Postgres store)."""

    async def find_relationships_between(
        self, keys: Iterable[tuple[uuid.UUID | str, uuid.UUID | str, str]]
    ) -> list[Relationship]:
        """Live edges whose ``(source_id, target_id, relation_type)`` is in ``keys``.

        Ordered by ``(valid_from, id)``; reads only the edges asked for.
        """
        wanted = sorted({(parse_id(s), parse_id(t), str(r)) for s, t, r in keys}, key=str)
        if not wanted:
            return []
        t = RELATIONSHIPS
        found: list[Relationship] = []
        async with self._session() as session:
            for start in range(0, len(wanted), _TRIPLES_PER_STATEMENT):
                chunk = wanted[start : start + _TRIPLES_PER_STATEMENT]
                stmt = select(t).where(
                    t.c.tenant_id == self._tenant,
                    t.c.invalidated_by.is_(None),
                    or_(
                        *(
                            and_(t.c.source_id == s, t.c.target_id == d, t.c.relation_type == r)
                            for s, d, r in chunk
                        )
                    ),
                )
                rows = (await session.execute(stmt)).mappings().all()
                found.extend(convert.relationship_from_row(row) for row in rows)
        return sorted(found, key=lambda r: (r.valid_from, str(r.id)))

    async def get_tenant_setting(self, key: str) -> dict[str, Any] | None:
        """The JSON record stored under ``key`` for this tenant, or ``None``."""
        name = check_setting_key(key)
        s = SETTINGS
        stmt = select(s.c.value).where(s.c.tenant_id == self._tenant, s.c.key == name)
        async with self._session() as session:
            value = (await session.execute(stmt)).scalar_one_or_none()
        return None if value is None else dict(value)

    async def put_tenant_setting(self, key: str, value: Mapping[str, Any]) -> None:
        """Insert or replace the JSON record under ``key`` for this tenant."""
        name = check_setting_key(key)
        document = check_setting(value)
        row = {"tenant_id": self._tenant, "key": name, "value": document, "updated_at": utc_now()}

        async def work(session: Any) -> None:
            await session.execute(_setting_upsert(), row)

        await self._run(work, "put tenant setting")


TIE_MARGIN = 8
"""Extra nearest themes read per query of ``search_themes_many``, so that themes tied at
the ``limit`` cut are all read and the cut falls by id, as in memory."""


class IngestSearch(PostgresIndexMixin):
    """Batched theme kNN used by ``MemoryPipeline`` (mixin of the Postgres index)."""

    async def search_themes_many(
        self,
        embeddings: Sequence[Sequence[float]],
        *,
        limit: int,
        min_similarity: float | None = None,
    ) -> list[list[tuple[uuid.UUID, float]]]:
        """For each query vector, the ids and scores of its ``limit`` nearest live themes.

        One statement for the whole batch (``statements.themes_near_many``: per vector, an
        exact scan of a small tenant's themes, an HNSW walk past ``exact_below`` facts),
        best first per query, ties by id. Schemas wider than 2,000 dimensions (indexed as
        ``halfvec``) fall back to one ``search_themes`` per vector. A theme scoring within
        ``SCORE_FLOOR_TOLERANCE`` (1e-6) below ``min_similarity`` is kept, as in memory:
        pgvector rounds the query to single precision, which moves a cosine by about 1e-8,
        and the calibrated clusterer's floor is often the exact cosine of one of the
        tenant's own pairs, so without the margin a theme at the floor was a candidate in
        memory and not on Postgres, and the two backends merged different themes.
        """
        # The in-memory index's check: limit 1-1000 and a number (not a bool) as the floor.
        opts = SearchOptions(limit=limit, min_similarity=min_similarity)
        limit, min_similarity = opts.limit, opts.min_similarity
        if not embeddings:
            return []
        queries = [
            self._query_vector(v, self._known_dim(), "search_themes_many") for v in embeddings
        ]
        # TIE_MARGIN more rows than asked per query: ``ORDER BY distance LIMIT k`` picks
        # arbitrarily among rows tied at the cut, and ties are broken by id below.
        fetch = limit + TIE_MARGIN
        ef = min(1000, max(self.ef_search, fetch + 1))
        out: list[list[tuple[uuid.UUID, float]]] = [[] for _ in queries]
        async with self._session(self._search_settings(ef)) as session:
            dim = await self._dim(session)
            for q in queries:
                self._query_vector(q, dim, "search_themes_many", checked=True)
            if dim > MAX_VECTOR_HNSW_DIM:
                return await self._themes_one_by_one(queries, limit, min_similarity)
            params = {
                "queries": queries,
                "tenant": self._tenant,
                "fetch": fetch,
                "exact_below": self.exact_below,
            }
            rows = await statements.fetch(session, statements.themes_near_many(dim), params)
        for row in rows:
            ord_, theme_id, distance = row["ord"], row["id"], row["distance"]
            score = 0.0 if distance is None or math.isnan(distance) else 1.0 - float(distance)
            if min_similarity is None or score >= min_similarity - SCORE_FLOOR_TOLERANCE:
                out[int(ord_) - 1].append((convert._uuid(theme_id), score))
        for hits in out:
            hits.sort(key=lambda h: (-h[1], str(h[0])))
            del hits[limit:]
        return out

    async def _themes_one_by_one(
        self, queries: list[list[float]], limit: int, min_similarity: float | None
    ) -> list[list[tuple[uuid.UUID, float]]]:
        search = getattr(self, "search_themes")  # noqa: B009 - the index's own method
        out: list[list[tuple[uuid.UUID, float]]] = []
        floor = None if min_similarity is None else max(0.0, min_similarity - SCORE_FLOOR_TOLERANCE)
        for q in queries:
            hits = await search(q, limit=limit, min_similarity=floor)
            out.append([(h.item.id, h.score) for h in hits])
        return out

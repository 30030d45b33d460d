"""Lookups by key that keep an ingest's cost independent of the tenant's size.

A mixin of :class:`~cycgraph_memory.postgres.PostgresMemoryStore`:

* ``find_relationships_between``: the stored edges with given ``(source, target,
  relation_type)`` triples, one statement on the ``(tenant_id, source_id)`` index, so
  ingest-time resolution checks the edges of a batch without reading every edge of a
  well-connected entity;
* ``get_tenant_setting`` / ``put_tenant_setting``: small JSON records per tenant in
  ``tenant_settings`` (migration 0011), e.g. the calibrated theme thresholds.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from typing import Any

from sqlalchemy import Table, and_, or_, select
from sqlalchemy.dialects.postgresql import insert as pg_insert

from cycgraph_memory._settings import check_setting, check_setting_key
from cycgraph_memory.postgres import convert
from cycgraph_memory.postgres._base import PostgresBackend, parse_id
from cycgraph_memory.postgres.schema import RelationshipRow, TenantSettingRow
from cycgraph_memory.records import Relationship, utc_now

__all__ = ["SETTINGS", "IngestLookups"]

RELATIONSHIPS: Table = RelationshipRow.__table__  # type: ignore[assignment]
SETTINGS: Table = TenantSettingRow.__table__  # type: ignore[assignment]

_TRIPLES_PER_STATEMENT = 500


class IngestLookups(PostgresBackend):
    """Key lookups used by ``MemoryPipeline`` (mixin of the Postgres store)."""

    async def find_relationships_between(
        self, keys: Iterable[tuple[uuid.UUID | str, uuid.UUID | str, str]]
    ) -> list[Relationship]:
        """Live edges whose ``(source_id, target_id, relation_type)`` is in ``keys``.

        Ordered by ``(valid_from, id)``; reads only the edges asked for.
        """
        wanted = sorted(
            {(parse_id(s), parse_id(t), str(r)) for s, t, r in keys}, key=str
        )
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
        s = SETTINGS
        stmt = pg_insert(s).values(
            tenant_id=self._tenant, key=name, value=document, updated_at=utc_now()
        )
        stmt = stmt.on_conflict_do_update(
            index_elements=[s.c.tenant_id, s.c.key],
            set_={"value": stmt.excluded.value, "updated_at": stmt.excluded.updated_at},
        )

        async def work(session: Any) -> None:
            await session.execute(stmt)

        await self._run(work, "put tenant setting")

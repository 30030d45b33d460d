"""Key lookups of the in-memory store used by ``MemoryPipeline`` (cost follows the keys).

A mixin of :class:`~cycgraph_memory.inmemory.InMemoryMemoryStore`, twin of
:mod:`cycgraph_memory.postgres.ingest_lookups`: ``find_relationships_between`` (edges by
``(source, target, relation_type)``) and per-tenant settings (``get_tenant_setting`` /
``put_tenant_setting``, part of the store's transactions like every record).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from typing import Any

from cycgraph_memory._ids import parse_id
from cycgraph_memory._settings import check_setting, check_setting_key
from cycgraph_memory.inmemory._common import copy_record
from cycgraph_memory.inmemory._lookup import StoreLookups
from cycgraph_memory.records import Relationship

__all__ = ["InMemoryIngestLookups"]


class InMemoryIngestLookups:
    """Mixin: needs the store's ``_relationships``, ``_lookups`` and ``_settings``."""

    _relationships: dict[uuid.UUID, Relationship]
    _lookups: StoreLookups
    _settings: dict[str, dict[str, Any]]

    async def find_relationships_between(
        self, keys: Iterable[tuple[uuid.UUID | str, uuid.UUID | str, str]]
    ) -> list[Relationship]:
        """Live edges whose ``(source_id, target_id, relation_type)`` is in ``keys``.

        Ordered by ``(valid_from, id)``; reads only the edges of the endpoints asked for.
        """
        wanted = {(parse_id(s), parse_id(t), str(r)) for s, t, r in keys}
        found: dict[uuid.UUID, Relationship] = {}
        by_entity = self._lookups.rels_by_entity
        for source, target, relation in wanted:
            shared = by_entity.get(source, set()) & by_entity.get(target, set())
            for rid in shared:
                rel = self._relationships.get(rid)
                if (
                    rel is not None
                    and rel.invalidated_by is None
                    and (rel.source_id, rel.target_id, rel.relation_type)
                    == (source, target, relation)
                ):
                    found[rid] = rel
        ordered = sorted(found.values(), key=lambda r: (r.valid_from, str(r.id)))
        return [copy_record(r) for r in ordered]

    async def get_tenant_setting(self, key: str) -> dict[str, Any] | None:
        """The JSON record stored under ``key``, or ``None`` (a copy)."""
        value = self._settings.get(check_setting_key(key))
        return None if value is None else check_setting(value)

    async def put_tenant_setting(self, key: str, value: Mapping[str, Any]) -> None:
        """Insert or replace the JSON record under ``key``."""
        name = check_setting_key(key)
        document = check_setting(value)
        self._settings[name] = document  # journaled: a rolled-back unit of work undoes it

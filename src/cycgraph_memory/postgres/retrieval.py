"""Retrieval-side SQL of :class:`~cycgraph_memory.postgres.PostgresMemoryStore`.

A mixin so the store module stays small: the batched reads used by retrieval
(``get_relationships_for_entities``, ``get_facts_for_entities``, ``get_live_messages``),
the native subgraph (``extract_subgraph_native``: the whole BFS in one recursive CTE) and
the idempotent fact write used by ``memory_writer`` (``put_facts_once``, backed by
``writer_keys``).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import Table, select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.ext.asyncio import AsyncSession

from cycgraph_memory._options import coerce_options
from cycgraph_memory._validate import validate_record
from cycgraph_memory.errors import InvalidInputError, InvalidTypeError
from cycgraph_memory.postgres import convert, statements
from cycgraph_memory.postgres._base import PostgresBackend, parse_ids
from cycgraph_memory.postgres.references import check_fact_references
from cycgraph_memory.postgres.statements import (
    FACTS,
    WRITER_KEYS,
    temporal_conditions,
)
from cycgraph_memory.records import (
    MAX_FORWARDING_STEPS,
    EntityFactsFilter,
    Message,
    Relationship,
    RelationshipFilter,
    SemanticFact,
    SubgraphResult,
    utc_now,
)

__all__ = ["WRITER_KEYS", "RetrievalQueries", "temporal_conditions"]

Options = Mapping[str, Any]


class RetrievalQueries(PostgresBackend):
    """Mixin of :class:`PostgresMemoryStore` (uses its ``_precheck``/``_upsert`` helpers)."""

    if TYPE_CHECKING:

        def _precheck(self, records: Sequence[Any], kind: str) -> None: ...

        async def _checked_dim(
            self, session: AsyncSession, records: Sequence[Any], kind: str
        ) -> None: ...

        async def _upsert(
            self, session: AsyncSession, table: Table, rows: list[dict[str, Any]]
        ) -> None: ...

    async def get_relationships_for_entities(
        self,
        entity_ids: Iterable[uuid.UUID | str],
        filter: RelationshipFilter | Options | None = None,
        /,
        **options: Any,
    ) -> list[Relationship]:
        """Edges touching any of the entities (each once), ordered by ``(valid_from, id)``.

        One statement (``source_id = ANY(:ids) OR target_id = ANY(:ids)``).
        """
        ids = parse_ids(entity_ids)
        f = coerce_options(RelationshipFilter, filter, options)
        if not ids:
            return []
        stmt = statements.relationships_of_entities(
            direction=f.direction,
            relation_type=f.relation_type is not None,
            include_invalidated=f.include_invalidated,
        )
        params = {"tenant": self._tenant, "ids": ids, "limit": f.limit, "offset": f.offset,
                  "relation_type": f.relation_type}
        async with self._read() as session:
            rows = await statements.fetch(session, stmt, params)
        return [convert.relationship_from_row(r) for r in rows]

    async def get_live_messages(
        self, ids: Iterable[uuid.UUID | str]
    ) -> dict[uuid.UUID, Message]:
        """``get_messages`` without the messages of invalidated episodes (one statement).

        A message kept by at least one live episode is returned. Retrieval reads the turns
        behind the served facts with it, so a soft-deleted episode's turns stay out of a
        result unless the query includes invalidated records.
        """
        wanted = parse_ids(ids)
        if not wanted:
            return {}
        async with self._read() as session:
            rows = await statements.fetch(
                session, statements.messages_by_ids(live=True),
                {"tenant": self._tenant, "ids": wanted},
            )
        found = {convert._uuid(r["id"]): convert.message_from_row(r) for r in rows}
        return {i: found[i] for i in wanted if i in found}

    async def get_facts_for_entities(
        self,
        entity_ids: Iterable[uuid.UUID | str],
        filter: EntityFactsFilter | Options | None = None,
        /,
        **options: Any,
    ) -> dict[uuid.UUID, list[SemanticFact]]:
        """Facts mentioning each entity, newest first, in one statement.

        ``unnest(:ids) CROSS JOIN LATERAL (... ORDER BY valid_from DESC, id LIMIT k)``
        on the ``entity_ids`` GIN index; every filter applies before the per-entity bound.
        """
        ids = parse_ids(entity_ids)
        f = coerce_options(EntityFactsFilter, filter, options)
        if not ids:
            return {}
        params = {
            "tenant": self._tenant, "ids": ids, "per_entity": f.per_entity_limit,
            "any_tags": list(f.tags or ()), "no_tags": list(f.exclude_tags or ()),
            "valid_at": f.valid_at, "changed_since": f.changed_since,
        }
        out: dict[uuid.UUID, list[SemanticFact]] = {}
        async with self._read() as session:
            stmt = statements.facts_of_entities(
                include_invalidated=f.include_invalidated,
                tags=bool(f.tags),
                exclude_tags=bool(f.exclude_tags),
                valid_at=f.valid_at is not None,
                changed_since=f.changed_since is not None,
                definer=await self._definer(session),
            )
            rows = await statements.fetch(session, stmt, params)
        for row in rows:
            out.setdefault(convert._uuid(row["eid"]), []).append(convert.fact_from_row(row))
        return {i: out[i] for i in ids if i in out}

    async def extract_subgraph_native(
        self,
        seed_entity_ids: Sequence[uuid.UUID],
        *,
        max_hops: int,
        valid_at: datetime | None,
        include_invalidated: bool,
        max_entities: int,
        relation_types: Sequence[str] | None,
    ) -> SubgraphResult:
        """The whole BFS of ``extract_subgraph`` in one statement (a recursive CTE).

        One round trip whatever ``max_hops``: the visited entities with their hop, and
        the traversed edges as JSON documents on the first row. Superseded seeds are
        forwarded along their ``superseded_by`` chains in the same statement.
        """
        seeds = list(seed_entity_ids)
        if not seeds:
            return SubgraphResult()
        params = {
            "tenant": self._tenant, "seeds": seeds, "max_forward": MAX_FORWARDING_STEPS,
            "inc": include_invalidated,
            "max_entities": max_entities, "max_hops": max_hops, "valid_at": valid_at,
            "types": None if relation_types is None else list(relation_types),
        }
        async with self._read() as session:
            rows = await statements.fetch(session, statements.SUBGRAPH, params)
        # The traversed edges come on the first row only (NULL on the others).
        docs: list[dict[str, Any]] = next(
            (r["edge_docs"] for r in rows if r["edge_docs"] is not None), []
        )
        edges = [convert.relationship_from_json(d) for d in docs]
        # The rows come in the canonical order of ``sort_subgraph``: entities by (hop, id),
        # edges by (valid_from, id) (a uuid sorts as its text form).
        entities = [convert.entity_from_row(r) for r in rows]
        hops = {e.id: int(r["hop"]) for e, r in zip(entities, rows, strict=True)}
        return SubgraphResult(entities=entities, relationships=edges, hops=hops)

    async def writer_key_ids(self, idempotency_key: str) -> list[uuid.UUID] | None:
        """The fact ids recorded under ``idempotency_key``, or ``None`` when it is unused.

        One primary-key read on the primary (a replica may lag behind the write). A read
        only: lets a writer skip its work (embedding) on a repeated key before
        :meth:`put_facts_once`, which stays the authority.
        """
        k = WRITER_KEYS
        async with self._session() as session:
            found = (
                await session.execute(
                    select(k.c.fact_ids).where(
                        k.c.tenant_id == self._tenant, k.c.idempotency_key == idempotency_key
                    )
                )
            ).scalar_one_or_none()
        return None if found is None else [convert._uuid(i) for i in found]

    async def put_facts_once(
        self, idempotency_key: str, facts: Iterable[SemanticFact]
    ) -> tuple[list[uuid.UUID], bool]:
        """Write ``facts`` unless ``idempotency_key`` was already used by this tenant.

        The key row (primary key ``(tenant_id, idempotency_key)``) and the facts are
        written in one transaction. A concurrent writer with the same key blocks on the
        key row until the first commits, then writes nothing and returns the first
        writer's fact ids.

        Returns:
            The fact ids recorded under the key and whether this call wrote them.
        """
        if not isinstance(idempotency_key, str) or not idempotency_key:
            raise InvalidInputError("idempotency_key must be a non-empty string")
        if "\x00" in idempotency_key:
            raise InvalidInputError("idempotency_key must not contain NUL characters")
        if isinstance(facts, SemanticFact | Mapping | str):
            raise InvalidTypeError("expected an iterable of SemanticFact, got a single value")
        records = [validate_record(SemanticFact, f) for f in facts]
        self._precheck(records, "fact")
        ids = list(dict.fromkeys(r.id for r in records))
        k = WRITER_KEYS
        claim = (
            pg_insert(k)
            .values(
                tenant_id=self._tenant,
                idempotency_key=idempotency_key,
                fact_ids=ids,
                created_at=utc_now(),
            )
            .on_conflict_do_nothing(index_elements=[k.c.tenant_id, k.c.idempotency_key])
            .returning(k.c.idempotency_key)
        )
        # One session = one transaction (or the caller's open unit of work).
        async with self._session() as session:
            won = (await session.execute(claim)).first() is not None
            if not won:
                existing = (
                    await session.execute(
                        select(k.c.fact_ids).where(
                            k.c.tenant_id == self._tenant,
                            k.c.idempotency_key == idempotency_key,
                        )
                    )
                ).scalar_one()
                return [convert._uuid(i) for i in existing], False
            await self._checked_dim(session, records, "fact")
            await check_fact_references(session, self._tenant, records)
            await self._upsert(
                session, FACTS, [convert.fact_to_row(r, self._tenant) for r in records]
            )
        return ids, True

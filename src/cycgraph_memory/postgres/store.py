"""PostgresMemoryStore: the ``MemoryStore`` contract on Postgres with set-based SQL."""

from __future__ import annotations

import logging
import uuid
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from datetime import datetime
from typing import Any, TypeVar

from pydantic import BaseModel
from sqlalchemy import (
    ColumnElement,
    Select,
    String,
    Table,
    Uuid,
    and_,
    any_,
    bindparam,
    delete,
    func,
    not_,
    or_,
    select,
    tuple_,
    update,
)
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.ext.asyncio import AsyncSession

from cycgraph_memory._options import coerce_options
from cycgraph_memory._validate import check_bool, check_text, normalize_ts, validate_record
from cycgraph_memory.errors import (
    DanglingReferenceError,
    DuplicateRecordError,
    InvalidInputError,
    InvalidTypeError,
)
from cycgraph_memory.lifecycle.models import PurgeCandidates, PurgePlan, PurgeSelector
from cycgraph_memory.normalize import normalize_entity_name
from cycgraph_memory.postgres import convert, statements
from cycgraph_memory.postgres import lifecycle as _lifecycle
from cycgraph_memory.postgres._base import (
    DEFAULT_TENANT,
    Bind,
    PostgresBackend,
    parse_id,
    parse_ids,
)
from cycgraph_memory.postgres.definer_lookups import entity_name_key_rows
from cycgraph_memory.postgres.ingest_lookups import SETTINGS, IngestLookups
from cycgraph_memory.postgres.references import check_fact_references
from cycgraph_memory.postgres.retrieval import RetrievalQueries
from cycgraph_memory.postgres.statements import (
    ENTITIES,
    EPISODES,
    FACTS,
    MESSAGES,
    RELATIONSHIPS,
    THEMES,
    WRITER_KEYS,
    episode_messages_column,
    in_ids,
)
from cycgraph_memory.records import (
    Entity,
    EntityFilter,
    Episode,
    FactFilter,
    ListOptions,
    Message,
    Relationship,
    RelationshipFilter,
    SemanticFact,
    Theme,
    utc_now,
)
from cycgraph_memory.retry import RetryPolicy

__all__ = [
    "PostgresMemoryStore",
    "coerce_record",
    "convert_ts",
    "episode_from_result",
    "episode_messages_column",
    "in_ids",
]

_log = logging.getLogger(__name__)

_ROWS_PER_BATCH = 1_000
Options = Mapping[str, Any]
R = TypeVar("R")
M = TypeVar("M", bound=BaseModel)


def coerce_record(model: type[M], value: object) -> M:
    """Return a freshly validated ``model`` (instances are re-validated, mappings validated).

    The same check as the in-memory backend, so both refuse the same input.

    Raises:
        pydantic.ValidationError: An invalid record or mapping.
        InvalidTypeError: Anything else (also a ``TypeError``).
    """
    return validate_record(model, value)


def _records(values: object, model: type[M]) -> list[M]:
    if isinstance(values, (model, Mapping, str, bytes)) or not isinstance(values, Iterable):
        raise InvalidTypeError(
            f"expected an iterable of {model.__name__}, got {type(values).__name__}"
        )
    return [coerce_record(model, v) for v in values]


def episode_from_result(row: Mapping[str, Any]) -> Episode:
    """Build an episode from a row that carries the ``messages`` aggregate column."""
    return convert.episode_from_rows(row, row["messages"] or [])


class PostgresMemoryStore(IngestLookups, RetrievalQueries, PostgresBackend):
    """``MemoryStore`` on Postgres + pgvector, scoped to one tenant.

    Args:
        bind: An ``AsyncEngine`` or an injected ``async_sessionmaker`` (tests pass one bound
            to a single connection with ``join_transaction_mode="create_savepoint"``).
        tenant_id: Tenant whose rows this store reads and writes: 1-64 characters of
            ``[A-Za-z0-9_.:-]`` (default ``"default"``). No method reaches other tenants.
        embedding_dim: Expected embedding dimension. ``None`` (default) reads the dimension
            the schema was migrated with (once, lazily); a value that differs from the
            schema raises ``EmbeddingDimensionMismatchError`` on first use.
        retry: How idempotent calls made outside a unit of work (``put_*``,
            ``touch_facts``) are retried after a deadlock, a serialization failure or a
            lost connection (default :data:`~cycgraph_memory.retry.DEFAULT_RETRY`; pass
            ``NO_RETRY`` to surface the first error).
        read_engine: Where reads go (an ``AsyncEngine`` or sessionmaker of a streaming
            replica): gets, listings, scans and the retrieval reads, outside a unit of
            work. Writes, :meth:`transaction`, :meth:`exclusive` and every read made
            inside an open unit of work or a :meth:`reads_on_primary` block use ``bind``
            (read-your-writes). ``None`` (default): everything uses ``bind``.

    Raises:
        InvalidTenantError: The tenant id is malformed.

    Every method outside :meth:`transaction` runs in its own short transaction; inside
    ``async with store.transaction():`` every call made from the same task (context), through
    this store or any other Postgres backend object on the same bind (an index, a ledger),
    shares one session and commits or rolls back together. Do not ``gather`` store calls inside a
    transaction (one session cannot run statements concurrently).
    """

    def __init__(
        self,
        bind: Bind,
        tenant_id: str = DEFAULT_TENANT,
        embedding_dim: int | None = None,
        retry: RetryPolicy | None = None,
        *,
        read_engine: Bind | None = None,
    ) -> None:
        super().__init__(
            bind, tenant_id=tenant_id, embedding_dim=embedding_dim, retry=retry,
            read_engine=read_engine,
        )

    # ------------------------------------------------------------------ helpers

    def _mine(self, table: Table) -> ColumnElement[bool]:
        return table.c.tenant_id == self._tenant

    def _precheck(self, records: Sequence[Any], kind: str) -> None:
        # With a known dimension (configured or cached) bad vectors never reach the database.
        dim = self._known_dim()
        for r in records:
            self._check_vector(getattr(r, "embedding", None), dim, f"{kind} {r.id}")

    async def _checked_dim(self, session: AsyncSession, records: Sequence[Any], kind: str) -> None:
        # Validate against the schema's dimension before any write.
        vectors = [(r.id, getattr(r, "embedding", None)) for r in records]
        if self._schema_dim is None and all(v is None for _, v in vectors):
            return
        dim = await self._dim(session)
        for rid, vector in vectors:
            self._check_vector(vector, dim, f"{kind} {rid}")

    async def _upsert(
        self, session: AsyncSession, table: Table, rows: list[dict[str, Any]]
    ) -> None:
        await self._upsert_rows(session, table, rows, report_replaced=False)

    async def _upsert_rows(
        self,
        session: AsyncSession,
        table: Table,
        rows: list[dict[str, Any]],
        *,
        report_replaced: bool,
    ) -> list[Any]:
        """Insert or replace ``rows``; with ``report_replaced``, the ids that were stored."""
        if not rows:
            return []
        # Later duplicates win, like successive put_* calls (and one statement must not
        # touch a row twice). Rows go in key order so that concurrent upserts lock them in
        # the same order and cannot deadlock each other.
        unique = sorted({row["id"]: row for row in rows}.values(), key=lambda row: row["id"])
        stmt = statements.upsert(table.name, report_replaced=report_replaced)
        replaced: list[Any] = []
        # executemany: SQLAlchemy compiles the statement once (cached) and the driver sends
        # the rows in batches, well under the 32,767 bind-parameter limit per statement.
        for start in range(0, len(unique), _ROWS_PER_BATCH):
            result = await session.execute(stmt, unique[start : start + _ROWS_PER_BATCH])
            if report_replaced:
                replaced.extend(row_id for row_id, was_stored in result.all() if was_stored)
        return replaced

    async def _put(
        self,
        table: Table,
        records: Iterable[Any],
        to_row: Callable[[Any, str], dict[str, Any]],
        kind: str,
        cls: type,
    ) -> None:
        items: list[Any] = _records(records, cls)
        if not items:
            return
        self._precheck(items, kind)
        rows = [to_row(r, self._tenant) for r in items]

        async def work(session: AsyncSession) -> None:
            await self._checked_dim(session, items, kind)
            if cls is Relationship:
                await self._check_endpoints(session, items)
            elif cls is SemanticFact:
                await check_fact_references(session, self._tenant, items)
            await self._upsert(session, table, rows)

        await self._run(work, f"put {kind}s")

    async def _check_endpoints(
        self, session: AsyncSession, relationships: Sequence[Relationship]
    ) -> None:
        # The foreign keys refuse a dangling edge anyway (23503, translated); checking first
        # names the missing ids, like the in-memory backend.
        wanted = list(
            dict.fromkeys(eid for r in relationships for eid in (r.source_id, r.target_id))
        )
        t = ENTITIES
        stmt = select(t.c.id).where(self._mine(t), in_ids(t.c.id, wanted))
        found = {convert._uuid(i) for i in (await session.execute(stmt)).scalars()}
        missing = [eid for eid in wanted if eid not in found]
        if missing:
            raise DanglingReferenceError(
                "relationship endpoints are not entities of this store: "
                + ", ".join(str(m) for m in missing),
                missing_ids=list(missing),
            )

    async def _delete_cited(
        self, table: Table, record_id: Any, unlink: Callable[[uuid.UUID], Any]
    ) -> bool:
        # Delete the row, then take its id out of the facts that cite it (one transaction;
        # the delete first, so it waits for writers holding the row FOR KEY SHARE and the
        # UPDATE, a new statement, sees the facts they committed).
        rid = parse_id(record_id)
        stmt = delete(table).where(self._mine(table), table.c.id == rid).returning(table.c.id)

        async def work(session: AsyncSession) -> bool:
            if (await session.execute(stmt)).first() is None:
                return False
            await session.execute(unlink(rid))
            return True

        return await self._run(work, f"delete {table.name}")

    def _unlink_entity(self, rid: uuid.UUID) -> Any:
        t = FACTS
        return (
            update(t)
            .where(self._mine(t), t.c.entity_ids.contains([rid]))
            .values(entity_ids=func.array_remove(t.c.entity_ids, rid))
        )

    def _unlink_episode(self, rid: uuid.UUID) -> Any:
        t = FACTS
        return (
            update(t)
            .where(self._mine(t), t.c.source_episode_ids.contains([rid]))
            .values(source_episode_ids=func.array_remove(t.c.source_episode_ids, rid))
        )

    def _unlink_theme(self, rid: uuid.UUID) -> Any:
        t = FACTS
        return update(t).where(self._mine(t), t.c.theme_id == rid).values(theme_id=None)

    async def _get_many(
        self, table: Table, ids: Iterable[Any], from_row: Callable[[Any], R]
    ) -> dict[uuid.UUID, R]:
        wanted = parse_ids(ids)
        if not wanted:
            return {}
        async with self._read() as session:
            rows = await statements.fetch(
                session, statements.by_ids(table.name), {"tenant": self._tenant, "ids": wanted}
            )
        found = {convert._uuid(row["id"]): from_row(row) for row in rows}
        return {i: found[i] for i in wanted if i in found}

    async def _get_one(
        self, table: Table, record_id: Any, from_row: Callable[[Any], R]
    ) -> R | None:
        rid = parse_id(record_id)
        async with self._read() as session:
            rows = await statements.fetch(
                session, statements.by_ids(table.name), {"tenant": self._tenant, "ids": [rid]}
            )
        return from_row(rows[0]) if rows else None

    async def _list(self, stmt: Select[Any], from_row: Callable[[Any], R]) -> list[R]:
        async with self._read() as session:
            rows = (await session.execute(stmt)).mappings().all()
        return [from_row(row) for row in rows]

    async def _delete(self, table: Table, record_id: Any) -> bool:
        rid = parse_id(record_id)
        stmt = delete(table).where(self._mine(table), table.c.id == rid).returning(table.c.id)
        async with self._session() as session:
            return (await session.execute(stmt)).first() is not None

    @staticmethod
    def _page(stmt: Select[Any], limit: int | None, offset: int) -> Select[Any]:
        if offset:
            stmt = stmt.offset(offset)
        if limit is not None:
            stmt = stmt.limit(limit)
        return stmt

    # ------------------------------------------------------------------ entities

    async def put_entity(self, entity: Entity) -> None:
        """Insert or replace one entity."""
        await self.put_entities([entity])

    async def put_entities(self, entities: Iterable[Entity]) -> None:
        """Insert or replace many entities (multi-row upserts, chunked)."""
        await self._put(ENTITIES, entities, convert.entity_to_row, "entity", Entity)

    async def get_entity(self, entity_id: uuid.UUID | str) -> Entity | None:
        """Return the entity (even when invalidated) or ``None``."""
        return await self._get_one(ENTITIES, entity_id, convert.entity_from_row)

    async def get_entities(self, ids: Iterable[uuid.UUID | str]) -> dict[uuid.UUID, Entity]:
        """Batch get in one round trip; missing ids are absent."""
        return await self._get_many(ENTITIES, ids, convert.entity_from_row)

    async def find_entities(
        self, filter: EntityFilter | Options | None = None, /, **options: Any
    ) -> list[Entity]:
        """List entities matching the filter, ordered by ``(created_at, id)``."""
        f = coerce_options(EntityFilter, filter, options)
        t = ENTITIES
        stmt = select(t).where(self._mine(t))
        if f.entity_type is not None:
            stmt = stmt.where(t.c.entity_type == f.entity_type)
        if not f.include_invalidated:
            stmt = stmt.where(t.c.invalidated_at.is_(None))
        stmt = self._page(stmt.order_by(t.c.created_at, t.c.id), f.limit, f.offset)
        return await self._list(stmt, convert.entity_from_row)

    async def delete_entity(self, entity_id: uuid.UUID | str) -> bool:
        """Hard-delete an entity and every relationship touching it; True when it existed.

        The edges go in the same statement, through the foreign keys' ``ON DELETE CASCADE``;
        the entity's id leaves the ``entity_ids`` of every fact citing it (same transaction).
        """
        return await self._delete_cited(ENTITIES, entity_id, self._unlink_entity)

    # ------------------------------------------------------------------ relationships

    async def put_relationship(self, relationship: Relationship) -> None:
        """Insert or replace one relationship."""
        await self.put_relationships([relationship])

    async def put_relationships(self, relationships: Iterable[Relationship]) -> None:
        """Insert or replace many relationships (multi-row upserts, chunked).

        Raises:
            DanglingReferenceError: An endpoint is not an entity of this tenant (nothing
                is written).
        """
        await self._put(
            RELATIONSHIPS, relationships, convert.relationship_to_row, "relationship", Relationship
        )

    async def get_relationship(self, relationship_id: uuid.UUID | str) -> Relationship | None:
        """Return the relationship or ``None``."""
        return await self._get_one(RELATIONSHIPS, relationship_id, convert.relationship_from_row)

    async def get_relationships(
        self, ids: Iterable[uuid.UUID | str]
    ) -> dict[uuid.UUID, Relationship]:
        """Batch get in one round trip; missing ids are absent."""
        return await self._get_many(RELATIONSHIPS, ids, convert.relationship_from_row)

    async def get_relationships_for_entity(
        self,
        entity_id: uuid.UUID | str,
        filter: RelationshipFilter | Options | None = None,
        /,
        **options: Any,
    ) -> list[Relationship]:
        """Edges touching an entity, ordered by ``(valid_from, id)``."""
        eid = parse_id(entity_id)
        f = coerce_options(RelationshipFilter, filter, options)
        t = RELATIONSHIPS
        stmt = select(t).where(self._mine(t))
        if f.direction == "outgoing":
            stmt = stmt.where(t.c.source_id == eid)
        elif f.direction == "incoming":
            stmt = stmt.where(t.c.target_id == eid)
        else:
            stmt = stmt.where(or_(t.c.source_id == eid, t.c.target_id == eid))
        if f.relation_type is not None:
            stmt = stmt.where(t.c.relation_type == f.relation_type)
        if not f.include_invalidated:
            stmt = stmt.where(t.c.invalidated_by.is_(None))
        stmt = self._page(stmt.order_by(t.c.valid_from, t.c.id), f.limit, f.offset)
        return await self._list(stmt, convert.relationship_from_row)

    async def delete_relationship(self, relationship_id: uuid.UUID | str) -> bool:
        """Hard-delete a relationship; True when it existed."""
        return await self._delete(RELATIONSHIPS, relationship_id)

    # ------------------------------------------------------------------ episodes

    async def put_episode(self, episode: Episode) -> None:
        """Insert or replace one episode with its messages."""
        await self.put_episodes([episode])

    async def put_episodes(self, episodes: Iterable[Episode]) -> None:
        """Insert or replace many episodes; their message rows are replaced wholesale.

        A message written without a vector keeps the one stored for it (as in memory):
        episode reads carry no message vectors, so an episode read, changed and written
        back (the consolidator's soft prune) must not lose them.

        Raises:
            DuplicateRecordError: A message id appears in two episodes of the call or is
                already stored in another episode of the tenant (``UNIQUE (tenant_id,
                id)``); nothing is written. Both are found before any write, so inside an
                open unit of work the error leaves the transaction usable (as in memory).
        """
        items = _records(episodes, Episode)
        if not items:
            return
        latest = sorted({e.id: e for e in items}.values(), key=lambda e: e.id)
        messages = [m for e in latest for m in e.messages]
        self._precheck(latest, "episode")
        self._precheck(messages, "message")
        owner: dict[uuid.UUID, uuid.UUID] = {}
        for e in latest:
            for m in e.messages:
                if owner.setdefault(m.id, e.id) != e.id:
                    raise DuplicateRecordError(
                        f"message {m.id} appears in episodes {owner[m.id]} and {e.id} "
                        "of one write"
                    )

        async def work(session: AsyncSession) -> None:
            await self._checked_dim(session, latest, "episode")
            await self._checked_dim(session, messages, "message")
            if messages:
                # A failed statement would abort an enclosing unit of work: look first.
                taken = (
                    await session.execute(
                        select(MESSAGES.c.id, MESSAGES.c.episode_id)
                        .where(
                            self._mine(MESSAGES),
                            in_ids(MESSAGES.c.id, list(owner)),
                            not_(in_ids(MESSAGES.c.episode_id, [e.id for e in latest])),
                        )
                        .order_by(MESSAGES.c.id)
                        .limit(1)
                    )
                ).first()
                if taken is not None:
                    raise DuplicateRecordError(
                        f"message {convert._uuid(taken[0])} is already stored in episode "
                        f"{convert._uuid(taken[1])}"
                    )
            replaced = await self._upsert_rows(
                session,
                EPISODES,
                [convert.episode_to_row(e, self._tenant) for e in latest],
                report_replaced=True,
            )
            # Only an episode that was already stored has message rows to replace: a new
            # one (every episode of an ingest) costs no DELETE, so no statement trigger of
            # the BM25 statistics runs over an empty set of rows (it scanned the terms).
            stored_vectors: dict[Any, Any] = {}
            if replaced:
                gone = await session.execute(
                    delete(MESSAGES)
                    .where(self._mine(MESSAGES), in_ids(MESSAGES.c.episode_id, replaced))
                    .returning(MESSAGES.c.id, MESSAGES.c.embedding)
                )
                stored_vectors = {i: v for i, v in gone if v is not None}
            rows = [r for e in latest for r in convert.messages_to_rows(e, self._tenant)]
            if stored_vectors:
                for row in rows:
                    if row["embedding"] is None and row["id"] in stored_vectors:
                        row["embedding"] = stored_vectors[row["id"]]
            for start in range(0, len(rows), _ROWS_PER_BATCH):
                await session.execute(
                    statements.insert_messages(), rows[start : start + _ROWS_PER_BATCH]
                )

        await self._run(work, "put episodes")

    async def get_episode(self, episode_id: uuid.UUID | str) -> Episode | None:
        """Return the episode (with its messages) or ``None``."""
        return await self._get_one(EPISODES, episode_id, episode_from_result)

    async def get_episodes(self, ids: Iterable[uuid.UUID | str]) -> dict[uuid.UUID, Episode]:
        """Batch get (episodes and messages) in one round trip; missing ids are absent."""
        return await self._get_many(EPISODES, ids, episode_from_result)

    async def list_episodes(
        self, options: ListOptions | Options | None = None, /, **kwargs: Any
    ) -> list[Episode]:
        """List episodes ordered by ``(started_at, id)``."""
        o = coerce_options(ListOptions, options, kwargs)
        t = EPISODES
        stmt = select(t, episode_messages_column()).where(self._mine(t))
        if not o.include_invalidated:
            stmt = stmt.where(t.c.invalidated_at.is_(None))
        stmt = self._page(stmt.order_by(t.c.started_at, t.c.id), o.limit, o.offset)
        return await self._list(stmt, episode_from_result)

    async def get_messages(self, ids: Iterable[uuid.UUID | str]) -> dict[uuid.UUID, Message]:
        """Batch get of stored messages (inside this tenant's episodes); missing ids absent."""
        wanted = parse_ids(ids)
        if not wanted:
            return {}
        async with self._read() as session:
            rows = await statements.fetch(
                session, statements.messages_by_ids(), {"tenant": self._tenant, "ids": wanted}
            )
        found = {convert._uuid(r["id"]): convert.message_from_row(r) for r in rows}
        return {i: found[i] for i in wanted if i in found}

    async def delete_episode(self, episode_id: uuid.UUID | str) -> bool:
        """Hard-delete an episode and its messages; True when it existed.

        The episode's id leaves the ``source_episode_ids`` of every fact citing it.
        """
        return await self._delete_cited(EPISODES, episode_id, self._unlink_episode)

    # ------------------------------------------------------------------ facts

    async def put_fact(self, fact: SemanticFact) -> None:
        """Insert or replace one fact."""
        await self.put_facts([fact])

    async def put_facts(self, facts: Iterable[SemanticFact]) -> None:
        """Insert or replace many facts (multi-row upserts of up to 1,000 rows each).

        Raises:
            DanglingReferenceError: A fact cites an entity, episode or theme id that is
                not a record of this tenant (nothing is written).
        """
        await self._put(FACTS, facts, convert.fact_to_row, "fact", SemanticFact)

    async def get_fact(self, fact_id: uuid.UUID | str) -> SemanticFact | None:
        """Return the fact (even when invalidated) or ``None``."""
        return await self._get_one(FACTS, fact_id, convert.fact_from_row)

    async def get_facts(self, ids: Iterable[uuid.UUID | str]) -> dict[uuid.UUID, SemanticFact]:
        """Batch get in one round trip; missing ids are absent."""
        return await self._get_many(FACTS, ids, convert.fact_from_row)

    async def get_facts_for_update(
        self, ids: Iterable[uuid.UUID | str]
    ) -> dict[uuid.UUID, SemanticFact]:
        """:meth:`get_facts` on the primary, the rows locked until the unit of work ends.

        For a pass that re-reads records before writing them back (the retention gate):
        inside ``transaction()`` / ``exclusive()`` no other transaction can commit a
        change to these facts until the pass commits, so its write cannot undo one.
        Outside a unit of work the lock ends with the read (no effect).
        """
        wanted = parse_ids(ids)
        if not wanted:
            return {}
        async with self._session() as session:
            rows = await statements.fetch(
                session, statements.facts_for_update(), {"tenant": self._tenant, "ids": wanted}
            )
        found = {convert._uuid(row["id"]): convert.fact_from_row(row) for row in rows}
        return {i: found[i] for i in wanted if i in found}

    async def find_facts(
        self, filter: FactFilter | Options | None = None, /, **options: Any
    ) -> list[SemanticFact]:
        """List facts matching the filter, ordered by ``(valid_from, id)``.

        ``tags`` (any-of, ``tags && :tags``), ``exclude_tags`` (``NOT (tags && :ex)``) and
        ``entity_id`` (``entity_ids @> ARRAY[:id]``) run in SQL on GIN indexes.
        """
        f = coerce_options(FactFilter, filter, options)
        stmt = statements.fact_listing(
            include_invalidated=f.include_invalidated,
            theme=f.theme_id is not None,
            entity=f.entity_id is not None,
            tags=bool(f.tags),
            exclude_tags=bool(f.exclude_tags),
        )
        params = {
            "tenant": self._tenant, "limit": f.limit, "offset": f.offset,
            "theme_id": f.theme_id, "entity_id": f.entity_id,
            "any_tags": list(f.tags or ()), "no_tags": list(f.exclude_tags or ()),
        }
        async with self._read() as session:
            rows = await statements.fetch(session, stmt, params)
        return [convert.fact_from_row(r) for r in rows]

    async def delete_fact(self, fact_id: uuid.UUID | str) -> bool:
        """Hard-delete a fact; True when it existed."""
        return await self._delete(FACTS, fact_id)

    async def list_and_touch_facts(
        self,
        *,
        tags: Sequence[str],
        exclude_tags: Sequence[str] | None,
        include_invalidated: bool,
        limit: int,
        at: datetime | None = None,
    ) -> list[SemanticFact]:
        """``find_facts(tags=..., limit=...)`` and ``touch_facts`` of what it lists, in one.

        One statement on the primary (a data-modifying CTE); the facts show the counters
        as read, before the touch. With a read engine the listing is read there and the
        touch is a second statement on the primary. Used by ``retrieve_memory``'s tag path.
        """
        f = FactFilter(
            tags=list(tags), exclude_tags=None if exclude_tags is None else list(exclude_tags),
            include_invalidated=include_invalidated, limit=limit,
        )
        if not f.tags or self._read_sessionmaker is not None:
            facts = await self.find_facts(f)
            await self.touch_facts([x.id for x in facts], at)
            return facts
        when = utc_now() if at is None else convert_ts(at)
        stmt = statements.fact_listing_touched(
            include_invalidated=f.include_invalidated, exclude_tags=bool(f.exclude_tags)
        )
        params = {
            "tenant": self._tenant, "limit": f.limit, "offset": 0, "at": when,
            "any_tags": list(f.tags), "no_tags": list(f.exclude_tags or ()),
        }

        async def work(session: AsyncSession) -> list[SemanticFact]:
            rows = await statements.fetch(session, stmt, params)
            return [convert.fact_from_row(r) for r in rows]

        return await self._run(work, "list and touch facts")

    async def expand_facts(
        self,
        entity_ids: Sequence[uuid.UUID],
        *,
        include_invalidated: bool,
        entity_types: Sequence[str] | None,
        relationship_limit: int | None,
        touch: Sequence[uuid.UUID] = (),
        at: datetime | None = None,
        episode_ids: Sequence[uuid.UUID] = (),
        theme_ids: Sequence[uuid.UUID] = (),
        entity_limit: int | None = None,
    ) -> tuple[
        dict[uuid.UUID, Entity], list[Relationship], bool, dict[uuid.UUID, Episode],
        dict[uuid.UUID, Theme],
    ]:
        """``get_entities`` + ``get_relationships_for_entities`` (+ ``touch_facts``) at once.

        ``retrieve_memory``'s expansion of the served facts in one statement
        (:func:`~cycgraph_memory.postgres.statements.expansion`): the entities of
        ``entity_ids`` that are live (unless ``include_invalidated``) and of
        ``entity_types`` (when given), the first ``entity_limit`` of them in the order of
        ``entity_ids`` (``None``: all); the relationships (``(valid_from, id)`` order, at
        most ``relationship_limit``; unless ``include_invalidated``, live ones whose
        endpoints are both live entities, filtered before that limit) touching any of
        those entities (not only the first ``entity_limit``); the touch of the facts
        ``touch``; the episodes ``episode_ids`` (as ``get_episodes``); and the themes
        ``theme_ids`` (as ``get_themes``: in the same statement when there is no entity
        to expand, :func:`~cycgraph_memory.postgres.statements.served_expansion`, which is
        how the entity path of ``retrieve_memory`` calls it; in a second one otherwise).
        With a read engine the reads run there and the touch is left to the caller (on
        the primary).

        Returns:
            The entities by id, the relationships, whether ``touch`` was touched, the
            episodes by id and the themes by id (missing ids absent).
        """
        can_touch = bool(touch) and self._read_sessionmaker is None
        if not entity_ids and not can_touch and not episode_ids and not theme_ids:
            return {}, [], False, {}, {}
        served_only = not entity_ids
        if served_only:  # nothing to expand: the themes, the episodes and the touch
            stmt = statements.served_expansion(touch=can_touch, episodes=bool(episode_ids))
        else:
            stmt = statements.expansion(
                touch=can_touch, include_invalidated=include_invalidated,
                entity_types=entity_types is not None, episodes=bool(episode_ids),
            )
        params: dict[str, Any] = {
            "tenant": self._tenant, "ids": list(entity_ids), "entity_limit": entity_limit,
            "rel_limit": relationship_limit,
            "entity_types": None if entity_types is None else list(entity_types),
            "served": list(touch), "at": utc_now() if at is None else convert_ts(at),
            "episode_ids": list(episode_ids), "theme_ids": list(theme_ids),
        }

        async def work(session: AsyncSession) -> Sequence[Any]:
            return await statements.fetch(session, stmt, params)

        if can_touch:
            rows = await self._run(work, "expand and touch facts")
        else:
            async with self._read() as session:
                rows = await work(session)
        entities: dict[uuid.UUID, Entity] = {}
        relationships: list[Relationship] = []
        themes: dict[uuid.UUID, Theme] = {}
        if served_only:  # one row per theme (a row of NULLs without one)
            themes = {
                convert._uuid(r["id"]): convert.theme_from_row(r)
                for r in rows if r["id"] is not None
            }
            carrier = rows[0] if rows else None
        else:
            entities = {
                convert._uuid(r["id"]): convert.entity_from_row(r)
                for r in rows if r["id"] is not None
            }
            # The aggregated arrays come on one row (the first), NULL on the others.
            carrier = next((r for r in rows if r["relationships"] is not None), None)
            if carrier is not None:
                relationships = [
                    convert.relationship_from_json(x) for x in carrier["relationships"]
                ]
            if theme_ids:
                themes = await self.get_themes(theme_ids)
        episodes: dict[uuid.UUID, Episode] = {}
        if episode_ids and carrier is not None:
            found = {
                e.id: e for e in (convert.episode_from_json(x) for x in carrier["episodes"])
            }
            episodes = {i: found[i] for i in episode_ids if i in found}
        return entities, relationships, can_touch, episodes, themes

    async def touch_facts(
        self, ids: Iterable[uuid.UUID | str], at: datetime | None = None
    ) -> None:
        """Increment ``access_count`` and set ``last_accessed_at`` in one UPDATE.

        Each distinct id counts once per call; unknown ids are ignored. The count
        saturates at ``MAX_ACCESS_COUNT`` (the column is 64-bit).
        """
        wanted = parse_ids(ids)
        if not wanted:
            return
        when = utc_now() if at is None else convert_ts(at)
        params = {"tenant": self._tenant, "ids": wanted, "at": when}

        async def work(session: AsyncSession) -> None:
            await session.execute(statements.TOUCH_FACTS, params)

        await self._run(work, "touch facts")

    # ------------------------------------------------------------------ themes

    async def put_theme(self, theme: Theme) -> None:
        """Insert or replace one theme."""
        await self.put_themes([theme])

    async def put_themes(self, themes: Iterable[Theme]) -> None:
        """Insert or replace many themes (multi-row upserts, chunked)."""
        await self._put(THEMES, themes, convert.theme_to_row, "theme", Theme)

    async def get_theme(self, theme_id: uuid.UUID | str) -> Theme | None:
        """Return the theme or ``None``."""
        return await self._get_one(THEMES, theme_id, convert.theme_from_row)

    async def get_themes(self, ids: Iterable[uuid.UUID | str]) -> dict[uuid.UUID, Theme]:
        """Batch get in one round trip; missing ids are absent."""
        return await self._get_many(THEMES, ids, convert.theme_from_row)

    async def list_themes(
        self, options: ListOptions | Options | None = None, /, **kwargs: Any
    ) -> list[Theme]:
        """List themes ordered by ``(provenance.created_at, id)``."""
        o = coerce_options(ListOptions, options, kwargs)
        t = THEMES
        stmt = select(t).where(self._mine(t))
        if not o.include_invalidated:
            stmt = stmt.where(t.c.invalidated_at.is_(None))
        stmt = self._page(stmt.order_by(t.c.created_at, t.c.id), o.limit, o.offset)
        return await self._list(stmt, convert.theme_from_row)

    async def delete_theme(self, theme_id: uuid.UUID | str) -> bool:
        """Hard-delete a theme; True when it existed. Facts of the theme get no theme."""
        return await self._delete_cited(THEMES, theme_id, self._unlink_theme)

    # ------------------------------------------------------------------ lifecycle

    async def clear(self) -> None:
        """Delete every row of this tenant (other tenants are untouched)."""
        async with self._session() as session:
            for table in (MESSAGES, EPISODES, FACTS, THEMES, RELATIONSHIPS, ENTITIES, WRITER_KEYS,
                          SETTINGS):
                await session.execute(delete(table).where(self._mine(table)))


    # ------------------------------------------------------------------ erasure (lifecycle)

    async def purge_candidates(self, selector: PurgeSelector) -> PurgeCandidates:
        """Every row a purge selector might touch (see ``postgres/lifecycle.py``)."""
        return await _lifecycle.purge_candidates(self, selector)

    async def apply_purge(self, plan: PurgePlan) -> None:
        """Apply a purge plan; use ``cycgraph_memory.lifecycle.purge`` rather than this."""
        async with self.transaction():
            await _lifecycle.apply_purge(self, plan)

    async def write_embeddings(
        self, kind: str, vectors: Mapping[uuid.UUID, list[float]], *, target: str = "current"
    ) -> int:
        """Overwrite only the vectors of ``kind`` rows (used by ``lifecycle.reembed``)."""
        return await _lifecycle.write_embeddings(self, kind, vectors, target=target)

    async def recompute_theme_centroids(self, *, target: str = "current") -> int:
        """Re-centre every theme on its live member facts' vectors (used by ``reembed``)."""
        return await _lifecycle.recompute_theme_centroids(self, target=target)

    async def write_batch(
        self, kind: str, records: Sequence[Any], *, validated: bool = False,
        theme_references: bool = True,
    ) -> dict[str, int]:
        """Upsert a batch with COPY, validated like ``put_*`` (used by ``import_``).

        ``validated=True``: the records are fresh instances the caller just built by
        validation (``import_`` parses them from JSON); they are not validated again.
        ``theme_references=False``: a fact's theme is left for the caller to check.
        """
        from cycgraph_memory.postgres.bulk import write_batch

        return await write_batch(
            self, kind, records, validated=validated, theme_references=theme_references
        )

    def in_transaction(self) -> bool:
        """Whether this task has a unit of work open on this store's bind."""
        return self._active_session() is not None

    def deferred_vector_indexes(
        self, tables: Sequence[str]
    ) -> AbstractAsyncContextManager[list[str]]:
        """Drop the HNSW indexes of ``tables`` for a block, rebuild them after (bulk loads)."""
        from cycgraph_memory.postgres.bulk import deferred_vector_indexes

        return deferred_vector_indexes(self, tables)

    async def vector_rows_estimate(self, tables: Sequence[str]) -> int:
        """Rows of ``tables`` in the whole deployment (planner statistics)."""
        from cycgraph_memory.postgres.bulk import vector_rows_estimate

        return await vector_rows_estimate(self, tables)

    # ------------------------------------------------------------------ batched lookups
    # (used by entity resolution and ingest-time resolution)

    async def find_facts_for_entities(
        self, entity_ids: Iterable[uuid.UUID | str], *, include_invalidated: bool = False
    ) -> list[SemanticFact]:
        """Facts mentioning any of ``entity_ids`` (``entity_ids && :ids`` on the GIN index).

        Ordered by ``(valid_from, id)``.
        """
        include_invalidated = check_bool(include_invalidated, "include_invalidated")
        wanted = parse_ids(entity_ids)
        if not wanted:
            return []
        t = FACTS
        ids = bindparam(None, list(wanted), type_=ARRAY(Uuid(as_uuid=True)))
        stmt = select(t).where(self._mine(t), t.c.entity_ids.overlap(ids))
        if not include_invalidated:
            stmt = stmt.where(t.c.invalidated_by.is_(None))
        return await self._list(stmt.order_by(t.c.valid_from, t.c.id), convert.fact_from_row)

    async def find_relationships_for_entities(
        self, entity_ids: Iterable[uuid.UUID | str], *, include_invalidated: bool = False
    ) -> list[Relationship]:
        """Edges with either endpoint in ``entity_ids``, ordered by ``(valid_from, id)``."""
        include_invalidated = check_bool(include_invalidated, "include_invalidated")
        wanted = parse_ids(entity_ids)
        if not wanted:
            return []
        t = RELATIONSHIPS
        stmt = select(t).where(
            self._mine(t), or_(in_ids(t.c.source_id, wanted), in_ids(t.c.target_id, wanted))
        )
        if not include_invalidated:
            stmt = stmt.where(t.c.invalidated_by.is_(None))
        return await self._list(
            stmt.order_by(t.c.valid_from, t.c.id), convert.relationship_from_row
        )

    async def find_entities_by_name_keys(
        self, keys: Iterable[tuple[str, str]]
    ) -> list[Entity]:
        """Live entities whose ``(normalize_entity_name(name), entity_type)`` is in ``keys``.

        One query on the ``(tenant_id, entity_type, name_key)`` index: ``name_key`` is
        ``normalize_entity_name(name)``, written with every entity (migration 0017); the
        key is checked again on the rows read (a key stored by an older normalisation
        finds nothing new). Ordered by ``(created_at, id)``.
        """
        # A key holding a NUL or a lone surrogate names no storable entity: it matches
        # nothing (as in memory) instead of failing the statement in the driver.
        wanted = {
            (name, etype)
            for name, etype in ((str(n), str(t)) for n, t in keys)
            if _storable(name) and _storable(etype)
        }
        if not wanted:
            return []
        t = ENTITIES
        type_list = bindparam(None, sorted({t for _, t in wanted}), type_=ARRAY(String()))
        key_list = bindparam(None, sorted({n for n, _ in wanted}), type_=ARRAY(String()))
        async with self._read() as session:
            if await self._definer(session):
                # A role under row-level security: the ids through migration 0016's
                # function (which compares 0017's column).
                found: ColumnElement[bool] = t.c.id.in_(entity_name_key_rows(type_list, key_list))
            else:
                found = and_(t.c.entity_type == any_(type_list), t.c.name_key == any_(key_list))
            stmt = select(t).where(self._mine(t), t.c.invalidated_at.is_(None), found)
            result = await session.execute(stmt.order_by(t.c.created_at, t.c.id))
            rows = [convert.entity_from_row(r) for r in result.mappings()]
        return [e for e in rows if (normalize_entity_name(e.name), e.entity_type) in wanted]


    async def record_counts(self, *, candidate_tag: str = "candidate", top: int = 20) -> Any:
        """Counts per record type, facts per tag and pending candidates, in the database.

        Used by :func:`cycgraph_memory.inspection.memory_stats` instead of a scan.
        """
        from cycgraph_memory.postgres.stats import record_counts

        return await record_counts(self, candidate_tag=candidate_tag, top=top)

    async def scan_facts(
        self,
        filter: FactFilter | Options | None = None,
        /,
        *,
        page_size: int = 1000,
        **options: Any,
    ) -> AsyncIterator[list[SemanticFact]]:
        """Every fact matching the filter, in pages, ``(valid_from, id)`` order.

        Keyset pagination (``(valid_from, id) > last``) on the ``(tenant, valid_from, id)``
        index: each page costs the same however deep the scan is. ``limit`` / ``offset``
        are ignored.
        """
        f = coerce_options(FactFilter, filter, options)
        if page_size < 1:
            raise InvalidInputError("page_size must be >= 1")
        t = FACTS
        base = select(t).where(self._mine(t))
        if not f.include_invalidated:
            base = base.where(t.c.invalidated_by.is_(None))
        if f.theme_id is not None:
            base = base.where(t.c.theme_id == f.theme_id)
        if f.entity_id is not None:
            base = base.where(t.c.entity_ids.contains([f.entity_id]))
        if f.tags:
            base = base.where(t.c.tags.overlap(list(f.tags)))
        if f.exclude_tags:
            base = base.where(not_(t.c.tags.overlap(list(f.exclude_tags))))
        last: tuple[datetime, uuid.UUID] | None = None
        while True:
            stmt = base
            if last is not None:
                stmt = stmt.where(tuple_(t.c.valid_from, t.c.id) > tuple_(*last))
            page = await self._list(
                stmt.order_by(t.c.valid_from, t.c.id).limit(page_size), convert.fact_from_row
            )
            if page:
                yield page
            if len(page) < page_size:
                return
            last = (page[-1].valid_from, page[-1].id)

    async def scan_entities(
        self,
        filter: EntityFilter | Options | None = None,
        /,
        *,
        page_size: int = 1000,
        **options: Any,
    ) -> AsyncIterator[list[Entity]]:
        """Every entity matching the filter, in pages, ``(created_at, id)`` order (keyset)."""
        f = coerce_options(EntityFilter, filter, options)
        if page_size < 1:
            raise InvalidInputError("page_size must be >= 1")
        t = ENTITIES
        base = select(t).where(self._mine(t))
        if f.entity_type is not None:
            base = base.where(t.c.entity_type == f.entity_type)
        if not f.include_invalidated:
            base = base.where(t.c.invalidated_at.is_(None))
        last: tuple[datetime, uuid.UUID] | None = None
        while True:
            stmt = base
            if last is not None:
                stmt = stmt.where(tuple_(t.c.created_at, t.c.id) > tuple_(*last))
            page = await self._list(
                stmt.order_by(t.c.created_at, t.c.id).limit(page_size), convert.entity_from_row
            )
            if page:
                yield page
            if len(page) < page_size:
                return
            last = (page[-1].created_at, page[-1].id)


def _storable(text: str) -> bool:
    """Whether Postgres can hold ``text`` (no NUL, no lone surrogate)."""
    try:
        check_text(text)
    except ValueError:
        return False
    return True


def convert_ts(value: object) -> datetime:
    """Normalise a datetime to aware UTC (naive input is assumed to be UTC).

    Raises:
        InvalidTypeError: ``value`` is not a datetime.
        InvalidInputError: It cannot be represented in UTC.
    """
    return normalize_ts(value)

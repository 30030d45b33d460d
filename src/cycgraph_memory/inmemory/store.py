"""In-process :class:`~cycgraph_memory.contracts.MemoryStore` backed by dictionaries.

Suitable for tests and lightweight single-process use. Every record is stored and handed
out as a deep copy, so mutating an argument after ``put_*`` or a returned record never
changes the store. Stored records are never mutated in place (updates replace them),
which is what makes the cheap journal-based :meth:`InMemoryMemoryStore.transaction`
correct.
"""

from __future__ import annotations

import asyncio
import heapq
import uuid
from array import array
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from contextvars import ContextVar
from datetime import datetime
from typing import Any, TypeVar

from cycgraph_memory._ids import parse_id, parse_ids
from cycgraph_memory._options import coerce_options
from cycgraph_memory._validate import (
    check_bool,
    check_dimensions,
    check_lock_name,
    normalize_ts,
)
from cycgraph_memory.errors import (
    DanglingReferenceError,
    DuplicateRecordError,
    InvalidInputError,
    InvalidTypeError,
)
from cycgraph_memory.inmemory import lifecycle as _lifecycle
from cycgraph_memory.inmemory._common import (
    check_dimension,
    coerce_record,
    compact_record,
    copy_record,
)
from cycgraph_memory.inmemory._ingest_lookups import InMemoryIngestLookups
from cycgraph_memory.inmemory._journal import Journal, JournaledDict, Unit
from cycgraph_memory.inmemory._lookup import StoreLookups
from cycgraph_memory.lifecycle.models import PurgeCandidates, PurgePlan, PurgeSelector
from cycgraph_memory.records import (
    MAX_ACCESS_COUNT,
    Entity,
    EntityFactsFilter,
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
from cycgraph_memory.temporal import is_changed_since, is_valid_at

__all__ = ["InMemoryMemoryStore"]

R = TypeVar("R", Entity, Relationship, Episode, SemanticFact, Theme)

_STATE = (
    "_entities",
    "_relationships",
    "_episodes",
    "_facts",
    "_themes",
    "_idempotency",
    "_message_vectors",
    "_message_homes",
    "_settings",
)
"""The store's journaled dicts (records, message vectors and homes, writer keys, settings).

They are never replaced (a replaced dict would no longer be journaled): change them in
place, value by value."""


def _page(matches: list[R], key: Callable[[R], Any], offset: int, limit: int | None) -> list[R]:
    """Order the matches, slice ``[offset, offset + limit)`` and copy the slice.

    A small page of many matches takes a partial sort (``heapq.nsmallest``, same result).
    """
    if limit is not None and (offset + limit) * 8 < len(matches):
        return [copy_record(r) for r in heapq.nsmallest(offset + limit, matches, key=key)[offset:]]
    matches.sort(key=key)
    end = None if limit is None else offset + limit
    return [copy_record(r) for r in matches[offset:end]]


def _entity_key(e: Entity) -> tuple[datetime, str]:
    return (e.created_at, str(e.id))


def _relationship_key(r: Relationship) -> tuple[datetime, uuid.UUID]:
    return (r.valid_from, r.id)


def _episode_key(e: Episode) -> tuple[datetime, str]:
    return (e.started_at, str(e.id))


def _fact_key(f: SemanticFact) -> tuple[datetime, uuid.UUID]:
    # UUIDs order exactly like their canonical strings (fixed-width hex of ``.int``).
    return (f.valid_from, f.id)


def _theme_key(t: Theme) -> tuple[datetime, str]:
    return (t.provenance.created_at, str(t.id))


_TRUSTED: ContextVar[bool] = ContextVar("cycgraph_inmemory_trusted_batch", default=False)
"""Set by ``write_batch(validated=True)`` for the put it makes (this task only)."""

_DEFER_THEMES: ContextVar[bool] = ContextVar("cycgraph_inmemory_defer_themes", default=False)
"""Set by ``write_batch(theme_references=False)``: a fact's theme is checked by the caller."""


class InMemoryMemoryStore(InMemoryIngestLookups):
    """Zero-dependency ``MemoryStore`` backed by dicts.

    Listings filter first, then sort by the contract's deterministic order, then apply
    ``offset`` / ``limit``; they are linear scans, which is fine at the scale this backend
    is meant for.

    Args:
        expected_dimensions: When set, every embedding written to the store must have
            this length, else ``EmbeddingDimensionMismatchError`` is raised and nothing
            is written (mirrors the fixed vector column of the Postgres backend).
            ``None`` (default) accepts any length.
    """

    def __init__(self, *, expected_dimensions: int | None = None) -> None:
        self._expected_dimensions = check_dimensions(expected_dimensions)
        # Every change to these dicts inside a unit of work is journaled (see _journal).
        self._journal = Journal()
        j = self._journal
        self._entities: dict[uuid.UUID, Entity] = JournaledDict(j)
        self._relationships: dict[uuid.UUID, Relationship] = JournaledDict(j)
        self._episodes: dict[uuid.UUID, Episode] = JournaledDict(j)
        self._message_vectors: dict[uuid.UUID, array[float]] = JournaledDict(j)
        # message -> episodes
        self._message_homes: dict[uuid.UUID, set[uuid.UUID]] = JournaledDict(j)
        self._facts: dict[uuid.UUID, SemanticFact] = JournaledDict(j)
        self._themes: dict[uuid.UUID, Theme] = JournaledDict(j)
        self._exclusive_locks: dict[str, asyncio.Lock] = {}
        self._lookups = StoreLookups()
        self._idempotency: dict[str, list[uuid.UUID]] = JournaledDict(j)
        self._settings: dict[str, dict[str, Any]] = JournaledDict(j)

    @property
    def expected_dimensions(self) -> int | None:
        """The enforced embedding length, or ``None`` when any length is accepted."""
        return self._expected_dimensions

    # ------------------------------------------------------------------ helpers

    def _prepare(self, model: type[R], value: object) -> R:
        # A freshly re-validated copy: the same checks as Postgres, even for records
        # changed with model_copy(update=...), and no state shared with the caller
        # (except inside write_batch(validated=True): fresh records just validated).
        if _TRUSTED.get() and type(value) is model:
            record: R = value
        else:
            record = coerce_record(model, value)
        embedding = getattr(record, "embedding", None)
        if embedding is not None:
            check_dimension(
                self._expected_dimensions,
                len(embedding),
                f"{model.__name__} {record.id}",
            )
        return compact_record(record)

    def _prepare_many(self, model: type[R], values: Iterable[object]) -> list[R]:
        if isinstance(values, (model, Mapping, str, bytes)) or not isinstance(values, Iterable):
            raise InvalidTypeError(
                f"expected an iterable of {model.__name__}, got {type(values).__name__}"
            )
        # Validate everything before writing anything: a bulk put is all or nothing.
        return [self._prepare(model, v) for v in values]

    def _check_endpoints(self, relationships: Iterable[Relationship]) -> None:
        missing = list(
            dict.fromkeys(
                eid
                for r in relationships
                for eid in (r.source_id, r.target_id)
                if eid not in self._entities
            )
        )
        if missing:
            raise DanglingReferenceError(
                "relationship endpoints are not entities of this store: "
                + ", ".join(str(m) for m in missing),
                missing_ids=list(missing),
            )

    def _check_fact_references(self, facts: Iterable[SemanticFact]) -> None:
        missing: dict[tuple[str, uuid.UUID], None] = {}
        for fact in facts:
            for eid in fact.entity_ids:
                if eid not in self._entities:
                    missing[("entity", eid)] = None
            for pid in fact.source_episode_ids:
                if pid not in self._episodes:
                    missing[("episode", pid)] = None
            if (
                fact.theme_id is not None
                and fact.theme_id not in self._themes
                and not _DEFER_THEMES.get()
            ):
                missing[("theme", fact.theme_id)] = None
        if missing:
            raise DanglingReferenceError(
                "facts cite records that are not in this store: "
                + ", ".join(f"{k} {i}" for k, i in missing),
                missing_ids=[i for _, i in missing],
            )

    def _unlink_facts(self, fact_ids: Iterable[uuid.UUID], **update: Any) -> None:
        # ``update`` maps a field to a function of the fact giving its new value.
        for fid in list(fact_ids):
            old = self._facts[fid]
            new = old.model_copy(update={k: fn(old) for k, fn in update.items()})
            self._lookups.put_fact(old, new)
            self._facts[fid] = new

    @staticmethod
    def _get_many(table: Mapping[uuid.UUID, R], ids: Iterable[object]) -> dict[uuid.UUID, R]:
        return {i: copy_record(table[i]) for i in parse_ids(ids) if i in table}

    @staticmethod
    def _get_one(table: Mapping[uuid.UUID, R], record_id: object) -> R | None:
        record = table.get(parse_id(record_id))
        return None if record is None else copy_record(record)

    @staticmethod
    def _delete(table: dict[uuid.UUID, R], record_id: object) -> bool:
        return table.pop(parse_id(record_id), None) is not None

    # ------------------------------------------------------------------ entities

    async def put_entity(self, entity: Entity) -> None:
        """Insert or replace one entity."""
        record = self._prepare(Entity, entity)
        self._lookups.put_entity(record)
        self._entities[record.id] = record

    async def put_entities(self, entities: Iterable[Entity]) -> None:
        """Insert or replace many entities; nothing is written if any is invalid."""
        for record in self._prepare_many(Entity, entities):
            self._lookups.put_entity(record)
            self._entities[record.id] = record

    async def get_entity(self, entity_id: uuid.UUID | str) -> Entity | None:
        """Return a copy of the entity (even when invalidated) or ``None``."""
        return self._get_one(self._entities, entity_id)

    async def get_entities(self, ids: Iterable[uuid.UUID | str]) -> dict[uuid.UUID, Entity]:
        """Batch get; missing ids are absent, duplicates appear once."""
        return self._get_many(self._entities, ids)

    async def find_entities(
        self, filter: EntityFilter | Mapping[str, Any] | None = None, /, **options: Any
    ) -> list[Entity]:
        """List entities matching the filter, ordered by ``(created_at, id)``."""
        f = coerce_options(EntityFilter, filter, options)
        matches = [
            e
            for e in self._entities.values()
            if (f.include_invalidated or e.invalidated_at is None)
            and (f.entity_type is None or e.entity_type == f.entity_type)
        ]
        return _page(matches, _entity_key, f.offset, f.limit)

    async def delete_entity(self, entity_id: uuid.UUID | str) -> bool:
        """Hard-delete an entity and every relationship touching it; True when it existed.

        The edges go in the same step (like the Postgres foreign keys' ``ON DELETE
        CASCADE``), so no relationship ever points at a missing entity; the entity's id
        leaves the ``entity_ids`` of every fact citing it.
        """
        eid = parse_id(entity_id)
        if self._entities.pop(eid, None) is None:
            return False
        self._lookups.drop_entity(eid)
        for rid in self._lookups.relationships_of([eid]):
            edge = self._relationships.pop(rid, None)
            if edge is not None:
                self._lookups.drop_relationship(edge)
        self._unlink_facts(
            self._lookups.facts_of_entity(eid),
            entity_ids=lambda f: [i for i in f.entity_ids if i != eid],
        )
        return True

    # ------------------------------------------------------------------ relationships

    async def put_relationship(self, relationship: Relationship) -> None:
        """Insert or replace one relationship.

        Raises:
            DanglingReferenceError: ``source_id`` or ``target_id`` is not a stored entity.
        """
        await self.put_relationships([relationship])

    async def put_relationships(self, relationships: Iterable[Relationship]) -> None:
        """Insert or replace many relationships; nothing is written if any is invalid.

        Raises:
            DanglingReferenceError: An endpoint is not a stored entity (nothing is written).
        """
        records = self._prepare_many(Relationship, relationships)
        self._check_endpoints(records)
        for record in records:
            self._lookups.put_relationship(self._relationships.get(record.id), record)
            self._relationships[record.id] = record

    async def get_relationship(self, relationship_id: uuid.UUID | str) -> Relationship | None:
        """Return a copy of the relationship (even when invalidated) or ``None``."""
        return self._get_one(self._relationships, relationship_id)

    async def get_relationships(
        self, ids: Iterable[uuid.UUID | str]
    ) -> dict[uuid.UUID, Relationship]:
        """Batch get; missing ids are absent, duplicates appear once."""
        return self._get_many(self._relationships, ids)

    async def get_relationships_for_entity(
        self,
        entity_id: uuid.UUID | str,
        filter: RelationshipFilter | Mapping[str, Any] | None = None,
        /,
        **options: Any,
    ) -> list[Relationship]:
        """Edges touching an entity, ordered by ``(valid_from, id)``.

        ``direction`` selects ``outgoing`` (``source_id`` is the entity), ``incoming``
        (``target_id`` is the entity) or ``both``.
        """
        eid = parse_id(entity_id)
        f = coerce_options(RelationshipFilter, filter, options)
        outgoing = f.direction in ("outgoing", "both")
        incoming = f.direction in ("incoming", "both")
        matches = [
            r
            for r in (self._relationships[i] for i in self._lookups.relationships_of([eid]))
            if ((outgoing and r.source_id == eid) or (incoming and r.target_id == eid))
            and (f.include_invalidated or r.invalidated_by is None)
            and (f.relation_type is None or r.relation_type == f.relation_type)
        ]
        return _page(matches, _relationship_key, f.offset, f.limit)

    async def delete_relationship(self, relationship_id: uuid.UUID | str) -> bool:
        """Hard-delete a relationship; True when it existed."""
        old = self._relationships.get(parse_id(relationship_id))
        if old is not None:
            self._lookups.drop_relationship(old)
        return self._delete(self._relationships, relationship_id)

    # ------------------------------------------------------------------ episodes

    async def put_episode(self, episode: Episode) -> None:
        """Insert or replace one episode (with its messages); see :meth:`put_episodes`."""
        if not isinstance(episode, Episode | Mapping):
            raise InvalidTypeError(f"expected an Episode, got {type(episode).__name__}")
        await self.put_episodes([episode])

    async def put_episodes(self, episodes: Iterable[Episode]) -> None:
        """Insert or replace many episodes; nothing is written if any is invalid.

        Message embeddings are kept beside the episode: episode reads return messages
        without them (as on Postgres), :meth:`get_messages` returns them.

        Raises:
            DuplicateRecordError: A message id would be stored in two episodes (like the
                Postgres ``UNIQUE (tenant_id, id)`` on messages); nothing is written.
        """
        records = self._prepare_many(Episode, episodes)
        latest = {r.id: r for r in records}
        owner: dict[uuid.UUID, uuid.UUID] = {}
        for record in latest.values():
            for message in record.messages:
                if message.embedding is not None:
                    check_dimension(
                        self._expected_dimensions, len(message.embedding), f"Message {message.id}"
                    )
                if owner.setdefault(message.id, record.id) != record.id:
                    raise DuplicateRecordError(
                        f"message {message.id} appears in episodes {owner[message.id]} and "
                        f"{record.id} of one write"
                    )
                # Stored elsewhere? (the message -> episodes map may hold stale entries)
                for home in self._message_homes.get(message.id, ()):
                    stored = self._episodes.get(home)
                    if (
                        home not in latest
                        and stored is not None
                        and any(m.id == message.id for m in stored.messages)
                    ):
                        raise DuplicateRecordError(
                            f"message {message.id} is already stored in episode {home}"
                        )
        # A message written without a vector keeps the one stored for it, which can only
        # be in a version of these episodes (elsewhere is refused above): a vector left by
        # a message no longer stored must not come back with it (as on Postgres).
        stored_now = {
            m.id
            for episode_id in latest
            if (previous := self._episodes.get(episode_id)) is not None
            for m in previous.messages
        }
        # Only the last record of an id is written (its earlier copies in this call would
        # otherwise leave their message vectors behind).
        for record in latest.values():
            for message in record.messages:
                if message.embedding is None and message.id not in stored_now:
                    self._message_vectors.pop(message.id, None)
                # Replace the set, never mutate it: the undo journal keeps the old one.
                self._message_homes[message.id] = {
                    *self._message_homes.get(message.id, ()),
                    record.id,
                }
                if message.embedding is not None:
                    self._message_vectors[message.id] = array("d", message.embedding)
                    message.__dict__["embedding"] = None  # a validated copy: no re-check
            self._episodes[record.id] = record

    async def get_episode(self, episode_id: uuid.UUID | str) -> Episode | None:
        """Return a copy of the episode (even when invalidated) or ``None``."""
        return self._get_one(self._episodes, episode_id)

    async def get_episodes(self, ids: Iterable[uuid.UUID | str]) -> dict[uuid.UUID, Episode]:
        """Batch get; missing ids are absent, duplicates appear once."""
        return self._get_many(self._episodes, ids)

    async def list_episodes(
        self, options: ListOptions | Mapping[str, Any] | None = None, /, **kwargs: Any
    ) -> list[Episode]:
        """List episodes ordered by ``(started_at, id)``."""
        o = coerce_options(ListOptions, options, kwargs)
        matches = [
            e for e in self._episodes.values() if o.include_invalidated or e.invalidated_at is None
        ]
        return _page(matches, _episode_key, o.offset, o.limit)

    async def get_messages(self, ids: Iterable[uuid.UUID | str]) -> dict[uuid.UUID, Message]:
        """Batch get of messages inside stored episodes; missing ids are absent.

        Invalidated episodes count too (like every ``get_*``).
        """
        return self._messages(ids, live=False)

    async def get_live_messages(
        self, ids: Iterable[uuid.UUID | str]
    ) -> dict[uuid.UUID, Message]:
        """:meth:`get_messages` without the messages of invalidated episodes.

        A message kept by at least one live episode is returned. Retrieval reads the turns
        behind the served facts with it, so a soft-deleted episode's turns stay out of a
        result unless the query includes invalidated records.
        """
        return self._messages(ids, live=True)

    def _messages(self, ids: Iterable[uuid.UUID | str], *, live: bool) -> dict[uuid.UUID, Message]:
        found: dict[uuid.UUID, Message] = {}
        for message_id in dict.fromkeys(parse_ids(ids)):
            # Candidate episodes from the message -> episodes map (entries may be stale
            # after a delete or a replace, so each is checked).
            for episode_id in sorted(self._message_homes.get(message_id, ()), key=str):
                episode = self._episodes.get(episode_id)
                if episode is None or (live and episode.invalidated_at is not None):
                    continue
                message = next((m for m in episode.messages if m.id == message_id), None)
                if message is None:
                    continue
                found[message_id] = copy_record(message)
                vector = self._message_vectors.get(message_id)
                if vector is not None:
                    found[message_id].__dict__["embedding"] = list(vector)
                break
        return found

    async def delete_episode(self, episode_id: uuid.UUID | str) -> bool:
        """Hard-delete an episode; True when it existed.

        The episode's id leaves the ``source_episode_ids`` of every fact citing it.
        """
        pid = parse_id(episode_id)
        if not self._delete(self._episodes, pid):
            return False
        self._unlink_facts(
            self._lookups.facts_of_episode(pid),
            source_episode_ids=lambda f: [i for i in f.source_episode_ids if i != pid],
        )
        return True

    # ------------------------------------------------------------------ facts

    async def put_fact(self, fact: SemanticFact) -> None:
        """Insert or replace one fact.

        Raises:
            DanglingReferenceError: It cites an entity, episode or theme id that is not a
                record of this store (nothing is written).
        """
        record = self._prepare(SemanticFact, fact)
        self._check_fact_references([record])
        self._lookups.put_fact(self._facts.get(record.id), record)
        self._facts[record.id] = record

    async def put_facts(self, facts: Iterable[SemanticFact]) -> None:
        """Insert or replace many facts; nothing is written if any is invalid.

        Raises:
            DanglingReferenceError: A fact cites an entity, episode or theme id that is not
                a record of this store (nothing is written).
        """
        records = self._prepare_many(SemanticFact, facts)
        self._check_fact_references(records)
        for record in records:
            self._lookups.put_fact(self._facts.get(record.id), record)
            self._facts[record.id] = record

    async def get_fact(self, fact_id: uuid.UUID | str) -> SemanticFact | None:
        """Return a copy of the fact (even when invalidated) or ``None``."""
        return self._get_one(self._facts, fact_id)

    async def get_facts(self, ids: Iterable[uuid.UUID | str]) -> dict[uuid.UUID, SemanticFact]:
        """Batch get; missing ids are absent, duplicates appear once."""
        return self._get_many(self._facts, ids)

    async def find_facts(
        self, filter: FactFilter | Mapping[str, Any] | None = None, /, **options: Any
    ) -> list[SemanticFact]:
        """List facts matching the filter, ordered by ``(valid_from, id)``.

        ``tags`` keeps facts carrying any of them (``None`` or ``[]``: no restriction);
        ``exclude_tags`` then drops facts carrying any of them.
        """
        f = coerce_options(FactFilter, filter, options)
        wanted = frozenset(f.tags or ())
        unwanted = frozenset(f.exclude_tags or ())
        if wanted and f.limit is not None and f.entity_id is None and f.theme_id is None:
            # A page of a tag listing (the reflection loop's hot path): walk the tag
            # set's cached (valid_from, id) order and stop once the page is full.
            page: list[SemanticFact] = []
            skip, need = f.offset, f.limit
            for fid in self._lookups.tag_order(wanted, self._facts):
                fact = self._facts[fid]
                if (f.include_invalidated or fact.invalidated_by is None) and (
                    not unwanted or unwanted.isdisjoint(fact.tags)
                ):
                    if skip:
                        skip -= 1
                        continue
                    page.append(copy_record(fact))
                    if len(page) == need:
                        break
            return page
        matches = [
            fact
            for fact in self._fact_candidates(f)
            if (f.include_invalidated or fact.invalidated_by is None)
            and (f.theme_id is None or fact.theme_id == f.theme_id)
            and (f.entity_id is None or f.entity_id in fact.entity_ids)
            and (not wanted or not wanted.isdisjoint(fact.tags))
            and (not unwanted or unwanted.isdisjoint(fact.tags))
        ]
        return _page(matches, _fact_key, f.offset, f.limit)

    async def delete_fact(self, fact_id: uuid.UUID | str) -> bool:
        """Hard-delete a fact; True when it existed."""
        old = self._facts.get(parse_id(fact_id))
        if old is not None:
            self._lookups.drop_fact(old)
        return self._delete(self._facts, fact_id)

    # ------------------------------------------------------------------ themes

    async def put_theme(self, theme: Theme) -> None:
        """Insert or replace one theme."""
        record = self._prepare(Theme, theme)
        self._themes[record.id] = record

    async def put_themes(self, themes: Iterable[Theme]) -> None:
        """Insert or replace many themes; nothing is written if any is invalid."""
        for record in self._prepare_many(Theme, themes):
            self._themes[record.id] = record

    async def get_theme(self, theme_id: uuid.UUID | str) -> Theme | None:
        """Return a copy of the theme (even when invalidated) or ``None``."""
        return self._get_one(self._themes, theme_id)

    async def get_themes(self, ids: Iterable[uuid.UUID | str]) -> dict[uuid.UUID, Theme]:
        """Batch get; missing ids are absent, duplicates appear once."""
        return self._get_many(self._themes, ids)

    async def list_themes(
        self, options: ListOptions | Mapping[str, Any] | None = None, /, **kwargs: Any
    ) -> list[Theme]:
        """List themes ordered by ``(provenance.created_at, id)``."""
        o = coerce_options(ListOptions, options, kwargs)
        matches = [
            t for t in self._themes.values() if o.include_invalidated or t.invalidated_at is None
        ]
        return _page(matches, _theme_key, o.offset, o.limit)

    async def delete_theme(self, theme_id: uuid.UUID | str) -> bool:
        """Hard-delete a theme; True when it existed. Facts of the theme get no theme."""
        tid = parse_id(theme_id)
        if not self._delete(self._themes, tid):
            return False
        self._unlink_facts(self._lookups.facts_of_theme(tid), theme_id=lambda f: None)
        return True

    # ------------------------------------------------------------------ usage tracking

    async def touch_facts(self, ids: Iterable[uuid.UUID | str], at: datetime | None = None) -> None:
        """Increment ``access_count`` and set ``last_accessed_at`` on existing facts.

        Missing ids are ignored; an id repeated in one call counts once. ``at`` defaults
        to now; a naive ``at`` is assumed to be UTC. The count saturates at
        ``MAX_ACCESS_COUNT`` (the 64-bit column of the Postgres backend).
        """
        when = utc_now() if at is None else normalize_ts(at)
        for fid in parse_ids(ids):
            fact = self._facts.get(fid)
            if fact is None:
                continue
            # Replace, never mutate: the undo journal keeps the old record.
            self._facts[fid] = fact.model_copy(
                update={
                    "access_count": min(fact.access_count + 1, MAX_ACCESS_COUNT),
                    "last_accessed_at": when,
                }
            )

    # ------------------------------------------------------------------ batched retrieval

    async def get_relationships_for_entities(
        self,
        entity_ids: Iterable[uuid.UUID | str],
        filter: RelationshipFilter | Mapping[str, Any] | None = None,
        /,
        **options: Any,
    ) -> list[Relationship]:
        """Edges touching any of the entities (each once), ordered by ``(valid_from, id)``.

        The batched form of :meth:`get_relationships_for_entity` (one call per BFS hop);
        ``direction`` is relative to the given entities.
        """
        wanted = set(parse_ids(entity_ids))
        f = coerce_options(RelationshipFilter, filter, options)
        outgoing = f.direction in ("outgoing", "both")
        incoming = f.direction in ("incoming", "both")
        matches = [
            r
            for r in (self._relationships[i] for i in self._lookups.relationships_of(wanted))
            if ((outgoing and r.source_id in wanted) or (incoming and r.target_id in wanted))
            and (f.include_invalidated or r.invalidated_by is None)
            and (f.relation_type is None or r.relation_type == f.relation_type)
        ]
        return _page(matches, _relationship_key, f.offset, f.limit)

    async def get_facts_for_entities(
        self,
        entity_ids: Iterable[uuid.UUID | str],
        filter: EntityFactsFilter | Mapping[str, Any] | None = None,
        /,
        **options: Any,
    ) -> dict[uuid.UUID, list[SemanticFact]]:
        """Facts mentioning each entity, newest first (``valid_from`` desc, then id).

        Every filter condition applies before ``per_entity_limit``. Entities without a
        matching fact are absent; a fact mentioning two of the entities appears under both.
        """
        f = coerce_options(EntityFactsFilter, filter, options)
        wanted = frozenset(f.tags or ())
        unwanted = frozenset(f.exclude_tags or ())
        out: dict[uuid.UUID, list[SemanticFact]] = {}
        for eid in parse_ids(entity_ids):
            facts = [
                fact
                for fact in (self._facts[i] for i in self._lookups.facts_of_entity(eid))
                if (f.include_invalidated or fact.invalidated_by is None)
                and (not wanted or not wanted.isdisjoint(fact.tags))
                and (not unwanted or unwanted.isdisjoint(fact.tags))
                and (f.valid_at is None or is_valid_at(fact, f.valid_at))
                and (f.changed_since is None or is_changed_since(fact, f.changed_since))
            ]
            if not facts:
                continue
            facts.sort(key=lambda x: str(x.id))
            facts.sort(key=lambda x: x.valid_from, reverse=True)
            out[eid] = [copy_record(x) for x in facts[: f.per_entity_limit]]
        return out

    # ------------------------------------------------------------------ idempotent writes

    async def put_facts_once(
        self, idempotency_key: str, facts: Iterable[SemanticFact]
    ) -> tuple[list[uuid.UUID], bool]:
        """Write ``facts`` unless ``idempotency_key`` was already used.

        Returns the fact ids recorded under the key and whether this call wrote them. A
        repeated key writes nothing and returns the ids of the first write. The key and
        the facts land together (a rolled-back transaction forgets both).
        """
        if not isinstance(idempotency_key, str) or not idempotency_key:
            raise InvalidInputError("idempotency_key must be a non-empty string")
        records = self._prepare_many(SemanticFact, facts)
        done = self._idempotency.get(idempotency_key)
        if done is not None:
            return list(done), False
        self._check_fact_references(records)
        # No await between the check and the writes: atomic on the event loop.
        for record in records:
            self._lookups.put_fact(self._facts.get(record.id), record)
            self._facts[record.id] = record
        ids = list(dict.fromkeys(r.id for r in records))
        self._idempotency[idempotency_key] = ids
        return list(ids), True

    async def writer_key_ids(self, idempotency_key: str) -> list[uuid.UUID] | None:
        """The fact ids recorded under ``idempotency_key``, or ``None`` when it is unused.

        A read only: lets a writer skip its work (embedding) on a repeated key before
        :meth:`put_facts_once`, which stays the authority.
        """
        done = self._idempotency.get(idempotency_key)
        return None if done is None else list(done)

    # ------------------------------------------------------------------ lifecycle

    def transaction(self) -> AbstractAsyncContextManager[None]:
        """Unit of work: every write in the block lands, or none does if it raises.

        Implemented with an undo journal: while the block runs, each change it makes is
        recorded with the value it replaced, and put back when the block raises (the
        exception is re-raised). Nested transactions act as savepoints: an inner failure
        caught inside the outer block undoes only the inner writes. The unit of work
        belongs to the task that opened it (and to tasks started inside it), like a
        Postgres transaction: a rollback undoes only its own writes, and leaves a value
        another task wrote since as that task wrote it.

        Note:
            The in-memory backend does not isolate transactions from concurrently running
            coroutines: they see uncommitted writes. Serialise writers yourself if that
            matters.
        """
        return self._transaction()

    @asynccontextmanager
    async def exclusive(self, name: str) -> AsyncIterator[None]:
        """Run a maintenance pass alone: a unit of work holding the lock called ``name``.

        Two passes with the same ``name`` on this store never overlap: the second waits
        for the first to finish, then sees its result. Used by consolidation, entity
        resolution, conflict resolution and the retention gate.

        Raises:
            InvalidTypeError: ``name`` is not a ``str``.
            InvalidInputError: ``name`` holds a NUL or a lone surrogate.
        """
        lock = self._exclusive_locks.setdefault(check_lock_name(name), asyncio.Lock())
        async with lock, self._transaction():
            yield

    @asynccontextmanager
    async def _transaction(self) -> AsyncIterator[None]:
        unit = self._journal.begin()
        try:
            yield
        except BaseException:
            self._restore(unit)
            raise
        finally:
            self._journal.end(unit)

    def _fact_candidates(self, f: FactFilter) -> Iterable[SemanticFact]:
        # The narrowest inverted index instead of a full scan; find_facts re-checks all.
        if f.entity_id is not None:
            ids: set[uuid.UUID] | None = self._lookups.facts_of_entity(f.entity_id)
        elif f.theme_id is not None:
            ids = self._lookups.facts_of_theme(f.theme_id)
        elif f.tags:
            ids = self._lookups.facts_with_tags(f.tags)
        else:
            ids = None
        if ids is None:
            return self._facts.values()
        return [self._facts[i] for i in ids]

    def _restore(self, unit: Unit) -> None:
        # No copy was taken: the dicts journaled this unit's changes (see _journal).
        self._journal.undo(unit)
        self._lookups.rebuild(self._relationships, self._facts, self._entities)

    async def clear(self) -> None:
        """Remove every record (inside a unit of work, undone by its rollback)."""
        # In place: the dicts stay journaled (a unit of work open around this undoes it).
        for name in _STATE:
            getattr(self, name).clear()
        self._lookups.rebuild(self._relationships, self._facts, self._entities)

    # ------------------------------------------------------------------ erasure (lifecycle)

    async def purge_candidates(self, selector: PurgeSelector) -> PurgeCandidates:
        """Every record a purge selector might touch (see ``cycgraph_memory.lifecycle``)."""
        return _lifecycle.purge_candidates(self, selector)

    async def apply_purge(self, plan: PurgePlan) -> None:
        """Apply a purge plan; use ``cycgraph_memory.lifecycle.purge`` rather than this."""
        async with self._transaction():
            await _lifecycle.apply_purge(self, plan)

    async def write_batch(
        self, kind: str, records: Sequence[Any], *, validated: bool = False,
        theme_references: bool = True,
    ) -> dict[str, int]:
        """Upsert a batch of ``kind`` records like the matching ``put_*`` (used by ``import_``).

        ``validated=True``: the records are fresh instances the caller just built by
        validation (``import_`` parses them from JSON); they are not validated again (the
        embedding width is still checked). ``theme_references=False``: a fact's theme is
        not checked here (an export lists facts before themes; ``import_`` checks them at
        the end of the file, in the same unit of work).

        Returns:
            Records written by kind.
        """
        writers: dict[str, Callable[[Any], Awaitable[None]]] = {
            "entity": self.put_entities, "relationship": self.put_relationships,
            "episode": self.put_episodes, "fact": self.put_facts, "theme": self.put_themes,
        }
        if kind not in writers:
            raise InvalidInputError(f"unknown record kind {kind!r}")
        token = _TRUSTED.set(bool(validated))
        deferred = _DEFER_THEMES.set(not theme_references)
        try:
            await writers[kind](records)
        finally:
            _DEFER_THEMES.reset(deferred)
            _TRUSTED.reset(token)
        return {kind: len(records)}

    async def write_embeddings(
        self, kind: str, vectors: Mapping[uuid.UUID, list[float]], *, target: str = "current"
    ) -> int:
        """Replace only the vectors of ``kind`` records (used by ``lifecycle.reembed``)."""
        if target != "current":
            raise InvalidInputError("the in-memory store has no staged width change")
        return _lifecycle.write_embeddings(self, kind, vectors)

    async def recompute_theme_centroids(self, *, target: str = "current") -> int:
        """Re-centre every theme on its live member facts' vectors (used by ``reembed``)."""
        if target != "current":
            raise InvalidInputError("the in-memory store has no staged width change")
        return _lifecycle.recompute_theme_centroids(self)

    # ------------------------------------------------------------------ batched lookups
    # (used by entity resolution and ingest-time resolution)

    async def find_facts_for_entities(
        self, entity_ids: Iterable[uuid.UUID | str], *, include_invalidated: bool = False
    ) -> list[SemanticFact]:
        """Facts mentioning any of ``entity_ids``, ordered by ``(valid_from, id)``."""
        include_invalidated = check_bool(include_invalidated, "include_invalidated")
        wanted = frozenset(parse_ids(entity_ids))
        if not wanted:
            return []
        matches = [
            fact
            for fact in self._facts.values()
            if (include_invalidated or fact.invalidated_by is None)
            and not wanted.isdisjoint(fact.entity_ids)
        ]
        return _page(matches, _fact_key, 0, None)

    async def find_relationships_for_entities(
        self, entity_ids: Iterable[uuid.UUID | str], *, include_invalidated: bool = False
    ) -> list[Relationship]:
        """Edges with either endpoint in ``entity_ids``, ordered by ``(valid_from, id)``."""
        include_invalidated = check_bool(include_invalidated, "include_invalidated")
        wanted = frozenset(parse_ids(entity_ids))
        if not wanted:
            return []
        matches = [
            r
            for r in self._relationships.values()
            if (include_invalidated or r.invalidated_by is None)
            and (r.source_id in wanted or r.target_id in wanted)
        ]
        return _page(matches, _relationship_key, 0, None)

    async def find_entities_by_name_keys(
        self, keys: Iterable[tuple[str, str]]
    ) -> list[Entity]:
        """Live entities whose ``(normalize_entity_name(name), entity_type)`` is in ``keys``.

        Ordered by ``(created_at, id)``. Keys are ``(normalized name, entity_type)`` pairs.
        """
        wanted = frozenset((str(name), str(etype)) for name, etype in keys)
        if not wanted:
            return []
        # The name-key lookup, not a scan: the cost follows the keys asked for.
        matches = [
            e
            for e in (self._entities[i] for i in self._lookups.entities_with_keys(wanted))
            if e.invalidated_at is None
        ]
        return _page(matches, _entity_key, 0, None)

    async def scan_facts(
        self,
        filter: FactFilter | Mapping[str, Any] | None = None,
        /,
        *,
        page_size: int = 1000,
        **options: Any,
    ) -> AsyncIterator[list[SemanticFact]]:
        """Every fact matching the filter, in pages of ``page_size``, ``(valid_from, id)`` order.

        One sort for the whole scan (``find_facts`` with ``offset`` sorts per page). The
        scan reads a snapshot taken when it starts; ``limit`` / ``offset`` are ignored.
        """
        f = coerce_options(FactFilter, filter, options)
        if page_size < 1:
            raise InvalidInputError("page_size must be >= 1")
        wanted = frozenset(f.tags or ())
        unwanted = frozenset(f.exclude_tags or ())
        matches = [
            fact
            for fact in self._facts.values()
            if (f.include_invalidated or fact.invalidated_by is None)
            and (f.theme_id is None or fact.theme_id == f.theme_id)
            and (f.entity_id is None or f.entity_id in fact.entity_ids)
            and (not wanted or not wanted.isdisjoint(fact.tags))
            and (not unwanted or unwanted.isdisjoint(fact.tags))
        ]
        matches.sort(key=_fact_key)
        for start in range(0, len(matches), page_size):
            yield [copy_record(r) for r in matches[start : start + page_size]]

    async def scan_entities(
        self,
        filter: EntityFilter | Mapping[str, Any] | None = None,
        /,
        *,
        page_size: int = 1000,
        **options: Any,
    ) -> AsyncIterator[list[Entity]]:
        """Every entity matching the filter, in pages, ``(created_at, id)`` order (snapshot)."""
        f = coerce_options(EntityFilter, filter, options)
        if page_size < 1:
            raise InvalidInputError("page_size must be >= 1")
        matches = [
            e
            for e in self._entities.values()
            if (f.include_invalidated or e.invalidated_at is None)
            and (f.entity_type is None or e.entity_type == f.entity_type)
        ]
        matches.sort(key=_entity_key)
        for start in range(0, len(matches), page_size):
            yield [copy_record(r) for r in matches[start : start + page_size]]

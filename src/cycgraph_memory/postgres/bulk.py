"""Bulk import on Postgres: COPY into a staging table, then one upsert per batch.

:func:`bulk_import` loads entities, episodes (with their messages), facts, themes and
relationships for the store's tenant. Every record is validated exactly like a ``put_*``
(pydantic model, the schema's embedding width, edge endpoints; the embeddings of records
given as model instances are checked as numpy blocks and kept in COPY form, see
:class:`_Validator`), then each batch runs in its own transaction:

1. ``COPY ... (FORMAT binary)`` into a temporary table with the real column types (the
   rows encoded by :mod:`~cycgraph_memory.postgres._copy_binary`: vectors as float32 in
   one numpy call, no per-row parameter binding), with the BM25 tokens (``search_terms``)
   the store writes with every record;
2. one ``INSERT ... SELECT ... ON CONFLICT (tenant_id, id) DO UPDATE`` into the real table
   (ids sorted, so concurrent loads lock rows in the same order). The BM25 statistics
   follow through migration 0008's triggers: statement-level (one set-based update of the
   tenant's document frequencies per batch) for new rows, row-level for an upsert that
   changes a stored row's tokens, so they stay exact.

Batches of one type are written two at a time on two connections when the store owns an
engine (a store on a single connection writes one at a time). A batch is all or nothing;
batches already committed stay (with two in flight, the one beside a failing batch may
commit too; re-running the import is safe: every write is an upsert by id).

HNSW trade-off: inserting into an HNSW index costs about a graph search per row and
dominates large loads. ``defer_vector_indexes=True`` drops the HNSW indexes of the tables
being loaded, loads, and rebuilds them from their saved definitions (even when the load
fails). While they are missing, vector searches of EVERY tenant fall back to exact scans,
and the DDL takes an exclusive lock on those tables: use it for initial loads and
maintenance windows, not on a live multi-tenant database.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import re
import threading
import uuid
from collections import defaultdict
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Sequence
from typing import Any, TypeVar

import numpy as np
from pydantic import BaseModel, ConfigDict
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession

from cycgraph_memory._validate import _plain, norms_in_range
from cycgraph_memory.errors import (
    DanglingReferenceError,
    DuplicateRecordError,
    InvalidInputError,
)
from cycgraph_memory.observability import traced
from cycgraph_memory.postgres import convert
from cycgraph_memory.postgres._copy_binary import (
    COLUMN_TYPES,
    Encoded,
    encode_jsonb,
    encode_rows,
    encode_vectors,
)
from cycgraph_memory.postgres.reembedding import HNSW_BUILD_MEMORY
from cycgraph_memory.postgres.references import check_fact_references
from cycgraph_memory.postgres.store import PostgresMemoryStore, coerce_record
from cycgraph_memory.records import (
    Entity,
    Episode,
    Message,
    Provenance,
    Relationship,
    SemanticFact,
    Theme,
)

__all__ = [
    "HNSW_BUILD_MEMORY",
    "BulkImportReport",
    "build_vector_indexes",
    "bulk_import",
    "deferred_vector_indexes",
    "vector_rows_estimate",
    "write_batch",
]

_log = logging.getLogger(__name__)

_COLUMNS: dict[str, tuple[str, ...]] = {
    table: tuple(types) for table, types in COLUMN_TYPES.items()
}
_HNSW_TABLES = ("entities", "episodes", "episode_messages", "facts", "themes")


class BulkImportReport(BaseModel):
    """Rows written by ``bulk_import``, by table, and the batches committed."""

    model_config = ConfigDict(extra="forbid")

    counts: dict[str, int]
    batches: int
    vector_indexes_rebuilt: list[str]


def _stage_sql(table: str) -> str:
    # The real column types (vector(N), jsonb, uuid[], ...): the binary COPY stream is
    # decoded by the types' own receive functions, and the upsert needs no casts.
    return (
        f"CREATE TEMP TABLE _cg_stage_{table} ON COMMIT DROP AS "
        f"SELECT {', '.join(_COLUMNS[table])} FROM {table} WITH NO DATA"
    )


def _upsert_sql(table: str) -> str:
    cols = _COLUMNS[table]
    key = ("tenant_id", "episode_id", "id") if table == "episode_messages" else ("tenant_id", "id")
    sets = ", ".join(f"{c} = EXCLUDED.{c}" for c in cols if c not in key)
    return (
        f"INSERT INTO {table} ({', '.join(cols)}) SELECT {', '.join(cols)} "
        f"FROM _cg_stage_{table} ORDER BY id ON CONFLICT ({', '.join(key)}) DO UPDATE SET {sets}"
    )


async def _copy(session: AsyncSession, table: str, stream: bytes) -> None:
    await session.execute(text(f"DROP TABLE IF EXISTS _cg_stage_{table}"))
    await session.execute(text(_stage_sql(table)))
    await session.execute(text("SET LOCAL work_mem = '64MB'"))  # the ORDER BY id sort
    conn = await session.connection()
    raw = await conn.get_raw_connection()
    driver: Any = raw.driver_connection
    await driver.copy_to_table(
        f"_cg_stage_{table}",
        source=memoryview(stream),  # bytes would be taken for a path
        columns=list(_COLUMNS[table]),
        format="binary",
    )
    await session.execute(text(_upsert_sql(table)))


def _batches(items: Sequence[Any], size: int) -> Iterable[Sequence[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


async def _saved_hnsw(session: AsyncSession, tables: Sequence[str]) -> list[tuple[str, str]]:
    rows = await session.execute(
        text(
            "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = current_schema() "
            "AND tablename = ANY(:tables) AND indexdef ILIKE '%USING hnsw%' ORDER BY indexname"
        ),
        {"tables": list(tables)},
    )
    return [(str(n), str(d)) for n, d in rows.all()]




async def build_vector_indexes(
    store: PostgresMemoryStore, definitions: Sequence[str], *, memory: str = HNSW_BUILD_MEMORY
) -> None:
    """Run HNSW ``CREATE INDEX`` statements, each in its own transaction, with ``memory``."""
    if not re.fullmatch(r"\d+\s*(kB|MB|GB)", memory):
        raise InvalidInputError(f"memory must look like '512MB' or '1GB', got {memory!r}")
    for definition in definitions:
        async with store.transaction(), store._session() as session:
            await session.execute(text(f"SET LOCAL maintenance_work_mem = '{memory}'"))
            # As the driver's text: a definition holds literals (a dedicated index's
            # tenant id), which text() would scan for ":name" binds.
            conn = await session.connection()
            await conn.exec_driver_sql(
                definition.replace("CREATE INDEX", "CREATE INDEX IF NOT EXISTS", 1)
            )


@contextlib.asynccontextmanager
async def deferred_vector_indexes(
    store: PostgresMemoryStore, tables: Sequence[str], *, memory: str = HNSW_BUILD_MEMORY
) -> AsyncIterator[list[str]]:
    """Drop the HNSW indexes of ``tables`` for the block, rebuild them after (even on error).

    The rebuild is shielded from cancellation: a caller cancelled meanwhile gets its
    ``CancelledError`` and the indexes are built all the same. Yields the names of the
    indexes dropped. While they are missing, vector searches of
    every tenant fall back to exact scans (correct, slower); see the module docstring.
    """
    if store._active_session() is not None:
        raise InvalidInputError("deferring vector indexes needs DDL: call it outside a transaction")
    async with store.transaction(), store._session() as session:
        saved = await _saved_hnsw(session, tables)
        for name, _ in saved:
            await session.execute(text(f'DROP INDEX IF EXISTS "{name}"'))
    _log.warning("dropped %d HNSW indexes until the load ends", len(saved))
    try:
        yield [n for n, _ in saved]
    finally:
        # Shielded: a caller's timeout expiring during the build (the longest step of a
        # large load) must not leave every tenant without these indexes; the build then
        # finishes on its own while the cancellation propagates.
        await asyncio.shield(build_vector_indexes(store, [d for _, d in saved], memory=memory))
        _log.info("rebuilt %d HNSW indexes", len(saved))


async def vector_rows_estimate(store: PostgresMemoryStore, tables: Sequence[str]) -> int:
    """Rows of ``tables`` in the whole deployment, from the planner's statistics (cheap)."""
    async with store._session() as session:
        value = (
            await session.execute(
                text(
                    "SELECT coalesce(sum(greatest(reltuples, 0)), 0) FROM pg_class "
                    "WHERE relname = ANY(:t) AND relnamespace = current_schema()::regnamespace"
                ),
                {"t": list(tables)},
            )
        ).scalar_one()
    return int(value)


M = TypeVar("M", Entity, Episode, SemanticFact, Theme, Relationship)

_VECTOR_CHUNK = 4096
"""Embeddings checked (and encoded) by one numpy call."""


class _Validator:
    """Validates many records of one model like :func:`coerce_record`, faster.

    A record given as an instance of the model is validated again from its field values,
    as ``coerce_record`` does (``model_copy(update=...)`` and ``__dict__`` writes skip
    pydantic), with two shortcuts that check the same rules:

    * embeddings (the record's, its messages') are checked as one numpy block per
      :data:`_VECTOR_CHUNK` vectors (real numbers, finite, within single precision; the
      width is checked later, as for every write) and kept in COPY form
      (:class:`~cycgraph_memory.postgres._copy_binary.EncodedVector`) instead of
      re-validating 384 floats one by one in pydantic;
    * a :class:`Provenance` instance shared by many records is validated once while its
      field values stay the same.

    Anything else (a mapping, a subclass, an embedding that is not a plain list, a block
    that is not all ``float64``) takes ``coerce_record``, which accepts or refuses it
    exactly as before: the pydantic error of an invalid record, the validated list of a
    valid one.
    """

    def __init__(self, model: type[Any]) -> None:
        self.model: type[Any] = model
        self.out: list[Any] = []
        self._origin: list[Any] = []
        self._provenances: dict[int, tuple[Provenance, dict[str, Any], Provenance]] = {}
        self._pending: list[tuple[int, Any, list[Any]]] = []  # (record index, holder, vector)

    def add(self, value: object) -> None:
        index = len(self.out)
        self._origin.append(value)
        if type(value) is self.model:
            record, vectors = self._lean(value)
        else:
            record, vectors = coerce_record(self.model, value), []
        self.out.append(record)
        for holder, vector in vectors:
            self._pending.append((index, holder, vector))
        if len(self._pending) >= _VECTOR_CHUNK:
            self._check_vectors()

    def done(self) -> list[Any]:
        self._check_vectors()
        self._origin.clear()
        self._provenances.clear()
        return self.out

    def _provenance(self, value: object) -> object:
        if type(value) is not Provenance:  # a subclass, a dict, anything: as coerce_record
            return _plain(value) if isinstance(value, BaseModel) else value
        fields = value.__dict__
        cached = self._provenances.get(id(value))
        if cached is not None and cached[0] is value and cached[1] == fields:
            return cached[2]
        checked = Provenance.model_validate(dict(fields))
        self._provenances[id(value)] = (value, dict(fields), checked)  # keeps value alive
        return checked

    def _lean(self, value: Any) -> tuple[Any, list[tuple[Any, list[Any]]]]:
        fields = dict(value.__dict__)
        vector = fields.get("embedding")
        if vector is not None:
            if type(vector) is not list or not vector:
                return coerce_record(self.model, value), []
            fields["embedding"] = None
        fields["provenance"] = self._provenance(fields.get("provenance"))
        message_vectors: list[tuple[int, list[Any]]] = []
        if self.model is Episode:
            messages: list[Any] = []
            if type(fields.get("messages")) is not list:
                return coerce_record(self.model, value), []
            for position, message in enumerate(fields["messages"]):
                if type(message) is not Message:
                    return coerce_record(self.model, value), []
                plain = dict(message.__dict__)
                emb = plain["embedding"]
                if emb is not None:
                    if type(emb) is not list or not emb:
                        return coerce_record(self.model, value), []
                    plain["embedding"] = None
                    message_vectors.append((position, emb))
                messages.append(plain)
            fields["messages"] = messages
        record = self.model.model_validate(fields)
        vectors: list[tuple[Any, list[Any]]] = []
        if vector is not None:
            vectors.append((record, vector))
        for position, emb in message_vectors:
            vectors.append((record.messages[position], emb))
        return record, vectors

    def _check_vectors(self) -> None:
        pending, self._pending = self._pending, []
        by_width: dict[int, list[tuple[int, Any, list[Any]]]] = defaultdict(list)
        for item in pending:
            by_width[len(item[2])].append(item)
        for items in by_width.values():
            encoded = _encoded_block([vector for _, _, vector in items])
            if encoded is not None:
                for (_, holder, _), field in zip(items, encoded, strict=True):
                    holder.__dict__["embedding"] = field
                continue
            for index, holder, vector in items:  # one is off: find it, record by record
                one = _encoded_block([vector])
                if one is not None:
                    holder.__dict__["embedding"] = one[0]
                else:  # the exact check: raises the pydantic error, or accepts the value
                    self.out[index] = coerce_record(self.model, self._origin[index])


def _encoded_block(vectors: list[list[Any]]) -> list[Any] | None:
    """COPY fields of same-width vectors when all are finite float64 in range, else None."""
    try:
        block = np.array(vectors)
    except (TypeError, ValueError, OverflowError):
        return None
    if block.dtype != np.float64 or block.ndim != 2:
        return None
    if not norms_in_range(block):  # the exact per-record check names the problem
        return None
    return encode_vectors(block)


_gc_lock = threading.Lock()
_gc_pauses = [0, False]  # [active pauses, collector enabled before the first]


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    """The cyclic garbage collector paused for a synchronous validation pass.

    Validating 100,000 records allocates millions of objects that all survive, and each
    full collection walks every object of the process (the caller's records included):
    at that scale a third of the pass. Validation creates no reference cycles, so nothing
    is left for the collector. Nested and concurrent pauses (other threads) are counted:
    the collector's previous state comes back when the last one ends.
    """
    with _gc_lock:
        if _gc_pauses[0] == 0:
            _gc_pauses[1] = gc.isenabled()
            gc.disable()
        _gc_pauses[0] += 1
    try:
        yield
    finally:
        with _gc_lock:
            _gc_pauses[0] -= 1
            if _gc_pauses[0] == 0 and _gc_pauses[1]:
                gc.enable()


def _validated(model: type[M], values: Iterable[object]) -> list[M]:
    validator = _Validator(model)
    for value in values:
        validator.add(value)
    return validator.done()


_TABLE_OF: dict[str, tuple[str, type[Any], Callable[..., dict[str, Any]]]] = {
    "entity": ("entities", Entity, convert.entity_to_row),
    "episode": ("episodes", Episode, convert.episode_to_row),
    "fact": ("facts", SemanticFact, convert.fact_to_row),
    "theme": ("themes", Theme, convert.theme_to_row),
    "relationship": ("relationships", Relationship, convert.relationship_to_row),
}


class _Prepared:
    """One batch checked and encoded for COPY (built off the event loop, in a thread)."""

    __slots__ = ("items", "kind", "messages", "streams")

    def __init__(self, kind: str, items: list[Any], tenant: str) -> None:
        table, _, to_row = _TABLE_OF[kind]
        self.kind = kind
        # Later duplicates of an id win, as in one put_* call (and as in successive
        # batches): one INSERT ... ON CONFLICT DO UPDATE must not touch a row twice.
        items = list({r.id: r for r in items}.values())
        self.items = items
        self.messages: list[Any] = []
        if kind == "episode":
            seen: dict[uuid.UUID, uuid.UUID] = {}
            for ep in items:
                for m in ep.messages:
                    if seen.setdefault(m.id, ep.id) != ep.id:
                        raise DuplicateRecordError(f"message {m.id} appears in two episodes")
                    self.messages.append(m)
        # A provenance instance shared by many rows (the validator shares one per distinct
        # value) is encoded once. These are the batch's own validated records: nothing
        # else holds them, so an instance cannot change while the batch is encoded.
        shared: dict[int, tuple[Any, Encoded]] = {}

        def provenance(record: Any) -> Encoded:
            value = record.provenance
            hit = shared.get(id(value))
            if hit is None or hit[0] is not value:
                hit = shared[id(value)] = (value, encode_jsonb(convert.provenance_json(value)))
            return hit[1]

        self.streams: dict[str, tuple[bytes, int]] = {
            table: (
                encode_rows(
                    table, (to_row(r, tenant, provenance=provenance(r)) for r in items)
                ),
                len(items),
            )
        }
        if kind == "episode":
            rows = [r for e in items for r in convert.messages_to_rows(e, tenant)]
            self.streams["episode_messages"] = (encode_rows("episode_messages", rows), len(rows))


def _prepare(store: PostgresMemoryStore, kind: str, items: list[Any]) -> _Prepared:
    store._precheck(items, kind)
    prepared = _Prepared(kind, items, store.tenant_id)
    store._precheck(prepared.messages, "message")
    return prepared


async def _write_prepared(
    store: PostgresMemoryStore, batch: _Prepared, *, theme_references: bool = True
) -> dict[str, int]:
    kind, items = batch.kind, batch.items
    async with store._session() as session:
        await store._checked_dim(session, [*items, *batch.messages], kind)
        # Checked in the batch's own transaction too (bulk_import checked them all
        # before its first batch): the cited rows are locked FOR KEY SHARE here, so a
        # concurrent delete cannot leave the written rows dangling.
        if kind == "relationship":
            await store._check_endpoints(session, items)
        if kind == "fact":
            await check_fact_references(
                session, store.tenant_id, items, themes=theme_references
            )
        if kind == "episode":
            await session.execute(
                text(
                    "DELETE FROM episode_messages "
                    "WHERE tenant_id = :t AND episode_id = ANY(:ids)"
                ),
                {"t": store.tenant_id, "ids": [e.id for e in items]},
            )
        for table, (stream, _) in batch.streams.items():
            await _copy(session, table, stream)
    return {table: n for table, (_, n) in batch.streams.items()}


async def write_batch(
    store: PostgresMemoryStore,
    kind: str,
    records: Sequence[Any],
    *,
    validated: bool = False,
    theme_references: bool = True,
) -> dict[str, int]:
    """Upsert one batch of ``kind`` records with COPY, in the store's current transaction.

    The same checks as ``put_*`` (model, embedding width, edge endpoints, the entities,
    episodes and theme a fact cites, one episode per message). Used by
    :func:`bulk_import` and by ``lifecycle.import_`` on Postgres.

    Args:
        store: The target store.
        kind: ``entity``, ``episode``, ``fact``, ``theme`` or ``relationship``.
        records: The records (or mappings).
        validated: The records are fresh instances this very call chain built by
            validation (``import_`` parses them from JSON): do not validate them again.
        theme_references: Check the theme a fact cites now; ``False`` leaves it to the
            caller (an export lists facts before themes: ``import_`` checks them at the
            end, in the same unit of work).

    Returns:
        Rows written by table.
    """
    if kind not in _TABLE_OF:
        raise InvalidInputError(f"unknown record kind {kind!r}")
    model = _TABLE_OF[kind][1]
    items = list(records) if validated else [coerce_record(model, r) for r in records]
    if not items:
        return {}
    # Encoding runs in a worker thread: the event loop stays free, and a caller that
    # overlaps parsing with writing (``import_``) keeps both cores busy.
    prepared = await asyncio.to_thread(_prepare, store, kind, items)
    return await _write_prepared(store, prepared, theme_references=theme_references)


@traced("cycgraph.bulk_import", lambda report: {"rows": sum(report.counts.values())})
async def bulk_import(
    store: PostgresMemoryStore,
    *,
    entities: Iterable[Entity] = (),
    episodes: Iterable[Episode] = (),
    facts: Iterable[SemanticFact] = (),
    themes: Iterable[Theme] = (),
    relationships: Iterable[Relationship] = (),
    batch_size: int = 5000,
    defer_vector_indexes: bool = False,
) -> BulkImportReport:
    """Load many records into the store's tenant with COPY, one transaction per batch.

    Records are loaded in the order entities, episodes (with messages), facts, themes,
    relationships (so edges find their endpoints). Everything is validated before the
    first batch is written.

    Args:
        store: The target store (its tenant, its bind).
        entities: Entities (records or mappings; every input is validated).
        episodes: Episodes with their messages (and the messages' embeddings).
        facts: Facts.
        themes: Themes.
        relationships: Edges; endpoints must be stored or in ``entities``.
        batch_size: Records per transaction (messages count with their episode).
        defer_vector_indexes: Drop the HNSW indexes of the loaded tables first and
            rebuild them at the end (see the module docstring for the trade-off).

    Returns:
        Rows written per table, batches committed, HNSW indexes rebuilt.

    Raises:
        pydantic.ValidationError: An invalid record (nothing written).
        EmbeddingDimensionMismatchError: A vector of the wrong width (nothing written).
        DanglingReferenceError: An edge endpoint, or an entity, episode or theme a fact
            cites, that is neither stored nor in the load (nothing written; checked
            before the first batch).
        DuplicateRecordError: A message id of two episodes (nothing written) or already
            stored in another episode (its batch is not written).
    """
    if not isinstance(batch_size, int) or batch_size < 1:
        raise InvalidInputError(f"batch_size must be a positive int, got {batch_size!r}")
    if store._active_session() is not None:
        raise InvalidInputError("bulk_import commits per batch: call it outside a transaction")
    with _gc_paused():  # synchronous: no other task of this event loop runs meanwhile
        ents = _validated(Entity, entities)
        eps = _validated(Episode, episodes)
        fcts = _validated(SemanticFact, facts)
        thms = _validated(Theme, themes)
        rels = _validated(Relationship, relationships)
    seen: dict[uuid.UUID, uuid.UUID] = {}
    for ep in eps:
        for m in ep.messages:
            if seen.setdefault(m.id, ep.id) != ep.id:
                raise DuplicateRecordError(f"message {m.id} appears in two episodes")
    messages = [m for ep in eps for m in ep.messages]
    async with store._session() as session:
        store._precheck(ents, "entity")
        store._precheck(eps, "episode")
        store._precheck(messages, "message")
        store._precheck(fcts, "fact")
        store._precheck(thms, "theme")
        await store._checked_dim(session, [*ents, *eps, *messages, *fcts, *thms], "record")
        await _check_citations(store, session, ents, eps, thms, fcts, rels)
    loaded = ("entities", "episodes", "episode_messages", "facts", "themes")
    touched = [t for t, xs in zip(loaded, (ents, eps, eps, fcts, thms), strict=True) if xs]
    async with contextlib.AsyncExitStack() as stack:
        rebuilt: list[str] = []
        if defer_vector_indexes and touched:
            rebuilt = await stack.enter_async_context(deferred_vector_indexes(store, touched))
        counts, batches = await _load(
            store, batch_size, (("entity", ents), ("episode", eps), ("fact", fcts),
                                ("theme", thms), ("relationship", rels))
        )
    return BulkImportReport(counts=counts, batches=batches, vector_indexes_rebuilt=rebuilt)


async def _check_citations(
    store: PostgresMemoryStore, session: Any, ents: Sequence[Entity], eps: Sequence[Episode],
    thms: Sequence[Theme], fcts: Sequence[SemanticFact], rels: Sequence[Relationship],
) -> None:
    """Refuse, before the first batch, what the load would leave dangling.

    A fact's entities, episodes and theme, and an edge's endpoints, must be records of
    the load or already stored (the batches are committed one by one, so a reference
    checked only in its own batch would fail after earlier batches were written).
    """
    loading = {
        "entity": {e.id for e in ents}, "episode": {e.id for e in eps},
        "theme": {t.id for t in thms},
    }
    wanted: dict[str, dict[uuid.UUID, None]] = {"entity": {}, "episode": {}, "theme": {}}
    for f in fcts:
        wanted["entity"].update(dict.fromkeys(f.entity_ids))
        wanted["episode"].update(dict.fromkeys(f.source_episode_ids))
        if f.theme_id is not None:
            wanted["theme"][f.theme_id] = None
    for r in rels:
        wanted["entity"].update(dict.fromkeys((r.source_id, r.target_id)))
    missing: list[tuple[str, uuid.UUID]] = []
    for kind, table in (("entity", "entities"), ("episode", "episodes"), ("theme", "themes")):
        outside = [i for i in wanted[kind] if i not in loading[kind]]
        for start in range(0, len(outside), 10_000):
            chunk = outside[start : start + 10_000]
            found = {
                convert._uuid(i) for i in (await session.execute(
                    text(f"SELECT id FROM {table} WHERE tenant_id = :t AND id = ANY(:ids)"),
                    {"t": store.tenant_id, "ids": chunk},
                )).scalars()
            }
            missing += [(kind, i) for i in chunk if i not in found]
    if missing:
        raise DanglingReferenceError(
            "the load cites records that are neither loaded nor stored: "
            + ", ".join(f"{k} {i}" for k, i in missing[:20])
            + (f" (and {len(missing) - 20} more)" if len(missing) > 20 else ""),
            missing_ids=[i for _, i in missing],
        )


_WRITERS = 2
"""Batches of one record type written at once, each in its own transaction/connection."""


async def _write_one(store: PostgresMemoryStore, prepared: _Prepared) -> dict[str, int]:
    async with store.transaction():  # a task of its own: its own unit of work
        # Themes come after facts: a fact's theme was checked before the first batch.
        return await _write_prepared(store, prepared, theme_references=False)


async def _load(
    store: PostgresMemoryStore, batch_size: int, groups: Iterable[tuple[str, list[Any]]]
) -> tuple[dict[str, int], int]:
    counts = dict.fromkeys(("entities", "episodes", "episode_messages", "facts", "themes",
                            "relationships"), 0)
    batches = 0
    plan = [(kind, list(batch)) for kind, items in groups for batch in _batches(items, batch_size)]
    pending: asyncio.Future[_Prepared] | None = None
    writing: set[asyncio.Future[dict[str, int]]] = set()
    # Several connections only when the store owns an engine (a sessionmaker bound to one
    # connection, as in tests, must never run two statements at once).
    writers = _WRITERS if isinstance(store.sessionmaker.kw.get("bind"), AsyncEngine) else 1

    async def drain(until: int) -> None:
        nonlocal batches
        while len(writing) > until:
            done, _ = await asyncio.wait(writing, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                writing.discard(task)
                for table, n in task.result().items():  # raises a failed batch's error
                    counts[table] += n
                batches += 1

    try:
        # Pipelined: batch i+1 is encoded in a worker thread while earlier batches are
        # written, and two batches of a type are written at once on two connections (the
        # server's per-row work is most of a load). Types are loaded one after the other
        # (edges need their endpoints committed).
        for i, (kind, batch) in enumerate(plan):
            current = pending or asyncio.ensure_future(
                asyncio.to_thread(_prepare, store, kind, batch)
            )
            prepared = await current
            pending = None
            if i + 1 < len(plan):
                nxt_kind, nxt = plan[i + 1]
                pending = asyncio.ensure_future(
                    asyncio.to_thread(_prepare, store, nxt_kind, nxt)
                )
            if i > 0 and plan[i - 1][0] != kind:
                await drain(0)
            await drain(writers - 1)
            writing.add(asyncio.ensure_future(_write_one(store, prepared)))
        await drain(0)
    finally:
        leftovers: list[asyncio.Future[Any]] = [*writing]
        if pending is not None:
            leftovers.append(pending)
        for task in leftovers:
            task.cancel()
        for task in leftovers:
            with contextlib.suppress(BaseException):
                await task
    return counts, batches

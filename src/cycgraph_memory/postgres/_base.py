"""Shared plumbing of the Postgres backends: tenant, the unit of work, schema dimension.

The unit of work is shared by every backend object built on the same bind. While
``async with obj.transaction():`` is open, every call made from that task (context) through
ANY Postgres backend object (store, index, ledger, ...) built on the same ``AsyncEngine``,
``AsyncConnection`` or sessionmaker joins the one open session and commits or rolls back with
it. Objects on different binds never share a transaction.

Reads can go to another engine (``read_engine=``, e.g. a streaming replica): retrieval,
searches and listings run there, unless the task has a unit of
work open on the primary bind, which they join (read-your-writes), or is inside
``reads_on_primary()`` (reads that decide a write). Writes, units of work and
advisory locks always use the primary bind.

Every transaction also carries the tenant as the transaction-local setting
``cycgraph.tenant_id`` (``set_config(..., true)``), which the row-level security policies
of migration 0006 compare with each row's ``tenant_id``: the database itself keeps a
connection on the tenant its backend object names.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager, contextmanager
from contextvars import ContextVar
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, TypeVar

from sqlalchemy import literal_column, select, text
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from cycgraph_memory._ids import parse_id, parse_ids
from cycgraph_memory._validate import check_lock_name
from cycgraph_memory.errors import (
    ConnectionLostError,
    EmbeddingDimensionMismatchError,
    InvalidInputError,
    InvalidTenantError,
    InvalidTypeError,
    SchemaNotReadyError,
)
from cycgraph_memory.postgres import definer_lookups, driver_sql, statements
from cycgraph_memory.postgres._errors import translate_errors
from cycgraph_memory.postgres.schema import SchemaMetadataRow
from cycgraph_memory.retry import DEFAULT_RETRY, RetryPolicy, call_with_retry

__all__ = [
    "DEFAULT_TENANT",
    "TENANT_SETTING",
    "Bind",
    "PostgresBackend",
    "PostgresIndexMixin",
    "advisory_lock_key",
    "parse_id",
    "parse_ids",
    "validate_tenant",
]

DEFAULT_TENANT = "default"
"""Tenant used when none is given."""

TENANT_SETTING = "cycgraph.tenant_id"
"""Transaction-local setting naming the current tenant (read by the row-level security policies)."""

FLOAT_DIGITS_SETTING = ("extra_float_digits", "3")
"""Set with the tenant: ``jsonb`` built in SQL (the subgraph's edges, the expansion's rows)
prints ``double precision`` columns (a relationship's ``weight``) with the session's
``extra_float_digits``; at ``0`` (a server or pooler default) that is 15 significant digits,
and ``1/3`` read back as ``0.333333333333333``. ``3`` prints every double exactly on every
Postgres version (shortest exact form since 12); it changes no stored value."""

_TENANT_INFO_KEY = "cycgraph_tenant"  # session.info: tenant last set in this session's transaction
SEARCH_GUCS_INFO_KEY = "cycgraph_search_gucs"  # session.info: HNSW settings last set in it

GENERIC_ESTIMATE_TTL = 60.0
"""Seconds a table's generic-plan row estimate (asked of the planner) is reused."""

T = TypeVar("T")

_log = logging.getLogger(__name__)

_TENANT_RE = re.compile(r"[A-Za-z0-9_.:\-]{1,64}")

_NO_UNITS: Mapping[object, AsyncSession] = MappingProxyType({})
_UNITS_OF_WORK: ContextVar[Mapping[object, AsyncSession]] = ContextVar(
    "cycgraph_memory_pg_units_of_work", default=_NO_UNITS
)
"""Open unit-of-work sessions of the current task, keyed by the bind they were opened on."""

_PRIMARY_READS: ContextVar[bool] = ContextVar("cycgraph_memory_pg_primary_reads", default=False)
"""True inside :meth:`PostgresBackend.reads_on_primary`: reads skip the read engine."""

Bind = AsyncEngine | async_sessionmaker[AsyncSession]
"""What stores and indexes are built from: an engine or an injected sessionmaker."""

def advisory_lock_key(tenant_id: str, name: str) -> str:
    """The text hashed into the advisory lock of :meth:`PostgresBackend.exclusive`.

    It starts with the tenant (``cycgraph:<tenant>:<name>``): a lock is per tenant, so
    on a sharded deployment (Citus) it never needs a cluster-wide key.
    """
    return f"cycgraph:{tenant_id}:{name}"


def _maker(bind: object) -> async_sessionmaker[AsyncSession]:
    if isinstance(bind, AsyncEngine):
        return async_sessionmaker(bind, expire_on_commit=False)
    if isinstance(bind, async_sessionmaker):
        return bind
    raise InvalidTypeError(
        f"expected an AsyncEngine or an async_sessionmaker, got {type(bind).__name__}"
    )


def _key(maker: async_sessionmaker[AsyncSession]) -> object:
    """What units of work are keyed by: the maker's bind (engine, connection) or itself."""
    bind = maker.kw.get("bind")
    return bind if bind is not None else maker


def validate_tenant(tenant_id: object) -> str:
    """Return ``tenant_id`` when it is 1-64 characters of ``[A-Za-z0-9_.:-]``.

    Raises:
        InvalidTenantError: Anything else.
    """
    if not isinstance(tenant_id, str) or _TENANT_RE.fullmatch(tenant_id) is None:
        raise InvalidTenantError(
            f"tenant id must be 1-64 characters of [A-Za-z0-9_.:-], got {tenant_id!r}"
        )
    return tenant_id


async def _rollback_keeping_the_error(rollback: Callable[[], Awaitable[None]]) -> None:
    """Roll back while the block's exception propagates; that exception stays the one raised.

    A rollback fails when the connection is gone (the server then discarded the
    transaction: nothing was committed). Raising that ``ConnectionLostError`` would
    replace the caller's own exception with a retryable one, so a failed rollback is
    logged and dropped; the exception that ended the block propagates.
    """
    try:
        with translate_errors():
            await rollback()
    except ConnectionLostError as exc:
        _log.warning("rollback after an error failed, connection lost: %s", exc)


class PostgresBackend:
    """Common base: tenant validation, session scoping and the schema's embedding dim."""

    def __init__(
        self,
        bind: Bind,
        *,
        tenant_id: str = DEFAULT_TENANT,
        embedding_dim: int | None = None,
        retry: RetryPolicy | None = None,
        read_engine: Bind | None = None,
    ) -> None:
        self._tenant = validate_tenant(tenant_id)
        if retry is not None and not isinstance(retry, RetryPolicy):
            raise InvalidInputError(f"retry must be a RetryPolicy, got {type(retry).__name__}")
        self._retry = DEFAULT_RETRY if retry is None else retry
        self._sessionmaker: async_sessionmaker[AsyncSession] = _maker(bind)
        self._read_sessionmaker = None if read_engine is None else _maker(read_engine)
        if embedding_dim is not None and (
            not isinstance(embedding_dim, int) or embedding_dim < 1
        ):
            raise InvalidInputError(f"embedding_dim must be a positive int, got {embedding_dim!r}")
        self._configured_dim = embedding_dim
        self._schema_dim: int | None = None
        self._uow_key: object = _key(self._sessionmaker)
        self._read_key: object | None = (
            None if self._read_sessionmaker is None else _key(self._read_sessionmaker)
        )
        # Per table: the rows the planner expects for an unknown tenant (None: unknown)
        # and when it was asked (time.monotonic()); see _set_tenant.
        self._generic_estimates: dict[str, tuple[float | None, float]] = {}
        # Per session bind (engine or connection): whether GIN lookups go through the
        # functions of migration 0016 there (definer_lookups.PROBE); see _definer.
        self._definer_modes: dict[object, bool] = {}

    @property
    def tenant_id(self) -> str:
        """The tenant whose rows this object reads and writes."""
        return self._tenant

    @property
    def retry_policy(self) -> RetryPolicy:
        """How idempotent operations outside a unit of work are retried."""
        return self._retry

    @property
    def sessionmaker(self) -> async_sessionmaker[AsyncSession]:
        """The session factory every operation uses."""
        return self._sessionmaker

    @property
    def read_sessionmaker(self) -> async_sessionmaker[AsyncSession] | None:
        """The session factory of the read engine (``None``: reads use the primary)."""
        return self._read_sessionmaker

    def _active_session(self) -> AsyncSession | None:
        """The open unit-of-work session on this object's bind in this task, if any."""
        return _UNITS_OF_WORK.get().get(self._uow_key)

    @contextmanager
    def reads_on_primary(self) -> Iterator[None]:
        """Send the reads of this task to the primary bind for the block.

        For callers that decide a write from what they read outside a unit of work
        (re-embedding reads the records it rewrites; an import checks what it wrote): a
        lagging read engine would hand them stale rows. It applies to every Postgres
        object's reads in the task (and tasks started inside the block); without a read
        engine it changes nothing.
        """
        token = _PRIMARY_READS.set(True)
        try:
            yield
        finally:
            _PRIMARY_READS.reset(token)

    @asynccontextmanager
    async def read_scope(self) -> AsyncIterator[None]:
        """Share one session (one transaction) between the read calls of the block.

        ``retrieve_memory`` reads through several store and index calls; inside this scope
        they take one connection checkout, one ``BEGIN`` and one ``COMMIT`` instead of one
        of each per call. Every Postgres object on the same binds joins the scope. Inside
        an open :meth:`transaction` it simply joins it (no savepoint). With a read engine
        the shared session is a transaction on it (writes made inside the block,
        such as the touch of served facts, still go to the primary in their own
        transaction).
        """
        if self._active_session() is not None:
            yield
            return
        if self._read_key is None or self._read_sessionmaker is None or _PRIMARY_READS.get():
            async with self.transaction():
                yield
            return
        if _UNITS_OF_WORK.get().get(self._read_key) is not None:
            yield
            return
        session = self._read_sessionmaker()
        units = dict(_UNITS_OF_WORK.get())
        units[self._read_key] = session
        token = _UNITS_OF_WORK.set(MappingProxyType(units))
        try:
            with translate_errors():
                await session.begin()
            yield
        finally:
            _UNITS_OF_WORK.reset(token)
            with translate_errors():
                await session.rollback()  # reads only: nothing to commit
                await session.close()

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[None]:
        """Unit of work: ``async with obj.transaction(): ...`` commits all or nothing.

        Every Postgres backend object built on the same bind (engine, connection or
        sessionmaker) joins the open unit of work from the same task, so a store, an index
        and a ledger can change data together. Nested blocks become savepoints: an exception
        inside a nested block rolls back only that block (and propagates). The block's
        exception is the one raised even when the rollback cannot reach the server (the
        connection died: the server discarded the transaction).
        """
        active = self._active_session()
        if active is not None:
            with translate_errors():
                nested = await active.begin_nested()
            try:
                yield
            except BaseException:
                # A rolled-back savepoint also reverts a set_config made inside it.
                active.info.pop(_TENANT_INFO_KEY, None)
                active.info.pop(SEARCH_GUCS_INFO_KEY, None)
                if nested.is_active:
                    await _rollback_keeping_the_error(nested.rollback)
                raise
            with translate_errors():
                await nested.commit()
            return
        session = self._sessionmaker()
        units = dict(_UNITS_OF_WORK.get())
        units[self._uow_key] = session
        token = _UNITS_OF_WORK.set(MappingProxyType(units))
        try:
            with translate_errors():
                # The tenant is set by the first statement's _session() (with any other
                # transaction-local settings it needs, in one round trip).
                await session.begin()
            try:
                yield
            except BaseException:
                await _rollback_keeping_the_error(session.rollback)
                raise
            with translate_errors():
                await session.commit()
        finally:
            _UNITS_OF_WORK.reset(token)
            with translate_errors():
                await session.close()

    @asynccontextmanager
    async def exclusive(self, name: str) -> AsyncIterator[None]:
        """Run a maintenance pass alone: a unit of work holding a per-tenant advisory lock.

        Opens (or joins) :meth:`transaction` and takes
        ``pg_advisory_xact_lock`` on ``(tenant, name)``; the lock is released when the
        outermost transaction ends. Two workers (any process, any machine) running the same
        pass for one tenant are serialised: the second waits, then reads the first one's
        committed result.

        Raises:
            InvalidTypeError: ``name`` is not a ``str``.
            InvalidInputError: ``name`` holds a NUL or a lone surrogate.
        """
        key = advisory_lock_key(self._tenant, check_lock_name(name))
        async with self.transaction():
            async with self._session() as session:
                await session.execute(
                    text("SELECT pg_advisory_xact_lock(hashtextextended(:key, 0))"),
                    {"key": key},
                )
            yield

    @asynccontextmanager
    async def _session(
        self, settings: tuple[tuple[str, str], ...] = (), *, read: bool = False
    ) -> AsyncIterator[AsyncSession]:
        """Yield the active unit-of-work session, or a fresh session in its own transaction.

        The tenant (and ``settings``, transaction-local ``(name, value)`` pairs such as the
        HNSW search settings) are set before the first statement, in one round trip, and
        not again while the transaction already has them. ``read=True`` (reads only): with
        a read engine, no unit of work open on the primary and outside
        :meth:`reads_on_primary`, the session is the read scope's, or a fresh transaction
        on the read engine.
        """
        active = self._active_session()
        if active is None and read and self._read_key is not None and not _PRIMARY_READS.get():
            active = _UNITS_OF_WORK.get().get(self._read_key)
            if active is None:
                assert self._read_sessionmaker is not None
                with translate_errors():
                    async with self._read_sessionmaker() as session, session.begin():
                        await self._set_tenant(session, settings)
                        yield session
                return
        if active is not None:
            with translate_errors():
                await self._set_tenant(active, settings)
                yield active
            return
        with translate_errors():
            async with self._sessionmaker() as session, session.begin():
                await self._set_tenant(session, settings)
                yield session

    def _read(
        self, settings: tuple[tuple[str, str], ...] = ()
    ) -> AbstractAsyncContextManager[AsyncSession]:
        """:meth:`_session` for a read (the read engine when there is one; see there)."""
        return self._session(settings, read=True)

    async def _set_tenant(
        self, session: AsyncSession, settings: tuple[tuple[str, str], ...] = ()
    ) -> None:
        """Make ``cycgraph.tenant_id`` name this object's tenant for the session's transaction.

        ``settings`` are set in the same statement (``SEARCH_GUCS_INFO_KEY`` remembers them).
        """
        tenant_set = session.info.get(_TENANT_INFO_KEY) == self._tenant
        settings_set = not settings or session.info.get(SEARCH_GUCS_INFO_KEY) == settings
        if tenant_set and settings_set:
            return
        tenant: tuple[tuple[str, str], ...] = (
            (TENANT_SETTING, self._tenant), FLOAT_DIGITS_SETTING
        )
        if not settings or settings_set:
            pairs = tenant
        else:
            pairs = settings if tenant_set else (*tenant, *settings)
        values = dict(pairs)
        params: dict[str, object] = {f"v{i}": v for i, (_, v) in enumerate(pairs)}
        corpus = values.get(statements.KNN_CORPUS_SETTING)
        if corpus is None or not values.get(statements.PLAN_CACHE_MODE, "").startswith(
            statements.AUTO_PLAN_PREFIX
        ):
            await driver_sql.execute(
                session, statements.settings(tuple(k for k, _ in pairs)), params
            )
        else:
            # plan_cache_mode chosen in the statement (statements.settings) from the
            # planner's guess for an unknown tenant, asked once a minute per table.
            known = self._generic_estimates.get(corpus)
            now = time.monotonic()
            if known is None or now - known[1] >= GENERIC_ESTIMATE_TTL:
                known = (await self._generic_rows(session, corpus), now)
                self._generic_estimates[corpus] = known
            params["est"] = known[0]
            await driver_sql.execute(
                session, statements.settings(tuple(k for k, _ in pairs), True), params
            )
        if settings and not settings_set:
            session.info[SEARCH_GUCS_INFO_KEY] = settings
        session.info[_TENANT_INFO_KEY] = self._tenant

    async def _generic_rows(self, session: AsyncSession, table: str) -> float | None:
        """Rows a generic plan expects ``tenant_id = $1`` to match in ``table`` (the planner's).

        Four short statements (``statements.generic_rows_probe``) in the session's
        transaction, a fifth when a failed transaction left the prepared statement behind.
        None when the plan has no estimate.
        """
        check, prepare, explain, deallocate = statements.generic_rows_probe(table)
        conn = await session.connection()
        if (await conn.exec_driver_sql(check)).scalar():
            await conn.exec_driver_sql(deallocate)
        await conn.exec_driver_sql(prepare)
        document: object = (await conn.exec_driver_sql(explain)).scalar()
        await conn.exec_driver_sql(deallocate)
        plans = json.loads(document) if isinstance(document, str) else document
        if isinstance(plans, list) and plans and isinstance(plans[0], dict):
            rows = plans[0].get("Plan", {}).get("Plan Rows")
            if isinstance(rows, int | float):
                return float(rows)
        return None

    async def _run(self, work: Callable[[AsyncSession], Awaitable[T]], name: str) -> T:
        """Run ``work(session)``; outside a unit of work, retry it per the retry policy.

        Only for idempotent work: each attempt is its own transaction, and a failed attempt
        (deadlock, serialization failure, lost connection) committed nothing. Inside an open
        unit of work the error propagates, since only the whole unit can be retried.
        """

        async def attempt() -> T:
            async with self._session() as session:
                return await work(session)

        if self._active_session() is not None:
            return await attempt()
        return await call_with_retry(attempt, self._retry, name=name)

    async def _definer(self, session: AsyncSession) -> bool:
        """Whether this session's GIN lookups go through the functions of migration 0016.

        True when the connected role is under row-level security, may execute the
        functions and their owner is not (:data:`definer_lookups.PROBE`). Asked once per
        object and session bind (the :meth:`_dim` read asks it in the same statement).
        """
        key = session.bind
        known = self._definer_modes.get(key)
        if known is None:
            known = bool((await session.execute(text(definer_lookups.PROBE))).scalar())
            self._definer_modes[key] = known
        return known

    async def _dim(self, session: AsyncSession) -> int:
        """Return the schema's embedding dimension (read once, then cached).

        The same statement answers :meth:`_definer` for the session's bind.
        """
        if self._schema_dim is None:
            result: Any = await session.execute(
                select(SchemaMetadataRow.value, literal_column(f"({definer_lookups.PROBE})"))
                .where(SchemaMetadataRow.key == "embedding_dim")
            )
            found = result.one_or_none()
            value = None if found is None else found[0]
            if found is not None:
                self._definer_modes.setdefault(session.bind, bool(found[1]))
            if value is None:
                raise SchemaNotReadyError(
                    "schema_metadata has no embedding_dim: run alembic upgrade head"
                )
            stored = int(value)
            if self._configured_dim is not None and self._configured_dim != stored:
                raise EmbeddingDimensionMismatchError(
                    stored, self._configured_dim, "configured embedding_dim vs database schema"
                )
            self._schema_dim = stored
        return self._schema_dim

    def _known_dim(self) -> int | None:
        return self._schema_dim if self._schema_dim is not None else self._configured_dim

    def _check_vector(self, vector: Sequence[float] | None, dim: int | None, context: str) -> None:
        if vector is not None and dim is not None and len(vector) != dim:
            raise EmbeddingDimensionMismatchError(dim, len(vector), context)


class PostgresIndexMixin(PostgresBackend):
    """Base of the ``PostgresMemoryIndex`` mixins: the index members they call.

    ``PostgresMemoryIndex`` defines them; declared here once so that each mixin type-checks
    on its own.
    """

    if TYPE_CHECKING:

        @property
        def exact_below(self) -> int:
            """Tenants below this many documents are searched exactly."""

        @property
        def ef_search(self) -> int:
            """Default ``hnsw.ef_search`` (the index's)."""

        def _query_vector(
            self, embedding: Sequence[float], dim: int | None, where: str, *,
            checked: bool = False,
        ) -> list[float]: ...

        def _search_settings(
            self, ef: int, corpus: str = ..., *, knn: bool = ...
        ) -> tuple[tuple[str, str], ...]: ...

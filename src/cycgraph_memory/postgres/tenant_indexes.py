"""Dedicated vector indexes: a tenant's own HNSW graphs (partial indexes).

Every tenant's rows share one HNSW graph per table. A kNN of a tenant holding a few
percent of a shared graph either walks the graph filtered to the tenant (its nearest
neighbours sit among other tenants' rows: recall@10 0.82-0.96 measured for tenants of
6,000-33,000 facts in a 1,000,000-fact table) or, below ``exact_below`` documents, reads
every one of its vectors (exact, but 40-90 ms for 19,000-33,000 facts: each vector is a
TOAST read). A dedicated index is the same HNSW index restricted to one tenant
(``CREATE INDEX ... WHERE tenant_id = '<tenant>'``): its graph holds only that tenant's
rows, so a kNN walks it like a single-tenant table (recall@10 1.000, ~1 ms of execution
for the 33,398-fact tenant above).

The searches find one by name: ``ix_<table>_hnsw_t_<first 16 hex digits of
md5(tenant_id)>``, valid (``pg_index.indisvalid``). For a tenant with one on a table, the
kNN of that table skips the exact scan, keeps the unscaled ``hnsw.ef_search`` and is
planned for this tenant (a custom plan: only then can the planner use a partial index).
Without one, nothing changes. Dropping one (or a failed build, which leaves an invalid
index) sends the tenant back to the shared graph or the exact scan at once.

Building one is an operator's step, like ``ANALYZE`` after a bulk load: it needs the
tables' owner (DDL), runs ``CREATE INDEX CONCURRENTLY`` (writes continue; it cannot run
inside a transaction) and costs a few seconds per 10,000 rows. Every write of the tenant
then updates two HNSW graphs (the shared one and its own). Re-embedding into a new column
drops the dedicated indexes with the old column: build them again afterwards.
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, ParamSpec, TypeVar

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from cycgraph_memory.errors import InvalidInputError
from cycgraph_memory.postgres._base import validate_tenant
from cycgraph_memory.postgres._errors import translate_errors

_P = ParamSpec("_P")
_T = TypeVar("_T")

__all__ = [
    "DEDICATE_MIN_DOCUMENTS",
    "KNN_TABLES",
    "DedicatedIndex",
    "dedicate_large_tenants",
    "dedicate_vector_indexes",
    "dedicated_index_name",
    "drop_dedicated_vector_indexes",
    "list_dedicated_vector_indexes",
]

KNN_TABLES: tuple[str, ...] = ("entities", "themes", "episodes", "episode_messages", "facts")
"""The tables searched by vector, in the order their dedicated indexes are built (facts,
the table every retrieval searches, last)."""

DEDICATE_MIN_DOCUMENTS = 10_000
"""Default size (facts) from which :func:`dedicate_large_tenants` gives a tenant its own
indexes."""

_PREFIX = "ix_{table}_hnsw_t_"
_COMMENT = "cycgraph-memory dedicated vector index of tenant "
_CREATE = re.compile(r"^CREATE INDEX (\S+) ON (.+)$", re.DOTALL)
_PREDICATE = re.compile(r"\(tenant_id = '((?:[^']|'')*)'::text\)")


_INT64_MAX = 2**63 - 1


def _translating(fn: Callable[_P, Awaitable[_T]]) -> Callable[_P, Awaitable[_T]]:
    """Database errors of ``fn`` as the library's (``StorageError`` and its subclasses).

    These functions work on a raw engine, outside the store's error translation: a
    missing schema, a role that does not own the tables or a lost server would otherwise
    surface as SQLAlchemy exceptions.
    """

    @functools.wraps(fn)
    async def wrapper(*args: _P.args, **kwargs: _P.kwargs) -> _T:
        with translate_errors():
            return await fn(*args, **kwargs)

    return wrapper


@dataclass(frozen=True)
class DedicatedIndex:
    """One dedicated vector index: its tenant, table, name and whether it is usable."""

    tenant_id: str
    table: str
    index_name: str
    valid: bool


def dedicated_index_name(table: str, tenant_id: str) -> str:
    """The name the searches look for: ``ix_<table>_hnsw_t_<md5(tenant_id)[:16]>``."""
    if table not in KNN_TABLES:
        raise InvalidInputError(f"no vector search on table {table!r}; one of {KNN_TABLES}")
    digest = hashlib.md5(validate_tenant(tenant_id).encode("utf-8")).hexdigest()[:16]
    return _PREFIX.format(table=table) + digest


def _check_tables(tables: Sequence[str] | None) -> list[str]:
    if tables is None:
        return list(KNN_TABLES)
    if isinstance(tables, str):
        raise InvalidInputError("tables must be a sequence of table names, not a string")
    wanted = set(tables)
    unknown = sorted(wanted - set(KNN_TABLES))
    if unknown:
        raise InvalidInputError(f"no vector search on {unknown}; tables are {KNN_TABLES}")
    return [t for t in KNN_TABLES if t in wanted]


async def _shared_definition(conn: Any, table: str) -> str | None:
    """``pg_get_indexdef`` of the table's shared HNSW index (plain or halfvec)."""
    row = (
        await conn.execute(
            text(
                "SELECT pg_get_indexdef(c.oid) FROM pg_class c "
                "JOIN pg_index i ON i.indexrelid = c.oid "
                "WHERE c.relname IN (:plain, :half) AND i.indrelid = to_regclass(:table) "
                "AND i.indpred IS NULL AND i.indisvalid "
                "ORDER BY c.relname LIMIT 1"
            ),
            {"plain": f"ix_{table}_embedding_hnsw",
             "half": f"ix_{table}_embedding_hnsw_halfvec", "table": table},
        )
    ).first()
    return None if row is None else str(row[0])


async def _index_state(conn: Any, name: str) -> bool | None:
    """``True`` valid, ``False`` invalid (a failed build), ``None`` absent."""
    row = (
        await conn.execute(
            text("SELECT i.indisvalid FROM pg_index i WHERE i.indexrelid = to_regclass(:n)"),
            {"n": name},
        )
    ).first()
    return None if row is None else bool(row[0])


@_translating
async def dedicate_vector_indexes(
    engine: AsyncEngine, tenant_id: str, *, tables: Sequence[str] | None = None
) -> list[str]:
    """Build the tenant's dedicated vector indexes that are missing; return their names.

    One ``CREATE INDEX CONCURRENTLY`` per table (default: every searched table), each a
    copy of the table's shared HNSW index (same operator class, ``m`` and
    ``ef_construction``) restricted to the tenant. An index left invalid by an earlier
    failed build is dropped and built again; a valid one is kept. Idempotent.

    A table without a shared HNSW index (a schema too wide for HNSW, or an index
    dropped by hand) is skipped: there is nothing to copy.

    Raises:
        InvalidInputError: An invalid tenant id or table name.
        StorageError: The database refused (e.g. a role that does not own the tables).
    """
    tenant = validate_tenant(tenant_id)
    built: list[str] = []
    async with engine.connect() as conn:
        auto = await conn.execution_options(isolation_level="AUTOCOMMIT")
        for table in _check_tables(tables):
            name = dedicated_index_name(table, tenant)
            state = await _index_state(auto, name)
            if state:
                continue
            definition = await _shared_definition(auto, table)
            if definition is None:
                continue
            match = _CREATE.match(definition)
            if match is None:  # pragma: no cover - pg_get_indexdef's fixed form
                raise InvalidInputError(f"unexpected index definition: {definition}")
            if state is False:
                await auto.exec_driver_sql(f'DROP INDEX CONCURRENTLY IF EXISTS "{name}"')
            # DDL takes no bind parameters: the tenant is a quoted literal, sent as the
            # driver's text (``text()`` would read ``:name`` in a tenant id as a bind).
            literal = "'" + tenant.replace("'", "''") + "'"
            await auto.exec_driver_sql(
                f'CREATE INDEX CONCURRENTLY "{name}" ON {match.group(2)} '
                f"WHERE (tenant_id = {literal})"
            )
            comment = "'" + (_COMMENT + tenant).replace("'", "''") + "'"
            await auto.exec_driver_sql(f'COMMENT ON INDEX "{name}" IS {comment}')
            built.append(name)
    return built


@_translating
async def drop_dedicated_vector_indexes(
    engine: AsyncEngine, tenant_id: str, *, tables: Sequence[str] | None = None
) -> list[str]:
    """Drop the tenant's dedicated vector indexes (``DROP INDEX CONCURRENTLY``).

    Its searches go back to the shared graphs (or the exact scan) at once. Returns the
    names dropped.
    """
    tenant = validate_tenant(tenant_id)
    dropped: list[str] = []
    async with engine.connect() as conn:
        auto = await conn.execution_options(isolation_level="AUTOCOMMIT")
        for table in reversed(_check_tables(tables)):  # facts first: searches leave it
            name = dedicated_index_name(table, tenant)
            if await _index_state(auto, name) is None:
                continue
            await auto.exec_driver_sql(f'DROP INDEX CONCURRENTLY IF EXISTS "{name}"')
            dropped.append(name)
    return dropped


@_translating
async def list_dedicated_vector_indexes(engine: AsyncEngine) -> list[DedicatedIndex]:
    """Every dedicated vector index of the database, by tenant then table.

    Read from the catalog: the partial HNSW indexes whose predicate is one tenant and
    whose name is the one the searches look for (so one rebuilt from its definition,
    e.g. by ``deferred_vector_indexes``, is listed too).
    """
    async with engine.connect() as conn:
        rows = (
            await conn.execute(
                text(
                    "SELECT c.relname, t.relname, i.indisvalid, "
                    "pg_get_expr(i.indpred, i.indrelid) "
                    "FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
                    "JOIN pg_class t ON t.oid = i.indrelid "
                    "WHERE c.relname LIKE 'ix\\_%\\_hnsw\\_t\\_%' "
                    "AND i.indpred IS NOT NULL AND pg_table_is_visible(t.oid)"
                )
            )
        ).all()
    out: list[DedicatedIndex] = []
    for name, table, valid, predicate in rows:
        match = _PREDICATE.fullmatch(str(predicate))
        if match is None or str(table) not in KNN_TABLES:
            continue
        tenant = match.group(1).replace("''", "'")
        try:
            expected = dedicated_index_name(str(table), tenant)
        except InvalidInputError:  # not a tenant id of ours: someone else's index
            continue
        if expected != name:
            continue
        out.append(DedicatedIndex(tenant, str(table), str(name), bool(valid)))
    order = {t: i for i, t in enumerate(KNN_TABLES)}
    return sorted(out, key=lambda d: (d.tenant_id, order[d.table]))


@_translating
async def dedicate_large_tenants(
    engine: AsyncEngine, *, min_documents: int = DEDICATE_MIN_DOCUMENTS
) -> dict[str, list[str]]:
    """Give every tenant with at least ``min_documents`` facts its dedicated indexes.

    Tenants are sized by their facts in ``text_search_corpora`` (kept by triggers on
    every write). Tenants that already have all of theirs are skipped without DDL.
    Returns the indexes built, by tenant (tenants with nothing to build omitted). A
    ``min_documents`` past 64 bits selects no tenant (no count reaches it).

    Raises:
        InvalidInputError: ``min_documents`` is not an int >= 1.
        StorageError: The database refused (``SchemaNotReadyError`` without the schema).
    """
    if isinstance(min_documents, bool) or not isinstance(min_documents, int) or (
        min_documents < 1
    ):
        raise InvalidInputError(f"min_documents must be an int >= 1, got {min_documents!r}")
    async with engine.connect() as conn:
        tenants = [
            str(r[0])
            for r in (
                await conn.execute(
                    text(
                        "SELECT tenant_id FROM text_search_corpora "
                        "WHERE corpus = 'facts' AND documents >= :n "
                        "ORDER BY documents DESC, tenant_id"
                    ),
                    {"n": min(min_documents, _INT64_MAX)},
                )
            ).all()
        ]
    out: dict[str, list[str]] = {}
    for tenant in tenants:
        built = await dedicate_vector_indexes(engine, tenant)
        if built:
            out[tenant] = built
    return out

"""Postgres side of re-embedding: vector rewrites and the width change (staging + swap).

``PostgresMemoryStore.write_embeddings`` / ``recompute_theme_centroids`` delegate here.

Why a staging TABLE: rewriting a vector in place (``UPDATE facts SET embedding = ...``)
creates a new row version, and Postgres adds it to EVERY index of the table, including
the HNSW index (a graph search per row: measured ~4-8 ms a row, 100,000 facts = minutes).
Even writing a staging column of the same table does (the rows are too wide to be
updated in place). So ``reembed(..., target="next")`` only INSERTs (COPY) into
``embedding_staging``, a table without a vector index, and the rows themselves are
rewritten once, in :func:`finish_width_change`:

1. check that every listed tenant's rows with a vector have a staged one;
2. per table, drop the HNSW index of the old column (vector searches keep answering from
   the old vectors, by exact scan), fill ``embedding_next`` from the staging table in one
   set-based UPDATE per tenant, build the HNSW index of the new column (with
   ``HNSW_BUILD_MEMORY``);
3. in one transaction: lock the vector tables, check again that no row of a listed tenant
   was written since step 1 without a new vector (an ingest during the fill; otherwise
   ``InvalidInputError``: nothing is swapped, the old HNSW indexes are rebuilt, run
   ``reembed(..., target="next")`` and this step again), drop the old columns, rename the
   new ones and their indexes, set ``embedding_dim`` in ``schema_metadata``, drop the
   staging table;
4. fit each listed tenant's stored theme calibration again on its new vectors.

If step 2 or step 3 fails, the old HNSW indexes are rebuilt and nothing is swapped.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from sqlalchemy import Text, bindparam, text
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.ext.asyncio import AsyncEngine

from cycgraph_memory._validate import norms_in_range
from cycgraph_memory.errors import (
    EmbeddingDimensionMismatchError,
    InvalidInputError,
    SchemaNotReadyError,
)
from cycgraph_memory.hierarchy.calibration import refit_theme_calibration
from cycgraph_memory.postgres._base import validate_tenant
from cycgraph_memory.postgres._copy_binary import encode_columns
from cycgraph_memory.postgres.schema import HNSW_EF_CONSTRUCTION, HNSW_M, MAX_VECTOR_HNSW_DIM
from cycgraph_memory.records import QUARANTINE_TAG

if TYPE_CHECKING:
    from cycgraph_memory.postgres.store import PostgresMemoryStore

__all__ = [
    "HNSW_BUILD_MEMORY",
    "NEXT_COLUMN",
    "STAGING_TABLE",
    "abort_width_change",
    "begin_width_change",
    "finish_width_change",
    "recompute_theme_centroids",
    "write_embeddings",
]

_log = logging.getLogger(__name__)

_VECTOR_TABLES = {
    "entity": "entities",
    "episode": "episodes",
    "message": "episode_messages",
    "fact": "facts",
    "theme": "themes",
}
NEXT_COLUMN = "embedding_next"
"""Column the new vectors are moved into at the swap (exists only during a width change)."""
STAGING_TABLE = "embedding_staging"
"""Table ``reembed(..., target="next")`` writes (exists only during a width change)."""

_POLICY = "cycgraph_tenant_isolation"
_TENANT_CHECK = "tenant_id = current_setting('cycgraph.tenant_id', true)"
HNSW_BUILD_MEMORY = "1GB"
"""``maintenance_work_mem`` of the HNSW builds after a load or a swap: pgvector builds far
faster when the whole graph fits in it (~2.5 kB a 384-d vector: 1 GB holds ~400,000).
Only what a build needs is allocated; lower it on a small server."""


def _column(target: str) -> str:
    if target == "current":
        return "embedding"
    if target == "next":
        return NEXT_COLUMN
    raise InvalidInputError(f"target must be 'current' or 'next', got {target!r}")


async def _next_dim(session: Any) -> int | None:
    value = (
        await session.execute(
            text("SELECT value FROM schema_metadata WHERE key = 'embedding_dim_next'")
        )
    ).scalar_one_or_none()
    return None if value is None else int(value)


async def write_embeddings(
    store: PostgresMemoryStore,
    kind: str,
    vectors: Mapping[uuid.UUID, Sequence[float]],
    *,
    target: str,
) -> int:
    """Write new vectors of ``kind`` rows: in place, or staged for a width change.

    Binary COPY into a temporary table, then one set-based statement: an UPDATE of the
    vector column (``current``) or an upsert into the staging table (``next``, only ids
    that exist; nothing else of the row is touched). Returns the rows written.
    """
    table = _VECTOR_TABLES.get(kind)
    if table is None:
        raise InvalidInputError(f"unknown record kind {kind!r}")
    _column(target)
    if not vectors:
        return 0
    async with store._session() as session:
        if target == "current":
            dim = await store._dim(session)
        else:
            next_dim = await _next_dim(session)
            if next_dim is None:
                raise SchemaNotReadyError("no width change in progress: call begin_width_change")
            dim = next_dim
        rows = list(zip(vectors, _checked_matrix(kind, vectors, dim), strict=True))
        await session.execute(text("DROP TABLE IF EXISTS _cg_stage_vectors"))
        await session.execute(
            text(f"CREATE TEMP TABLE _cg_stage_vectors (id uuid, e vector({dim})) ON COMMIT DROP")
        )
        conn = await session.connection()
        raw = await conn.get_raw_connection()
        driver: Any = raw.driver_connection
        stream = encode_columns(("uuid", "vector"), rows)
        await driver.copy_to_table(
            "_cg_stage_vectors", source=memoryview(stream), columns=["id", "e"], format="binary"
        )
        if target == "current":
            stmt = (
                f"UPDATE {table} t SET embedding = s.e FROM _cg_stage_vectors s "
                "WHERE t.tenant_id = :tenant AND t.id = s.id"
            )
        else:
            stmt = (
                f"INSERT INTO {STAGING_TABLE} (tenant_id, kind, id, embedding) "
                f"SELECT :tenant, '{kind}', s.id, s.e FROM _cg_stage_vectors s "
                f"WHERE EXISTS (SELECT 1 FROM {table} t "
                "WHERE t.tenant_id = :tenant AND t.id = s.id) "
                "ORDER BY s.id "
                "ON CONFLICT (tenant_id, kind, id) DO UPDATE SET embedding = EXCLUDED.embedding"
            )
        result = await session.execute(text(stmt), {"tenant": store.tenant_id})
        return int(getattr(result, "rowcount", 0) or 0)


def _checked_matrix(
    kind: str, vectors: Mapping[uuid.UUID, Sequence[float]], dim: int
) -> np.ndarray[Any, Any]:
    """The vectors as one float32 matrix (big-endian, COPY's layout), checked in numpy."""
    for rid, v in vectors.items():
        if len(v) != dim:
            raise EmbeddingDimensionMismatchError(dim, len(v), f"{kind} {rid}")
    try:
        m = np.asarray(list(vectors.values()), dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise InvalidInputError(f"{kind}: embeddings must be sequences of numbers") from exc
    for rid, row in zip(vectors, m, strict=True):
        if not norms_in_range(row):
            raise InvalidInputError(
                f"{kind} {rid}: embeddings must be finite numbers with a Euclidean norm "
                "of at most 1e19 (MAX_EMBEDDING_NORM)"
            )
    return m.astype(">f4")


async def recompute_theme_centroids(store: PostgresMemoryStore, *, target: str) -> int:
    """Set every theme's vector (of ``target``) to its servable member facts' unit-mean, in SQL.

    Servable members only (``invalidated_by IS NULL``, not tagged ``quarantined``), as every
    theme writer computes centroids; NULL when no such member has a vector.
    """
    _column(target)
    centre = (
        "CASE WHEN count(v.e) = 0 THEN NULL ELSE l2_normalize(sum(l2_normalize(v.e))) END"
    )
    if target == "current":
        stmt = (
            f"UPDATE themes t SET embedding = c.centre FROM ("
            f"  SELECT th.id, (SELECT {centre} FROM (SELECT f.embedding AS e FROM facts f"
            "      WHERE f.tenant_id = th.tenant_id AND f.id = ANY(th.fact_ids)"
            "        AND f.invalidated_by IS NULL AND NOT (f.tags @> :quarantined)) v)"
            " AS centre"
            "  FROM themes th WHERE th.tenant_id = :tenant"
            ") c WHERE t.tenant_id = :tenant AND t.id = c.id"
        )
    else:  # from the staged fact vectors, into the staging table
        stmt = (
            f"INSERT INTO {STAGING_TABLE} (tenant_id, kind, id, embedding) "
            f"SELECT th.tenant_id, 'theme', th.id, (SELECT {centre} FROM ("
            f"    SELECT s.embedding AS e FROM {STAGING_TABLE} s"
            "    WHERE s.tenant_id = th.tenant_id AND s.kind = 'fact'"
            "      AND s.id = ANY(th.fact_ids) AND EXISTS (SELECT 1 FROM facts f"
            "        WHERE f.tenant_id = s.tenant_id AND f.id = s.id"
            "          AND f.invalidated_by IS NULL AND NOT (f.tags @> :quarantined))) v) "
            "FROM themes th WHERE th.tenant_id = :tenant ORDER BY th.id "
            "ON CONFLICT (tenant_id, kind, id) DO UPDATE SET embedding = EXCLUDED.embedding"
        )
    async with store._session() as session:
        result = await session.execute(
            text(stmt).bindparams(bindparam("quarantined", type_=ARRAY(Text()))),
            {"tenant": store.tenant_id, "quarantined": [QUARANTINE_TAG]},
        )
        return int(getattr(result, "rowcount", 0) or 0)


def _hnsw_sql(table: str, column: str, dim: int, name: str) -> str:
    ops = f"WITH (m = {HNSW_M}, ef_construction = {HNSW_EF_CONSTRUCTION})"
    if dim > MAX_VECTOR_HNSW_DIM:
        return (
            f'CREATE INDEX "{name}" ON {table} USING hnsw '
            f"(({column}::halfvec({dim})) halfvec_cosine_ops) {ops}"
        )
    return f'CREATE INDEX "{name}" ON {table} USING hnsw ({column} vector_cosine_ops) {ops}'


async def _current_dim(conn: Any) -> int:
    value = (
        await conn.execute(text("SELECT value FROM schema_metadata WHERE key = 'embedding_dim'"))
    ).scalar_one_or_none()
    if value is None:
        raise SchemaNotReadyError("schema_metadata has no embedding_dim: run migrations")
    return int(value)


async def begin_width_change(engine: AsyncEngine, embedding_dim: int) -> None:
    """Start moving the schema to ``embedding_dim``-wide vectors (deployment-wide).

    Creates the staging table ``embedding_staging`` (``vector(N)``, row-level security
    like every tenant table), adds a nullable ``embedding_next vector(N)`` column to every
    table with vectors (filled at the swap) and records ``embedding_dim_next`` in
    ``schema_metadata``. Reads and writes keep using the current vectors. Then run
    ``reembed(..., target="next")`` for every tenant and call :func:`finish_width_change`.
    Idempotent for the same width.

    Raises:
        InvalidInputError: A bad width, or another width change is in progress.
    """
    if not isinstance(embedding_dim, int) or not 1 <= embedding_dim <= 16_000:
        raise InvalidInputError(f"embedding_dim must be in [1, 16000], got {embedding_dim!r}")
    async with engine.begin() as conn:
        current = await _next_dim(conn)
        if current is not None and current != embedding_dim:
            raise InvalidInputError(
                f"a change to width {current} is in progress: finish or abort it first"
            )
        for table in _VECTOR_TABLES.values():
            await conn.execute(
                text(
                    f"ALTER TABLE {table} ADD COLUMN IF NOT EXISTS {NEXT_COLUMN} "
                    f"vector({embedding_dim})"
                )
            )
        await conn.execute(
            text(
                f"CREATE TABLE IF NOT EXISTS {STAGING_TABLE} (tenant_id text NOT NULL, "
                f"kind text NOT NULL, id uuid NOT NULL, embedding vector({embedding_dim}), "
                f"CONSTRAINT pk_{STAGING_TABLE} PRIMARY KEY (tenant_id, kind, id))"
            )
        )
        await conn.execute(text(f"ALTER TABLE {STAGING_TABLE} ENABLE ROW LEVEL SECURITY"))
        await conn.execute(text(f"ALTER TABLE {STAGING_TABLE} FORCE ROW LEVEL SECURITY"))
        await conn.execute(text(f"DROP POLICY IF EXISTS {_POLICY} ON {STAGING_TABLE}"))
        await conn.execute(
            text(
                f"CREATE POLICY {_POLICY} ON {STAGING_TABLE} "
                f"USING ({_TENANT_CHECK}) WITH CHECK ({_TENANT_CHECK})"
            )
        )
        await conn.execute(
            text(
                "INSERT INTO schema_metadata (key, value) VALUES ('embedding_dim_next', :v) "
                "ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value"
            ),
            {"v": str(embedding_dim)},
        )
    _log.warning("width change to %d started: staging table and columns added", embedding_dim)


async def abort_width_change(engine: AsyncEngine) -> None:
    """Drop the staging table and columns of an unfinished change (the old vectors stay).

    Also rebuilds an old HNSW index that an interrupted :func:`finish_width_change` left
    dropped.
    """
    async with engine.begin() as conn:
        dim = await _current_dim(conn)
        for table in _VECTOR_TABLES.values():
            await conn.execute(text(f"ALTER TABLE {table} DROP COLUMN IF EXISTS {NEXT_COLUMN}"))
        await conn.execute(text(f"DROP TABLE IF EXISTS {STAGING_TABLE}"))
        await conn.execute(text("DELETE FROM schema_metadata WHERE key = 'embedding_dim_next'"))
    for table in _VECTOR_TABLES.values():
        await _restore_old_index(engine, table, dim)


async def _swap(engine: AsyncEngine, tenants: Sequence[str], dim: int) -> None:
    """Step 3: re-check under the tables' locks, then swap the columns in one transaction."""
    async with engine.begin() as conn:
        # Every vector table locked first (the lock its ALTER takes anyway), then checked
        # again: a row written since the check of step 1 (an ingest during the fill) has no
        # new vector, and the swap would leave it without any (unsearchable).
        for table in _VECTOR_TABLES.values():
            await conn.execute(text(f"LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE"))
        for tenant in tenants:
            await conn.execute(
                text("SELECT set_config('cycgraph.tenant_id', :t, true)"), {"t": tenant}
            )
            for table in _VECTOR_TABLES.values():
                late = (
                    await conn.execute(
                        text(
                            f"SELECT count(*) FROM {table} WHERE tenant_id = :t "
                            f"AND embedding IS NOT NULL AND {NEXT_COLUMN} IS NULL"
                        ),
                        {"t": tenant},
                    )
                ).scalar_one()
                if late:
                    raise InvalidInputError(
                        f"tenant {tenant}: {late} {table} rows were written during the width "
                        "change and have no new vector; run reembed(..., target='next') for "
                        "it again, then finish_width_change again (nothing was swapped)"
                    )
        for table in _VECTOR_TABLES.values():
            await conn.execute(text(f"ALTER TABLE {table} DROP COLUMN embedding"))
            await conn.execute(
                text(f"ALTER TABLE {table} RENAME COLUMN {NEXT_COLUMN} TO embedding")
            )
            await conn.execute(
                text(
                    f'ALTER INDEX "ix_{table}_embedding_next_hnsw" '
                    f'RENAME TO "ix_{table}_embedding_hnsw"'
                )
            )
        await conn.execute(
            text("UPDATE schema_metadata SET value = :v WHERE key = 'embedding_dim'"),
            {"v": str(dim)},
        )
        await conn.execute(text("DELETE FROM schema_metadata WHERE key = 'embedding_dim_next'"))
        await conn.execute(text(f"DROP TABLE {STAGING_TABLE}"))


async def _restore_old_index(engine: AsyncEngine, table: str, dim: int) -> None:
    name = f"ix_{table}_embedding_hnsw"
    async with engine.begin() as conn:
        await conn.execute(text(f"SET LOCAL maintenance_work_mem = '{HNSW_BUILD_MEMORY}'"))
        await conn.execute(
            text(
                _hnsw_sql(table, "embedding", dim, name).replace(
                    "CREATE INDEX", "CREATE INDEX IF NOT EXISTS", 1
                )
            )
        )


async def finish_width_change(engine: AsyncEngine, tenants: Sequence[str]) -> int:
    """Swap the new vectors in: check the backfill, fill, build HNSW, swap atomically.

    See the module docstring for the steps. Rows of tenants not listed get no vector.
    Store objects cache the width: build new ones after the swap.

    Returns:
        The new width.

    Raises:
        SchemaNotReadyError: No width change in progress.
        InvalidInputError: A tenant's backfill is incomplete (nothing changed), also when
            a writer added rows during the fill (nothing swapped; re-run the backfill).
    """
    for tenant in tenants:
        validate_tenant(tenant)
    async with engine.begin() as conn:
        dim = await _next_dim(conn)
        if dim is None:
            raise SchemaNotReadyError("no width change in progress: call begin_width_change")
        old_dim = await _current_dim(conn)
        for tenant in tenants:
            await conn.execute(
                text("SELECT set_config('cycgraph.tenant_id', :t, true)"), {"t": tenant}
            )
            for kind, table in _VECTOR_TABLES.items():
                missing = (
                    await conn.execute(
                        text(
                            f"SELECT count(*) FROM {table} t WHERE t.tenant_id = :t "
                            "AND t.embedding IS NOT NULL AND NOT EXISTS ("
                            f"SELECT 1 FROM {STAGING_TABLE} s WHERE s.tenant_id = t.tenant_id "
                            "AND s.kind = :kind AND s.id = t.id)"
                        ),
                        {"t": tenant, "kind": kind},
                    )
                ).scalar_one()
                if missing:
                    raise InvalidInputError(
                        f"tenant {tenant}: {missing} {table} rows have no new vector yet; "
                        "run reembed(..., target='next') for it again"
                    )
    for kind, table in _VECTOR_TABLES.items():
        try:
            await _fill_and_build(engine, kind, table, tenants, dim)
        except BaseException:
            _log.error("width change: filling %s failed; rebuilding its old index", table)
            await _restore_old_index(engine, table, old_dim)
            raise
    try:
        await _swap(engine, tenants, dim)
    except BaseException:
        # Refused, or failed (a deadlock with a writer's lock, a lost connection, a
        # cancellation): the swap's transaction rolled back, the old columns serve, and
        # their HNSW indexes (dropped for the fill) are built again. Were the swap
        # committed after all (a lost COMMIT reply), the renamed index already exists and
        # this changes nothing.
        _log.error("width change: the swap did not happen; rebuilding the old indexes")
        for table in _VECTOR_TABLES.values():
            await _restore_old_index(engine, table, old_dim)
        raise
    _log.warning("width change finished: vectors are now %d-wide", dim)
    from cycgraph_memory.postgres.store import PostgresMemoryStore

    for tenant in tenants:  # the theme calibration is a function of the vectors
        store = PostgresMemoryStore(engine, tenant_id=tenant)
        async with store.transaction():
            await refit_theme_calibration(store)
    return dim


async def _fill_and_build(
    engine: AsyncEngine, kind: str, table: str, tenants: Sequence[str], dim: int
) -> None:
    # Without the old HNSW index the fill is a plain set-based UPDATE (no graph insert per
    # row); vector searches meanwhile scan the old vectors exactly.
    async with engine.begin() as conn:
        await conn.execute(text(f'DROP INDEX IF EXISTS "ix_{table}_embedding_hnsw"'))
    _log.warning("width change: %s searched by exact scan until its swap", table)
    async with engine.begin() as conn:
        for tenant in tenants:
            await conn.execute(
                text("SELECT set_config('cycgraph.tenant_id', :t, true)"), {"t": tenant}
            )
            await conn.execute(
                text(
                    f"UPDATE {table} t SET {NEXT_COLUMN} = s.embedding FROM {STAGING_TABLE} s "
                    "WHERE t.tenant_id = :t AND s.tenant_id = :t AND s.kind = :kind "
                    "AND s.id = t.id"
                ),
                {"t": tenant, "kind": kind},
            )
    async with engine.begin() as conn:
        await conn.execute(text(f"SET LOCAL maintenance_work_mem = '{HNSW_BUILD_MEMORY}'"))
        await conn.execute(text(f'DROP INDEX IF EXISTS "ix_{table}_embedding_next_hnsw"'))
        await conn.execute(
            text(_hnsw_sql(table, NEXT_COLUMN, dim, f"ix_{table}_embedding_next_hnsw"))
        )

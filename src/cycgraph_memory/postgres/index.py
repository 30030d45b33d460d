"""PostgresMemoryIndex: the ``MemoryIndex`` contract as pgvector kNN over the store's tables.

The index owns no data: it queries the same tables :class:`PostgresMemoryStore` writes, so
there is no second copy to keep in sync and :meth:`PostgresMemoryIndex.rebuild` is cheap.

Each search runs, in one transaction::

    SELECT set_config('hnsw.ef_search', :ef, true),
           set_config('hnsw.iterative_scan', 'relaxed_order', true);
    SELECT * FROM (
        SELECT t.*, t.embedding <=> :q AS distance FROM t
        WHERE t.tenant_id = :tenant AND t.embedding IS NOT NULL
          AND <not invalidated> [AND tags && :tags] [AND NOT (tags && :exclude)]
        ORDER BY distance LIMIT :limit
    ) nearest [WHERE 1 - distance >= :min_similarity]

pgvector 0.8's iterative index scan keeps walking the HNSW graph when the filters reject
candidates, so a filtered search still returns ``limit`` rows when that many match (up to
``hnsw.max_scan_tuples``, 20,000 by default). ``relaxed_order`` may return slightly
out-of-order rows, so the rows are re-sorted in Python by score, then id. For schemas wider
than 2,000 dimensions the distance is computed on ``embedding::halfvec(N)``, the same
expression the migration indexed.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from pgvector.sqlalchemy import HALFVEC
from sqlalchemy import ColumnElement, Table, cast, func, literal, not_, select, text
from sqlalchemy.ext.asyncio import AsyncSession

from cycgraph_memory._options import coerce_options
from cycgraph_memory._validate import check_query_vector
from cycgraph_memory.contracts import MemoryStore
from cycgraph_memory.errors import EmbeddingDimensionMismatchError, InvalidInputError
from cycgraph_memory.postgres import convert
from cycgraph_memory.postgres._base import DEFAULT_TENANT, Bind, PostgresBackend
from cycgraph_memory.postgres.hierarchical import HierarchicalCandidates
from cycgraph_memory.postgres.ingest_lookups import IngestSearch
from cycgraph_memory.postgres.schema import MAX_VECTOR_HNSW_DIM, EmbeddingVector
from cycgraph_memory.postgres.search import PostgresSearchMixin
from cycgraph_memory.postgres.store import (
    ENTITIES,
    EPISODES,
    FACTS,
    THEMES,
    episode_from_result,
    episode_messages_column,
)
from cycgraph_memory.records import (
    Entity,
    Episode,
    ScoredResult,
    SearchOptions,
    SemanticFact,
    Theme,
)

__all__ = ["DEFAULT_EF_SEARCH", "MAX_HALFVEC_HNSW_DIM", "PostgresMemoryIndex", "distance_expr"]

DEFAULT_EF_SEARCH = 100
"""Default ``hnsw.ef_search`` (pgvector's own default is 40; 100 gives recall >= 0.95)."""

MAX_HALFVEC_HNSW_DIM = 4000
"""Widest ``halfvec`` pgvector can index with HNSW; wider schemas are searched exactly."""

Options = Mapping[str, Any]
R = TypeVar("R")


def distance_expr(table: Table, query: Sequence[float], dim: int) -> ColumnElement[float]:
    """Cosine distance between ``table.embedding`` and ``query`` matching the HNSW index.

    ``dim <= 2000``: ``embedding <=> :q::vector(dim)`` (plain column index).
    ``2000 < dim <= 4000``: ``embedding::halfvec(dim) <=> :q::halfvec(dim)`` (the migration's
    expression index). Wider: plain vector distance (no index; exact scan).
    """
    values = [float(x) for x in query]
    if MAX_VECTOR_HNSW_DIM < dim <= MAX_HALFVEC_HNSW_DIM:
        column: Any = cast(table.c.embedding, HALFVEC(dim))
        q: Any = cast(literal(values, HALFVEC(dim)), HALFVEC(dim))
    else:
        column = table.c.embedding
        q = cast(literal(values, EmbeddingVector(dim)), EmbeddingVector(dim))
    result: ColumnElement[float] = column.cosine_distance(q)
    return result


class PostgresMemoryIndex(
    IngestSearch, HierarchicalCandidates, PostgresSearchMixin, PostgresBackend
):
    """``MemoryIndex`` on pgvector HNSW indexes, scoped to one tenant.

    Also searches messages by embedding (``search_messages``) and facts, messages and
    episodes by text (``text_search_*``; see :mod:`cycgraph_memory.postgres.search`).

    Args:
        bind: An ``AsyncEngine`` or an injected ``async_sessionmaker``.
        tenant_id: Tenant to search (same rules as the store). Use the store's tenant.
        embedding_dim: Expected dimension; ``None`` reads it from the schema (cached).
        ef_search: Default HNSW candidate-list size (``hnsw.ef_search``), overridden per
            query by ``SearchOptions.ef_search``; raised to at least ``limit`` (max 1000).

    Raises:
        InvalidTenantError: The tenant id is malformed.
    """

    def __init__(
        self,
        bind: Bind,
        tenant_id: str = DEFAULT_TENANT,
        embedding_dim: int | None = None,
        *,
        ef_search: int = DEFAULT_EF_SEARCH,
        iterative_scan: str = "relaxed_order",
    ) -> None:
        super().__init__(bind, tenant_id=tenant_id, embedding_dim=embedding_dim)
        if not isinstance(ef_search, int) or not 1 <= ef_search <= 1000:
            raise InvalidInputError(f"ef_search must be an int in 1..1000, got {ef_search!r}")
        if iterative_scan not in ("off", "relaxed_order", "strict_order"):
            raise InvalidInputError(
                "iterative_scan must be 'off', 'relaxed_order' or 'strict_order'"
            )
        self._ef_search = ef_search
        self._iterative_scan = iterative_scan

    @property
    def ef_search(self) -> int:
        """Default ``hnsw.ef_search`` for queries that do not set one."""
        return self._ef_search

    async def search_entities(
        self, embedding: Sequence[float], options: SearchOptions | Options | None = None, /,
        **kwargs: Any,
    ) -> list[ScoredResult[Entity]]:
        """Nearest entities by cosine similarity (invalidated excluded by default)."""
        opts = coerce_options(SearchOptions, options, kwargs)
        return await self._search(
            ENTITIES, embedding, opts, convert.entity_from_row, "search_entities",
            live=ENTITIES.c.invalidated_at.is_(None),
        )

    async def search_facts(
        self, embedding: Sequence[float], options: SearchOptions | Options | None = None, /,
        **kwargs: Any,
    ) -> list[ScoredResult[SemanticFact]]:
        """Nearest facts; ``tags`` / ``exclude_tags`` filter inside the kNN query."""
        opts = coerce_options(SearchOptions, options, kwargs)
        filters: list[ColumnElement[bool]] = []
        if opts.tags:
            filters.append(FACTS.c.tags.overlap(list(opts.tags)))
        if opts.exclude_tags:
            filters.append(not_(FACTS.c.tags.overlap(list(opts.exclude_tags))))
        return await self._search(
            FACTS, embedding, opts, convert.fact_from_row, "search_facts",
            live=FACTS.c.invalidated_by.is_(None), filters=filters,
        )

    async def search_themes(
        self, embedding: Sequence[float], options: SearchOptions | Options | None = None, /,
        **kwargs: Any,
    ) -> list[ScoredResult[Theme]]:
        """Nearest themes by centroid similarity."""
        opts = coerce_options(SearchOptions, options, kwargs)
        return await self._search(
            THEMES, embedding, opts, convert.theme_from_row, "search_themes",
            live=THEMES.c.invalidated_at.is_(None),
        )

    async def search_episodes(
        self, embedding: Sequence[float], options: SearchOptions | Options | None = None, /,
        **kwargs: Any,
    ) -> list[ScoredResult[Episode]]:
        """Nearest episodes (returned with their messages)."""
        opts = coerce_options(SearchOptions, options, kwargs)
        return await self._search(
            EPISODES, embedding, opts, episode_from_result, "search_episodes",
            live=EPISODES.c.invalidated_at.is_(None), extra=(episode_messages_column(),),
        )

    async def rebuild(self, store: MemoryStore | None = None, *, analyze: bool = False) -> None:
        """Re-validate the schema's embedding dimension; optionally refresh planner stats.

        The HNSW indexes are maintained by Postgres on every write, so there is nothing to
        rebuild: this re-reads ``embedding_dim`` from the schema (clearing the cache) and,
        with ``analyze=True``, runs ``ANALYZE`` on the searchable tables (useful after a
        bulk load; needs table ownership). ``store`` is accepted for contract compatibility.
        """
        self._schema_dim = None
        async with self._session() as session:
            await self._dim(session)
            if analyze:
                for table in (ENTITIES, EPISODES, FACTS, THEMES):
                    await session.execute(text(f"ANALYZE {table.name}"))

    # ------------------------------------------------------------------ internals

    def _query_vector(
        self, embedding: Sequence[float], dim: int | None, where: str, *, checked: bool = False
    ) -> list[float]:
        # checked: ``embedding`` is this method's own earlier result (only the length left).
        values = list(embedding) if checked else check_query_vector(embedding, where)
        if dim is not None and len(values) != dim:
            raise EmbeddingDimensionMismatchError(dim, len(values), f"{where} query")
        return values

    def _search_settings(self, ef: int) -> tuple[tuple[str, str], ...]:
        """Transaction-local HNSW settings of a search with candidate list ``ef``."""
        return (("hnsw.ef_search", str(ef)), ("hnsw.iterative_scan", self._iterative_scan))

    async def _set_search_gucs(self, session: AsyncSession, ef: int) -> None:
        # Skipped when this transaction already has them (a retrieval searches themes,
        # facts and messages in one unit of work); set with the tenant when it is not yet.
        await self._set_tenant(session, self._search_settings(ef))

    async def _search(
        self,
        table: Table,
        embedding: Sequence[float],
        opts: SearchOptions,
        from_row: Callable[[Any], R],
        where: str,
        *,
        live: ColumnElement[bool],
        filters: Sequence[ColumnElement[bool]] = (),
        extra: Sequence[ColumnElement[Any]] = (),
    ) -> list[ScoredResult[R]]:
        # Reject a wrong dimension before any SQL when the dimension is already known.
        query = self._query_vector(embedding, self._known_dim(), where)
        limit = opts.limit
        first_ef = min(1000, max(opts.ef_search or self._ef_search, limit + 1))
        async with self._session(self._search_settings(first_ef)) as session:
            dim = await self._dim(session)
            query = self._query_vector(query, dim, where, checked=True)
            distance = distance_expr(table, query, dim).label("distance")
            inner = select(table, *extra, distance).where(
                table.c.tenant_id == self._tenant, table.c.embedding.is_not(None), *filters
            )
            if not opts.include_invalidated:
                inner = inner.where(live)
            # The HNSW scan can only order by distance, so ties are broken by id here: fetch
            # one row more than asked and widen the fetch while a tie straddles the cut.
            fetch = limit + 1
            while True:
                nearest = inner.order_by(distance).limit(fetch).subquery("nearest")
                stmt = select(nearest)
                if opts.min_similarity is not None:
                    # pgvector gives NaN for a zero vector, and NaN sorts above every number
                    # in SQL: score it 0.0 like the in-memory index (cosine_similarity's rule).
                    similarity = func.coalesce(
                        func.nullif(1 - nearest.c.distance, literal(math.nan)), 0.0
                    )
                    stmt = stmt.where(similarity >= opts.min_similarity)
                ef = min(1000, max(opts.ef_search or self._ef_search, fetch))
                await self._set_search_gucs(session, ef)
                rows = (await session.execute(stmt)).mappings().all()
                ranked = sorted(
                    ((_distance(row), convert._uuid(row["id"]), row) for row in rows),
                    key=lambda item: (item[0], item[1]),
                )
                if len(ranked) < fetch or ranked[limit - 1][0] != ranked[-1][0]:
                    break
                fetch *= 2
        return [
            ScoredResult(item=from_row(row), score=_score(d)) for d, _, row in ranked[:limit]
        ]


def _distance(row: Mapping[Any, Any]) -> float:
    d = row["distance"]
    return math.inf if d is None or math.isnan(d) else float(d)


def _score(distance: float) -> float:
    # pgvector yields NaN for zero vectors; like the in-memory index, score those 0.
    return 0.0 if math.isinf(distance) else 1.0 - distance

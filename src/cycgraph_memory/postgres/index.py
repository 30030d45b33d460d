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

That is the plan for a tenant with at least ``exact_below`` (default 50,000) documents in
the table, or holding at least half of it. A smaller tenant is searched EXACTLY: its rows
reached through the ``tenant_id`` B-tree, every distance computed, the nearest sorted
(``statements.nearest``; both plans are in the statement, a one-time filter on the
tenant's document count runs one). A
filtered HNSW scan of a graph shared with bigger tenants misses neighbours of a tenant of
a few thousand to a few tens of thousands of rows (recall@10 0.77-0.96 measured at
1,000,000 facts); for a bigger one ``hnsw.ef_search`` is raised by the inverse square
root of its share of the table, or by the square root of its documents over 50,000 when
that is larger, in the settings statement.

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

from sqlalchemy import Table, text
from sqlalchemy.ext.asyncio import AsyncSession

from cycgraph_memory._options import coerce_options
from cycgraph_memory._validate import check_bool, check_query_vector
from cycgraph_memory.contracts import MemoryStore
from cycgraph_memory.errors import EmbeddingDimensionMismatchError, InvalidInputError
from cycgraph_memory.postgres import convert, statements
from cycgraph_memory.postgres._base import DEFAULT_TENANT, Bind, PostgresBackend
from cycgraph_memory.postgres.hierarchical import HierarchicalCandidates
from cycgraph_memory.postgres.ingest_lookups import IngestSearch
from cycgraph_memory.postgres.search import PostgresSearchMixin
from cycgraph_memory.postgres.signals import SignalPrefetch
from cycgraph_memory.postgres.statements import (
    ENTITIES,
    EPISODES,
    EXACT_KNN_BELOW,
    FACTS,
    KNN_CORPUS_SETTING,
    MAX_HALFVEC_HNSW_DIM,
    THEMES,
    distance_expr,
    knn_corpus,
    row_distance,
    score_of,
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

Options = Mapping[str, Any]
R = TypeVar("R")


def _episode(row: Mapping[Any, Any]) -> Episode:
    return convert.episode_from_rows(row, row["messages"] or [])


_TINY_QUERY_NORM = 1e-15
"""Below this Euclidean norm a query vector is scaled to unit length before it is sent."""


class PostgresMemoryIndex(
    IngestSearch, HierarchicalCandidates, SignalPrefetch, PostgresSearchMixin, PostgresBackend
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
        iterative_scan: pgvector's ``hnsw.iterative_scan`` for filtered searches.
        exact_below: A tenant with fewer documents than this in a table (its count in
            ``text_search_corpora``; themes and entities go by the tenant's facts) is
            searched exactly there unless it holds half the table or more (every row of
            the tenant scored, no HNSW): a filtered
            HNSW scan of a graph shared with bigger tenants misses neighbours of a tenant
            of a few thousand rows. ``0``: always the HNSW index. Above it, the search's
            ``hnsw.ef_search`` is scaled by the inverse square root of the tenant's
            share of the table, or by the square root of its documents over 50,000
            (``statements.EF_GRAPH_ROWS``) when that is larger (at most 1,000).
        read_engine: Where searches go (e.g. a streaming replica's engine) outside a unit
            of work; inside one they use ``bind`` (read-your-writes). ``None``: ``bind``.

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
        exact_below: int = EXACT_KNN_BELOW,
        read_engine: Bind | None = None,
    ) -> None:
        super().__init__(
            bind, tenant_id=tenant_id, embedding_dim=embedding_dim, read_engine=read_engine
        )
        if not isinstance(ef_search, int) or not 1 <= ef_search <= 1000:
            raise InvalidInputError(f"ef_search must be an int in 1..1000, got {ef_search!r}")
        if iterative_scan not in ("off", "relaxed_order", "strict_order"):
            raise InvalidInputError(
                "iterative_scan must be 'off', 'relaxed_order' or 'strict_order'"
            )
        if not isinstance(exact_below, int) or isinstance(exact_below, bool) or exact_below < 0:
            raise InvalidInputError(f"exact_below must be an int >= 0, got {exact_below!r}")
        self._ef_search = ef_search
        self._iterative_scan = iterative_scan
        self._exact_below = exact_below

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
            ENTITIES, embedding, opts, convert.entity_from_row, "search_entities"
        )

    async def search_facts(
        self, embedding: Sequence[float], options: SearchOptions | Options | None = None, /,
        **kwargs: Any,
    ) -> list[ScoredResult[SemanticFact]]:
        """Nearest facts; ``tags`` / ``exclude_tags`` filter inside the kNN query."""
        opts = coerce_options(SearchOptions, options, kwargs)
        return await self._search(
            FACTS, embedding, opts, convert.fact_from_row, "search_facts", tag_filters=True
        )

    async def search_themes(
        self, embedding: Sequence[float], options: SearchOptions | Options | None = None, /,
        **kwargs: Any,
    ) -> list[ScoredResult[Theme]]:
        """Nearest themes by centroid similarity."""
        opts = coerce_options(SearchOptions, options, kwargs)
        return await self._search(
            THEMES, embedding, opts, convert.theme_from_row, "search_themes"
        )

    async def search_episodes(
        self, embedding: Sequence[float], options: SearchOptions | Options | None = None, /,
        **kwargs: Any,
    ) -> list[ScoredResult[Episode]]:
        """Nearest episodes (returned with their messages)."""
        opts = coerce_options(SearchOptions, options, kwargs)
        return await self._search(EPISODES, embedding, opts, _episode, "search_episodes")

    async def index_sizes(self) -> dict[str, int]:
        """On-disk bytes of the database's HNSW and GIN indexes (shared by all tenants)."""
        from cycgraph_memory.postgres.stats import index_sizes

        return await index_sizes(self)

    async def rebuild(self, store: MemoryStore | None = None, *, analyze: bool = False) -> None:
        """Re-validate the schema's embedding dimension; optionally refresh planner stats.

        The HNSW indexes are maintained by Postgres on every write, so there is nothing to
        rebuild: this re-reads ``embedding_dim`` from the schema (clearing the cache) and,
        with ``analyze=True``, runs ``ANALYZE`` on the searchable tables (useful after a
        bulk load; needs table ownership). ``store`` is accepted for contract compatibility.

        Raises:
            InvalidTypeError: ``analyze`` is not a real ``bool``.
        """
        analyze = check_bool(analyze, "analyze")
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
        if not checked:
            norm = math.hypot(*values)
            if 0.0 < norm < _TINY_QUERY_NORM:
                # Cosine distance ignores scale, but pgvector reads the query in single
                # precision, where values this small vanish (a zero vector, no order):
                # a tiny query is sent at unit length, as the in-memory index scores it.
                values = [v / norm for v in values]
        return values

    @property
    def exact_below(self) -> int:
        """Tenants with fewer documents than this in a table are searched exactly there."""
        return self._exact_below

    def _search_settings(
        self, ef: int, corpus: str = "facts", *, knn: bool = True
    ) -> tuple[tuple[str, str], ...]:
        """Transaction-local settings of a search with HNSW candidate list ``ef``.

        ``ef`` is scaled in the statement by the inverse square root of the tenant's share of
        ``corpus`` (``cycgraph.knn_corpus``; see ``statements.settings``).

        ``plan_cache_mode``: the statements are prepared once per connection. Every search
        gets ``auto:<exact_below>``, which the settings statement turns into a generic plan
        when the rows the planner expects for an unknown tenant (asked of the planner once
        a minute, see ``PostgresBackend._generic_rows``) lead it to the plan this tenant
        needs (for a kNN: exact scan of a small tenant, HNSW walk of a big one), and into
        custom plans otherwise or without statistics (see ``statements.settings``). A
        generic plan that misjudged the tenant read a 134,072-fact tenant through the
        ``tenant_id`` B-tree and sorted it (p95 450 ms); one that fits saves planning the
        hybrid statement (~4 ms). A statement without a kNN (``knn`` False: a text-mode
        retrieval, BM25, entity names, the entities' facts) gets ``auto:0``: generic when the
        guess is at least a quarter of the tenant's documents (the rule of a tenant searched
        through HNSW). It used to reuse a generic plan always (text p50 at 100,000 facts in
        one tenant 18.0-22.8 -> 13.0-13.4 ms, kept: the guess fits that tenant), but for a
        tenant far above the guess custom plans are faster (1,000,000 facts across 1,000
        tenants: 29 against 37 ms for a 134,072-fact tenant, 22 against 27 for a 33,398-fact
        one), and as an application role under row-level security the generic plan took
        218 and 65 ms for those two tenants, against 28 and 29 custom.
        """
        exact_below = self._exact_below if knn else 0
        return (
            ("hnsw.ef_search", str(ef)),
            ("hnsw.iterative_scan", self._iterative_scan),
            (statements.PLAN_CACHE_MODE, f"{statements.AUTO_PLAN_PREFIX}{exact_below}"),
            (KNN_CORPUS_SETTING, corpus),
        )

    async def _set_search_gucs(self, session: AsyncSession, ef: int, corpus: str) -> None:
        # Skipped when this transaction already has them (a retrieval searches themes,
        # facts and messages in one unit of work); set with the tenant when it is not yet.
        await self._set_tenant(session, self._search_settings(ef, corpus))

    async def _search(
        self,
        table: Table,
        embedding: Sequence[float],
        opts: SearchOptions,
        from_row: Callable[[Any], R],
        where: str,
        *,
        tag_filters: bool = False,
    ) -> list[ScoredResult[R]]:
        # Reject a wrong dimension before any SQL when the dimension is already known.
        query = self._query_vector(embedding, self._known_dim(), where)
        limit = opts.limit
        first_ef = min(1000, max(opts.ef_search or self._ef_search, limit + 1))
        tags = bool(tag_filters and opts.tags)
        exclude = bool(tag_filters and opts.exclude_tags)
        params: dict[str, Any] = {
            "tenant": self._tenant, "q": query, "exact_below": self._exact_below,
        }
        corpus = knn_corpus(table)
        if tags:
            params["any_tags"] = list(opts.tags or ())
        if exclude:
            params["no_tags"] = list(opts.exclude_tags or ())
        if opts.min_similarity is not None:
            params["min_similarity"] = opts.min_similarity
        async with self._read(self._search_settings(first_ef, corpus)) as session:
            dim = await self._dim(session)
            params["q"] = self._query_vector(query, dim, where, checked=True)
            stmt = statements.knn(
                table.name, dim, include_invalidated=opts.include_invalidated, tags=tags,
                exclude_tags=exclude, min_similarity=opts.min_similarity is not None,
                zero_query=not any(params["q"]),
            )
            # The HNSW scan can only order by distance, so ties are broken by id here: fetch
            # one row more than asked and widen the fetch while a tie straddles the cut.
            fetch = limit + 1
            while True:
                ef = min(1000, max(opts.ef_search or self._ef_search, fetch))
                await self._set_search_gucs(session, ef, corpus)
                params["fetch"] = fetch
                rows = await statements.fetch(session, stmt, params)
                ranked = sorted(
                    ((row_distance(row), convert._uuid(row["id"]), row) for row in rows),
                    key=lambda item: (item[0], item[1]),
                )
                if len(ranked) < fetch or ranked[limit - 1][0] != ranked[-1][0]:
                    break
                fetch *= 2
        return [
            ScoredResult(item=from_row(row), score=score_of(d)) for d, _, row in ranked[:limit]
        ]

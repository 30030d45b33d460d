"""Message kNN and full-text search for :class:`PostgresMemoryIndex` (one statement each).

* ``search_messages``: pgvector HNSW kNN over ``episode_messages.embedding``.
* ``text_search_facts`` / ``text_search_messages`` / ``text_search_episodes``: BM25 over
  the stored :func:`~cycgraph_memory.textsearch.tokenize` tokens, the same ranking as the
  in-memory index (see :mod:`cycgraph_memory.postgres.bm25`: GIN candidates, bounded per
  query term by ``TEXT_CANDIDATES``, statistics kept by triggers), ties by id. An episode
  is searched by its topic and every message, as in memory.

Messages of invalidated episodes are skipped unless ``include_invalidated``. Returned
messages carry no embedding (as from the in-memory index).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Table,
    any_,
    bindparam,
    exists,
    func,
    not_,
    select,
    true,
)
from sqlalchemy.dialects.postgresql import ARRAY, array
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.types import Text, Uuid

from cycgraph_memory._options import coerce_options
from cycgraph_memory.postgres import convert
from cycgraph_memory.postgres.bm25 import CORPORA, TEXT_CANDIDATES, bm25_ranked, bm25_terms
from cycgraph_memory.postgres.store import (
    ENTITIES,
    EPISODES,
    FACTS,
    MESSAGES,
    episode_from_result,
    episode_messages_column,
)
from cycgraph_memory.records import (
    Entity,
    Episode,
    Message,
    ScoredResult,
    SearchOptions,
    SemanticFact,
)
from cycgraph_memory.textsearch import name_candidates

__all__ = ["TEXT_CANDIDATES", "PostgresSearchMixin"]

Options = Mapping[str, Any]


def message_without_vector(row: Mapping[Any, Any]) -> Message:
    """A message from its row, without its embedding."""
    return Message(
        id=convert._uuid(row["id"]),
        role=row["role"],
        content=row["content"],
        timestamp=row["timestamp"],
        metadata=row["metadata"],
    )


def _episode_live() -> ColumnElement[bool]:
    e = EPISODES
    return exists(
        select(e.c.id).where(
            e.c.tenant_id == MESSAGES.c.tenant_id,
            e.c.id == MESSAGES.c.episode_id,
            e.c.invalidated_at.is_(None),
        )
    )


class PostgresSearchMixin:
    """Message and text search methods; mixed into ``PostgresMemoryIndex``."""

    _tenant: str
    _session: Callable[..., Any]
    _search: Callable[..., Any]

    async def search_messages(
        self, embedding: Sequence[float], options: SearchOptions | Options | None = None, /,
        **kwargs: Any,
    ) -> list[ScoredResult[Message]]:
        """Nearest messages by cosine similarity (HNSW), best first, ties by id."""
        opts = coerce_options(SearchOptions, options, kwargs)
        result: list[ScoredResult[Message]] = await self._search(
            MESSAGES, embedding, opts, message_without_vector, "search_messages",
            live=_episode_live(),
        )
        return result

    async def _text(
        self,
        table: Table,
        text: str,
        opts: SearchOptions,
        filters: Sequence[ColumnElement[bool]],
    ) -> list[tuple[Mapping[Any, Any], float]]:
        terms = bm25_terms(text)
        if not terms:
            return []
        # Rank on (id, search_terms) only, then read the whole rows of the best ``limit``.
        ranked = bm25_ranked(
            table, self._tenant, terms, filters, opts.limit, candidates=TEXT_CANDIDATES
        ).subquery("ranked")
        columns: list[Any] = [table, ranked.c.text_rank]
        if table is EPISODES:
            columns.insert(1, episode_messages_column())
        stmt = (
            select(*columns)
            .join(ranked, ranked.c.id == table.c.id)
            .where(table.c.tenant_id == self._tenant)
            .order_by(ranked.c.text_rank.desc(), table.c.id)
        )
        session: AsyncSession
        async with self._session() as session:
            rows = (await session.execute(stmt)).mappings().all()
        return [(r, float(r["text_rank"])) for r in rows]

    async def text_search_facts(
        self, text: str, options: SearchOptions | Options | None = None, /, **kwargs: Any
    ) -> list[ScoredResult[SemanticFact]]:
        """Facts sharing a word with ``text``, by BM25; tag filters apply."""
        opts = coerce_options(SearchOptions, options, kwargs)
        filters: list[ColumnElement[bool]] = []
        if not opts.include_invalidated:
            filters.append(FACTS.c.invalidated_by.is_(None))
        if opts.tags:
            filters.append(FACTS.c.tags.overlap(list(opts.tags)))
        if opts.exclude_tags:
            filters.append(not_(FACTS.c.tags.overlap(list(opts.exclude_tags))))
        hits = await self._text(FACTS, text, opts, filters)
        return [ScoredResult(item=convert.fact_from_row(r), score=s) for r, s in hits]

    async def text_search_messages(
        self, text: str, options: SearchOptions | Options | None = None, /, **kwargs: Any
    ) -> list[ScoredResult[Message]]:
        """Messages sharing a word with ``text``, by BM25."""
        opts = coerce_options(SearchOptions, options, kwargs)
        filters = [] if opts.include_invalidated else [_episode_live()]
        hits = await self._text(MESSAGES, text, opts, filters)
        return [ScoredResult(item=message_without_vector(r), score=s) for r, s in hits]

    async def text_search_episodes(
        self, text: str, options: SearchOptions | Options | None = None, /, **kwargs: Any
    ) -> list[ScoredResult[Episode]]:
        """Episodes whose topic or messages share words with ``text``, by BM25."""
        opts = coerce_options(SearchOptions, options, kwargs)
        filters = [] if opts.include_invalidated else [EPISODES.c.invalidated_at.is_(None)]
        hits = await self._text(EPISODES, text, opts, filters)
        return [ScoredResult(item=episode_from_result(r), score=s) for r, s in hits]

    async def entity_fact_counts(
        self, entity_ids: Iterable[uuid.UUID], *, cap: int = 1000
    ) -> tuple[dict[uuid.UUID, int], int]:
        """How many of the tenant's facts cite each entity, and how many facts there are.

        One statement: per entity, at most ``cap`` facts through the GIN index on
        ``entity_ids`` (so the cost is bounded by ``cap``), and the tenant's fact count from
        the BM25 statistics. Every fact counts (invalidated ones too). Entities cited by no
        fact are absent.
        """
        ids = list(dict.fromkeys(entity_ids))
        if not ids:
            return {}, 0
        wanted = (
            func.unnest(bindparam("entity_ids", ids, type_=ARRAY(Uuid(as_uuid=True))))
            .table_valued("id")
            .render_derived(name="wanted")
        )
        cited = (
            select(FACTS.c.id)
            .where(FACTS.c.tenant_id == self._tenant,
                   FACTS.c.entity_ids.contains(array([wanted.c.id])))
            .limit(cap)
            .lateral("cited")
        )
        total = (
            select(CORPORA.c.documents)
            .where(CORPORA.c.tenant_id == self._tenant, CORPORA.c.corpus == FACTS.name)
            .scalar_subquery()
        )
        stmt = (
            select(wanted.c.id, func.count(cited.c.id).label("n"),
                   func.coalesce(total, 0).label("total"))
            .select_from(wanted)
            .outerjoin(cited, true())
            .group_by(wanted.c.id)
        )
        async with self._session() as session:
            rows = (await session.execute(stmt)).all()
        counts = {convert._uuid(r[0]): int(r[1]) for r in rows if r[1]}
        return counts, int(rows[0][2]) if rows else 0

    async def match_entity_names(
        self, text: str, *, limit: int = 10, include_invalidated: bool = False
    ) -> list[Entity]:
        """Entities whose lowercased name is a word n-gram of ``text`` (1-4 words).

        One statement (``lower(name) = ANY(:candidates)``); ordered by where the name first
        appears in ``text``, then id.
        """
        candidates = name_candidates(text)
        if not candidates:
            return []
        t = ENTITIES
        stmt = select(t).where(
            t.c.tenant_id == self._tenant,
            func.lower(t.c.name) == any_(bindparam(None, candidates, type_=ARRAY(Text()))),
        )
        if not include_invalidated:
            stmt = stmt.where(t.c.invalidated_at.is_(None), t.c.superseded_by.is_(None))
        async with self._session() as session:
            rows = (await session.execute(stmt)).mappings().all()
        position = {c: i for i, c in enumerate(candidates)}
        entities = [convert.entity_from_row(r) for r in rows]
        entities.sort(key=lambda e: (position.get(e.name.lower(), len(position)), str(e.id)))
        return entities[:limit]

"""Message kNN and full-text search for :class:`PostgresMemoryIndex` (one statement each).

* ``search_messages``: pgvector HNSW kNN over ``episode_messages.embedding``.
* ``text_search_facts`` / ``text_search_messages`` / ``text_search_episodes``: BM25 over
  the stored :func:`~cycgraph_memory.textsearch.tokenize` tokens, the same ranking as the
  in-memory index (see :mod:`cycgraph_memory.postgres.bm25`: GIN candidates, bounded per
  query term by ``TEXT_CANDIDATES``, statistics kept by triggers), ties by id. An episode
  is searched by its topic and every message, as in memory. The statements are built once
  (:func:`cycgraph_memory.postgres.statements.text_ranked`); the terms are a bound array.

Messages of invalidated episodes are skipped unless ``include_invalidated``. Returned
messages carry no embedding (as from the in-memory index).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from sqlalchemy import Integer, bindparam, func, literal, select, true
from sqlalchemy.dialects.postgresql import ARRAY, array
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.types import Uuid

from cycgraph_memory._construct import trusted
from cycgraph_memory._options import coerce_options
from cycgraph_memory._validate import check_bool, check_query_text
from cycgraph_memory.normalize import name_candidate_keys, normalize_entity_name
from cycgraph_memory.postgres import convert, statements
from cycgraph_memory.postgres.bm25 import CORPORA, TEXT_CANDIDATES, bm25_terms
from cycgraph_memory.postgres.definer_lookups import entity_fact_count
from cycgraph_memory.postgres.statements import FACTS, MESSAGES
from cycgraph_memory.records import (
    Entity,
    Episode,
    Message,
    ScoredResult,
    SearchOptions,
    SemanticFact,
)

__all__ = ["TEXT_CANDIDATES", "PostgresSearchMixin"]

Options = Mapping[str, Any]
R = TypeVar("R")


def message_without_vector(row: Mapping[Any, Any]) -> Message:
    """A message from its row, without its embedding (trusted: read from our table)."""
    return trusted(
        Message,
        id=convert._uuid(row["id"]),
        role=row["role"],
        content=row["content"],
        timestamp=row["timestamp"],
        metadata=row["metadata"],
        embedding=None,
    )


def _episode(row: Mapping[Any, Any]) -> Episode:
    return convert.episode_from_rows(row, row["messages"] or [])


class PostgresSearchMixin:
    """Message and text search methods; mixed into ``PostgresMemoryIndex``."""

    _tenant: str
    _read: Callable[..., Any]
    _search: Callable[..., Any]

    if TYPE_CHECKING:

        async def _definer(self, session: AsyncSession) -> bool:
            """See ``PostgresBackend._definer``."""

    async def search_messages(
        self, embedding: Sequence[float], options: SearchOptions | Options | None = None, /,
        **kwargs: Any,
    ) -> list[ScoredResult[Message]]:
        """Nearest messages by cosine similarity (HNSW), best first, ties by id."""
        opts = coerce_options(SearchOptions, options, kwargs)
        result: list[ScoredResult[Message]] = await self._search(
            MESSAGES, embedding, opts, message_without_vector, "search_messages"
        )
        return result

    async def _text(
        self,
        table_name: str,
        text: str,
        opts: SearchOptions,
        from_row: Callable[[Any], R],
        *,
        tag_filters: bool = False,
    ) -> list[ScoredResult[R]]:
        terms = bm25_terms(check_query_text(text))
        if not terms:
            return []
        tags = bool(tag_filters and opts.tags)
        exclude = bool(tag_filters and opts.exclude_tags)
        params: dict[str, Any] = {
            "tenant": self._tenant, "limit": opts.limit, "bm25_terms": terms,
        }
        if tags:
            params["any_tags"] = list(opts.tags or ())
        if exclude:
            params["no_tags"] = list(opts.exclude_tags or ())
        session: AsyncSession
        async with self._read() as session:
            stmt = statements.text_ranked(
                table_name, live=not opts.include_invalidated, tags=tags, exclude_tags=exclude,
                definer=await self._definer(session),
            )
            rows = await statements.fetch(session, stmt, params)
        return [ScoredResult(item=from_row(r), score=float(r["text_rank"])) for r in rows]

    async def text_search_facts(
        self, text: str, options: SearchOptions | Options | None = None, /, **kwargs: Any
    ) -> list[ScoredResult[SemanticFact]]:
        """Facts sharing a word with ``text``, by BM25; tag filters apply."""
        opts = coerce_options(SearchOptions, options, kwargs)
        return await self._text("facts", text, opts, convert.fact_from_row, tag_filters=True)

    async def text_search_messages(
        self, text: str, options: SearchOptions | Options | None = None, /, **kwargs: Any
    ) -> list[ScoredResult[Message]]:
        """Messages sharing a word with ``text``, by BM25."""
        opts = coerce_options(SearchOptions, options, kwargs)
        return await self._text("episode_messages", text, opts, message_without_vector)

    async def text_search_episodes(
        self, text: str, options: SearchOptions | Options | None = None, /, **kwargs: Any
    ) -> list[ScoredResult[Episode]]:
        """Episodes whose topic or messages share words with ``text``, by BM25."""
        opts = coerce_options(SearchOptions, options, kwargs)
        return await self._text("episodes", text, opts, _episode)

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
        total = (
            select(CORPORA.c.documents)
            .where(CORPORA.c.tenant_id == self._tenant, CORPORA.c.corpus == FACTS.name)
            .scalar_subquery()
        )
        async with self._read() as session:
            if await self._definer(session):
                # A role under row-level security: the count through migration 0016's
                # function (the GIN index is out of its reach).
                stmt = select(
                    wanted.c.id,
                    entity_fact_count(wanted.c.id, literal(cap, Integer())).label("n"),
                    func.coalesce(total, 0).label("total"),
                ).select_from(wanted)
            else:
                cited = (
                    select(FACTS.c.id)
                    .where(FACTS.c.tenant_id == self._tenant,
                           FACTS.c.entity_ids.contains(array([wanted.c.id])))
                    .limit(cap)
                    .lateral("cited")
                )
                stmt = (
                    select(wanted.c.id, func.count(cited.c.id).label("n"),
                           func.coalesce(total, 0).label("total"))
                    .select_from(wanted)
                    .outerjoin(cited, true())
                    .group_by(wanted.c.id)
                )
            rows = (await session.execute(stmt)).all()
        counts = {convert._uuid(r[0]): int(r[1]) for r in rows if r[1]}
        return counts, int(rows[0][2]) if rows else 0

    async def match_entity_names(
        self, text: str, *, limit: int = 10, include_invalidated: bool = False
    ) -> list[Entity]:
        """Entities whose normalised name is a word n-gram of ``text`` (1-4 words).

        One statement (``name_key = ANY(:keys)``, the candidates' identity keys, as in
        memory); ordered by where the name first appears in ``text``, then id; superseded
        and invalidated entities are skipped unless ``include_invalidated``.
        """
        include_invalidated = check_bool(include_invalidated, "include_invalidated")
        candidates = name_candidate_keys(text)
        position = {key: i for i, key in enumerate(candidates)}
        if not candidates:
            return []
        async with self._read() as session:
            stmt = statements.entity_name_match(
                include_invalidated=include_invalidated, definer=await self._definer(session)
            )
            rows = await statements.fetch(
                session, stmt, {"tenant": self._tenant, "names": candidates}
            )
        entities = [convert.entity_from_row(r) for r in rows]
        entities.sort(
            key=lambda e: (position.get(normalize_entity_name(e.name), len(position)), str(e.id))
        )
        return entities[:limit]

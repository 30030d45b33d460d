"""Message kNN and full-text search for :class:`PostgresMemoryIndex` (one statement each).

* ``search_messages``: pgvector HNSW kNN over ``episode_messages.embedding``.
* ``text_search_facts`` / ``text_search_messages``: the generated ``search_tsv`` columns
  (``to_tsvector('english', content)``, GIN-indexed) matched against an OR query of the
  question's words (``to_tsquery('english', 'w1 | w2 | ...')``, so a document needs only
  one shared word) and ranked by ``ts_rank_cd(search_tsv, query, 1)`` (cover density,
  divided by ``1 + log(length)``), ties by id.
* Bounded candidates: only a bounded candidate set is ranked, so the cost does not grow
  with the number of matching rows. The candidates are the union of at most
  ``TEXT_CANDIDATES`` rows matching every word (AND) and, per word, at most
  ``TEXT_CANDIDATES`` rows containing that word (all ``LIMIT`` branches of one statement
  through the GIN index). A rare word (document frequency <= the cap) brings all of its
  rows; a word found in more rows than the cap brings an arbitrary sample, like the ~0
  weight BM25's IDF gives it. When no more than the cap match, the result equals ranking
  every match.
* ``text_search_episodes``: the same bounded message match, summed per episode.

Messages of invalidated episodes are skipped unless ``include_invalidated``. Returned
messages carry no embedding (as from the in-memory index).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from sqlalchemy.ext.asyncio import AsyncSession

from cycgraph_memory._construct import trusted
from cycgraph_memory._options import coerce_options
from cycgraph_memory.postgres import convert, statements
from cycgraph_memory.postgres.statements import MESSAGES, TEXT_CANDIDATES
from cycgraph_memory.records import (
    Entity,
    Episode,
    Message,
    ScoredResult,
    SearchOptions,
    SemanticFact,
)
from cycgraph_memory.textsearch import name_candidates

__all__ = ["TEXT_CANDIDATES", "PostgresSearchMixin", "or_tsquery_text"]

MAX_QUERY_WORDS = 32
"""Words of a question used by a text search (the first ones, in order)."""

Options = Mapping[str, Any]
R = TypeVar("R")
_WORD = re.compile(r"[^\W_]+", re.UNICODE)


def or_tsquery_text(text: str) -> str:
    """``to_tsquery`` input matching any word of ``text`` (letters and digits only)."""
    return " | ".join(_query_words(text))


def _query_words(text: str) -> list[str]:
    words = dict.fromkeys(w for w in _WORD.findall(text.lower().replace("'", "")) if len(w) > 1)
    return list(words)[:MAX_QUERY_WORDS]


def _word_params(words: Sequence[str]) -> dict[str, Any]:
    params: dict[str, Any] = {"and_query": " & ".join(words), "or_query": " | ".join(words)}
    params.update((f"w{i}", w) for i, w in enumerate(words))
    return params


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
        live: bool,
        tag_filters: bool = False,
    ) -> list[ScoredResult[R]]:
        words = _query_words(text)
        if not words:
            return []
        tags = bool(tag_filters and opts.tags)
        exclude = bool(tag_filters and opts.exclude_tags)
        params = _word_params(words)
        params.update(tenant=self._tenant, limit=opts.limit)
        if tags:
            params["any_tags"] = list(opts.tags or ())
        if exclude:
            params["no_tags"] = list(opts.exclude_tags or ())
        stmt = statements.text_ranked(
            table_name, len(words), live=live, tags=tags, exclude_tags=exclude
        )
        session: AsyncSession
        async with self._read() as session:
            rows = await statements.fetch(session, stmt, params)
        return [ScoredResult(item=from_row(r), score=float(r["text_rank"])) for r in rows]

    async def text_search_facts(
        self, text: str, options: SearchOptions | Options | None = None, /, **kwargs: Any
    ) -> list[ScoredResult[SemanticFact]]:
        """Facts sharing a word with ``text``, by ``ts_rank_cd``; tag filters apply."""
        opts = coerce_options(SearchOptions, options, kwargs)
        return await self._text(
            "facts", text, opts, convert.fact_from_row,
            live=not opts.include_invalidated, tag_filters=True,
        )

    async def text_search_messages(
        self, text: str, options: SearchOptions | Options | None = None, /, **kwargs: Any
    ) -> list[ScoredResult[Message]]:
        """Messages sharing a word with ``text``, by ``ts_rank_cd``."""
        opts = coerce_options(SearchOptions, options, kwargs)
        return await self._text(
            "episode_messages", text, opts, message_without_vector,
            live=not opts.include_invalidated,
        )

    async def text_search_episodes(
        self, text: str, options: SearchOptions | Options | None = None, /, **kwargs: Any
    ) -> list[ScoredResult[Episode]]:
        """Episodes whose messages share words with ``text`` (summed ``ts_rank_cd``)."""
        opts = coerce_options(SearchOptions, options, kwargs)
        words = _query_words(text)
        if not words:
            return []
        params = _word_params(words)
        params.update(tenant=self._tenant, limit=opts.limit)
        stmt = statements.text_ranked_episodes(
            len(words), include_invalidated=opts.include_invalidated
        )
        async with self._read() as session:
            rows = await statements.fetch(session, stmt, params)
        return [ScoredResult(item=_episode(r), score=float(r["text_rank"])) for r in rows]

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
        stmt = statements.entity_name_match(include_invalidated=include_invalidated)
        async with self._read() as session:
            rows = await statements.fetch(
                session, stmt, {"tenant": self._tenant, "names": candidates}
            )
        position = {c: i for i, c in enumerate(candidates)}
        entities = [convert.entity_from_row(r) for r in rows]
        entities.sort(key=lambda e: (position.get(e.name.lower(), len(position)), str(e.id)))
        return entities[:limit]

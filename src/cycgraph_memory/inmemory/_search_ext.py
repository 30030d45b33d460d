"""Message vectors and lexical (BM25) search for :class:`InMemoryMemoryIndex`.

Kept apart from the vector tables of ``index.py``: messages are searchable by embedding
(exact cosine, like every other record type) and facts, messages and episodes by text
(:class:`~cycgraph_memory.textsearch.BM25Index`). Facts and episodes without an embedding
are still text-searchable.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TypeVar

import numpy as np
from numpy.typing import NDArray

from cycgraph_memory._options import coerce_options
from cycgraph_memory._validate import check_bool, check_query_text
from cycgraph_memory.contracts import MemoryStore
from cycgraph_memory.errors import InvalidInputError
from cycgraph_memory.inmemory._common import (
    RESCORE_SLACK,
    SCORE_FLOOR_TOLERANCE,
    check_dimension,
    copy_record,
    normalize_rows,
    pack_embedding,
    row_scores,
)
from cycgraph_memory.normalize import name_candidate_keys, normalize_entity_name
from cycgraph_memory.records import (
    Entity,
    EntityFilter,
    Episode,
    FactFilter,
    ListOptions,
    Message,
    ScoredResult,
    SearchOptions,
    SemanticFact,
)
from cycgraph_memory.textsearch import BM25Index, tokenize

__all__ = ["MessageAndTextSearch", "episode_search_text"]

_PAGE = 1000


def episode_search_text(episode: Episode) -> str:
    """The text an episode is searched by: its topic and every message."""
    return " ".join([episode.topic, *(m.content for m in episode.messages)])


class _Vectors:
    """Unit rows keyed by id; the matrix is rebuilt lazily after changes."""

    def __init__(self) -> None:
        self.rows: dict[uuid.UUID, NDArray[np.float32]] = {}
        self._matrix: NDArray[np.float32] | None = None
        self._ids: list[uuid.UUID] = []
        self._id_keys: list[str] = []

    def put(self, item_id: uuid.UUID, row: NDArray[np.float32]) -> None:
        self.rows[item_id] = row
        self._matrix = None

    def remove(self, item_id: uuid.UUID) -> bool:
        if self.rows.pop(item_id, None) is None:
            return False
        self._matrix = None
        return True

    def search(self, query: NDArray[np.float32], limit: int) -> list[tuple[uuid.UUID, float]]:
        if not self.rows:
            return []
        if self._matrix is None:
            self._ids = list(self.rows)
            self._id_keys = [str(i) for i in self._ids]
            self._matrix = np.vstack([self.rows[i] for i in self._ids])
        scores = self._matrix @ query
        n = len(self._ids)
        k = min(limit, n)
        if k < n:
            top = np.argpartition(scores, n - k)[n - k :]
            candidates = np.flatnonzero(scores >= scores[top].min() - RESCORE_SLACK)
        else:
            candidates = np.arange(n)
        # Scored row by row: the same vector twice ties exactly, and ties go by id.
        exact = dict(zip(candidates.tolist(),
                         row_scores(self._matrix[candidates], query).tolist(), strict=True))
        ranked = sorted(exact, key=lambda r: (-exact[r], self._id_keys[r]))[:k]
        return [(self._ids[r], min(1.0, max(-1.0, exact[r]))) for r in ranked]


_Shared = TypeVar("_Shared", Entity, SemanticFact)

_MessageVectors = Mapping[uuid.UUID, Sequence[tuple[uuid.UUID, Sequence[float]]]]
"""Per episode id, ``(message id, vector)`` of its messages that have one."""


def _vectors_of(
    episode: Episode, given: _MessageVectors | None
) -> Sequence[tuple[uuid.UUID, Sequence[float]]]:
    """The message vectors of ``episode``: from ``given`` when it has them, else its own."""
    if given is not None:
        found = given.get(episode.id)
        if found is not None:
            return found
    return [(m.id, m.embedding) for m in episode.messages if m.embedding is not None]


class MessageAndTextSearch:
    """Mixin state and methods; the index calls the ``_ext_*`` hooks on every change."""

    _dim: int | None

    def _ext_init(self) -> None:
        self._message_vectors = _Vectors()
        self._message_records: dict[uuid.UUID, Message] = {}
        self._message_episode: dict[uuid.UUID, uuid.UUID] = {}
        self._episode_messages: dict[uuid.UUID, list[uuid.UUID]] = {}
        self._text_facts: dict[uuid.UUID, SemanticFact] = {}
        self._text_episodes: dict[uuid.UUID, Episode] = {}
        self._bm25_facts = BM25Index()
        self._bm25_messages = BM25Index()
        self._bm25_episodes = BM25Index()
        self._entity_records: dict[uuid.UUID, Entity] = {}
        self._entity_keys: dict[str, set[uuid.UUID]] = {}
        self._entity_fact_counts: Counter[uuid.UUID] = Counter()

    # ------------------------------------------------------------------ maintenance

    def _ext_shared(self, record: _Shared) -> _Shared:
        """The object to keep for a record read by ``_ext_read``.

        The index returns its own copy of the same record when it holds one (the vector
        tables hold every record with an embedding), so a rebuild keeps one copy per record,
        not two; otherwise the record with its embedding packed (3 KB instead of ~12 KB for
        384 floats as a list).
        """
        return pack_embedding(record)

    def _ext_check(
        self, records: Iterable[object], message_vectors: _MessageVectors | None = None
    ) -> int | None:
        """Validate message vectors (dimension) before anything is written.

        ``message_vectors`` holds, per episode id, the vectors of its messages when the
        records are copies made without them.
        """
        dim = self._dim
        for record in records:
            if isinstance(record, Episode):
                vectors = _vectors_of(record, message_vectors)
                for message_id, embedding in vectors:
                    if dim is None:
                        dim = len(embedding)
                    check_dimension(dim, len(embedding), f"Message {message_id}")
        return dim

    def _ext_upsert(
        self, records: Iterable[object], message_vectors: _MessageVectors | None = None
    ) -> None:
        """Index facts and episodes for text search; ``records`` are the index's copies.

        ``message_vectors``: as for :meth:`_ext_check`.
        """
        for record in records:
            if isinstance(record, SemanticFact):
                self._ext_drop_fact_citations(record.id)
                self._text_facts[record.id] = record
                self._entity_fact_counts.update(set(record.entity_ids))
                self._bm25_facts.add(record.id, record.content)
            elif isinstance(record, Episode):
                self._ext_put_episode(record, _vectors_of(record, message_vectors))
            elif isinstance(record, Entity):
                self._ext_drop_entity(record.id)
                self._entity_records[record.id] = record
                self._entity_keys.setdefault(normalize_entity_name(record.name), set()).add(
                    record.id
                )

    def _ext_drop_fact_citations(self, fact_id: uuid.UUID) -> None:
        old = self._text_facts.get(fact_id)
        if old is not None:
            self._entity_fact_counts.subtract(set(old.entity_ids))
            for entity_id in set(old.entity_ids):
                if self._entity_fact_counts[entity_id] <= 0:
                    del self._entity_fact_counts[entity_id]

    def _ext_drop_entity(self, entity_id: uuid.UUID) -> bool:
        old = self._entity_records.pop(entity_id, None)
        if old is None:
            return False
        key = normalize_entity_name(old.name)
        ids = self._entity_keys.get(key)
        if ids is not None:
            ids.discard(entity_id)
            if not ids:
                del self._entity_keys[key]
        return True

    def _ext_put_episode(
        self, stored: Episode, vectors: Sequence[tuple[uuid.UUID, Sequence[float]]]
    ) -> None:
        # A message written again without a vector keeps the one indexed (as the stores
        # keep it): episode reads carry no message vectors, so an episode read, changed
        # (soft-deleted by the consolidator, say) and written back has none.
        given = {message_id for message_id, _ in vectors}
        kept = {
            m.id: row
            for m in stored.messages
            if m.id not in given
            and self._message_episode.get(m.id) == stored.id
            and (row := self._message_vectors.rows.get(m.id)) is not None
        }
        self._ext_drop_episode_messages(stored.id)
        total: Counter[str] = Counter(tokenize(stored.topic))
        for message in stored.messages:
            message.__dict__["embedding"] = None  # results carry no vectors
            self._message_records[message.id] = message
            self._message_episode[message.id] = stored.id
            total.update(self._bm25_messages.add(message.id, message.content))
        self._episode_messages[stored.id] = [m.id for m in stored.messages]
        if vectors:
            rows = normalize_rows(np.asarray([v for _, v in vectors], dtype=np.float64))
            for (message_id, _), row in zip(vectors, rows, strict=True):
                self._message_vectors.put(message_id, row)
        for message_id, row in kept.items():
            self._message_vectors.put(message_id, row)
        self._text_episodes[stored.id] = stored
        self._bm25_episodes.add_counts(stored.id, total)

    def _ext_drop_episode_messages(self, episode_id: uuid.UUID) -> None:
        for message_id in self._episode_messages.pop(episode_id, []):
            if self._message_episode.get(message_id) == episode_id:
                self._message_episode.pop(message_id, None)
                self._message_records.pop(message_id, None)
                self._message_vectors.remove(message_id)
                self._bm25_messages.remove(message_id)

    def _ext_remove(self, record_id: uuid.UUID) -> bool:
        removed = self._ext_drop_entity(record_id)
        self._ext_drop_fact_citations(record_id)
        if self._text_facts.pop(record_id, None) is not None:
            self._bm25_facts.remove(record_id)
            removed = True
        if self._text_episodes.pop(record_id, None) is not None:
            self._bm25_episodes.remove(record_id)
            self._ext_drop_episode_messages(record_id)
            removed = True
        return removed

    async def _ext_read(
        self, store: MemoryStore
    ) -> tuple[list[Entity], list[SemanticFact], list[Episode]]:
        """Read what ``_ext_load`` indexes (messages with their vectors); change nothing.

        The rebuild reads everything first and swaps the new state in without awaiting:
        a rebuild cancelled (or failing) while it reads leaves the index as it was.
        """
        entities: list[Entity] = []
        offset = 0
        while True:
            page = await store.find_entities(
                EntityFilter(include_invalidated=True, limit=_PAGE, offset=offset)
            )
            entities += page
            offset += len(page)
            if len(page) < _PAGE:
                break
        facts: list[SemanticFact] = []
        offset = 0
        while True:
            fact_page = await store.find_facts(
                FactFilter(include_invalidated=True, limit=_PAGE, offset=offset)
            )
            facts += fact_page
            offset += len(fact_page)
            if len(fact_page) < _PAGE:
                break
        episodes: list[Episode] = []
        offset = 0
        while True:
            episode_page = await store.list_episodes(
                ListOptions(include_invalidated=True, limit=_PAGE, offset=offset)
            )
            ids = [m.id for e in episode_page for m in e.messages]
            stored = await store.get_messages(ids) if ids else {}
            for episode in episode_page:
                for message in episode.messages:
                    full = stored.get(message.id)
                    if full is not None and full.embedding is not None:
                        message.__dict__["embedding"] = full.embedding
            episodes += episode_page
            offset += len(episode_page)
            if len(episode_page) < _PAGE:
                break
        return entities, facts, episodes

    def _ext_load(self, read: tuple[list[Entity], list[SemanticFact], list[Episode]]) -> None:
        """Replace the text, name and message state with what ``_ext_read`` returned.

        Call it after ``_ext_check`` passed on the episodes read.
        """
        entities, facts, episodes = read
        self._ext_init()
        self._ext_upsert([self._ext_shared(e) for e in entities])
        self._ext_upsert([self._ext_shared(f) for f in facts])
        self._ext_upsert(episodes)  # store pages are copies already

    # ------------------------------------------------------------------ search

    async def search_messages(
        self,
        embedding: Sequence[float],
        options: SearchOptions | Mapping[str, Any] | None = None,
        /,
        **kwargs: Any,
    ) -> list[ScoredResult[Message]]:
        """Nearest messages by cosine similarity, best first (ties by id).

        Messages of invalidated episodes are skipped unless ``include_invalidated``.
        Results carry the message without its embedding.
        """
        opts = coerce_options(SearchOptions, options, kwargs)
        q = np.asarray(embedding, dtype=np.float64)
        if q.ndim != 1 or q.size == 0 or not np.all(np.isfinite(q)):
            raise InvalidInputError("search_messages query must be a non-empty finite vector")
        if self._dim is None:
            return []
        check_dimension(self._dim, q.shape[0], "search_messages query")
        unit = normalize_rows(q[np.newaxis, :])[0]
        extra = 0 if opts.include_invalidated else len(self._message_records)
        hits = self._message_vectors.search(unit, opts.limit + extra)
        out: list[ScoredResult[Message]] = []
        for message_id, score in hits:
            if (
                opts.min_similarity is not None
                and score < opts.min_similarity - SCORE_FLOOR_TOLERANCE
            ):
                break
            if not opts.include_invalidated and not self._message_live(message_id):
                continue
            out.append(ScoredResult(item=copy_record(self._message_records[message_id]),
                                    score=score))
            if len(out) == opts.limit:
                break
        return out

    def _message_live(self, message_id: uuid.UUID) -> bool:
        episode = self._text_episodes.get(self._message_episode.get(message_id, uuid.UUID(int=0)))
        return episode is None or episode.invalidated_at is None

    def message_episode_ids(self, message_ids: Iterable[uuid.UUID]) -> dict[uuid.UUID, uuid.UUID]:
        """The episode each known message belongs to."""
        return {m: self._message_episode[m] for m in message_ids if m in self._message_episode}

    async def text_search_facts(
        self,
        text: str,
        options: SearchOptions | Mapping[str, Any] | None = None,
        /,
        **kwargs: Any,
    ) -> list[ScoredResult[SemanticFact]]:
        """Facts sharing words with ``text``, by BM25 (best first, ties by id).

        ``tags`` / ``exclude_tags`` / ``include_invalidated`` apply as in
        ``search_facts``; ``min_similarity`` does not (BM25 scores are not similarities).
        """
        opts = coerce_options(SearchOptions, options, kwargs)
        tags = set(opts.tags or ())
        exclude = set(opts.exclude_tags or ())
        out: list[ScoredResult[SemanticFact]] = []
        for fact_id, score in self._bm25_facts.ranked(check_query_text(text)):
            fact = self._text_facts[fact_id]
            if not opts.include_invalidated and fact.invalidated_by is not None:
                continue
            if tags and tags.isdisjoint(fact.tags):
                continue
            if exclude and not exclude.isdisjoint(fact.tags):
                continue
            out.append(ScoredResult(item=copy_record(fact), score=score))
            if len(out) == opts.limit:
                break
        return out

    async def text_search_messages(
        self,
        text: str,
        options: SearchOptions | Mapping[str, Any] | None = None,
        /,
        **kwargs: Any,
    ) -> list[ScoredResult[Message]]:
        """Messages sharing words with ``text``, by BM25 (best first, ties by id)."""
        opts = coerce_options(SearchOptions, options, kwargs)
        out: list[ScoredResult[Message]] = []
        for message_id, score in self._bm25_messages.ranked(check_query_text(text)):
            if not opts.include_invalidated and not self._message_live(message_id):
                continue
            out.append(
                ScoredResult(item=copy_record(self._message_records[message_id]), score=score)
            )
            if len(out) == opts.limit:
                break
        return out

    async def text_search_episodes(
        self,
        text: str,
        options: SearchOptions | Mapping[str, Any] | None = None,
        /,
        **kwargs: Any,
    ) -> list[ScoredResult[Episode]]:
        """Episodes (topic and messages) sharing words with ``text``, by BM25."""
        opts = coerce_options(SearchOptions, options, kwargs)
        out: list[ScoredResult[Episode]] = []
        for episode_id, score in self._bm25_episodes.ranked(check_query_text(text)):
            episode = self._text_episodes[episode_id]
            if not opts.include_invalidated and episode.invalidated_at is not None:
                continue
            out.append(ScoredResult(item=copy_record(episode), score=score))
            if len(out) == opts.limit:
                break
        return out

    async def entity_fact_counts(
        self, entity_ids: Iterable[uuid.UUID], *, cap: int = 1000
    ) -> tuple[dict[uuid.UUID, int], int]:
        """How many of the tenant's facts cite each entity, and how many facts there are.

        Every fact counts (invalidated ones too, as in the BM25 statistics); a count stops
        at ``cap``. Entities cited by no fact are absent. Used to weigh the graph signal by
        specificity (``retrieve_memory``).
        """
        counts = {e: min(cap, self._entity_fact_counts[e]) for e in entity_ids
                  if self._entity_fact_counts.get(e, 0) > 0}
        return counts, len(self._text_facts)

    async def match_entity_names(
        self, text: str, *, limit: int = 10, include_invalidated: bool = False
    ) -> list[Entity]:
        """Entities whose normalised name is a word n-gram of ``text`` (1-4 words).

        Ordered by where the name first appears in ``text``, then id; superseded and
        invalidated entities are skipped unless ``include_invalidated``.
        """
        include_invalidated = check_bool(include_invalidated, "include_invalidated")
        out: list[Entity] = []
        seen: set[uuid.UUID] = set()
        for key in name_candidate_keys(text):
            ids = self._entity_keys.get(key, set())
            for entity_id in sorted(ids, key=str):
                entity = self._entity_records[entity_id]
                if entity_id in seen:
                    continue
                live = entity.invalidated_at is None and entity.superseded_by is None
                if not live and not include_invalidated:
                    continue
                seen.add(entity_id)
                out.append(copy_record(entity))
                if len(out) == limit:
                    return out
        return out

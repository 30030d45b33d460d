"""In-process :class:`~cycgraph_memory.contracts.MemoryIndex`: exact cosine search on numpy.

Each record type (entities, facts, themes, episodes) has one float32 matrix of
L2-normalised rows, so a search is one matrix-vector product followed by a top-k
selection (``np.argpartition``) and a sort of those k only. Filters (soft delete, fact
tags) are applied *before* the top-k by masking scores to ``-inf``, so ``limit`` results
come back whenever that many records pass the filters.

The scan is a float32 matrix product (accurate to about 1e-6); float32 halves the memory
traffic of the scan, which dominates search time, and matches the precision of
pgvector's ``vector`` type. Its best candidates are then scored again in double
precision, divided by both vectors' lengths as pgvector does, so a vector scores exactly
1.0 against itself. The scan is O(n) per query: past
:data:`IN_MEMORY_INDEX_WARN_THRESHOLD` entries a one-shot :class:`InMemoryIndexScaleWarning`
suggests the pgvector backend.
"""

from __future__ import annotations

import uuid
import warnings
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Generic, TypeVar

import numpy as np
from numpy.typing import NDArray

from cycgraph_memory._ids import parse_id
from cycgraph_memory._options import coerce_options
from cycgraph_memory._validate import (
    check_bool,
    check_dimensions,
    keyword_options,
    query_vector_array,
    query_vectors_array,
)
from cycgraph_memory.contracts import MemoryStore
from cycgraph_memory.errors import InvalidTypeError
from cycgraph_memory.inmemory._common import (
    RESCORE_SLACK,
    SCORE_FLOOR_TOLERANCE,
    check_dimension,
    coerce_record,
    copy_record,
    normalize_rows,
    pack_embedding,
    row_scores,
)
from cycgraph_memory.inmemory._search_ext import MessageAndTextSearch
from cycgraph_memory.records import (
    Entity,
    EntityFilter,
    Episode,
    FactFilter,
    ListOptions,
    ScoredResult,
    SearchOptions,
    SemanticFact,
    Theme,
)

__all__ = ["IN_MEMORY_INDEX_WARN_THRESHOLD", "InMemoryIndexScaleWarning", "InMemoryMemoryIndex"]


IN_MEMORY_INDEX_WARN_THRESHOLD = 10_000
"""Indexed-entry count past which the in-memory index warns (once) about its O(n) scan."""

_REBUILD_PAGE = 1000

R = TypeVar("R", Entity, SemanticFact, Theme, Episode)
_S = TypeVar("_S", Entity, SemanticFact)
IndexedRecord = Entity | SemanticFact | Theme | Episode
"""Any record type the index holds."""

_NEG_INF = np.float32(-np.inf)


class InMemoryIndexScaleWarning(UserWarning):
    """The in-memory index grew past :data:`IN_MEMORY_INDEX_WARN_THRESHOLD` entries."""


def _is_invalidated(record: IndexedRecord) -> bool:
    if isinstance(record, SemanticFact):
        return record.invalidated_by is not None
    return record.invalidated_at is not None


class _Table(Generic[R]):
    """One record type: a growable matrix of unit rows plus per-row metadata.

    Rows ``[0, size)`` are live; removal swaps the last row into the hole, so rows stay
    dense and a search never copies the matrix. Capacity grows geometrically, so upserts
    are amortised O(d).
    """

    def __init__(self, kind: str, *, tagged: bool) -> None:
        self.kind = kind
        self.tagged = tagged
        self.size = 0
        self.matrix: NDArray[np.float32] = np.zeros((0, 0), dtype=np.float32)
        self.invalid: NDArray[np.bool_] = np.zeros(0, dtype=np.bool_)
        # uuid.int split in two words: numeric order == UUID string order (tie-break).
        self.id_hi: NDArray[np.uint64] = np.zeros(0, dtype=np.uint64)
        self.id_lo: NDArray[np.uint64] = np.zeros(0, dtype=np.uint64)
        self.n_invalid = 0
        self.records: list[R] = []
        self.pos: dict[uuid.UUID, int] = {}
        self.row_tags: list[tuple[str, ...]] = []
        self.tag_rows: dict[str, set[int]] = {}

    def _reserve(self, rows: int, dim: int) -> None:
        cap = self.matrix.shape[0]
        if self.matrix.shape[1] != dim:
            cap = 0
        if rows <= cap:
            return
        new_cap = max(rows, 2 * cap, 16)
        matrix = np.zeros((new_cap, dim), dtype=np.float32)
        invalid = np.zeros(new_cap, dtype=np.bool_)
        hi = np.zeros(new_cap, dtype=np.uint64)
        lo = np.zeros(new_cap, dtype=np.uint64)
        n = self.size
        if n:
            matrix[:n] = self.matrix[:n]
            invalid[:n] = self.invalid[:n]
            hi[:n] = self.id_hi[:n]
            lo[:n] = self.id_lo[:n]
        self.matrix, self.invalid, self.id_hi, self.id_lo = matrix, invalid, hi, lo

    def _untag(self, row: int) -> None:
        for tag in self.row_tags[row]:
            rows = self.tag_rows[tag]
            rows.discard(row)
            if not rows:
                del self.tag_rows[tag]

    def _tag(self, row: int, tags: tuple[str, ...]) -> None:
        self.row_tags[row] = tags
        for tag in tags:
            self.tag_rows.setdefault(tag, set()).add(row)

    def put_many(self, records: Sequence[R], vectors: NDArray[np.float32]) -> None:
        """Insert or replace rows; ``records`` have unique ids and the caller owns them."""
        if not records:
            return
        self._reserve(self.size + len(records), vectors.shape[1])
        rows = np.empty(len(records), dtype=np.intp)
        for i, record in enumerate(records):
            row = self.pos.get(record.id)
            if row is None:
                row = self.size
                self.size += 1
                self.pos[record.id] = row
                self.records.append(record)
                self.row_tags.append(())
                self.id_hi[row] = record.id.int >> 64
                self.id_lo[row] = record.id.int & 0xFFFF_FFFF_FFFF_FFFF
            else:
                self.records[row] = record
                self._untag(row)
                self.n_invalid -= int(self.invalid[row])
            invalid = _is_invalidated(record)
            self.invalid[row] = invalid
            self.n_invalid += int(invalid)
            if self.tagged and isinstance(record, SemanticFact):
                self._tag(row, tuple(record.tags))
            rows[i] = row
        self.matrix[rows] = vectors

    def remove(self, record_id: uuid.UUID) -> bool:
        """Drop one row (swap-with-last); True when it was present."""
        row = self.pos.pop(record_id, None)
        if row is None:
            return False
        last = self.size - 1
        self._untag(row)
        self.n_invalid -= int(self.invalid[row])
        if row != last:
            moved = self.records[last]
            moved_tags = self.row_tags[last]
            self._untag(last)
            self.matrix[row] = self.matrix[last]
            self.invalid[row] = self.invalid[last]
            self.id_hi[row] = self.id_hi[last]
            self.id_lo[row] = self.id_lo[last]
            self.records[row] = moved
            self.pos[moved.id] = row
            self._tag(row, moved_tags)
        self.records.pop()
        self.row_tags.pop()
        self.invalid[last] = False
        self.size = last
        return True

    def _tag_rows(self, tags: Iterable[str]) -> NDArray[np.intp]:
        found: set[int] = set()
        for tag in tags:
            found |= self.tag_rows.get(tag, set())
        return np.fromiter(found, dtype=np.intp, count=len(found))

    def search(self, query: NDArray[np.float32], opts: SearchOptions) -> list[tuple[R, float]]:
        """Top ``opts.limit`` rows by cosine similarity, best first, ties by id."""
        n = self.size
        if n == 0:
            return []
        scores = self.matrix[:n] @ query
        masked = False
        if not opts.include_invalidated and self.n_invalid:
            scores[self.invalid[:n]] = _NEG_INF
            masked = True
        if self.tagged and opts.tags:
            keep = np.zeros(n, dtype=np.bool_)
            keep[self._tag_rows(opts.tags)] = True
            scores[~keep] = _NEG_INF
            masked = True
        if self.tagged and opts.exclude_tags:
            drop = self._tag_rows(opts.exclude_tags)
            if drop.size:
                scores[drop] = _NEG_INF
                masked = True
        available = int(np.count_nonzero(scores != _NEG_INF)) if masked else n
        k = min(opts.limit, available)
        if k == 0:
            return []
        if k < n:
            top = np.argpartition(scores, n - k)[n - k :]
            threshold = scores[top].min()
            # Every row tied (up to the product's rounding) with the k-th score competes,
            # so ties resolve by id, not by argpartition's arbitrary choice.
            candidates = np.flatnonzero(scores >= threshold - RESCORE_SLACK)
        else:
            candidates = np.flatnonzero(scores != _NEG_INF) if masked else np.arange(n)
        # The matrix product is a fast filter; the candidates are scored row by row, so
        # equal vectors tie exactly (as on pgvector) and ties go by id.
        cand_scores = row_scores(self.matrix[candidates], query)
        order = np.lexsort((self.id_lo[candidates], self.id_hi[candidates], -cand_scores))
        chosen = order[:k]
        rows = candidates[chosen]
        best = cand_scores[chosen]
        out: list[tuple[R, float]] = []
        floor = opts.min_similarity
        for row, score in zip(rows.tolist(), best.tolist(), strict=True):
            if floor is not None and score < floor - SCORE_FLOOR_TOLERANCE:
                break
            out.append((self.records[row], min(1.0, max(-1.0, score))))
        return out


class InMemoryMemoryIndex(MessageAndTextSearch):
    """Brute-force (exact) cosine search over entities, facts, themes, episodes and messages.

    Besides the vector searches it offers ``search_messages`` (message embeddings) and
    BM25 text search over facts, messages and episodes (``text_search_facts``,
    ``text_search_messages``, ``text_search_episodes``); facts and episodes without an
    embedding are text-searchable too.

    Keep it in sync with a store through :meth:`rebuild` (full re-read) or, cheaper,
    through :meth:`upsert` / :meth:`upsert_many` / :meth:`remove` after writes. Records
    without an embedding are not indexed. Results carry deep copies of the records.

    The options may also come as one mapping in the first place (the spec's
    ``new InMemoryMemoryIndex({ expectedDimensions })``):
    ``InMemoryMemoryIndex({"expected_dimensions": 384})``, with the names below; an
    unknown name is an ``InvalidTypeError``, a mapping together with other arguments an
    ``InvalidInputError``.

    Args:
        expected_dimensions: Required embedding length. Any indexed or query vector of
            another length raises ``EmbeddingDimensionMismatchError``. When ``None``, the
            first indexed vector fixes the dimension for this index (until :meth:`clear`
            or a :meth:`rebuild`, which re-learns it from the store), and later
            mismatches raise as well. Wire it from ``EmbeddingProvider.dimensions``. Or
            the options mapping.
        silence_scale_warning: Suppress the one-shot warning emitted when the index grows
            past :data:`IN_MEMORY_INDEX_WARN_THRESHOLD` entries.
    """

    def __init__(
        self,
        expected_dimensions: int | Mapping[str, Any] | None = None,
        silence_scale_warning: bool = False,
    ) -> None:
        if isinstance(expected_dimensions, Mapping):
            given = keyword_options(
                InMemoryMemoryIndex.__init__,
                expected_dimensions,
                locals(),
                "InMemoryMemoryIndex",
                slot="expected_dimensions",
            )
            InMemoryMemoryIndex.__init__(self, **given)
            return
        self._expected_dimensions = check_dimensions(expected_dimensions)
        self._silence = check_bool(silence_scale_warning, "silence_scale_warning")
        self._warned = False
        self._dim: int | None = expected_dimensions
        self._entities: _Table[Entity] = _Table("entity", tagged=False)
        self._facts: _Table[SemanticFact] = _Table("fact", tagged=True)
        self._themes: _Table[Theme] = _Table("theme", tagged=False)
        self._episodes: _Table[Episode] = _Table("episode", tagged=False)
        self._ext_init()

    @property
    def expected_dimensions(self) -> int | None:
        """The configured embedding length (``None`` = learned from the first vector)."""
        return self._expected_dimensions

    @property
    def dimensions(self) -> int | None:
        """The dimension currently enforced (configured or learned), if known."""
        return self._dim

    def __len__(self) -> int:
        """Total number of indexed entries across all record types."""
        return self._entities.size + self._facts.size + self._themes.size + self._episodes.size

    # ------------------------------------------------------------------ maintenance

    def _tables(self) -> tuple[_Table[Any], ...]:
        return (self._entities, self._facts, self._themes, self._episodes)

    def _table_for(self, record: object) -> _Table[Any]:
        if isinstance(record, SemanticFact):
            return self._facts
        if isinstance(record, Entity):
            return self._entities
        if isinstance(record, Theme):
            return self._themes
        if isinstance(record, Episode):
            return self._episodes
        raise InvalidTypeError(
            f"expected Entity, SemanticFact, Theme or Episode, got {type(record).__name__}"
        )

    @staticmethod
    def _vectors(
        records: Sequence[IndexedRecord], dim: int | None
    ) -> tuple[NDArray[np.float32], int | None]:
        """Check lengths and normalise; return rows and the (possibly learned) dimension."""
        for record in records:
            assert record.embedding is not None
            if dim is None:
                dim = len(record.embedding)
            check_dimension(dim, len(record.embedding), f"{type(record).__name__} {record.id}")
        if not records:
            return np.zeros((0, dim or 0), dtype=np.float32), dim
        raw = np.array([r.embedding for r in records], dtype=np.float64)
        return normalize_rows(raw), dim

    def _apply(
        self,
        batches: Mapping[int, list[IndexedRecord]],
        removals: Iterable[tuple[int, uuid.UUID]],
        tables: tuple[_Table[Any], ...],
    ) -> None:
        """Validate every batch's vectors first, then write (all or nothing)."""
        dim = self._dim
        prepared: list[tuple[_Table[Any], list[IndexedRecord], NDArray[np.float32]]] = []
        for slot, records in batches.items():
            vectors, dim = self._vectors(records, dim)
            prepared.append((tables[slot], records, vectors))
        self._dim = dim
        for slot, record_id in removals:
            tables[slot].remove(record_id)
        for table, records, vectors in prepared:
            table.put_many(records, vectors)

    def upsert(self, record: IndexedRecord) -> None:
        """Index (or re-index) one record; a record without embedding is dropped.

        Raises:
            EmbeddingDimensionMismatchError: The embedding has the wrong length; the
                index is left unchanged.
            pydantic.ValidationError: The record is invalid (e.g. a NaN embedding set with
                ``model_copy(update=...)``, which skips validation); nothing is indexed.
            InvalidTypeError: ``record`` is not an Entity, SemanticFact, Theme or Episode
                (also a ``TypeError``).
        """
        self.upsert_many([record])

    def upsert_many(self, records: Iterable[IndexedRecord]) -> None:
        """Index (or re-index) many records at once; all or nothing on a bad vector.

        Within one call, the last record with a given id wins. Every record is validated
        again (and copied) first, like a store write.
        """
        self._upsert(records, validated=False)

    def upsert_stored_many(self, records: Iterable[IndexedRecord]) -> None:
        """:meth:`upsert_many` for records a store has just accepted, without validating again.

        For a writer that indexes what it has just written (``MemoryPipeline`` after its
        store writes): the store validated these very records, so the index only copies
        them (it still shares nothing with the caller). Same dimension checks and
        all-or-nothing write as :meth:`upsert_many`; pass anything else to that method.
        """
        self._upsert(records, validated=True)

    def _upsert(self, records: Iterable[IndexedRecord], *, validated: bool) -> None:
        tables = self._tables()
        latest: dict[tuple[int, uuid.UUID], IndexedRecord] = {}
        message_vectors: dict[uuid.UUID, list[tuple[uuid.UUID, list[float]]]] = {}
        for record in records:
            slot = tables.index(self._table_for(record))
            # Validation builds a fresh record (sharing nothing with the caller); an
            # already validated one is copied instead.
            if not validated:
                latest[(slot, record.id)] = coerce_record(type(record), record)
            elif isinstance(record, Episode):
                # Held messages carry no vector (results have none): copy them without it
                # and index the caller's vectors (read, never kept).
                message_vectors[record.id] = [
                    (m.id, m.embedding) for m in record.messages if m.embedding is not None
                ]
                held = copy_record(record, blank=("messages",))
                held.__dict__["messages"] = [
                    copy_record(m, blank=("embedding",)) for m in record.messages
                ]
                latest[(slot, record.id)] = held
            else:
                latest[(slot, record.id)] = copy_record(record)
        self._dim = self._ext_check(latest.values(), message_vectors)
        batches: dict[int, list[IndexedRecord]] = {}
        removals: list[tuple[int, uuid.UUID]] = []
        copies = list(latest.values())
        for (slot, record_id), record in zip(latest, copies, strict=True):
            if record.embedding is None:
                removals.append((slot, record_id))
            else:
                batches.setdefault(slot, []).append(pack_embedding(record))
        self._apply(batches, removals, tables)
        self._ext_upsert(copies, message_vectors)
        self._maybe_warn()

    def remove(self, record_id: uuid.UUID | str) -> bool:
        """Drop a record of any type from the index; True when it was indexed."""
        rid = parse_id(record_id)
        removed = False
        for table in self._tables():
            removed = table.remove(rid) or removed
        return self._ext_remove(rid) or removed

    def clear(self) -> None:
        """Drop every entry (a learned dimension is forgotten)."""
        self._entities = _Table("entity", tagged=False)
        self._facts = _Table("fact", tagged=True)
        self._themes = _Table("theme", tagged=False)
        self._episodes = _Table("episode", tagged=False)
        self._dim = self._expected_dimensions
        self._ext_init()

    def _ext_shared(self, record: _S) -> _S:
        """The vector table's copy of ``record`` when it has one (see the mixin)."""
        table: _Table[Any] = self._facts if isinstance(record, SemanticFact) else self._entities
        row = table.pos.get(record.id)
        if row is not None:
            held: _S = table.records[row]
            return held
        return pack_embedding(record)

    async def rebuild(self, store: MemoryStore) -> None:
        """Replace the whole index with every record of ``store`` (invalidated included).

        Reads only through the public ``MemoryStore`` API, in pages. On a dimension
        mismatch the previous index contents are kept. Everything is read first; the new
        contents then replace the old ones at once, without awaiting: a rebuild cancelled
        (or failing) while it reads leaves the index as it was. ``upsert`` calls made
        while a rebuild is awaiting the store are lost; do not interleave them.
        """
        gathered: dict[int, list[IndexedRecord]] = {0: [], 1: [], 2: [], 3: []}
        offset = 0
        while True:
            ents = await store.find_entities(
                EntityFilter(include_invalidated=True, limit=_REBUILD_PAGE, offset=offset)
            )
            gathered[0].extend(pack_embedding(e) for e in ents if e.embedding is not None)
            offset += len(ents)
            if len(ents) < _REBUILD_PAGE:
                break
        offset = 0
        while True:
            facts = await store.find_facts(
                FactFilter(include_invalidated=True, limit=_REBUILD_PAGE, offset=offset)
            )
            gathered[1].extend(pack_embedding(f) for f in facts if f.embedding is not None)
            offset += len(facts)
            if len(facts) < _REBUILD_PAGE:
                break
        offset = 0
        while True:
            themes = await store.list_themes(
                ListOptions(include_invalidated=True, limit=_REBUILD_PAGE, offset=offset)
            )
            gathered[2].extend(pack_embedding(t) for t in themes if t.embedding is not None)
            offset += len(themes)
            if len(themes) < _REBUILD_PAGE:
                break
        offset = 0
        while True:
            episodes = await store.list_episodes(
                ListOptions(include_invalidated=True, limit=_REBUILD_PAGE, offset=offset)
            )
            gathered[3].extend(pack_embedding(e) for e in episodes if e.embedding is not None)
            offset += len(episodes)
            if len(episodes) < _REBUILD_PAGE:
                break
        # Every read before anything changes: a rebuild cancelled while it awaits the
        # store leaves the whole index as it was.
        read = await self._ext_read(store)
        fresh: tuple[_Table[Any], ...] = (
            _Table("entity", tagged=False),
            _Table("fact", tagged=True),
            _Table("theme", tagged=False),
            _Table("episode", tagged=False),
        )
        saved_dim = self._dim
        self._dim = self._expected_dimensions
        # Store pages are already copies (MemoryStore contract), so no extra copy here.
        batches = {slot: _dedupe(records) for slot, records in gathered.items() if records}
        try:
            self._apply(batches, (), fresh)
            self._ext_check(read[2])
        except BaseException:
            self._dim = saved_dim
            raise
        self._entities, self._facts, self._themes, self._episodes = fresh
        self._ext_load(read)
        self._maybe_warn()

    def _maybe_warn(self) -> None:
        if self._warned or self._silence:
            return
        total = len(self)
        if total <= IN_MEMORY_INDEX_WARN_THRESHOLD:
            return
        self._warned = True
        message = (
            f"InMemoryMemoryIndex holds {total} entries (> {IN_MEMORY_INDEX_WARN_THRESHOLD}); "
            "every search is an O(n) scan. Use the pgvector-backed PostgresMemoryIndex at "
            "this scale, or pass silence_scale_warning=True."
        )
        # Reported once, as a warning only (a log record as well would say it twice).
        warnings.warn(message, InMemoryIndexScaleWarning, stacklevel=3)

    # ------------------------------------------------------------------ search

    def _query(self, embedding: Sequence[float], what: str) -> NDArray[np.float32] | None:
        q = query_vector_array(embedding, what)
        if self._dim is None:
            return None  # nothing indexed yet and no configured dimension
        check_dimension(self._dim, q.shape[0], f"{what} query")
        row: NDArray[np.float32] = normalize_rows(q[np.newaxis, :])[0]
        return row

    def _search(
        self,
        table: _Table[R],
        embedding: Sequence[float],
        options: SearchOptions | Mapping[str, Any] | None,
        kwargs: Mapping[str, Any],
    ) -> list[ScoredResult[R]]:
        opts = coerce_options(SearchOptions, options, kwargs)
        q = self._query(embedding, f"search_{table.kind}")
        if q is None:
            return []
        return [
            ScoredResult(item=copy_record(record), score=score)
            for record, score in table.search(q, opts)
        ]

    async def search_entities(
        self,
        embedding: Sequence[float],
        options: SearchOptions | Mapping[str, Any] | None = None,
        /,
        **kwargs: Any,
    ) -> list[ScoredResult[Entity]]:
        """Nearest entities, best first (ties by id)."""
        return self._search(self._entities, embedding, options, kwargs)

    async def search_facts(
        self,
        embedding: Sequence[float],
        options: SearchOptions | Mapping[str, Any] | None = None,
        /,
        **kwargs: Any,
    ) -> list[ScoredResult[SemanticFact]]:
        """Nearest facts, best first (ties by id); ``tags`` / ``exclude_tags`` apply."""
        return self._search(self._facts, embedding, options, kwargs)

    async def search_themes(
        self,
        embedding: Sequence[float],
        options: SearchOptions | Mapping[str, Any] | None = None,
        /,
        **kwargs: Any,
    ) -> list[ScoredResult[Theme]]:
        """Nearest themes, best first (ties by id)."""
        return self._search(self._themes, embedding, options, kwargs)

    async def search_themes_many(
        self,
        embeddings: Sequence[Sequence[float]],
        *,
        limit: int,
        min_similarity: float | None = None,
    ) -> list[list[tuple[uuid.UUID, float]]]:
        """For each query vector, the ids and scores of its ``limit`` nearest live themes.

        The batched twin of :meth:`search_themes` (no record copies), used by ingest.
        """
        opts = SearchOptions(limit=limit, min_similarity=min_similarity)
        what = "search_themes_many"
        out: list[list[tuple[uuid.UUID, float]]] = []
        block = query_vectors_array(embeddings, what)
        if block is None or self._dim is None:
            # Not one clean block: each vector is checked (and the first bad one named)
            # exactly as a single search would.
            for embedding in embeddings:
                q = self._query(embedding, what)
                hits = [] if q is None else self._themes.search(q, opts)
                out.append([(theme.id, score) for theme, score in hits])
            return out
        # One validation and one normalisation for the whole batch (rows are
        # normalised independently, so each equals what _query returns for it).
        check_dimension(self._dim, block.shape[1], f"{what} query")
        for q in normalize_rows(block):
            out.append([(theme.id, score) for theme, score in self._themes.search(q, opts)])
        return out

    async def search_episodes(
        self,
        embedding: Sequence[float],
        options: SearchOptions | Mapping[str, Any] | None = None,
        /,
        **kwargs: Any,
    ) -> list[ScoredResult[Episode]]:
        """Nearest episodes, best first (ties by id)."""
        return self._search(self._episodes, embedding, options, kwargs)


def _dedupe(records: list[IndexedRecord]) -> list[IndexedRecord]:
    """Keep the last record per id (a store paged while changing may repeat one)."""
    return list({r.id: r for r in records}.values())

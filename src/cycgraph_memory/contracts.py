"""Contracts (``typing.Protocol``) that storage backends and pipeline stages implement.

Implementations do not inherit from these classes; they match them structurally.
Algorithms (retrieval, consolidation, the retention gate) are written only against these
contracts, so they run unchanged on the in-memory and the Postgres backends. Optional
capabilities (``touch_facts`` on a store, ``get_fact_stats_batch`` on a ledger) are
detected with ``hasattr`` / the ``Supports*`` protocols below.

Option arguments (filters, pagination, search options) accept the option model, a plain
``dict`` with the same keys, or keyword arguments; for example these are equivalent::

    await store.find_facts(FactFilter(tags=["lesson"], limit=10))
    await store.find_facts({"tags": ["lesson"], "limit": 10})
    await store.find_facts(tags=["lesson"], limit=10)
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from cycgraph_memory.records import (
    Entity,
    EntityFactsFilter,
    EntityFilter,
    Episode,
    ExtractionResult,
    FactFilter,
    FactStats,
    GateAuditEntry,
    ListOptions,
    Message,
    OutcomeBaseline,
    Relationship,
    RelationshipFilter,
    RunOutcome,
    ScoredResult,
    SearchOptions,
    SemanticFact,
    SubgraphResult,
    Theme,
)

if TYPE_CHECKING:
    from cycgraph_memory.lifecycle.models import (
        ErasureEntry,
        LedgerErasure,
        PurgeCandidates,
        PurgePlan,
        PurgeSelector,
    )

__all__ = [
    "EmbeddingProvider",
    "EpisodeSegmenter",
    "LLMProvider",
    "MemoryIndex",
    "MemoryStore",
    "OutcomeLedger",
    "SemanticExtractor",
    "SupportsErasureLog",
    "SupportsEmbeddingRewrite",
    "SupportsExclusive",
    "SupportsFactStatsBatch",
    "SupportsGateInputs",
    "SupportsGateAudit",
    "SupportsIdempotentFactWrites",
    "SupportsNativeSubgraph",
    "SupportsQueryEmbedding",
    "SupportsPurge",
    "SupportsTouchFacts",
    "ThemeClusterer",
    "embed_queries",
]

Options = Mapping[str, Any]


@runtime_checkable
class MemoryStore(Protocol):
    """Primary persistence contract: CRUD over the hierarchy and the knowledge graph.

    Semantics every implementation honours (the contract suite checks them):

    * ``put_*`` is an upsert: a record with an existing id replaces every mutable field.
    * A message id is stored in at most one episode: ``put_episode(s)`` raises
      ``DuplicateRecordError`` (and writes nothing) for a message already stored in another
      episode; replace both episodes in one ``put_episodes`` call to move a message.
    * ``get_*`` returns ``None`` for a missing id; batch getters return a ``dict`` with
      missing ids absent. Returned records are copies: mutating them changes nothing.
    * ``delete_*`` removes the record for good and returns whether it existed. Soft delete
      is expressed on the record itself (``invalidated_by`` / ``invalidated_at``).
    * Listings exclude soft-deleted records unless ``include_invalidated=True`` and have one
      deterministic order: entities by ``(created_at, id)``, relationships by
      ``(valid_from, id)``, episodes by ``(started_at, id)``, facts by ``(valid_from, id)``,
      themes by ``(provenance.created_at, id)``; ids compare as UUID strings.
    * ``transaction()`` is a unit of work: every write inside the ``async with`` block
      lands together, or none does when the block raises.
    """

    # entities
    async def put_entity(self, entity: Entity) -> None:
        """Insert or replace one entity."""
        ...

    async def put_entities(self, entities: Iterable[Entity]) -> None:
        """Insert or replace many entities in one operation."""
        ...

    async def get_entity(self, entity_id: uuid.UUID) -> Entity | None:
        """Return the entity (even when invalidated) or ``None``."""
        ...

    async def get_entities(self, ids: Iterable[uuid.UUID]) -> dict[uuid.UUID, Entity]:
        """Batch get; missing ids are absent."""
        ...

    async def find_entities(
        self, filter: EntityFilter | Options | None = None, /, **options: Any
    ) -> list[Entity]:
        """List entities matching the filter, ordered by ``(created_at, id)``."""
        ...

    async def delete_entity(self, entity_id: uuid.UUID) -> bool:
        """Hard-delete an entity and every relationship touching it; True when it existed."""
        ...

    # relationships
    async def put_relationship(self, relationship: Relationship) -> None:
        """Insert or replace one relationship.

        Both endpoints must be stored entities, else ``DanglingReferenceError``.
        """
        ...

    async def put_relationships(self, relationships: Iterable[Relationship]) -> None:
        """Insert or replace many relationships in one operation (endpoints must exist)."""
        ...

    async def get_relationship(self, relationship_id: uuid.UUID) -> Relationship | None:
        """Return the relationship or ``None``."""
        ...

    async def get_relationships(
        self, ids: Iterable[uuid.UUID]
    ) -> dict[uuid.UUID, Relationship]:
        """Batch get; missing ids are absent."""
        ...

    async def get_relationships_for_entity(
        self,
        entity_id: uuid.UUID,
        filter: RelationshipFilter | Options | None = None,
        /,
        **options: Any,
    ) -> list[Relationship]:
        """Edges touching an entity, ordered by ``(valid_from, id)``."""
        ...

    async def delete_relationship(self, relationship_id: uuid.UUID) -> bool:
        """Hard-delete a relationship; True when it existed."""
        ...

    # episodes
    async def put_episode(self, episode: Episode) -> None:
        """Insert or replace one episode (with its messages)."""
        ...

    async def put_episodes(self, episodes: Iterable[Episode]) -> None:
        """Insert or replace many episodes in one operation."""
        ...

    async def get_episode(self, episode_id: uuid.UUID) -> Episode | None:
        """Return the episode or ``None``."""
        ...

    async def get_episodes(self, ids: Iterable[uuid.UUID]) -> dict[uuid.UUID, Episode]:
        """Batch get; missing ids are absent."""
        ...

    async def list_episodes(
        self, options: ListOptions | Options | None = None, /, **kwargs: Any
    ) -> list[Episode]:
        """List episodes ordered by ``(started_at, id)``."""
        ...

    async def get_messages(self, ids: Iterable[uuid.UUID]) -> dict[uuid.UUID, Message]:
        """Batch get of stored messages (those inside stored episodes); missing ids absent.

        Ingest uses it to skip messages that are already stored, which makes re-ingesting
        the same messages a no-op.
        """
        ...

    async def delete_episode(self, episode_id: uuid.UUID) -> bool:
        """Hard-delete an episode; True when it existed."""
        ...

    # facts
    async def put_fact(self, fact: SemanticFact) -> None:
        """Insert or replace one fact."""
        ...

    async def put_facts(self, facts: Iterable[SemanticFact]) -> None:
        """Insert or replace many facts in one operation."""
        ...

    async def get_fact(self, fact_id: uuid.UUID) -> SemanticFact | None:
        """Return the fact (even when invalidated) or ``None``."""
        ...

    async def get_facts(self, ids: Iterable[uuid.UUID]) -> dict[uuid.UUID, SemanticFact]:
        """Batch get; missing ids are absent."""
        ...

    async def find_facts(
        self, filter: FactFilter | Options | None = None, /, **options: Any
    ) -> list[SemanticFact]:
        """List facts matching the filter, ordered by ``(valid_from, id)``."""
        ...

    async def delete_fact(self, fact_id: uuid.UUID) -> bool:
        """Hard-delete a fact; True when it existed."""
        ...

    # themes
    async def put_theme(self, theme: Theme) -> None:
        """Insert or replace one theme."""
        ...

    async def put_themes(self, themes: Iterable[Theme]) -> None:
        """Insert or replace many themes in one operation."""
        ...

    async def get_theme(self, theme_id: uuid.UUID) -> Theme | None:
        """Return the theme or ``None``."""
        ...

    async def get_themes(self, ids: Iterable[uuid.UUID]) -> dict[uuid.UUID, Theme]:
        """Batch get; missing ids are absent."""
        ...

    async def list_themes(
        self, options: ListOptions | Options | None = None, /, **kwargs: Any
    ) -> list[Theme]:
        """List themes ordered by ``(provenance.created_at, id)``."""
        ...

    async def delete_theme(self, theme_id: uuid.UUID) -> bool:
        """Hard-delete a theme; True when it existed."""
        ...

    # batched reads used by retrieval (one call per BFS hop, never one per entity)
    async def get_relationships_for_entities(
        self,
        entity_ids: Iterable[uuid.UUID],
        filter: RelationshipFilter | Options | None = None,
        /,
        **options: Any,
    ) -> list[Relationship]:
        """Edges touching any of the entities, each once, ordered by ``(valid_from, id)``."""
        ...

    async def get_facts_for_entities(
        self,
        entity_ids: Iterable[uuid.UUID],
        filter: EntityFactsFilter | Options | None = None,
        /,
        **options: Any,
    ) -> dict[uuid.UUID, list[SemanticFact]]:
        """Facts mentioning each entity, newest first; entities without facts absent."""
        ...

    # usage tracking (optional in the spec; both shipped backends implement it)
    async def touch_facts(
        self, ids: Iterable[uuid.UUID], at: datetime | None = None
    ) -> None:
        """Increment ``access_count`` and set ``last_accessed_at`` (default now)."""
        ...

    # lifecycle
    def transaction(self) -> AbstractAsyncContextManager[None]:
        """Unit of work: ``async with store.transaction(): ...`` commits all or nothing."""
        ...

    async def clear(self) -> None:
        """Remove every record this store can see."""
        ...


@runtime_checkable
class SupportsTouchFacts(Protocol):
    """Optional store capability used by retrieval and decay scoring."""

    async def touch_facts(
        self, ids: Iterable[uuid.UUID], at: datetime | None = None
    ) -> None:
        """Increment ``access_count`` and set ``last_accessed_at``."""
        ...


@runtime_checkable
class SupportsExclusive(Protocol):
    """Optional store capability: maintenance passes that never overlap.

    ``async with store.exclusive("consolidation"): ...`` is a unit of work (like
    ``transaction()``) that also holds a lock named ``name`` for this store's tenant, so two
    workers running the same pass at once end in the state of one run. Run the WHOLE pass
    (collect and apply) inside the block. Both shipped stores implement it.
    """

    def exclusive(self, name: str) -> AbstractAsyncContextManager[None]:
        """Open a unit of work holding the lock ``name``."""
        ...


@runtime_checkable
class SupportsNativeSubgraph(Protocol):
    """Optional store capability: the whole BFS of ``extract_subgraph`` in one query.

    It must return exactly what the generic algorithm returns for the same arguments.
    """

    async def extract_subgraph_native(
        self,
        seed_entity_ids: Sequence[uuid.UUID],
        *,
        max_hops: int,
        valid_at: datetime | None,
        include_invalidated: bool,
        max_entities: int,
        relation_types: Sequence[str] | None,
    ) -> SubgraphResult:
        """Run the traversal natively."""
        ...


@runtime_checkable
class SupportsIdempotentFactWrites(Protocol):
    """Optional store capability used by ``memory_writer``: write facts once per key."""

    async def put_facts_once(
        self, idempotency_key: str, facts: Iterable[SemanticFact]
    ) -> tuple[list[uuid.UUID], bool]:
        """Return the ids stored under the key and whether this call wrote them."""
        ...


@runtime_checkable
class MemoryIndex(Protocol):
    """Embedding similarity search over entities, facts, themes and episodes.

    Every search returns whole records with their cosine similarity, best first (ties by
    id), excluding invalidated records unless ``include_invalidated=True``; a query vector
    of the wrong dimension raises ``EmbeddingDimensionMismatchError``.
    """

    async def search_entities(
        self,
        embedding: Sequence[float],
        options: SearchOptions | Options | None = None,
        /,
        **kwargs: Any,
    ) -> list[ScoredResult[Entity]]:
        """Nearest entities."""
        ...

    async def search_facts(
        self,
        embedding: Sequence[float],
        options: SearchOptions | Options | None = None,
        /,
        **kwargs: Any,
    ) -> list[ScoredResult[SemanticFact]]:
        """Nearest facts (``tags`` / ``exclude_tags`` options apply here)."""
        ...

    async def search_themes(
        self,
        embedding: Sequence[float],
        options: SearchOptions | Options | None = None,
        /,
        **kwargs: Any,
    ) -> list[ScoredResult[Theme]]:
        """Nearest themes."""
        ...

    async def search_episodes(
        self,
        embedding: Sequence[float],
        options: SearchOptions | Options | None = None,
        /,
        **kwargs: Any,
    ) -> list[ScoredResult[Episode]]:
        """Nearest episodes."""
        ...

    async def rebuild(self, store: MemoryStore) -> None:
        """Re-read every record from ``store`` (e.g. after bulk inserts)."""
        ...


@runtime_checkable
class EmbeddingProvider(Protocol):
    """Bring-your-own embeddings.

    ``embed`` embeds stored text (messages, facts, entities, episodes). A provider may also
    have ``embed_query`` (:class:`SupportsQueryEmbedding`) for retrieval texts.
    """

    @property
    def dimensions(self) -> int:
        """Dimensionality of produced embeddings."""
        ...

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """Embed a batch of texts (one vector per text, same order)."""
        ...


@runtime_checkable
class SupportsQueryEmbedding(Protocol):
    """Optional capability of an :class:`EmbeddingProvider`: embed *queries* differently.

    Asymmetric models (e5, bge, gte, nomic, ...) embed a question with a prompt or prefix
    of its own and documents with another. When a provider has ``embed_query``, every
    retrieval text goes through it (:func:`embed_queries`); stored records always go
    through ``embed``.
    """

    async def embed_query(self, texts: Sequence[str]) -> list[list[float]]:
        """Embed a batch of query texts (one vector per text, same order)."""
        ...


async def embed_queries(embedder: EmbeddingProvider, texts: Sequence[str]) -> list[list[float]]:
    """Embed retrieval texts: ``embed_query`` when the provider has it, else ``embed``."""
    embed_query = getattr(embedder, "embed_query", None)
    if callable(embed_query):
        vectors: list[list[float]] = await embed_query(list(texts))
        return vectors
    return await embedder.embed(list(texts))


@runtime_checkable
class LLMProvider(Protocol):
    """Bring-your-own LLM completion function (used by ``LLMExtractor``)."""

    async def complete(self, prompt: str) -> str:
        """Run one completion and return the text."""
        ...


@runtime_checkable
class EpisodeSegmenter(Protocol):
    """Level 0 -> 1: group messages into topic-coherent episodes."""

    async def segment(self, messages: Sequence[Message]) -> list[Episode]:
        """Return episodes covering every message, in time order."""
        ...


@runtime_checkable
class SemanticExtractor(Protocol):
    """Level 1 -> 2: distil an episode into facts, entities and relationships.

    Sets ``fact_ids`` on the passed episode, so persist the episode after extraction.
    """

    async def extract(self, episode: Episode) -> ExtractionResult:
        """Extract from one episode."""
        ...


@runtime_checkable
class ThemeClusterer(Protocol):
    """Level 2 -> 3: cluster facts into themes.

    Sets ``theme_id`` on each passed fact. An existing theme absent from the returned list
    was merged away.
    """

    async def cluster(
        self, facts: Sequence[SemanticFact], existing_themes: Sequence[Theme] | None = None
    ) -> list[Theme]:
        """Return the surviving and new themes."""
        ...


@runtime_checkable
class OutcomeLedger(Protocol):
    """Run outcomes and the per-fact statistics the retention gate needs."""

    async def record_outcome(self, outcome: RunOutcome) -> None:
        """Record (or re-record: idempotent on ``run_id``) a run outcome."""
        ...

    async def get_fact_stats(self, fact_id: uuid.UUID) -> FactStats | None:
        """Stats of one fact, or ``None`` if it appeared in no recorded run."""
        ...

    async def list_fact_stats(self) -> list[FactStats]:
        """Stats for every fact that appeared in at least one run, ordered by fact id."""
        ...

    async def get_baseline(self, exclude_fact_id: uuid.UUID | None = None) -> OutcomeBaseline:
        """Mean over recorded runs; with ``exclude_fact_id`` only runs without it."""
        ...

    async def clear(self) -> None:
        """Remove all recorded outcomes."""
        ...


@runtime_checkable
class SupportsFactStatsBatch(Protocol):
    """Optional ledger capability: stats for many facts in one call."""

    async def get_fact_stats_batch(
        self, ids: Iterable[uuid.UUID]
    ) -> dict[uuid.UUID, FactStats]:
        """Stats by fact id; facts without runs are absent."""
        ...


class SupportsGateInputs(Protocol):
    """Optional ledger capability: a gate pass's statistics read from one snapshot.

    ``evaluate_retention`` derives each candidate's leave-one-out baseline from the
    candidate's statistics and the all-runs baseline. Read in two calls, a run recorded
    between them would count in one and not the other (on a server whose statements each
    see the latest commits); a ledger with this method returns both from one view.
    """

    async def get_gate_inputs(
        self, ids: Iterable[uuid.UUID]
    ) -> tuple[dict[uuid.UUID, FactStats], OutcomeBaseline]:
        """Stats by fact id (facts without runs absent) and the all-runs baseline."""
        ...


@runtime_checkable
class SupportsGateAudit(Protocol):
    """Optional ledger capability: an append-only log of gate decisions.

    ``evaluate_retention`` appends one entry per decision of every pass to a ledger that
    has it, inside the pass's unit of work; entries are never changed or removed.
    """

    async def append_gate_audit(self, entries: Sequence[GateAuditEntry]) -> None:
        """Append entries (all or nothing), keeping their order."""
        ...

    async def list_gate_audit(
        self,
        *,
        pass_id: uuid.UUID | None = None,
        fact_id: uuid.UUID | None = None,
        limit: int | None = None,
        offset: int = 0,
    ) -> list[GateAuditEntry]:
        """Entries in append order, optionally only one pass's or one fact's.

        ``offset`` entries of that order are skipped, then at most ``limit`` returned.
        """
        ...


@runtime_checkable
class SupportsPurge(Protocol):
    """Optional store capability used by ``cycgraph_memory.lifecycle.purge``.

    ``purge`` runs both inside ``exclusive("purge")``: the candidates must include every
    record the purge rules can reach (a superset is fine), found through indexes where
    the backend has them; ``apply_purge`` hard-deletes and rewrites in the open unit of
    work, leaving no copy of an erased record in any table, vector or text index.
    """

    def exclusive(self, name: str) -> AbstractAsyncContextManager[None]:
        """Open a unit of work holding the lock ``name``."""
        ...

    async def purge_candidates(self, selector: PurgeSelector) -> PurgeCandidates:
        """Every stored record the selector might touch."""
        ...

    async def apply_purge(self, plan: PurgePlan) -> None:
        """Apply the plan (all or nothing)."""
        ...


@runtime_checkable
class SupportsErasureLog(Protocol):
    """Optional ledger capability: forget purged facts and log the erasure.

    The gate audit log stays append-only; the one exception is ``erase_facts``, which
    replaces the fact id of entries naming an erased fact by ``REDACTED_FACT_ID`` (and
    logs that it did). The erasure log itself is append-only. A ledger with this
    capability remembers the erased fact ids (a digest of each) and its
    ``record_outcome`` never links them again (the run is still recorded).
    """

    async def erase_facts(
        self,
        fact_ids: Iterable[uuid.UUID],
        run_ids: Iterable[str] = (),
        *,
        tenant: bool = False,
        dry_run: bool = False,
        entry: ErasureEntry | None = None,
    ) -> LedgerErasure:
        """Remove links/runs, redact audit rows, append ``entry``; return the counts."""
        ...

    async def list_erasures(self, *, limit: int | None = None) -> list[ErasureEntry]:
        """Erasure-log entries in append order."""
        ...


@runtime_checkable
class SupportsEmbeddingRewrite(Protocol):
    """Optional store capability used by ``cycgraph_memory.lifecycle.reembed``.

    Only vectors change; ``target="next"`` addresses the staging column of a Postgres
    width change (the in-memory store refuses it).
    """

    async def write_embeddings(
        self, kind: str, vectors: Mapping[uuid.UUID, list[float]], *, target: str = "current"
    ) -> int:
        """Overwrite the vectors of ``kind`` records (``message``, ``episode``, ...)."""
        ...

    async def recompute_theme_centroids(self, *, target: str = "current") -> int:
        """Set every theme's vector to the unit mean of its live member facts' vectors.

        Live members only (``invalidated_by`` unset), as consolidation computes
        centroids; ``None`` when no live member has a vector.
        """
        ...

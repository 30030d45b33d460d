"""Pydantic v2 records: the memory hierarchy, the knowledge graph, queries and options.

Conventions shared by every model here:

* ``extra="forbid"`` (unknown fields are errors) and ``validate_assignment=True`` (mutating
  a field re-validates it, so ``episode.fact_ids = [...]`` stays checked).
* Ids are :class:`uuid.UUID`; strings are parsed, anything else is rejected.
* Timestamps are timezone-aware UTC. A naive ``datetime`` is *assumed to be UTC* and is
  normalised; an aware one is converted to UTC.
* Embeddings are ``list[float] | None``; every element must be finite (NaN and infinity are
  rejected), the Euclidean norm at most :data:`MAX_EMBEDDING_NORM` (1e19: pgvector compares
  vectors in single precision), and an embedding has at least one element.
* Timestamps are aware UTC (naive ones are taken as UTC); the first and last instants a
  ``datetime`` holds (``datetime.min`` / ``datetime.max``, which Postgres stores as
  ``-infinity`` / ``infinity``) are refused.
* Tags are ``list[str]`` defaulting to ``[]``; each tag is 1-:data:`MAX_TAG_LENGTH`
  characters, at most :data:`MAX_TAGS` per record; duplicates are removed keeping the first
  occurrence.
* Text has no NUL character and no lone surrogate and is at most :data:`MAX_TEXT_LENGTH`
  characters (100,000) in every text field. Names, labels and topics are at most
  :data:`MAX_NAME_LENGTH` characters; ``entity_type`` / ``relation_type`` at most
  :data:`MAX_TYPE_LENGTH`.
* ``attributes`` / ``metadata`` are JSON objects: str keys; dict, list, str, 64-bit int,
  finite float, bool and None values; at most ``MAX_JSON_DEPTH`` (32) levels deep.
* Integers fit their Postgres columns: ``access_count`` <= :data:`MAX_ACCESS_COUNT` (64-bit),
  ``offset`` <= :data:`MAX_OFFSET`.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Annotated, Any, Generic, Literal, TypeVar

import numpy as np
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    model_validator,
)

from cycgraph_memory._validate import (
    MAX_EMBEDDING_NORM,
    MAX_TEXT_LENGTH,
    check_json_object,
    check_text,
    utc_in_range,
)

__all__ = [
    "MAX_ACCESS_COUNT",
    "MAX_EMBEDDING_NORM",
    "MAX_NAME_LENGTH",
    "MAX_OFFSET",
    "MAX_RUN_ID_LENGTH",
    "MAX_TAGS",
    "MAX_TAG_LENGTH",
    "MAX_TEXT_LENGTH",
    "MAX_TYPE_LENGTH",
    "QUARANTINE_TAG",
    "Conflict",
    "ConflictResolutionDetail",
    "ConflictResolutionReport",
    "ConsolidationMutation",
    "ConsolidationReport",
    "Embedding",
    "Entity",
    "EntityFilter",
    "EntityResolutionReport",
    "Episode",
    "EvictedLesson",
    "ExtractedEntity",
    "ExtractionResult",
    "FactFilter",
    "FactStats",
    "GateAuditEntry",
    "GateVerdict",
    "HeldLesson",
    "ListOptions",
    "DEFAULT_MAX_SUBGRAPH_ENTITIES",
    "EntityFactsFilter",
    "MemoryQuery",
    "FactScore",
    "MemoryResult",
    "RetrievalOptions",
    "SubgraphResult",
    "Message",
    "OutcomeBaseline",
    "PaginationOptions",
    "PromotedLesson",
    "Provenance",
    "ProvenanceSource",
    "Relationship",
    "RelationshipFilter",
    "RetentionEvidence",
    "RetentionReport",
    "RunOutcome",
    "ScoredResult",
    "SearchOptions",
    "SemanticFact",
    "Tags",
    "Theme",
    "new_id",
    "utc_now",
]

QUARANTINE_TAG = "quarantined"
"""Marks a fact learned in a failed, poisoned or tainted run; never served as a lesson."""

MAX_TAG_LENGTH = 128
"""Longest accepted tag, in characters."""

MAX_TAGS = 64
"""Most tags one record may carry."""

MAX_NAME_LENGTH = 1024
"""Longest entity name, theme label or episode topic, in characters."""

MAX_TYPE_LENGTH = 256
"""Longest ``entity_type`` / ``relation_type``, in characters (they are indexed)."""

MAX_RUN_ID_LENGTH = 512
"""Longest ``RunOutcome.run_id``, in characters. Postgres keeps it in the ledger's primary
keys, whose index entries cannot exceed 2,704 bytes: 512 characters of UTF-8 fit on both
backends alike (a longer id was kept in memory but refused by Postgres)."""

MAX_ACCESS_COUNT = 2**63 - 1
"""Largest ``access_count`` (a 64-bit column); ``touch_facts`` saturates there, which a
counter touched a billion times a second reaches after 292 years."""

MAX_OFFSET = 2**63 - 1
"""Largest listing ``offset`` (a 64-bit SQL OFFSET)."""

ProvenanceSource = Literal["agent", "tool", "human", "system", "derived"]
"""Origin category of a record."""


def new_id() -> uuid.UUID:
    """Return a fresh random (version 4) UUID for a record id."""
    return uuid.uuid4()


def utc_now() -> datetime:
    """Return the current time as a timezone-aware UTC datetime."""
    return datetime.now(UTC)


def _to_utc(value: datetime) -> datetime:
    return utc_in_range(value)


def _check_text(value: str) -> str:
    return check_text(value)


def _check_embedding(value: list[float] | None) -> list[float] | None:
    if value is None:
        return None
    if len(value) == 0:
        raise ValueError("embedding must have at least one dimension")
    # Fast path, one C-level pass: the Euclidean norm bounds every magnitude, and NaN or
    # infinity make the comparison false (math.hypot is ~5x faster than summing abs()
    # for 384 values). Otherwise find out which rule is broken.
    if math.hypot(*value) <= MAX_EMBEDDING_NORM:
        return value
    for x in value:
        if not math.isfinite(x):
            raise ValueError("embedding values must be finite numbers (no NaN or infinity)")
    raise ValueError(
        f"embedding's Euclidean norm must be at most {MAX_EMBEDDING_NORM:.0e} "
        "(cycgraph_memory.MAX_EMBEDDING_NORM: pgvector compares vectors in single precision)"
    )


def _check_tags(value: list[str]) -> list[str]:
    seen: dict[str, None] = {}
    for tag in value:
        if not tag or len(tag) > MAX_TAG_LENGTH:
            raise ValueError(f"tags must be 1-{MAX_TAG_LENGTH} characters, got {len(tag)}")
        check_text(tag, "tags")
        seen.setdefault(tag, None)
    if len(seen) > MAX_TAGS:
        raise ValueError(f"at most {MAX_TAGS} tags per record, got {len(seen)}")
    return list(seen)


def _not_bool(value: Any) -> Any:
    # pydantic's lax int reads True as 1: a flag passed where a count belongs
    # (``limit=True``) would silently serve one record.
    if isinstance(value, bool):
        raise ValueError(f"must be an int, not a bool ({value!r})")
    return value


Count = Annotated[int, BeforeValidator(_not_bool)]
"""An ``int`` that refuses ``True`` / ``False`` (a query's ``limit`` and ``max_hops``)."""


def _real_bool(value: Any) -> Any:
    # pydantic's lax bool reads "no" / "off" / 0 as False and "yes" / 1 as True: a flag
    # written as text would be read, and a typo ("fasle") would be a confusing error.
    if not isinstance(value, bool):
        raise ValueError(f"must be True or False, got {value!r}")
    return value


Flag = Annotated[bool, BeforeValidator(_real_bool)]
"""A ``bool`` that accepts only ``True`` / ``False`` (not ``"no"``, ``1`` or ``numpy.bool_``)."""


def _real_number(value: Any) -> Any:
    # pydantic's lax float reads True as 1.0 and the string "0.5" as 0.5: a flag or a
    # text passed where a threshold or a weight belongs is almost always a bug.
    if isinstance(value, bool | np.bool_):
        raise ValueError(f"must be a number, not a bool ({value!r})")
    if isinstance(value, str | bytes | bytearray):
        raise ValueError(f"must be a number, not a {type(value).__name__} ({value!r})")
    return value


Number = Annotated[float, BeforeValidator(_real_number)]
"""A ``float`` that refuses bools and strings (ints and numpy floats are fine)."""

UtcDatetime = Annotated[datetime, AfterValidator(_to_utc)]
"""A timezone-aware UTC datetime (naive input is assumed to be UTC)."""

Text = Annotated[str, AfterValidator(_check_text)]
"""A string without NUL characters (Postgres cannot store them)."""

NonEmptyText = Annotated[str, Field(min_length=1), AfterValidator(_check_text)]
"""A non-empty string without NUL characters."""

Embedding = Annotated[list[float] | None, AfterValidator(_check_embedding)]
"""An optional embedding whose values are all finite."""

Tags = Annotated[list[str], AfterValidator(_check_tags)]
"""A list of validated, de-duplicated tags."""

Name = Annotated[str, Field(min_length=1, max_length=MAX_NAME_LENGTH), AfterValidator(_check_text)]
"""A non-empty name, label or topic of at most :data:`MAX_NAME_LENGTH` characters."""

TypeName = Annotated[
    str, Field(min_length=1, max_length=MAX_TYPE_LENGTH), AfterValidator(_check_text)
]
"""A non-empty ``entity_type`` / ``relation_type`` of at most :data:`MAX_TYPE_LENGTH` chars."""

JsonObject = Annotated[dict[str, Any], AfterValidator(check_json_object)]
"""A JSON object (see the module docstring for the accepted values)."""

class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class Provenance(_Model):
    """Origin metadata carried by every record.

    Attributes:
        source: Origin category: agent, tool, human, system or derived.
        agent_id: Agent that produced the data.
        tool_name: Tool that produced the data.
        run_id: Workflow run that produced the data.
        node_id: Graph node that produced the data.
        confidence: Extraction confidence in ``[0, 1]``.
        created_at: When the record was created.
    """

    source: ProvenanceSource
    agent_id: Text | None = None
    tool_name: Text | None = None
    run_id: Text | None = None
    node_id: Text | None = None
    confidence: Number | None = Field(default=None, ge=0.0, le=1.0)
    created_at: UtcDatetime = Field(default_factory=utc_now)


class Entity(_Model):
    """Knowledge-graph node: a person, organization, concept, tool or location.

    An entity is *invalidated* (soft-deleted) when ``invalidated_at`` is set.
    """

    id: uuid.UUID = Field(default_factory=new_id)
    name: Name
    entity_type: TypeName
    attributes: JsonObject = Field(default_factory=dict)
    embedding: Embedding = None
    provenance: Provenance
    created_at: UtcDatetime = Field(default_factory=utc_now)
    updated_at: UtcDatetime = Field(default_factory=utc_now)
    invalidated_at: UtcDatetime | None = None
    superseded_by: uuid.UUID | None = None


class Relationship(_Model):
    """Directed, weighted knowledge-graph edge valid on ``[valid_from, valid_until)``.

    A relationship is *invalidated* (soft-deleted) when ``invalidated_by`` is set.
    """

    id: uuid.UUID = Field(default_factory=new_id)
    source_id: uuid.UUID
    target_id: uuid.UUID
    relation_type: TypeName
    weight: Number = Field(default=1.0, ge=0.0, le=1.0)
    attributes: JsonObject = Field(default_factory=dict)
    valid_from: UtcDatetime = Field(default_factory=utc_now)
    valid_until: UtcDatetime | None = None
    provenance: Provenance
    invalidated_by: Text | None = None

    @model_validator(mode="after")
    def _window_is_ordered(self) -> Relationship:
        if self.valid_until is not None and self.valid_until < self.valid_from:
            raise ValueError("valid_until must not be earlier than valid_from")
        return self


class Message(_Model):
    """One raw conversation turn (hierarchy level 0)."""

    id: uuid.UUID = Field(default_factory=new_id)
    role: Literal["user", "assistant", "system", "tool"]
    content: Text
    timestamp: UtcDatetime = Field(default_factory=utc_now)
    metadata: JsonObject = Field(default_factory=dict)
    embedding: Embedding = None


class Episode(_Model):
    """A coherent group of messages about one topic (hierarchy level 1).

    ``invalidated_at`` is an extension of the spec's shape so episodes can be soft-deleted
    like every other record.
    """

    id: uuid.UUID = Field(default_factory=new_id)
    topic: Annotated[str, Field(max_length=MAX_NAME_LENGTH), AfterValidator(_check_text)]
    messages: list[Message] = Field(default_factory=list)
    started_at: UtcDatetime
    ended_at: UtcDatetime
    embedding: Embedding = None
    fact_ids: list[uuid.UUID] = Field(default_factory=list)
    provenance: Provenance
    invalidated_at: UtcDatetime | None = None

    @model_validator(mode="after")
    def _span_is_ordered(self) -> Episode:
        if self.ended_at < self.started_at:
            raise ValueError("ended_at must not be earlier than started_at")
        if len({m.id for m in self.messages}) != len(self.messages):
            raise ValueError("message ids must be unique within an episode")
        return self


class SemanticFact(_Model):
    """An atomic, self-contained piece of knowledge (hierarchy level 2).

    A fact is *invalidated* (soft-deleted) when ``invalidated_by`` is set: either the id of
    the fact that replaced it or a reason such as ``"eval-gate:harmful"``.
    """

    id: uuid.UUID = Field(default_factory=new_id)
    content: NonEmptyText
    source_episode_ids: list[uuid.UUID] = Field(default_factory=list)
    entity_ids: list[uuid.UUID] = Field(default_factory=list)
    theme_id: uuid.UUID | None = None
    embedding: Embedding = None
    provenance: Provenance
    valid_from: UtcDatetime = Field(default_factory=utc_now)
    valid_until: UtcDatetime | None = None
    invalidated_by: Text | None = None
    access_count: Count = Field(default=0, ge=0, le=MAX_ACCESS_COUNT)
    last_accessed_at: UtcDatetime | None = None
    tags: Tags = Field(default_factory=list)
    source_message_ids: list[uuid.UUID] = Field(default_factory=list)

    @model_validator(mode="after")
    def _window_is_ordered(self) -> SemanticFact:
        if self.valid_until is not None and self.valid_until < self.valid_from:
            raise ValueError("valid_until must not be earlier than valid_from")
        return self


class Theme(_Model):
    """A cluster of related facts (hierarchy level 3); ``embedding`` is the centroid.

    ``invalidated_at`` is an extension of the spec's shape so themes can be soft-deleted.
    """

    id: uuid.UUID = Field(default_factory=new_id)
    label: Annotated[str, Field(max_length=MAX_NAME_LENGTH), AfterValidator(_check_text)]
    description: Text = ""
    fact_ids: list[uuid.UUID] = Field(default_factory=list)
    embedding: Embedding = None
    provenance: Provenance
    invalidated_at: UtcDatetime | None = None


# --------------------------------------------------------------------------- filters


class PaginationOptions(_Model):
    """Paging for listings: ``limit`` rows (``None`` = all) after skipping ``offset``."""

    limit: Count | None = Field(default=None, ge=1, le=100_000)
    offset: Count = Field(default=0, ge=0, le=MAX_OFFSET)


class ListOptions(PaginationOptions):
    """Paging plus soft-delete opt-in, used by ``list_episodes`` and ``list_themes``."""

    include_invalidated: Flag = False


class EntityFilter(PaginationOptions):
    """Filter for ``find_entities``."""

    entity_type: TypeName | None = None
    include_invalidated: Flag = False


class FactFilter(PaginationOptions):
    """Filter for ``find_facts``.

    Attributes:
        theme_id: Only facts assigned to this theme.
        entity_id: Only facts whose ``entity_ids`` contain this entity.
        include_invalidated: Include soft-deleted facts.
        tags: Facts carrying at least one of these tags (OR). ``None`` or ``[]`` = no
            tag restriction.
        exclude_tags: Drop facts carrying any of these tags (applied after ``tags``).
    """

    theme_id: uuid.UUID | None = None
    entity_id: uuid.UUID | None = None
    include_invalidated: Flag = False
    tags: Tags | None = None
    exclude_tags: Tags | None = None


class RelationshipFilter(PaginationOptions):
    """Filter for ``get_relationships_for_entity``."""

    direction: Literal["outgoing", "incoming", "both"] = "both"
    relation_type: TypeName | None = None
    include_invalidated: Flag = False


class SearchOptions(_Model):
    """Options for every ``MemoryIndex.search_*`` method.

    Attributes:
        limit: Maximum results (1-1000, default 10).
        min_similarity: Drop results whose cosine similarity is below this (0-1).
            ``None`` keeps every result.
        include_invalidated: Also search soft-deleted records.
        tags: Fact searches only: facts carrying at least one of these tags.
        exclude_tags: Fact searches only: drop facts carrying any of these tags.
        ef_search: HNSW candidate-list size hint for backends with an ANN index
            (Postgres); exact backends ignore it.
    """

    limit: Count = Field(default=10, ge=1, le=1000)
    min_similarity: Number | None = Field(default=None, ge=0.0, le=1.0)
    include_invalidated: Flag = False
    tags: Tags | None = None
    exclude_tags: Tags | None = None
    ef_search: Count | None = Field(default=None, ge=1, le=1000)


T = TypeVar("T")


class ScoredResult(BaseModel, Generic[T]):
    """A search hit: the whole record and its cosine similarity to the query."""

    model_config = ConfigDict(extra="forbid")

    item: T
    score: float


# --------------------------------------------------------------------------- retrieval


class MemoryQuery(_Model):
    """Input of ``retrieve_memory``; the populated fields select the strategy."""

    text: Text | None = None
    embedding: Embedding = None
    entity_ids: list[uuid.UUID] | None = None
    entity_types: list[TypeName] | None = None
    relation_types: list[TypeName] | None = None
    max_hops: Count = Field(default=2, ge=0, le=5)
    valid_at: UtcDatetime | None = None
    changed_since: UtcDatetime | None = None
    limit: Count = Field(default=20, ge=1, le=100)
    min_similarity: Number = Field(default=0.5, ge=0.0, le=1.0)
    include_invalidated: Flag = False
    tags: Tags = Field(default_factory=list)


class FactScore(_Model):
    """How one retrieved fact was reached (``MemoryResult.fact_scores``).

    Attributes:
        vector_rank: 1-based rank in the vector signal (``None``: not reached by it).
        vector_score: Cosine similarity to the query vector.
        text_rank: 1-based rank in the text signal.
        text_score: The text signal's BM25 score (the same on both backends).
        graph_distance: Hops from an entity named in the question (0 = mentions it).
        graph_weight: The RRF weight the graph signal gave this fact: for every entity
            named in the question that the fact cites, ``graph_weight`` times the entity's
            specificity (how much it narrows the tenant's facts, 0-1), summed; ``None``
            when the graph signal did not reach the fact.
        fused_score: The reciprocal-rank-fusion score the facts are ordered by.
    """

    vector_rank: int | None = None
    vector_score: float | None = None
    text_rank: int | None = None
    text_score: float | None = None
    graph_distance: int | None = None
    graph_weight: float | None = None
    fused_score: float = 0.0


class MemoryResult(_Model):
    """Output of ``retrieve_memory``.

    ``messages`` are the conversation turns behind the answer, best first: the messages
    the served facts were extracted from and the messages matched directly (query paths
    with text or an embedding). ``fact_scores`` explains each served fact's rank.
    """

    themes: list[Theme] = Field(default_factory=list)
    facts: list[SemanticFact] = Field(default_factory=list)
    episodes: list[Episode] = Field(default_factory=list)
    entities: list[Entity] = Field(default_factory=list)
    relationships: list[Relationship] = Field(default_factory=list)
    messages: list[Message] = Field(default_factory=list)
    fact_scores: dict[uuid.UUID, FactScore] = Field(default_factory=dict)


# --------------------------------------------------------------------------- extraction


class ExtractedEntity(_Model):
    """A name and type returned by ``RuleBasedExtractor.extract_entities``.

    Besides attribute access it supports the spec's ``{ name, type }`` shape: ``e["name"]``
    works, and it compares equal to a mapping with the same two keys.
    """

    name: NonEmptyText
    type: NonEmptyText

    def __getitem__(self, key: str) -> str:
        """Return ``name`` or ``type`` by key, like the spec's plain object."""
        if key == "name":
            return self.name
        if key == "type":
            return self.type
        raise KeyError(key)

    def __eq__(self, other: object) -> bool:
        """Equal to another ``ExtractedEntity`` or to ``{"name": ..., "type": ...}``."""
        if isinstance(other, Mapping):
            return dict(other) == {"name": self.name, "type": self.type}
        return super().__eq__(other)

    def __hash__(self) -> int:
        """Hash by ``(name, type)`` so extracted entities can go into sets."""
        return hash((self.name, self.type))


class ExtractionResult(_Model):
    """What a ``SemanticExtractor`` distils from one episode."""

    facts: list[SemanticFact] = Field(default_factory=list)
    entities: list[Entity] = Field(default_factory=list)
    relationships: list[Relationship] = Field(default_factory=list)


# --------------------------------------------------------------------------- retention


class RunOutcome(_Model):
    """A scored workflow run and the facts injected into it.

    ``run_id`` is 1-:data:`MAX_RUN_ID_LENGTH` characters; ``score`` is in [0, 1].
    """

    run_id: Annotated[NonEmptyText, Field(max_length=MAX_RUN_ID_LENGTH)]
    score: Number = Field(ge=0.0, le=1.0)
    fact_ids: list[uuid.UUID] = Field(default_factory=list)
    recorded_at: UtcDatetime = Field(default_factory=utc_now)


class FactStats(_Model):
    """Outcome statistics of the runs one fact was injected into."""

    fact_id: uuid.UUID
    trials: int = Field(ge=0)
    mean_score: float
    variance: float | None = None


class OutcomeBaseline(_Model):
    """Mean outcome over recorded runs (optionally leaving one fact's runs out)."""

    runs: int = Field(ge=0)
    mean_score: float = 0.0
    variance: float | None = None


class RetentionEvidence(_Model):
    """Statistical evidence behind one gate decision (inference rule).

    Attributes:
        lift: ``mean(runs with) - mean(leave-one-out baseline)``.
        se: Standard error of the lift (variances never below the floor or the observed).
        df: Welch-Satterthwaite degrees of freedom (``inf``: every variance from the floor).
        p_promote: P(true lift > promote_margin) at this look alone.
        p_evict: P(true lift < -evict_margin) at this look alone.
        trials: Runs containing the lesson.
        baseline_runs: Leave-one-out baseline runs.
        alpha_bracket: Sequential-control bracket (``sequential_control="doubling"``).
        noise_sd: Per-run noise SD the test used: the floor, or the pooled observed SD when
            larger.
        sequential_p_promote: Always-valid p-value against "lift <= promote_margin"
            (``sequential_control="always_valid"``); promotion needs it (after
            Benjamini-Hochberg) at or below ``1 - promote_confidence``.
        sequential_p_evict: The same against "lift >= -evict_margin", for eviction.
    """

    lift: float
    se: float
    df: float
    p_promote: float
    p_evict: float
    trials: int
    baseline_runs: int
    alpha_bracket: float | None = None
    noise_sd: float | None = None
    sequential_p_promote: float | None = None
    sequential_p_evict: float | None = None


class PromotedLesson(_Model):
    """A candidate promoted to verified in one gate pass."""

    fact_id: uuid.UUID
    evidence: RetentionEvidence | None = None


class EvictedLesson(_Model):
    """A candidate invalidated in one gate pass."""

    fact_id: uuid.UUID
    reason: Literal["eval-gate:harmful", "eval-gate:no_lift"]
    evidence: RetentionEvidence | None = None


class HeldLesson(_Model):
    """A candidate left on trial in one gate pass.

    ``reason``: why no decision was made (``insufficient_trials``,
    ``insufficient_baseline``, ``no_verdict``, ``malformed_stats: ...``, or
    ``changed_during_pass``), as in the gate audit log.
    """

    fact_id: uuid.UUID
    trials: int
    evidence: RetentionEvidence | None = None
    reason: str | None = None


class RetentionReport(_Model):
    """Result of one retention-gate pass (``pass_id`` links it to the gate audit log)."""

    promoted: list[PromotedLesson] = Field(default_factory=list)
    evicted: list[EvictedLesson] = Field(default_factory=list)
    held: list[HeldLesson] = Field(default_factory=list)
    pass_id: uuid.UUID | None = None


GateVerdict = Literal["promoted", "evicted", "held"]
"""What one gate pass decided about one candidate."""


class GateAuditEntry(_Model):
    """One row of the append-only gate audit log: one decision of one gate pass.

    Attributes:
        pass_id: The gate pass (``RetentionReport.pass_id``).
        fact_id: The candidate lesson.
        verdict: ``promoted``, ``evicted`` or ``held``.
        reason: ``eval-gate:harmful`` / ``eval-gate:no_lift`` for evictions; for a held
            candidate why it was held (``insufficient_trials``, ``insufficient_baseline``,
            ``no_verdict``, ``malformed_stats: ...``, ``changed_during_pass``); ``None``
            for a promotion.
        trials: Runs containing the lesson at decision time.
        evidence: The statistical evidence (inference rule), if it could be computed.
        policy: The ``RetentionPolicy`` the pass ran with, as JSON.
        decided_at: When the pass decided.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    pass_id: uuid.UUID
    fact_id: uuid.UUID
    verdict: GateVerdict
    reason: Text | None = None
    trials: int = Field(default=0, ge=0)
    evidence: RetentionEvidence | None = None
    policy: dict[str, Any] = Field(default_factory=dict)
    decided_at: UtcDatetime = Field(default_factory=utc_now)


# --------------------------------------------------------------------------- consolidation


class ConsolidationMutation(_Model):
    """One mutation applied by the consolidator (debug mutation log)."""

    type: str
    id: uuid.UUID


class ConsolidationReport(_Model):
    """Result of ``MemoryConsolidator.consolidate``."""

    facts_deduped: int = 0
    facts_decayed: int = 0
    episodes_pruned: int = 0
    themes_cleaned_up: int = 0
    themes_removed: int = 0
    total_reclaimed: int = 0
    mutation_log: list[ConsolidationMutation] | None = None


class EntityResolutionReport(_Model):
    """Result of ``EntityResolver.resolve``."""

    groups_merged: int = 0
    entities_absorbed: int = 0
    facts_rewritten: int = 0
    relationships_rewritten: int = 0
    relationships_dropped: int = 0


class Conflict(_Model):
    """Two facts that contradict, negate or supersede one another."""

    fact_a: SemanticFact
    fact_b: SemanticFact
    type: Literal["negation", "supersession", "semantic_contradiction"]
    confidence: Number = Field(ge=0.0, le=1.0)

    @model_validator(mode="after")
    def _two_facts(self) -> Conflict:
        # A fact cannot contradict itself: resolving such a "conflict" would invalidate
        # the fact in favour of itself.
        if self.fact_a.id == self.fact_b.id:
            raise ValueError(f"a conflict needs two different facts, got {self.fact_a.id} twice")
        return self


class ConflictResolutionDetail(_Model):
    """How one conflict was handled by ``autoResolveAll``."""

    conflict: Conflict
    action: Literal["keep_a", "keep_b", "keep_both", "skipped"]
    reason: str = ""


class ConflictResolutionReport(_Model):
    """Result of resolving a batch of conflicts."""

    resolved: int = 0
    skipped: int = 0
    details: list[ConflictResolutionDetail] = Field(default_factory=list)


# --------------------------------------------------------------------------- retrieval

DEFAULT_MAX_SUBGRAPH_ENTITIES = 500
"""Hard cap on the entities one subgraph extraction visits (seeds included)."""

MAX_FORWARDING_STEPS = 16
"""Most ``superseded_by`` pointers a subgraph seed is forwarded along (see
``extract_subgraph``); a longer chain is treated like a broken one: no forwarding."""


class SubgraphResult(_Model):
    """Output of ``extract_subgraph``.

    Attributes:
        entities: Every visited entity, ordered by ``(hop, id)``.
        relationships: Every traversed relationship, ordered by ``(valid_from, id)``.
        hops: BFS distance of each visited entity from the nearest seed (seeds are 0).
    """

    entities: list[Entity] = Field(default_factory=list)
    relationships: list[Relationship] = Field(default_factory=list)
    hops: dict[uuid.UUID, int] = Field(default_factory=dict)


class EntityFactsFilter(_Model):
    """Filter of the batched ``get_facts_for_entities`` store method.

    Every condition is applied *before* the per-entity bound, so the bound never hides a
    fact that passes the filter in favour of one that does not.

    Attributes:
        per_entity_limit: At most this many facts per entity, newest first
            (``valid_from`` descending, then id ascending). ``None`` = all.
        include_invalidated: Include soft-deleted facts.
        tags: Facts carrying at least one of these tags (``None`` / ``[]``: any).
        exclude_tags: Drop facts carrying any of these tags.
        valid_at: Only facts valid at this instant (``[valid_from, valid_until)``).
        changed_since: Only facts that started or ended strictly after this instant.
    """

    per_entity_limit: Count | None = Field(default=None, ge=1, le=100_000)
    include_invalidated: Flag = False
    tags: Tags | None = None
    exclude_tags: Tags | None = None
    valid_at: UtcDatetime | None = None
    changed_since: UtcDatetime | None = None


class RetrievalOptions(_Model):
    """Tuning knobs of ``retrieve_memory`` (frozen data; copy with ``model_copy``).

    Every bound the retrieval paths apply is here, none is hidden in the code.

    Attributes:
        theme_limit: Themes matched by similarity on the hierarchical path (their facts
            are candidates; the matched themes are returned, cut to the query's ``limit``).
        max_facts_per_theme: Facts taken from each matched theme, in the theme's
            ``fact_ids`` order. ``None`` = all of them.
        direct_fact_candidates: Facts fetched by the direct similarity search.
            ``None`` = ``2 * limit``, widened (4 times per round, up to 1,000) while the
            query's temporal filters, applied afterwards, leave fewer than the facts
            wanted and the index has more: a valid fact behind many better-matching
            expired ones is still served. A number given here is never widened.
        max_facts_per_entity: Facts attached per subgraph entity on the entity path.
            ``None`` = the query's ``limit``, which is exact: no fact of the top
            ``limit`` can be cut by it. (Entities are read in rank order, in growing
            chunks, until ``limit`` facts are found; later entities cannot contribute.)
        tag_page_size: Page size of the tag-listing path when temporal filters drop
            facts after the listing. ``None`` = ``max(4 * limit, 100)``.
        rrf_k: The reciprocal-rank-fusion constant of text/hybrid retrieval: each signal
            adds ``1 / (rrf_k + rank)`` (default 60).
        text_candidates: Facts fetched by the text signal. ``None`` = ``4 * limit``,
            widened like ``direct_fact_candidates`` (up to 1,000) while the temporal
            filters leave fewer than that many hits. A number given here is never widened.
        vector_candidates: Facts of the vector ranking that the hybrid mode fuses (its
            first ones). ``None`` = ``4 * limit``, the text signal's depth: each signal
            brings the same number of candidates, and a fact ranked below it by the vector
            signal would add at most ``1 / (rrf_k + 4 * limit + 1)``. A backend then reads
            only those facts (and a margin) instead of every fact of the matched themes.
        message_candidates: Messages fetched per message signal (vector, text).
            ``None`` = ``2 * limit``.
        message_limit: Messages returned in ``MemoryResult.messages``. ``None`` = the
            query's ``limit``; 0 = none.
        entity_match_limit: Entities named in the question (text/hybrid modes) whose
            facts join the fusion as the graph signal (0 = off).
        graph_weight: RRF weight of the graph signal, multiplied per entity by its
            specificity (its IDF over the tenant's facts scaled to 0-1; see
            ``retrieval.hybrid.entity_specificity``).
        text_weight: RRF weight of the text signal of the facts (the vector signal weighs
            1). The default 0.5 lets text matches refine the vector ranking: on the first
            frozen conversation set it was the best of 0.3 / 0.5 / 0.7 / 1.0 with
            all-MiniLM-L6-v2 and equal (within 0.004 recall@10) with the hashing embedder.
        message_hit_weight: RRF weight of each direct message signal (vector and text
            message search) in ``MemoryResult.messages``. Messages are ranked by one
            reciprocal-rank fusion: each fact signal projected to the messages grounding
            its facts (with the fact fusion's weights: vector 1, text ``text_weight``, each
            graph list its specificity weight), the direct message hits and the episode
            lists, which corroborate rather than outvote (0.5 each by default; see
            docs/retrieval-quality.md).
        episode_weight: RRF weight of each episode list in ``MemoryResult.messages``: the
            messages of the episodes found by vector (vector and hybrid modes) and by text
            (text and hybrid modes), episode after episode, so that a turn which does not
            repeat the question's words is still reached through the conversation around
            it. 0 = off (one index call fewer per mode).
        episode_candidates: Episodes fetched per episode list. ``None`` = the query's
            ``limit``.
        native_paths: Use a backend's native fast paths when it has them (Postgres:
            ``hierarchical_candidates`` on the index, ``extract_subgraph_native`` on the
            store); ``False`` forces the generic contract-only algorithms.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    theme_limit: Count = Field(default=3, ge=0, le=100)
    max_facts_per_theme: Count | None = Field(default=200, ge=1, le=100_000)
    direct_fact_candidates: Count | None = Field(default=None, ge=1, le=1000)
    max_facts_per_entity: Count | None = Field(default=None, ge=1, le=100_000)
    tag_page_size: Count | None = Field(default=None, ge=1, le=10_000)
    rrf_k: Count = Field(default=60, ge=1, le=10_000)
    text_candidates: Count | None = Field(default=None, ge=1, le=1000)
    vector_candidates: Count | None = Field(default=None, ge=1, le=100_000)
    message_candidates: Count | None = Field(default=None, ge=1, le=1000)
    message_limit: Count | None = Field(default=None, ge=0, le=1000)
    entity_match_limit: Count = Field(default=5, ge=0, le=100)
    graph_weight: Number = Field(default=1.0, ge=0.0, le=10.0)
    text_weight: Number = Field(default=0.5, ge=0.0, le=10.0)
    message_hit_weight: Number = Field(default=0.5, ge=0.0, le=10.0)
    episode_weight: Number = Field(default=0.5, ge=0.0, le=10.0)
    episode_candidates: Count | None = Field(default=None, ge=1, le=1000)
    native_paths: Flag = True

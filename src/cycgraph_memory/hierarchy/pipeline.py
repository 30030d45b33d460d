"""One-call ingest: messages -> episodes -> facts/entities/relationships -> themes -> store.

:class:`MemoryPipeline` wires the pluggable stages (segmenter, extractor, embedder,
clusterer) to a :class:`~cycgraph_memory.contracts.MemoryStore` and writes everything one
ingest produces in a single ``store.transaction()``: all of it lands, or none of it does.

With an embedder, every message is embedded first (``Message.embedding``, searchable with
``search_messages``); the default segmenter uses those vectors for topic-shift cuts, and an
episode's embedding is the normalised mean of its messages' vectors, so it covers all of
its text. Facts are grounded and made self-contained by
:mod:`cycgraph_memory.hierarchy.grounding`: each records the message(s) it came from
(``source_message_ids``), greetings/thanks/fillers are dropped, and the text carries the
speaker and date with first-person pronouns resolved (``"Maya on 2024-01-08: Maya's dog
..."``).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from cycgraph_memory._exclusive import THEMES_LOCK, exclusive_passes
from cycgraph_memory._primary import primary_reads
from cycgraph_memory._validate import (
    check_bool,
    check_same_tenant,
    keyword_options,
    string_list,
    validate_record,
)
from cycgraph_memory.contracts import (
    EmbeddingProvider,
    EpisodeSegmenter,
    MemoryIndex,
    MemoryStore,
    SemanticExtractor,
    ThemeClusterer,
)
from cycgraph_memory.errors import (
    EmbeddingDimensionMismatchError,
    InvalidInputError,
    InvalidTypeError,
)
from cycgraph_memory.hierarchy._stage_checks import (
    check_batch_ids,
    check_episodes,
    check_extraction,
    check_themes,
)
from cycgraph_memory.hierarchy._theme_candidates import ThemeNeighbours, candidate_themes
from cycgraph_memory.hierarchy.calibration import TenantThemeCalibrator
from cycgraph_memory.hierarchy.clustering import THEME_ID_NAMESPACE
from cycgraph_memory.hierarchy.extractors._polarity import is_ended_marker
from cycgraph_memory.hierarchy.extractors.closing import (
    close_ended_relationships,
    split_ended_markers,
)
from cycgraph_memory.hierarchy.grounding import (
    contextualize,
    ground_facts,
    is_filler,
    speaker_of,
)
from cycgraph_memory.hierarchy.ingest_resolution import resolve_ingest_entities
from cycgraph_memory.normalize import normalize_entity_name
from cycgraph_memory.observability import span, tenant_of
from cycgraph_memory.progress import ProgressCallback, check_progress, report_progress
from cycgraph_memory.records import (
    MAX_TAGS,
    MAX_TEXT_LENGTH,
    QUARANTINE_TAG,
    Entity,
    Episode,
    Message,
    Provenance,
    ProvenanceSource,
    Relationship,
    SemanticFact,
    Tags,
    Theme,
    utc_now,
)
from cycgraph_memory.retry import RetryPolicy, call_with_retry
from cycgraph_memory.temporal import windows_overlap

__all__ = ["IngestReport", "MemoryPipeline"]

logger = logging.getLogger(__name__)

_EPISODE_TEXT_LIMIT = 2_000
DEFAULT_RULE_MAX_FACTS = 1000
"""The pipeline's default ``RuleBasedExtractor(max_facts=...)``: effectively no cap (episodes
are bounded by the segmenter, and fillers are dropped after extraction instead)."""


ENTITY_RESOLUTION_LOCK = "entity-resolution"
"""The entity-resolution pass's lock, also held by an ingest's write phase.

The ingest matches its new entities to stored ones, writes the matched records back with
what they absorbed, and closes stored edges that an "ended" claim ends: an entity
resolution pass committing between that read and the ingest's write (or the reverse)
would drop one of the two changes."""

DEFAULT_THEME_CANDIDATES = 4
"""Nearest stored themes looked up per new fact (``MemoryPipeline(theme_candidates=...)``)."""

DEFAULT_MAX_THEME_FACTS = 400
"""Facts after which a theme is full (``MemoryPipeline(max_theme_facts=...)``)."""


class IngestReport(BaseModel):
    """What one :meth:`MemoryPipeline.ingest` call wrote.

    Attributes:
        messages_ingested: New messages stored (inside new episodes).
        messages_skipped: Messages skipped because their id was already stored or
            repeated within the call.
        episode_ids: Ids of the new episodes, in time order.
        fact_ids: Ids of the new facts.
        entity_ids: Ids of the new entities.
        relationship_ids: Ids of the relationships written: the new ones, and stored
            open ones this ingest closed ("no longer works at": ``valid_until`` set).
        theme_ids: Ids of the themes created or updated by this ingest.
        themes_merged_away: Ids of existing themes merged into another theme; they are
            soft-deleted (``invalidated_at`` set) and their facts re-pointed.
    """

    model_config = ConfigDict(extra="forbid")

    messages_ingested: int = 0
    messages_skipped: int = 0
    episode_ids: list[uuid.UUID] = Field(default_factory=list)
    fact_ids: list[uuid.UUID] = Field(default_factory=list)
    entity_ids: list[uuid.UUID] = Field(default_factory=list)
    relationship_ids: list[uuid.UUID] = Field(default_factory=list)
    theme_ids: list[uuid.UUID] = Field(default_factory=list)
    themes_merged_away: list[uuid.UUID] = Field(default_factory=list)


class _IngestOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    tags: Tags = Field(default_factory=list)
    source: ProvenanceSource | None = None
    run_id: str | None = Field(default=None, min_length=1, max_length=256)
    node_id: str | None = Field(default=None, min_length=1, max_length=256)
    agent_id: str | None = Field(default=None, min_length=1, max_length=256)
    tool_name: str | None = Field(default=None, min_length=1, max_length=256)

    @classmethod
    def build(
        cls,
        tags: Sequence[str],
        provenance: Provenance | Mapping[str, Any] | None,
        **explicit: Any,
    ) -> _IngestOptions:
        """Merge a provenance template with explicit keywords (explicit ones win).

        Raises:
            InvalidTypeError: ``provenance`` is neither a ``Provenance`` nor a mapping.
            pydantic.ValidationError: ``provenance`` or an option is invalid.
        """
        values: dict[str, Any] = {}
        if provenance is not None:
            template = validate_record(Provenance, provenance)
            values = template.model_dump(
                include={"source", "run_id", "node_id", "agent_id", "tool_name"},
                exclude_none=True,
            )
        values.update({k: v for k, v in explicit.items() if v is not None})
        return cls(tags=string_list(tags, "tags"), **values)


_R = TypeVar("_R", Episode, SemanticFact, Entity, Relationship)


@dataclass
class _Prepared:
    """One batch after the CPU-bound stages, ready to be clustered and written."""

    received: int
    episodes: list[Episode] = field(default_factory=list)
    facts: list[SemanticFact] = field(default_factory=list)
    entities: list[Entity] = field(default_factory=list)
    relationships: list[Relationship] = field(default_factory=list)

    def copy(self) -> _Prepared:
        """A copy whose records the write stages may change in place.

        Clustering, entity resolution and theme bookkeeping update the batch's records
        as they go; a commit attempt that fails (and is retried) must not leave its
        changes in the batch the next attempt starts from.
        """
        return _Prepared(
            received=self.received,
            episodes=[_fresh(e) for e in self.episodes],
            facts=[_fresh(f) for f in self.facts],
            entities=[_fresh(e) for e in self.entities],
            relationships=[_fresh(r) for r in self.relationships],
        )


def _fresh(record: _R) -> _R:
    """A copy of ``record`` with its own top-level lists and dicts (values shared)."""
    own = {
        name: type(value)(value)
        for name, value in record.__dict__.items()
        if type(value) in (list, dict)
    }
    return record.model_copy(update=own)


class MemoryPipeline:
    """Segment, extract, embed, cluster and persist conversation messages in one call.

    Args:
        store: Where everything is written (any ``MemoryStore``).
        options: The keyword options below as one mapping
            (``MemoryPipeline(store, {"embedder": embedder, "index": index})``, the spec's
            one-options-object style), instead of keywords. An unknown name is an
            ``InvalidTypeError``, a mapping together with keywords an
            ``InvalidInputError``.
        embedder: Embeds facts, episodes, entities and the themes' centroids come from
            the facts. ``None`` stores records without embeddings (facts then all go to
            the clusterer's "General" theme).
        index: Optional ``MemoryIndex`` kept in sync after each commit when it offers
            ``upsert_many`` (the in-memory index does; the Postgres index reads the
            store's tables and needs nothing).
        segmenter: Level 0 -> 1 stage; default ``SimpleEpisodeSegmenter.bounded()``
            (bounded episodes, topic cuts on the message vectors; a plain
            ``SimpleEpisodeSegmenter()`` splits on time gaps only, as the spec's).
        extractor: Level 1 -> 2 stage; default ``ParserExtractor`` when the ``parser``
            extra is installed, else ``RuleBasedExtractor``, either with
            ``max_facts=DEFAULT_RULE_MAX_FACTS`` (no cap that silently drops sentences).
        clusterer: Level 2 -> 3 stage. Default: a ``ConsolidatingThemeClusterer`` whose
            thresholds are fitted to the tenant's own vectors, stored with the tenant and
            refitted as it doubles (:class:`~cycgraph_memory.hierarchy.calibration.
            TenantThemeCalibrator`). A clusterer passed here is used as is.
        theme_candidates: Stored themes looked up per new fact (kNN over theme
            centroids); a batch is clustered against these candidates only, so an
            ingest's cost follows the batch, not the tenant.
        max_theme_facts: A stored theme with this many facts is full: new facts no longer
            join it (nor merge into it) and start a sibling theme, so no theme, and no
            write of one, grows with the tenant. ``None``: no limit.
        embed_batch_size: Texts per ``embedder.embed`` call.
        merge_entities: Merge entities of one ingest that share a normalised name and
            type (the extractor mints ids per episode).
        resolve_entities: Inside the ingest transaction, match new entities to stored
            live ones with the same normalised name and type (one batched lookup) and
            reuse the stored ids, so the graph does not fragment between
            ``EntityResolver`` passes (see ``hierarchy.ingest_resolution``).
        retry: How a write that failed on a deadlock, a serialization failure or a lost
            connection is retried (the whole write transaction runs again; default
            :data:`~cycgraph_memory.retry.DEFAULT_RETRY`).
        ground_facts: Link facts to their messages, drop fillers and prefix speaker and
            date (:mod:`cycgraph_memory.hierarchy.grounding`); ``False`` keeps the
            extractor's facts as they are.

    Cost per call: the stored themes a batch can join or merge with are found through
    ``index`` (``search_themes``, ``theme_candidates`` per fact) and read back by id;
    entities are resolved by name key and edges checked by endpoint pair. Nothing lists
    the tenant. Without ``index``, the pipeline keeps its own table of theme centroids,
    filled once from the store on its first ingest (see
    :mod:`cycgraph_memory.hierarchy._theme_candidates`); pass the index you retrieve
    with so that every writer shares one view.

    Concurrency: any number of pipelines may ingest into one tenant at once. The CPU stages
    run in parallel; the write phase (the "already stored?" check, theme assignment and
    merging, and the writes) runs in ``exclusive_passes(store, "entity-resolution",
    "themes")``, so on Postgres it holds two per-tenant advisory locks inside the writing
    transaction: ingests of one tenant write one at a time, and never between an entity
    resolution or consolidation pass's read and its write. Every live fact stays
    in exactly one live theme that lists it, and a message is stored once.
    """

    def __init__(
        self,
        store: MemoryStore,
        options: Mapping[str, Any] | None = None,
        *,
        embedder: EmbeddingProvider | None = None,
        index: MemoryIndex | None = None,
        segmenter: EpisodeSegmenter | None = None,
        extractor: SemanticExtractor | None = None,
        clusterer: ThemeClusterer | None = None,
        theme_candidates: int = DEFAULT_THEME_CANDIDATES,
        max_theme_facts: int | None = DEFAULT_MAX_THEME_FACTS,
        embed_batch_size: int = 256,
        merge_entities: bool = True,
        resolve_entities: bool = True,
        retry: RetryPolicy | None = None,
        ground_facts: bool = True,
    ) -> None:
        if options is not None:
            given = keyword_options(MemoryPipeline.__init__, options, locals(), "MemoryPipeline")
            MemoryPipeline.__init__(self, store, **given)
            return
        check_same_tenant(store, index=index)
        merge_entities = check_bool(merge_entities, "merge_entities")
        resolve_entities = check_bool(resolve_entities, "resolve_entities")
        ground_facts = check_bool(ground_facts, "ground_facts")
        if embed_batch_size < 1:
            raise InvalidInputError("embed_batch_size must be >= 1")
        if isinstance(theme_candidates, bool) or not 1 <= theme_candidates <= 100:
            raise InvalidInputError("theme_candidates must be an int in 1..100")
        if max_theme_facts is not None and (
            isinstance(max_theme_facts, bool) or max_theme_facts < 1
        ):
            raise InvalidInputError("max_theme_facts must be a positive int or None")
        if segmenter is None:
            from cycgraph_memory.hierarchy.segmenters import SimpleEpisodeSegmenter

            segmenter = SimpleEpisodeSegmenter.bounded()
        if extractor is None:
            from cycgraph_memory.hierarchy.extractors.parser import default_extractor

            extractor = default_extractor(max_facts=DEFAULT_RULE_MAX_FACTS)
        self.calibrator = TenantThemeCalibrator() if clusterer is None else None
        self.theme_candidates = theme_candidates
        self.max_theme_facts = max_theme_facts
        self._neighbours = ThemeNeighbours() if index is None else None
        self.store = store
        self.embedder = embedder
        self.index = index
        self.segmenter = segmenter
        self.extractor = extractor
        self.clusterer = clusterer
        self.embed_batch_size = embed_batch_size
        self.merge_entities = merge_entities
        self.resolve_entities = resolve_entities
        self.retry = retry
        self.ground_facts = ground_facts

    async def ingest(
        self,
        messages: Iterable[Message | Mapping[str, Any]],
        *,
        tags: Sequence[str] = (),
        provenance: Provenance | Mapping[str, Any] | None = None,
        source: ProvenanceSource | None = None,
        run_id: str | None = None,
        node_id: str | None = None,
        agent_id: str | None = None,
        progress: ProgressCallback | None = None,
    ) -> IngestReport:
        """Ingest conversation messages and persist the hierarchy they produce.

        Messages whose id is already stored (or repeated in ``messages``) are skipped, so
        re-ingesting the same messages adds nothing. Everything new is written in one
        ``store.transaction()``.

        Args:
            messages: ``Message`` records or dicts with the same fields.
            tags: Tags added to every new fact (e.g. ``["lesson", "graph:research-v1"]``).
            provenance: A template (a ``Provenance`` or a dict with its fields) whose
                ``source``, ``run_id``, ``node_id``, ``agent_id`` and ``tool_name`` (when
                set) go into the provenance of every new record; the explicit keywords
                below win over it.
            source: Overrides the provenance source of new records.
            run_id: Workflow run recorded in the provenance of every new record.
            node_id: Graph node recorded in the provenance of every new record.
            agent_id: Agent recorded in the provenance of every new record.
            progress: Called with ``ProgressEvent("ingest", done, total, stage)``: per
                episode extracted (``"extract"``), then once written (``"write"``).

        Returns:
            An :class:`IngestReport` with the ids of everything written.

        Raises:
            pydantic.ValidationError: A message or option is invalid (nothing written).
            InvalidTypeError: ``tags`` is a single string instead of a list,
                ``provenance`` is neither a ``Provenance`` nor a mapping, or ``messages``
                is not an iterable of messages (``None``, one message, a text); nothing
                written.
            EmbeddingDimensionMismatchError: The embedder returned vectors of the wrong
                size (nothing written).
        """
        if progress is not None:
            check_progress(progress)
        opts = _IngestOptions.build(
            tags, provenance, source=source, run_id=run_id, node_id=node_id, agent_id=agent_id
        )
        with span("cycgraph.ingest", tenant=tenant_of(self.store)) as sp:
            prepared = await self._prepare(messages, opts, in_flight=frozenset(), progress=progress)
            # The "write" event is sent inside the unit of work, before it commits: a
            # callback that raises on it rolls the ingest back like any other error.
            report = await self._commit(prepared, opts, progress)
            sp.set(rows=len(report.fact_ids), messages=report.messages_ingested)
        return report

    async def ingest_many(
        self,
        batches: Iterable[Iterable[Message | Mapping[str, Any]]],
        *,
        tags: Sequence[str] = (),
        provenance: Provenance | Mapping[str, Any] | None = None,
        source: ProvenanceSource | None = None,
        run_id: str | None = None,
        node_id: str | None = None,
        agent_id: str | None = None,
    ) -> list[IngestReport]:
        """Ingest many message batches, overlapping CPU work with database writes.

        Each batch is ingested exactly like :meth:`ingest` (one transaction per batch,
        same options for all), but while batch *n* is being written the pipeline already
        segments, extracts and embeds batch *n + 1*; with a database store on another core
        the two overlap. Clustering of a batch waits for the previous batch's commit, so
        every batch clusters against the themes stored before it.

        If a batch fails, the batches before it stay committed, nothing of the failing or
        later batches is written, and the error propagates.

        Returns:
            One :class:`IngestReport` per batch, in order.

        Raises:
            InvalidTypeError: ``batches`` or one batch is not an iterable of messages.
        """
        if isinstance(batches, str | bytes | Mapping) or not isinstance(batches, Iterable):
            raise InvalidTypeError(
                f"batches must be an iterable of message batches, got {type(batches).__name__}"
            )
        opts = _IngestOptions.build(
            tags, provenance, source=source, run_id=run_id, node_id=node_id, agent_id=agent_id
        )
        reports: list[IngestReport] = []
        pending: asyncio.Task[IngestReport] | None = None
        in_flight: frozenset[uuid.UUID] = frozenset()
        try:
            for batch in batches:
                prepared = await self._prepare(batch, opts, in_flight=in_flight)
                if pending is not None:
                    reports.append(await pending)
                    pending = None
                in_flight = frozenset(m.id for e in prepared.episodes for m in e.messages)
                pending = asyncio.create_task(self._commit(prepared, opts))
                await asyncio.sleep(0)  # let the write start before preparing the next batch
            if pending is not None:
                reports.append(await pending)
                pending = None
        finally:
            if pending is not None:
                # Preparing a later batch failed: let the running write finish (it is a
                # whole transaction) before the error propagates.
                await asyncio.gather(pending, return_exceptions=True)
        return reports

    async def _prepare(
        self,
        messages: Iterable[Message | Mapping[str, Any]],
        opts: _IngestOptions,
        *,
        in_flight: frozenset[uuid.UUID],
        progress: ProgressCallback | None = None,
    ) -> _Prepared:
        """Validate, de-duplicate, segment, extract and embed (no writes)."""
        # Validated up front (sizes included: MAX_TEXT_LENGTH), before any work. A single
        # message, a text or None is not a batch of messages: a typed refusal.
        if isinstance(messages, str | bytes | Mapping | BaseModel) or not isinstance(
            messages, Iterable
        ):
            raise InvalidTypeError(
                "messages must be an iterable of Message records or mappings, got "
                f"{type(messages).__name__} (wrap a single message in a list)"
            )
        batch = [validate_record(Message, m) for m in messages]
        prepared = _Prepared(received=len(batch))
        unique: dict[uuid.UUID, Message] = {}
        for message in batch:
            if message.id not in in_flight:
                unique.setdefault(message.id, message)
        # On the primary: a lagging read engine may still hold a message erased since,
        # and the message would be skipped as stored (the check under the lock only
        # looks again at the messages found fresh here).
        with primary_reads(self.store):
            stored = await self.store.get_messages(list(unique)) if unique else {}
        fresh = [m for m in unique.values() if m.id not in stored]
        if not fresh:
            return prepared

        await self._embed_messages(fresh)
        # The stages may be the user's own: what they return is checked before any use.
        episodes = check_episodes(await self.segmenter.segment(fresh), fresh)
        for episode in episodes:
            self._stamp(episode, opts)
        # An extractor with extract_batch (the parser tier) reads the whole batch at once.
        batch_extract = getattr(self.extractor, "extract_batch", None)
        batched = await batch_extract(episodes) if batch_extract is not None else None
        if batched is not None and (
            not isinstance(batched, Sequence) or len(batched) != len(episodes)
        ):
            raise InvalidInputError(
                f"the extractor's extract_batch must return one result per episode "
                f"({len(episodes)}), got {type(batched).__name__}"
            )
        for done, episode in enumerate(episodes, 1):
            result = check_extraction(
                batched[done - 1] if batched is not None else await self.extractor.extract(episode),
                episode,
            )
            if self.ground_facts:
                result.facts = _ground(episode, result.facts)
            prepared.facts.extend(result.facts)
            prepared.entities.extend(result.entities)
            prepared.relationships.extend(result.relationships)
            report_progress(progress, "ingest", done, len(episodes), "extract")
            await asyncio.sleep(0)  # CPU-bound stage: give a pending write its turn
        prepared.episodes = episodes
        check_batch_ids(prepared.facts, prepared.entities, prepared.relationships)
        if self.merge_entities:
            prepared.entities, prepared.facts, prepared.relationships = _merge_batch_entities(
                prepared.entities, prepared.facts, prepared.relationships
            )
        for fact in prepared.facts:
            self._stamp(fact, opts)
            if opts.tags:
                fact.tags = _with_tags(fact.tags, opts.tags)
        for entity in prepared.entities:
            self._stamp(entity, opts)
        for rel in prepared.relationships:
            self._stamp(rel, opts)
        await self._embed(prepared.episodes, prepared.facts, prepared.entities)
        return prepared

    async def _commit(
        self,
        prepared: _Prepared,
        opts: _IngestOptions,
        progress: ProgressCallback | None = None,
    ) -> IngestReport:
        """Write ``prepared`` (retried as a whole on deadlocks and lost connections)."""
        if not prepared.episodes:
            report_progress(progress, "ingest", 0, 0, "write")
            return IngestReport(messages_skipped=prepared.received)
        return await call_with_retry(
            lambda: self._commit_attempt(prepared.copy(), opts, progress),
            self.retry,
            name="ingest",
        )

    async def _commit_attempt(
        self,
        prepared: _Prepared,
        opts: _IngestOptions,
        progress: ProgressCallback | None = None,
    ) -> IngestReport:
        """One :meth:`_commit_once`; on failure, forget the pipeline's theme view.

        When it raises, whether its transaction committed may be unknown (cancelled, or
        the connection lost, while ``COMMIT`` was in flight): the pipeline's own view of
        the theme centroids is then read again from the store by the next ingest.
        """
        try:
            return await self._commit_once(prepared, opts, progress)
        except BaseException:
            if self._neighbours is not None:
                self._neighbours = ThemeNeighbours()
            raise

    async def _commit_once(
        self,
        prepared: _Prepared,
        opts: _IngestOptions,
        progress: ProgressCallback | None = None,
    ) -> IngestReport:
        """Check, cluster against the stored themes and write, in one exclusive transaction."""
        async with exclusive_passes(self.store, ENTITY_RESOLUTION_LOCK, THEMES_LOCK):
            # Inside the lock: a concurrent ingest may have stored some of these messages
            # since they were prepared. Then the stages run again for the rest (rare).
            ids = [m.id for e in prepared.episodes for m in e.messages]
            stored = await self.store.get_messages(ids)
            if stored:
                rest = [m for e in prepared.episodes for m in e.messages if m.id not in stored]
                redone = await self._prepare(rest, opts, in_flight=frozenset())
                redone.received = prepared.received
                prepared = redone
            episodes, facts = prepared.episodes, prepared.facts
            entities, relationships = prepared.entities, prepared.relationships
            report = IngestReport(
                messages_skipped=prepared.received - sum(len(e.messages) for e in episodes)
            )
            if not episodes:
                report_progress(progress, "ingest", 0, 0, "write")
                return report
            facts, relinked = await self._split_stored_facts(facts)
            # Quarantined facts (an ingest of a failed or poisoned run, tagged
            # QUARANTINE_TAG) join no theme: a theme is served without a tag scope and its
            # label is written from its facts, so one would carry them into results. Such
            # a run writes no relationship, ends none and changes no stored entity either
            # (edges and entities carry no tags: nothing could keep them out of reads).
            quarantined = QUARANTINE_TAG in opts.tags
            clustered = [f for f in facts if QUARANTINE_TAG not in f.tags]
            themes, existing = [], []
            if clustered:
                clusterer = await self._clusterer(clustered)
                existing = await self._candidates(clustered, clusterer, opts)
                themes = check_themes(
                    await clusterer.cluster(clustered, existing), clustered, existing
                )
            known = {t.id for t in existing}
            themes = await self._free_theme_ids(themes, known, clustered)
            survivors = {t.id for t in themes}
            for theme in themes:  # a new theme is a new record: it carries the provenance
                if theme.id not in known:
                    self._stamp(theme, opts)
            now = utc_now()
            merged_away = [
                t.model_copy(update={"invalidated_at": now})
                for t in existing
                if t.id not in survivors
            ]
            remapped = await self._remap_merged(merged_away, themes)
            remapped = _relink(remapped, relinked)
            touched = _touched_themes(themes, existing)
            new_entity_ids = [e.id for e in entities]
            relationships, ended = split_ended_markers(relationships)
            if quarantined:  # its claims change no graph: no new edge, none ended
                relationships, ended = [], []
            matched: dict[uuid.UUID, uuid.UUID] = {}
            if self.resolve_entities:
                resolved = await resolve_ingest_entities(
                    self.store, entities, facts, relationships, ended=ended,
                    absorb=not quarantined,
                )
                entities, relationships = resolved.entities, resolved.relationships
                new_entity_ids = [i for i in new_entity_ids if i not in resolved.matched]
                matched = resolved.matched
            # "no longer works at": close the open edge (batch or store), store no marker.
            relationships = await close_ended_relationships(
                self.store, relationships, ended, matched
            )
            entities, relationships, kept = await self._keep_stored_records(
                prepared, entities, relationships
            )
            new_entity_ids = [i for i in new_entity_ids if i not in kept]
            # Referenced records first: facts may cite only stored episodes, entities
            # and themes (DanglingReferenceError otherwise).
            await self.store.put_episodes(episodes)
            await self.store.put_entities(entities)
            await self.store.put_relationships(relationships)
            await self.store.put_themes(touched)
            await self.store.put_facts([*facts, *remapped])
            if merged_away:
                await self.store.put_themes(merged_away)
            # Before the commit and before the index hears of the records: a callback
            # that raises here leaves the store and the index unchanged.
            report_progress(progress, "ingest", len(episodes), len(episodes), "write")
            # Inside the lock: the next ingest's kNN must see these themes.
            await self._sync_index(episodes, [*facts, *remapped], entities, touched, merged_away)

        if self._neighbours is not None:  # committed: this pipeline's own view follows
            self._neighbours.update(touched, [t.id for t in merged_away])
        report.messages_ingested = sum(len(e.messages) for e in episodes)
        report.episode_ids = [e.id for e in episodes]
        report.fact_ids = [f.id for f in facts]
        report.entity_ids = new_entity_ids
        report.relationship_ids = [r.id for r in relationships]
        report.theme_ids = [t.id for t in touched]
        report.themes_merged_away = [t.id for t in merged_away]
        logger.info(
            "ingested %d messages: %d episodes, %d facts, %d entities, %d relationships",
            report.messages_ingested,
            len(episodes),
            len(facts),
            len(entities),
            len(relationships),
        )
        return report

    async def _clusterer(self, facts: list[SemanticFact]) -> ThemeClusterer:
        """The configured clusterer, or the tenant-calibrated one for this batch."""
        if self.calibrator is None:
            assert self.clusterer is not None
            return self.clusterer
        return await self.calibrator.clusterer_for(self.store, facts)

    async def _candidates(
        self, facts: list[SemanticFact], clusterer: object, opts: _IngestOptions
    ) -> list[Theme]:
        """The stored themes this batch may join or merge with (kNN, then by id)."""
        neighbours = self._neighbours
        if neighbours is not None and not neighbours.loaded:
            await neighbours.load(self.store)
        thresholds = [
            float(v)
            for name in ("assignment_threshold", "similarity_threshold", "merge_threshold")
            if isinstance(v := getattr(clusterer, name, None), int | float)
        ]
        return await candidate_themes(
            self.store,
            facts,
            index=self.index,
            neighbours=neighbours,
            limit=self.theme_candidates,
            # No floor below 0 (search floors are similarities in [0, 1]).
            floor=min(thresholds) if thresholds and min(thresholds) > 0 else None,
            max_facts=self.max_theme_facts,
            # a "General" theme not stored yet is a new record of this ingest
            provenance=self._stamped(Provenance(source="derived"), opts),
        )

    @staticmethod
    def _stamped(provenance: Provenance, opts: _IngestOptions) -> Provenance:
        """``provenance`` with the ingest's source, run, node, agent and tool set."""
        update: dict[str, Any] = {}
        if opts.source is not None:
            update["source"] = opts.source
        for key in ("run_id", "node_id", "agent_id", "tool_name"):
            value = getattr(opts, key)
            if value is not None:
                update[key] = value
        return provenance.model_copy(update=update) if update else provenance

    @classmethod
    def _stamp(
        cls, record: Episode | SemanticFact | Entity | Relationship | Theme, opts: _IngestOptions
    ) -> None:
        stamped = cls._stamped(record.provenance, opts)
        if stamped is not record.provenance:
            record.provenance = stamped

    async def _embed(
        self, episodes: list[Episode], facts: list[SemanticFact], entities: list[Entity]
    ) -> None:
        if self.embedder is None:
            return
        texts: list[str] = [f.content for f in facts]
        unvectored = [e for e in episodes if _mean_vector(e) is None]
        texts += [_episode_text(e) for e in unvectored]
        texts += [e.name for e in entities]
        vectors: list[list[float]] = []
        for start in range(0, len(texts), self.embed_batch_size):
            chunk = texts[start : start + self.embed_batch_size]
            out = await self.embedder.embed(chunk)
            if len(out) != len(chunk):
                raise InvalidInputError(
                    f"embedder returned {len(out)} vectors for {len(chunk)} texts"
                )
            vectors.extend(out)
        expected = self.embedder.dimensions
        for i, vector in enumerate(vectors):
            if len(vector) != expected:
                raise EmbeddingDimensionMismatchError(expected, len(vector), f"embedder output {i}")
        it = iter(vectors)
        for fact in facts:
            fact.embedding = next(it)
        for episode in unvectored:
            episode.embedding = next(it)
        for entity in entities:
            entity.embedding = next(it)
        for episode in episodes:
            if episode.embedding is None:
                episode.embedding = _mean_vector(episode)

    async def _embed_messages(self, messages: list[Message]) -> None:
        """Give every message without an embedding one (in place; they are copies)."""
        if self.embedder is None:
            return
        missing = [m for m in messages if m.embedding is None]
        expected = self.embedder.dimensions
        for start in range(0, len(missing), self.embed_batch_size):
            chunk = missing[start : start + self.embed_batch_size]
            out = await self.embedder.embed([m.content for m in chunk])
            if len(out) != len(chunk):
                raise InvalidInputError(
                    f"embedder returned {len(out)} vectors for {len(chunk)} texts"
                )
            for message, vector in zip(chunk, out, strict=True):
                if len(vector) != expected:
                    raise EmbeddingDimensionMismatchError(
                        expected, len(vector), f"message {message.id}"
                    )
                message.embedding = vector
        for message in messages:
            assert message.embedding is not None
            if len(message.embedding) != expected:
                raise EmbeddingDimensionMismatchError(
                    expected, len(message.embedding), f"message {message.id}"
                )

    async def _split_stored_facts(
        self, facts: list[SemanticFact]
    ) -> tuple[list[SemanticFact], dict[uuid.UUID, SemanticFact]]:
        """Split off the facts whose id is already stored, linked to their new sources.

        Extractors derive fact ids from the episode id, and episode ids from the message
        ids: messages whose episode was hard-deleted (a consolidation pass pruning old
        episodes keeps their facts) come back as the same episode and the same fact ids.
        The stored fact is kept as it is (a forgotten or superseded one stays invalidated,
        it stays in the one theme that lists it, its counts and tags stay) and only gains
        the re-created episode and messages as sources; it is not clustered again.
        Returns the facts to create and the stored ones to write back, by id.
        """
        if not facts:
            return facts, {}
        ids = [f.id for f in facts]
        lock = getattr(self.store, "get_facts_for_update", None)
        stored = await (lock(ids) if lock is not None else self.store.get_facts(ids))
        if not stored:
            return facts, {}
        relinked: dict[uuid.UUID, SemanticFact] = {}
        for fact in facts:
            old = stored.get(fact.id)
            if old is None:
                continue
            relinked[fact.id] = old.model_copy(
                update={
                    "source_episode_ids": list(
                        dict.fromkeys([*old.source_episode_ids, *fact.source_episode_ids])
                    ),
                    "source_message_ids": list(
                        dict.fromkeys([*old.source_message_ids, *fact.source_message_ids])
                    ),
                }
            )
        return [f for f in facts if f.id not in stored], relinked

    async def _keep_stored_records(
        self,
        prepared: _Prepared,
        entities: list[Entity],
        relationships: list[Relationship],
    ) -> tuple[list[Entity], list[Relationship], set[uuid.UUID]]:
        """Drop the extracted entities and edges whose id is already stored.

        As for facts (:meth:`_split_stored_facts`): an episode re-created from messages
        whose episode was hard-deleted re-derives its entities and edges under the same
        ids, and writing them would replace the stored records (an invalidated or closed
        edge served again, what an entity absorbed lost). The stored records stay as they
        are. Stored entities and edges that resolution rewrites on purpose (an entity that
        absorbed a new one, an edge an "ended" marker closes) carry other ids and are kept.
        Returns the entities and edges to write and the ids of the stored entities kept.
        """
        extracted_entities = {e.id for e in prepared.entities}
        extracted_edges = {r.id for r in prepared.relationships}
        entity_ids = [e.id for e in entities if e.id in extracted_entities]
        edge_ids = [r.id for r in relationships if r.id in extracted_edges]
        stored_entities = await self.store.get_entities(entity_ids) if entity_ids else {}
        stored_edges = await self.store.get_relationships(edge_ids) if edge_ids else {}
        if not stored_entities and not stored_edges:
            return entities, relationships, set()
        return (
            [e for e in entities if e.id not in stored_entities],
            [r for r in relationships if r.id not in stored_edges],
            set(stored_entities),
        )

    async def _free_theme_ids(
        self, themes: list[Theme], known: set[uuid.UUID], facts: list[SemanticFact]
    ) -> list[Theme]:
        """``themes`` with every new theme whose id is already stored given a free one.

        Theme ids are derived from the founding fact
        (:func:`~cycgraph_memory.hierarchy.clustering.theme_id_for`), and a fact
        erased by ``purge`` or a hard consolidation pass can be ingested again and found
        a theme once more while the theme it founded first is still stored (it kept other
        facts, or was soft-deleted by a merge). Such a new theme moves to
        ``uuid5(THEME_ID_NAMESPACE, "theme:<id>:next")`` (again until free), and the
        batch's facts follow it. One batched ``get_themes`` per round; the first round
        finds nothing in the common case.
        """
        new_ids = [t.id for t in themes if t.id not in known]
        if not new_ids:
            return themes
        used = {t.id for t in themes} | known
        renamed: dict[uuid.UUID, uuid.UUID] = {}
        pending = {i: i for i in new_ids}  # original id -> id being checked
        while pending:
            stored = await self.store.get_themes(list(pending.values()))
            clash = {orig: cur for orig, cur in pending.items() if cur in stored}
            pending = {}
            for orig, cur in clash.items():
                nxt = uuid.uuid5(THEME_ID_NAMESPACE, f"theme:{cur}:next")
                while nxt in used:
                    nxt = uuid.uuid5(THEME_ID_NAMESPACE, f"theme:{nxt}:next")
                used.add(nxt)
                renamed[orig] = nxt
                pending[orig] = nxt
        if not renamed:
            return themes
        for fact in facts:
            if fact.theme_id is not None and fact.theme_id in renamed:
                fact.theme_id = renamed[fact.theme_id]
        return [
            t.model_copy(update={"id": renamed[t.id]}) if t.id in renamed else t
            for t in themes
        ]

    async def _remap_merged(
        self, merged_away: list[Theme], themes: list[Theme]
    ) -> list[SemanticFact]:
        """Facts persisted earlier under a merged-away theme, re-pointed at its survivor.

        They are written back whole, and ingest does not hold ``FACTS_LOCK``: a pass under
        it (``Memory.forget``, the gate, conflict resolution) may commit a change to one of
        them meanwhile. A store with ``get_facts_for_update``
        (Postgres) re-reads them with their rows locked until the ingest commits, so the
        copies written back are the current ones and a later change waits for the ingest.
        """
        if not merged_away:
            return []
        owner: dict[uuid.UUID, uuid.UUID] = {}
        for theme in themes:
            for fact_id in theme.fact_ids:
                owner[fact_id] = theme.id
        found: dict[uuid.UUID, SemanticFact] = {}
        for gone in merged_away:
            stored = await self.store.find_facts(theme_id=gone.id, include_invalidated=True)
            found.update((f.id, f) for f in stored if f.id in owner)
        lock = getattr(self.store, "get_facts_for_update", None)
        if lock is not None and found:
            found = await lock(list(found))
        out: list[SemanticFact] = []
        for fact in found.values():
            fact.theme_id = owner[fact.id]
            out.append(fact)
        return out

    async def _sync_index(
        self,
        episodes: list[Episode],
        facts: list[SemanticFact],
        entities: list[Entity],
        themes: list[Theme],
        removed: list[Theme],
    ) -> None:
        index = self.index
        if index is None:
            return
        # The store has just validated these records: an index that offers it skips a
        # second validation of each (it still copies them).
        upsert_many = getattr(index, "upsert_stored_many", None) or getattr(
            index, "upsert_many", None
        )
        remove = getattr(index, "remove", None)
        if upsert_many is None:
            return
        upsert_many([*episodes, *facts, *entities, *themes])
        if remove is not None:
            for theme in removed:
                remove(theme.id)


def _mean_vector(episode: Episode) -> list[float] | None:
    """Normalised mean of the messages' unit vectors (``None`` unless all have one)."""
    vectors = [m.embedding for m in episode.messages]
    if not vectors or any(v is None for v in vectors):
        return None
    m = np.asarray(vectors, dtype=np.float64)
    norms = np.linalg.norm(m, axis=1, keepdims=True)
    mean = (m / np.where(norms == 0.0, 1.0, norms)).mean(axis=0)
    length = float(np.linalg.norm(mean))
    if length == 0.0:
        return None
    out: list[float] = (mean / length).tolist()
    return out


def _ground(episode: Episode, facts: list[SemanticFact]) -> list[SemanticFact]:
    """Link facts to messages, drop fillers, add speaker and date (see grounding)."""
    names = sorted({speaker_of(m) for m in episode.messages})
    # The free extractor tiers write "Speaker: sentence"; the speaker and date prefix
    # below replaces that (one prefix, not two), and grounding matches the bare sentence.
    prefixes = tuple(f"{name}: " for name in names)
    original = {f.id: f.content for f in facts}
    for fact in facts:
        if fact.content.startswith(prefixes):
            fact.content = fact.content.split(": ", 1)[1]
    ground_facts(episode, facts)
    by_id = {m.id: m for m in episode.messages}
    kept: list[SemanticFact] = []
    for fact in facts:
        if is_filler(fact.content, names):
            continue
        source = next((by_id[i] for i in fact.source_message_ids if i in by_id), None)
        if source is not None:
            grounded = contextualize(fact, source)
            # The prefix and the resolved pronouns lengthen the text: a fact that would
            # outgrow MAX_TEXT_LENGTH keeps its own text rather than fail the ingest.
            fact.content = grounded if len(grounded) <= MAX_TEXT_LENGTH else original[fact.id]
            if fact.valid_until is None:
                fact.valid_from = source.timestamp  # valid from when it was said
        else:
            fact.content = original[fact.id]  # ungrounded: keep who said it
        kept.append(fact)
    if len(kept) != len(facts):
        episode.fact_ids = [f.id for f in kept]
    return kept


def _with_tags(own: list[str], added: Sequence[str]) -> list[str]:
    """``own`` followed by the ingest's ``added`` tags, within :data:`MAX_TAGS`.

    The ingest's tags (its scope, such as ``graph:research-v1``) always land; when the two
    lists together exceed the limit, the extractor's own tags past the room left are
    dropped, so an extractor (a model's reply) cannot make the ingest fail.
    """
    merged = list(dict.fromkeys([*own, *added]))
    if len(merged) <= MAX_TAGS:
        return merged
    wanted = list(dict.fromkeys(added))
    scope = set(wanted)
    room = MAX_TAGS - len(wanted)
    return [t for t in dict.fromkeys(own) if t not in scope][:room] + wanted


def _episode_text(episode: Episode) -> str:
    text = " ".join(m.content for m in episode.messages) or episode.topic
    return text[:_EPISODE_TEXT_LIMIT]


def _touched_themes(themes: list[Theme], existing: list[Theme]) -> list[Theme]:
    """Themes that are new or whose content differs from what is stored."""
    before = {t.id: t for t in existing}
    return [t for t in themes if before.get(t.id) != t]


def _merge_batch_entities(
    entities: list[Entity], facts: list[SemanticFact], relationships: list[Relationship]
) -> tuple[list[Entity], list[SemanticFact], list[Relationship]]:
    """Collapse entities of one ingest sharing (normalised name, type) onto the first one.

    Edges that become the same triple with overlapping validity windows keep the first
    one, but an ended marker is never a repeat ("Kevin works at Initech", then in a later
    episode "Kevin left Initech": the marker must reach :func:`close_ended_relationships`),
    and the triple said again after a marker, or after an edge that ended, starts a new
    edge.
    """
    canonical: dict[tuple[str, str], Entity] = {}
    remap: dict[uuid.UUID, uuid.UUID] = {}
    kept: list[Entity] = []
    for entity in entities:
        key = (normalize_entity_name(entity.name), entity.entity_type)
        first = canonical.get(key)
        if first is None:
            canonical[key] = entity
            kept.append(entity)
            continue
        remap[entity.id] = first.id
        if entity.attributes:
            first.attributes = {**entity.attributes, **first.attributes}
    if not remap:
        return entities, facts, relationships
    for fact in facts:
        if any(e in remap for e in fact.entity_ids):
            fact.entity_ids = list(dict.fromkeys(remap.get(e, e) for e in fact.entity_ids))
    seen_edges: dict[tuple[uuid.UUID, uuid.UUID, str], list[Relationship]] = {}
    edges: list[Relationship] = []
    for rel in relationships:
        source = remap.get(rel.source_id, rel.source_id)
        target = remap.get(rel.target_id, rel.target_id)
        edge = (source, target, rel.relation_type)
        if source == target:
            continue
        if is_ended_marker(rel.attributes):
            seen_edges.pop(edge, None)
        elif any(windows_overlap(rel, kept) for kept in seen_edges.get(edge, ())):
            continue
        else:
            seen_edges.setdefault(edge, []).append(rel)
        if source != rel.source_id or target != rel.target_id:
            rel = rel.model_copy(update={"source_id": source, "target_id": target})
        edges.append(rel)
    return kept, facts, edges


def _relink(
    remapped: list[SemanticFact], relinked: dict[uuid.UUID, SemanticFact]
) -> list[SemanticFact]:
    """``remapped`` plus the re-linked stored facts, one copy per id.

    A re-linked fact that a theme merge also re-points keeps both changes.
    """
    if not relinked:
        return remapped
    out: list[SemanticFact] = []
    pending = dict(relinked)
    for fact in remapped:
        again = pending.pop(fact.id, None)
        if again is not None:
            fact = again.model_copy(update={"theme_id": fact.theme_id})
        out.append(fact)
    out.extend(pending.values())
    return out

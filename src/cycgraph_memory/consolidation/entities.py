"""EntityResolver: cross-episode entity deduplication (collect, then apply in one unit of work).

Matching is exact and deterministic: two live entities merge when their
:func:`~cycgraph_memory.normalize.normalize_entity_name` keys and their ``entity_type`` are
equal. The oldest record (``(created_at, id)`` order) is canonical, so ids stay stable.

Per duplicate group the resolver

* merges the losers' attributes into the canonical (the canonical wins on conflicts; among
  losers, the older wins) and gives it the oldest loser embedding if it has none;
* rewrites every fact's ``entity_ids`` (invalidated facts too, so no id dangles) with the
  losers replaced by the canonical, order kept, duplicates removed;
* rewrites relationship endpoints; a live edge that becomes a self-loop, or duplicates a
  live edge with the same ``(source, target, relation_type)`` and an overlapping validity
  window, is dropped (an edge that was not remapped is kept in preference; then the older
  one); edges of disjoint windows are two periods of the relation and both stay;
* soft-deletes losers (``invalidated_at`` + ``superseded_by`` = canonical) or, in
  ``delete_mode="hard"``, deletes them after the edges and facts no longer point at them,
  and after entities merged into them earlier (``superseded_by`` = a loser) forward to the
  canonical instead, so no pointer dangles.

Dropped edges are invalidated (``invalidated_by`` = the kept duplicate's id, or the
canonical entity's id for a self-loop) with their endpoints untouched in soft mode, and
deleted in hard mode.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any, Literal

from cycgraph_memory._exclusive import FACTS_LOCK, exclusive_passes
from cycgraph_memory._validate import check_logger, check_same_tenant, keyword_options
from cycgraph_memory.consolidation._common import (
    check_batch_size,
    check_delete_mode,
    check_index,
    check_store,
    facts_reader_for_update,
    require,
    scan,
)
from cycgraph_memory.consolidation.plan import (
    Delete,
    Mutation,
    MutationPlan,
    Put,
    apply_mutations,
    sync_index,
)
from cycgraph_memory.contracts import MemoryIndex, MemoryStore
from cycgraph_memory.errors import InvalidTypeError
from cycgraph_memory.normalize import normalize_entity_name
from cycgraph_memory.observability import span, tenant_of
from cycgraph_memory.progress import ProgressCallback, report_progress
from cycgraph_memory.records import (
    Entity,
    EntityResolutionReport,
    Relationship,
    SemanticFact,
    utc_now,
)
from cycgraph_memory.temporal import windows_overlap

__all__ = ["EntityResolutionPlan", "EntityResolver"]

_log = logging.getLogger(__name__)

EntityResolutionPlan = MutationPlan[EntityResolutionReport]
"""The plan of one resolution pass."""

_EdgeKey = tuple[uuid.UUID, uuid.UUID, str]


def _chunks(groups: list[list[uuid.UUID]], limit: int) -> Iterator[list[list[uuid.UUID]]]:
    """Consecutive groups totalling at most ``limit`` members (at least one group each)."""
    chunk: list[list[uuid.UUID]] = []
    size = 0
    for group in groups:
        if chunk and size + len(group) > limit:
            yield chunk
            chunk, size = [], 0
        chunk.append(group)
        size += len(group)
    if chunk:
        yield chunk


class EntityResolver:
    """Merge entity records that share a normalised name and an entity type.

    Args:
        store: The store to resolve (any ``MemoryStore`` with the batched lookups
            ``find_facts_for_entities`` / ``find_relationships_for_entities``; both shipped
            stores have them).
        options: The keyword options below as one mapping (the spec's
            ``new EntityResolver(store, options)``), instead of keywords.
        delete_mode: ``"soft"`` (default) invalidates losers and sets ``superseded_by``;
            ``"hard"`` deletes them.
        batch_size: Page size for loading entities, and the number of group members whose
            facts and edges are loaded at once.
        logger: Optional ``logging.Logger``, or any object with some of ``debug`` /
            ``info`` / ``warning`` (or the spec's ``warn``): the levels it lacks are
            dropped (default: this module's logger).
        index: Optional index kept in sync after the commit (the in-memory index; a
            pgvector index reads the tables and needs nothing).
        clock: Returns "now" (aware UTC) for ``invalidated_at`` / ``updated_at``.

    Raises:
        InvalidInputError: An unknown ``delete_mode`` or a ``batch_size`` out of range.
        InvalidTypeError: A ``store`` without the ``MemoryStore`` methods, an ``index``
            that is neither ``None`` nor a ``MemoryIndex``, a ``clock`` that is not
            callable, a logger with none of the logging methods.

    Example:
        ``report = await EntityResolver(store).resolve()``
    """

    def __init__(
        self,
        store: MemoryStore,
        options: Mapping[str, Any] | None = None,
        *,
        delete_mode: Literal["soft", "hard"] = "soft",
        batch_size: int = 1000,
        logger: logging.Logger | object | None = None,
        index: MemoryIndex | None = None,
        clock: Callable[[], datetime] | None = None,
    ) -> None:
        if options is not None:
            given = keyword_options(EntityResolver.__init__, options, locals(), "EntityResolver")
            EntityResolver.__init__(self, store, **given)
            return
        self.store = check_store(store)
        self.delete_mode = check_delete_mode(delete_mode)
        self.batch_size = check_batch_size(batch_size)
        self.logger = check_logger(logger, _log)
        self.index = check_index(index)
        check_same_tenant(self.store, index=self.index)
        if clock is not None and not callable(clock):
            raise InvalidTypeError(f"clock must be a callable, got {type(clock).__name__}")
        self.clock = clock or utc_now

    async def resolve(
        self, *, progress: ProgressCallback | None = None
    ) -> EntityResolutionReport:
        """Plan and apply one resolution pass as one exclusive unit of work.

        Two workers resolving the same store at once end in the state of one run; a
        failure leaves the store unchanged. Running it again reports zeros. ``progress``
        receives ``ProgressEvent("resolve-entities", chunks_done, chunks)`` while planning.

        Returns:
            The counts of what was merged and rewritten.
        """
        async with exclusive_passes(self.store, "entity-resolution", FACTS_LOCK):
            with span("cycgraph.resolve_entities", tenant=tenant_of(self.store)) as sp:
                plan = await self.plan(progress=progress)
                await apply_mutations(self.store, plan.mutations)
                sp.set(rows=len(plan.mutations))
        sync_index(self.index, plan.mutations)
        assert plan.report is not None
        self.logger.info("entity resolution: %s", plan.report.model_dump())
        return plan.report

    async def plan(self, *, progress: ProgressCallback | None = None) -> EntityResolutionPlan:
        """Compute the mutations of a resolution pass without writing anything."""
        groups = await self._duplicate_groups()
        report = EntityResolutionReport(
            groups_merged=len(groups), entities_absorbed=sum(len(g) - 1 for g in groups)
        )
        if not groups:
            report_progress(progress, "resolve-entities", 0, 0, "plan")
            return EntityResolutionPlan([], report)
        remap = {loser: g[0] for g in groups for loser in g[1:]}
        now = self.clock()
        entity_puts: list[Mutation] = []
        losers_out: list[Mutation] = []
        facts: dict[uuid.UUID, SemanticFact] = {}
        edges: dict[uuid.UUID, Relationship] = {}
        dropped: dict[uuid.UUID, Relationship] = {}
        originals: dict[uuid.UUID, Relationship] = {}
        chunks = list(_chunks(groups, self.batch_size))
        for done, chunk in enumerate(chunks):
            report_progress(progress, "resolve-entities", done, len(chunks), "plan")
            members = [i for g in chunk for i in g]
            records = await self.store.get_entities(members)
            for group in chunk:
                canonical, losers = self._merge(group, records, now)
                if canonical is not None:
                    entity_puts.append(Put(canonical, "entity_absorbed_into"))
                losers_out.extend(losers)
            losers_in_chunk = [i for g in chunk for i in g[1:]]
            for fact in await require(self.store, "find_facts_for_entities")(
                losers_in_chunk, include_invalidated=True
            ):
                if fact.id in facts:
                    continue
                new_ids = list(dict.fromkeys(remap.get(e, e) for e in fact.entity_ids))
                if new_ids != fact.entity_ids:
                    facts[fact.id] = fact.model_copy(update={"entity_ids": new_ids})
            loaded = await require(self.store, "find_relationships_for_entities")(
                members, include_invalidated=True
            )
            self._remap_edges(loaded, remap, edges, dropped, originals)
        if self.delete_mode == "hard":
            entity_puts += await self._forward_pointers(remap, now)
        report_progress(progress, "resolve-entities", len(chunks), len(chunks), "plan")
        if facts:
            # Re-read locked (Postgres) until the pass commits, and remap the rows as they
            # are now: a touch committed since the listing is kept, and a later one waits
            # for the pass instead of being overwritten by its write-back.
            # Locked in id order across batches, the touch's order: the two queue instead of
            # deadlocking.
            ids, in_order = list(facts), sorted(facts)
            current: dict[uuid.UUID, SemanticFact] = {}
            read = facts_reader_for_update(self.store)
            for start in range(0, len(in_order), self.batch_size):
                current.update(await read(in_order[start : start + self.batch_size]))
            facts = {
                fid: now_.model_copy(
                    update={
                        "entity_ids": list(dict.fromkeys(remap.get(e, e) for e in now_.entity_ids))
                    }
                )
                for fid, now_ in ((fid, current.get(fid)) for fid in ids)
                if now_ is not None
            }
        report.facts_rewritten = len(facts)
        report.relationships_rewritten = sum(1 for i in edges if i not in dropped)
        report.relationships_dropped = len(dropped)
        mutations: list[Mutation] = list(entity_puts)
        mutations += [Put(f, "fact_entities_remapped") for f in facts.values()]
        mutations += [Put(e, "relationship_remapped") for i, e in edges.items() if i not in dropped]
        for rid, kept in dropped.items():
            if self.delete_mode == "hard":
                mutations.append(Delete("relationship", rid, "relationship_dropped"))
            else:
                original = originals[rid]
                mutations.append(
                    Put(
                        original.model_copy(update={"invalidated_by": str(kept.id)}),
                        "relationship_dropped",
                    )
                )
        mutations += losers_out
        return EntityResolutionPlan(mutations, report)

    async def _forward_pointers(
        self, remap: dict[uuid.UUID, uuid.UUID], now: datetime
    ) -> list[Mutation]:
        """Hard mode: entities whose ``superseded_by`` names a loser forward to its canonical.

        The loser is deleted, so an earlier merge's pointer to it would dangle.
        """
        out: list[Mutation] = []
        async for page in scan(self.store, "entities", self.batch_size, include_invalidated=True):
            for entity in page:
                target = entity.superseded_by
                if target is not None and target in remap and entity.id not in remap:
                    out.append(
                        Put(
                            entity.model_copy(
                                update={"superseded_by": remap[target], "updated_at": now}
                            ),
                            "entity_forwarded",
                        )
                    )
        return out

    async def _duplicate_groups(self) -> list[list[uuid.UUID]]:
        """Ids of live entities grouped by identity key, oldest first; groups of 2+ only."""
        groups: dict[tuple[str, str], list[uuid.UUID]] = {}
        async for page in scan(self.store, "entities", self.batch_size):
            for entity in page:
                key = (normalize_entity_name(entity.name), entity.entity_type)
                groups.setdefault(key, []).append(entity.id)
        return [ids for ids in groups.values() if len(ids) > 1]

    def _merge(
        self, group: Sequence[uuid.UUID], records: dict[uuid.UUID, Entity], now: datetime
    ) -> tuple[Entity | None, list[Mutation]]:
        """The updated canonical (None when unchanged) and the losers' mutations."""
        canonical = records[group[0]]
        losers = [records[i] for i in group[1:] if i in records]
        attributes: dict[str, Any] = {}
        for loser in reversed(losers):  # older losers win over newer ones
            attributes.update(loser.attributes)
        attributes.update(canonical.attributes)
        update: dict[str, Any] = {}
        if attributes != canonical.attributes:
            update["attributes"] = attributes
        if canonical.embedding is None:
            donor = next((x for x in losers if x.embedding is not None), None)
            if donor is not None:
                update["embedding"] = list(donor.embedding or [])
        merged = None
        if update:
            update["updated_at"] = now
            merged = canonical.model_copy(update=update)
        out: list[Mutation] = []
        for loser in losers:
            if self.delete_mode == "hard":
                out.append(Delete("entity", loser.id, "entity_absorbed"))
            else:
                out.append(
                    Put(
                        loser.model_copy(
                            update={
                                "invalidated_at": now,
                                "superseded_by": canonical.id,
                                "updated_at": now,
                            }
                        ),
                        "entity_absorbed",
                    )
                )
        return merged, out

    def _remap_edges(
        self,
        loaded: list[Relationship],
        remap: dict[uuid.UUID, uuid.UUID],
        edges: dict[uuid.UUID, Relationship],
        dropped: dict[uuid.UUID, Relationship],
        originals: dict[uuid.UUID, Relationship],
    ) -> None:
        """Remap endpoints; drop live self-loops and live duplicates (state kept across chunks).

        ``edges`` holds the new state of every remapped edge, ``dropped`` maps a dropped
        edge id to the edge it yields to (itself-ish for a self-loop: a stand-in whose id is
        the canonical entity), ``originals`` the stored state of changed edges.
        """
        current: list[tuple[Relationship, bool]] = []  # (state, changed)
        for rel in loaded:
            if rel.id in dropped:
                continue
            state = edges.get(rel.id)
            if state is None:
                source = remap.get(rel.source_id, rel.source_id)
                target = remap.get(rel.target_id, rel.target_id)
                if source == rel.source_id and target == rel.target_id:
                    current.append((rel, False))
                    continue
                originals[rel.id] = rel
                state = rel.model_copy(update={"source_id": source, "target_id": target})
                if source == target:
                    if rel.invalidated_by is None or self.delete_mode == "hard":
                        # The stand-in's id (the canonical entity) becomes invalidated_by.
                        dropped[rel.id] = rel.model_copy(update={"id": source})
                    continue
                edges[rel.id] = state
            current.append((state, True))
        best: dict[_EdgeKey, list[Relationship]] = {}
        ranked = sorted(
            (c for c in current if c[0].invalidated_by is None),
            key=lambda c: (c[1], c[0].valid_from, str(c[0].id)),
        )
        for state, changed in ranked:
            key = (state.source_id, state.target_id, state.relation_type)
            kept = best.setdefault(key, [])
            # A duplicate is an edge of the same key whose validity window overlaps a kept
            # one: "worked at X in 2024" and "works at X since 2025" are two periods.
            same = next((k for k in kept if windows_overlap(k, state)), None)
            if same is None:
                kept.append(state)
            elif changed:
                dropped[state.id] = same

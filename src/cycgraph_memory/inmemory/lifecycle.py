"""In-memory side of the lifecycle operations (purge), kept out of ``store.py``.

The store's ``purge_candidates`` / ``apply_purge`` delegate here. Candidates are found
through the store's inverted lookups where it has them; provenance criteria scan (the
in-memory backend is meant for small tenants).
"""

from __future__ import annotations

import uuid
from array import array
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from cycgraph_memory.errors import InvalidInputError
from cycgraph_memory.inmemory._common import check_dimension, copy_record
from cycgraph_memory.lifecycle.models import PurgeCandidates, PurgePlan, PurgeSelector
from cycgraph_memory.records import QUARANTINE_TAG

if TYPE_CHECKING:
    from cycgraph_memory.inmemory.store import InMemoryMemoryStore

__all__ = ["apply_purge", "purge_candidates", "recompute_theme_centroids", "write_embeddings"]


def purge_candidates(store: InMemoryMemoryStore, sel: PurgeSelector) -> PurgeCandidates:
    """Every record the selector might touch (copies)."""
    s = store
    entity_ids = {
        e.id
        for e in s._entities.values()
        if e.id in set(sel.entity_ids) or sel.matches_provenance(e)
    }
    # A stale id (a duplicate entity resolution merged away: soft-deleted, with
    # ``superseded_by``) names the entity it was merged into, as in retrieval.
    frontier = set(entity_ids) & set(sel.entity_ids)
    while frontier:
        frontier = {
            e.superseded_by
            for e in (s._entities[i] for i in frontier)
            if e.invalidated_at is not None and e.superseded_by in s._entities
            and e.superseded_by not in entity_ids
        }
        entity_ids |= frontier
    # The duplicates entity resolution merged into one (soft-deleted, ``superseded_by`` it,
    # through chains of merges) are the same subject: ``plan_purge`` erases them with it.
    frontier = set(entity_ids)
    while frontier:
        frontier = {
            e.id
            for e in s._entities.values()
            if e.invalidated_at is not None and e.superseded_by in frontier
            and e.id not in entity_ids
        }
        entity_ids |= frontier
    wanted_messages = set(sel.message_ids)
    episode_ids: set[uuid.UUID] = set()
    for mid in wanted_messages:
        episode_ids.update(h for h in s._message_homes.get(mid, ()) if h in s._episodes)
    episode_ids.update(e.id for e in s._episodes.values() if sel.matches_provenance(e))
    message_ids = set(wanted_messages)
    for eid in episode_ids:
        message_ids.update(m.id for m in s._episodes[eid].messages)
    fact_ids = {
        f.id
        for f in s._facts.values()
        if sel.matches_provenance(f)
        or not entity_ids.isdisjoint(f.entity_ids)
        or not message_ids.isdisjoint(f.source_message_ids)
        or not episode_ids.isdisjoint(f.source_episode_ids)
    }
    themes = [
        t
        for t in s._themes.values()
        if sel.matches_provenance(t) or not fact_ids.isdisjoint(t.fact_ids)
    ]
    for t in themes:
        fact_ids.update(i for i in t.fact_ids if i in s._facts)
    episode_ids.update(
        e.id for e in s._episodes.values() if not fact_ids.isdisjoint(e.fact_ids)
    )
    message_keys = {str(m) for m in message_ids}
    relationships = [
        r
        for r in s._relationships.values()
        if r.source_id in entity_ids or r.target_id in entity_ids or sel.matches_provenance(r)
        or str(r.attributes.get("message_id")) in message_keys
    ]
    # Soft-deleted in favour of a candidate (a merge keeper, a conflict winner): their
    # ``invalidated_by`` must not keep an erased id.
    edge_keys = {str(r.id) for r in relationships}
    listed = {r.id for r in relationships}
    relationships += [
        r for r in s._relationships.values()
        if r.id not in listed and r.invalidated_by is not None and r.invalidated_by in edge_keys
    ]
    fact_keys = {str(i) for i in fact_ids}
    fact_ids.update(
        f.id for f in s._facts.values()
        if f.invalidated_by is not None and f.invalidated_by in fact_keys
    )
    return PurgeCandidates(
        entities=[copy_record(s._entities[i]) for i in sorted(entity_ids)],
        relationships=[copy_record(r) for r in relationships],
        episodes=[copy_record(s._episodes[i]) for i in sorted(episode_ids)],
        facts=[copy_record(s._facts[i]) for i in sorted(fact_ids)],
        themes=[copy_record(t) for t in themes],
        superseding=[
            copy_record(e)
            for e in s._entities.values()
            if e.superseded_by is not None and e.superseded_by in entity_ids
        ],
        writer_keys={k: list(v) for k, v in s._idempotency.items() if not fact_ids.isdisjoint(v)},
        message_vectors={m for m in message_ids if m in s._message_vectors},
        setting_keys=sorted(s._settings) if sel.tenant else [],
    )


async def apply_purge(store: InMemoryMemoryStore, plan: PurgePlan) -> None:
    """Apply a purge plan (the caller holds the store's unit of work)."""
    s = store
    for rid in plan.delete_relationship_ids:
        await s.delete_relationship(rid)
    for eid in plan.delete_entity_ids:
        await s.delete_entity(eid)
    for fid in plan.delete_fact_ids:
        await s.delete_fact(fid)
    for tid in plan.delete_theme_ids:
        await s.delete_theme(tid)
    for epid in plan.delete_episode_ids:
        await s.delete_episode(epid)
    # Surviving episodes keep their messages' vectors (put_episodes stores them again).
    episodes = []
    keep = {m.id for ep in plan.put_episodes for m in ep.messages}
    stored = await s.get_messages(keep) if keep else {}
    for ep in plan.put_episodes:
        episodes.append(
            ep.model_copy(update={"messages": [stored.get(m.id, m) for m in ep.messages]})
        )
    # In place, key by key: the store's dicts must stay journaled (see _journal).
    for mid in plan.delete_message_ids:
        s._message_vectors.pop(mid, None)
        s._message_homes.pop(mid, None)
    if episodes:
        await s.put_episodes(episodes)
    if plan.put_facts:
        await s.put_facts(plan.put_facts)
    if plan.put_themes:
        await s.put_themes(plan.put_themes)
    if plan.put_entities:
        await s.put_entities(plan.put_entities)
    if plan.put_relationships:
        await s.put_relationships(plan.put_relationships)
    if plan.delete_writer_keys:
        for key in plan.delete_writer_keys:
            s._idempotency.pop(key, None)
    if plan.delete_setting_keys:
        for name in plan.delete_setting_keys:
            s._settings.pop(name, None)


def write_embeddings(
    store: InMemoryMemoryStore, kind: str, vectors: Mapping[uuid.UUID, list[float]]
) -> int:
    """Replace the vectors of ``kind`` records (only the vector changes); missing ids skip."""
    s = store
    for v in vectors.values():
        check_dimension(s._expected_dimensions, len(v), f"{kind} embedding")
    packed = _packed(vectors)
    if kind == "message":
        updated = {k: v for k, v in packed.items() if k in s._message_homes}
        s._message_vectors.update(updated)  # in place: stays journaled
        return len(updated)
    tables: dict[str, dict[uuid.UUID, Any]] = {
        "entity": s._entities, "episode": s._episodes, "fact": s._facts, "theme": s._themes,
    }
    if kind not in tables:
        raise InvalidInputError(f"unknown record kind {kind!r}")
    table = tables[kind]
    n = 0
    for rid in vectors:
        old = table.get(rid)
        if old is None:
            continue
        # Replace, never mutate: the undo journal keeps the old record.
        new = copy_record(old)
        new.__dict__["embedding"] = packed[rid]
        table[rid] = new
        if kind == "fact":
            s._lookups.put_fact(old, new)
        n += 1
    return n


def _packed(vectors: Mapping[uuid.UUID, list[float]]) -> dict[uuid.UUID, array[float]]:
    """The vectors checked in one numpy pass (finite) and packed as ``array("d")``."""
    out: dict[uuid.UUID, array[float]] = {}
    if not vectors:
        return out
    try:
        m = np.asarray(list(vectors.values()), dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise InvalidInputError("embeddings must be sequences of numbers of one width") from exc
    if m.ndim != 2 or not np.isfinite(m).all():
        raise InvalidInputError("embeddings must be finite numbers")
    for rid, row in zip(vectors, m, strict=True):
        packed: array[float] = array("d")
        packed.frombytes(row.tobytes())
        out[rid] = packed
    return out


def recompute_theme_centroids(store: InMemoryMemoryStore) -> int:
    """Set every theme's vector to the unit mean of its servable member facts' unit vectors.

    Servable members only (``invalidated_by`` unset, not tagged ``quarantined``), as every
    theme writer computes centroids; ``None`` when no such member has a vector.
    """
    s = store
    n = 0
    for tid, theme in list(s._themes.items()):
        vectors = [
            np.asarray(fact.embedding, dtype=np.float64)
            for f in theme.fact_ids
            if (fact := s._facts.get(f)) is not None
            and fact.invalidated_by is None
            and QUARANTINE_TAG not in fact.tags
            and fact.embedding is not None
        ]
        centre: list[float] | None = None
        if vectors:
            m = np.stack(vectors)
            norms = np.linalg.norm(m, axis=1, keepdims=True)
            total = (m / np.where(norms == 0.0, 1.0, norms)).sum(axis=0)
            length = float(np.linalg.norm(total))
            if length > 0.0:
                centre = [float(x) for x in total / length]
        new = copy_record(theme)
        new.__dict__["embedding"] = None if centre is None else array("d", centre)
        s._themes[tid] = new
        n += 1
    return n

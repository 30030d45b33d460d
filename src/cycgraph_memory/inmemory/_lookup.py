"""Private inverted indexes of the in-memory store: adjacency, fact tags, fact entities.

They turn ``get_relationships_for_entity``, ``find_facts(tags=..., entity_id=...)`` and the
batched retrieval methods into lookups instead of full scans. The store calls
:meth:`StoreLookups.put_relationship` / :meth:`StoreLookups.put_fact` (and the ``drop_``
twins) on every write, and :meth:`StoreLookups.rebuild` when its dicts are swapped
wholesale (``clear``, a transaction rollback).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping

from cycgraph_memory.normalize import normalize_entity_name
from cycgraph_memory.records import Entity, Relationship, SemanticFact

__all__ = ["StoreLookups"]


def _add(index: dict[object, set[uuid.UUID]], key: object, value: uuid.UUID) -> None:
    bucket = index.get(key)
    if bucket is None:
        index[key] = {value}
    else:
        bucket.add(value)


def _discard(index: dict[object, set[uuid.UUID]], key: object, value: uuid.UUID) -> None:
    bucket = index.get(key)
    if bucket is not None:
        bucket.discard(value)
        if not bucket:
            del index[key]


class StoreLookups:
    """Inverted indexes kept in step with the store's relationship and fact dicts."""

    def __init__(self) -> None:
        self.rels_by_entity: dict[object, set[uuid.UUID]] = {}
        self.facts_by_entity: dict[object, set[uuid.UUID]] = {}
        self.facts_by_tag: dict[object, set[uuid.UUID]] = {}
        self.facts_by_theme: dict[object, set[uuid.UUID]] = {}
        self.facts_by_episode: dict[object, set[uuid.UUID]] = {}
        # (normalize_entity_name(name), entity_type) -> entity ids (ingest-time resolution)
        self.entities_by_key: dict[object, set[uuid.UUID]] = {}
        self.entity_key: dict[uuid.UUID, tuple[str, str]] = {}
        # Fact writes bump the version; a tag set's ids sorted by (valid_from, id) are
        # cached until then (touches do not change the order, so they keep the cache).
        self.fact_version = 0
        self._tag_order: dict[frozenset[str], tuple[int, list[uuid.UUID]]] = {}

    # entities -------------------------------------------------------------------

    def put_entity(self, new: Entity) -> None:
        """Re-index one entity under its normalised name key."""
        key = (normalize_entity_name(new.name), new.entity_type)
        old = self.entity_key.get(new.id)
        if old == key:
            return
        if old is not None:
            _discard(self.entities_by_key, old, new.id)
        self.entity_key[new.id] = key
        _add(self.entities_by_key, key, new.id)

    def drop_entity(self, entity_id: uuid.UUID) -> None:
        """Forget one entity."""
        old = self.entity_key.pop(entity_id, None)
        if old is not None:
            _discard(self.entities_by_key, old, entity_id)

    def entities_with_keys(self, keys: Iterable[tuple[str, str]]) -> set[uuid.UUID]:
        """Ids of entities whose ``(normalised name, type)`` is one of ``keys``."""
        out: set[uuid.UUID] = set()
        for key in keys:
            out |= self.entities_by_key.get(key, set())
        return out

    # relationships ------------------------------------------------------------

    def put_relationship(self, old: Relationship | None, new: Relationship) -> None:
        """Re-index one relationship (``old`` is the record it replaces, if any)."""
        if old is not None:
            self.drop_relationship(old)
        _add(self.rels_by_entity, new.source_id, new.id)
        _add(self.rels_by_entity, new.target_id, new.id)

    def drop_relationship(self, old: Relationship) -> None:
        """Forget one relationship."""
        _discard(self.rels_by_entity, old.source_id, old.id)
        _discard(self.rels_by_entity, old.target_id, old.id)

    # facts ----------------------------------------------------------------------

    def put_fact(self, old: SemanticFact | None, new: SemanticFact) -> None:
        """Re-index one fact (``old`` is the record it replaces, if any)."""
        self.fact_version += 1
        if old is not None:
            if (
                old.entity_ids == new.entity_ids
                and old.tags == new.tags
                and old.theme_id == new.theme_id
                and old.source_episode_ids == new.source_episode_ids
            ):
                return
            self.drop_fact(old)
        for eid in new.entity_ids:
            _add(self.facts_by_entity, eid, new.id)
        for tag in new.tags:
            _add(self.facts_by_tag, tag, new.id)
        if new.theme_id is not None:
            _add(self.facts_by_theme, new.theme_id, new.id)
        for pid in new.source_episode_ids:
            _add(self.facts_by_episode, pid, new.id)

    def drop_fact(self, old: SemanticFact) -> None:
        """Forget one fact."""
        self.fact_version += 1
        for eid in old.entity_ids:
            _discard(self.facts_by_entity, eid, old.id)
        for tag in old.tags:
            _discard(self.facts_by_tag, tag, old.id)
        if old.theme_id is not None:
            _discard(self.facts_by_theme, old.theme_id, old.id)
        for pid in old.source_episode_ids:
            _discard(self.facts_by_episode, pid, old.id)

    # queries --------------------------------------------------------------------

    def relationships_of(self, entity_ids: Iterable[uuid.UUID]) -> set[uuid.UUID]:
        """Ids of relationships touching any of the entities."""
        out: set[uuid.UUID] = set()
        for eid in entity_ids:
            out |= self.rels_by_entity.get(eid, set())
        return out

    def facts_with_tags(self, tags: Iterable[str]) -> set[uuid.UUID]:
        """Ids of facts carrying any of the tags."""
        out: set[uuid.UUID] = set()
        for tag in tags:
            out |= self.facts_by_tag.get(tag, set())
        return out

    def tag_order(
        self, tags: frozenset[str], facts: Mapping[uuid.UUID, SemanticFact]
    ) -> list[uuid.UUID]:
        """Ids of facts carrying any of ``tags``, sorted by ``(valid_from, id)`` (cached)."""
        held = self._tag_order.get(tags)
        if held is not None and held[0] == self.fact_version:
            return held[1]
        ids = sorted(
            self.facts_with_tags(tags), key=lambda i: (facts[i].valid_from, i)
        )
        if len(self._tag_order) > 64:
            self._tag_order.clear()
        self._tag_order[tags] = (self.fact_version, ids)
        return ids

    def facts_of_entity(self, entity_id: uuid.UUID) -> set[uuid.UUID]:
        """Ids of facts whose ``entity_ids`` contain the entity."""
        return self.facts_by_entity.get(entity_id, set())

    def facts_of_episode(self, episode_id: uuid.UUID) -> set[uuid.UUID]:
        """Ids of facts whose ``source_episode_ids`` contain the episode."""
        return self.facts_by_episode.get(episode_id, set())

    def facts_of_theme(self, theme_id: uuid.UUID) -> set[uuid.UUID]:
        """Ids of facts assigned to the theme."""
        return self.facts_by_theme.get(theme_id, set())

    # bulk -----------------------------------------------------------------------

    def rebuild(
        self,
        relationships: Mapping[uuid.UUID, Relationship],
        facts: Mapping[uuid.UUID, SemanticFact],
        entities: Mapping[uuid.UUID, Entity] | None = None,
    ) -> None:
        """Recompute every index from the store's dicts."""
        self.__init__()  # type: ignore[misc]
        for entity in (entities or {}).values():
            self.put_entity(entity)
        for rel in relationships.values():
            self.put_relationship(None, rel)
        for fact in facts.values():
            self.put_fact(None, fact)

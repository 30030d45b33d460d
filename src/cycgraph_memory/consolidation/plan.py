"""Plans as data: the typed mutations a maintenance pass computes before writing anything.

Entity resolution, consolidation and conflict resolution first collect a
:class:`MutationPlan` (a list of :class:`Put` / :class:`Delete` mutations plus the report the
pass will return), then apply it with :func:`apply_mutations` inside one unit of work. A
plan collected again after it was applied is empty.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypeVar

from cycgraph_memory.contracts import MemoryIndex, MemoryStore
from cycgraph_memory.records import Entity, Episode, Relationship, SemanticFact, Theme

__all__ = [
    "Delete",
    "Mutation",
    "MutationPlan",
    "Put",
    "RecordKind",
    "apply_mutations",
    "sync_index",
]

RecordKind = Literal["entity", "relationship", "episode", "fact", "theme"]
"""The record types a mutation can touch."""

Record = Entity | Relationship | Episode | SemanticFact | Theme

_KIND_OF: dict[type, RecordKind] = {
    Entity: "entity",
    Relationship: "relationship",
    Episode: "episode",
    SemanticFact: "fact",
    Theme: "theme",
}

ReportT = TypeVar("ReportT")


@dataclass(frozen=True)
class Put:
    """Insert or replace one record (an update, a soft delete, a remap).

    Attributes:
        record: The full new state of the record.
        reason: Why the pass writes it (``"fact_merged"``, ``"entity_absorbed"``, ...).
    """

    record: Record
    reason: str = ""

    @property
    def kind(self) -> RecordKind:
        """The record type."""
        return _KIND_OF[type(self.record)]

    @property
    def id(self) -> uuid.UUID:
        """The record id."""
        return self.record.id


@dataclass(frozen=True)
class Delete:
    """Hard-delete one record.

    Attributes:
        kind: The record type.
        id: The record id.
        reason: Why the pass deletes it.
    """

    kind: RecordKind
    id: uuid.UUID
    reason: str = ""


Mutation = Put | Delete
"""One planned write."""


@dataclass
class MutationPlan(Generic[ReportT]):
    """The mutations of one pass, in apply order, and the report it will return.

    Attributes:
        mutations: Writes in the order they are applied.
        report: What the pass reports once the mutations are applied.
    """

    mutations: list[Mutation] = field(default_factory=list)
    report: ReportT | None = None

    def __len__(self) -> int:
        return len(self.mutations)

    def __bool__(self) -> bool:
        return bool(self.mutations)

    @property
    def empty(self) -> bool:
        """True when applying the plan would change nothing."""
        return not self.mutations


def _putter(store: MemoryStore, kind: RecordKind) -> Callable[[list[Any]], Any]:
    table: dict[RecordKind, Callable[[list[Any]], Any]] = {
        "entity": store.put_entities,
        "relationship": store.put_relationships,
        "episode": store.put_episodes,
        "fact": store.put_facts,
        "theme": store.put_themes,
    }
    return table[kind]


def _deleter(store: MemoryStore, kind: RecordKind) -> Callable[[uuid.UUID], Any]:
    table: dict[RecordKind, Callable[[uuid.UUID], Any]] = {
        "entity": store.delete_entity,
        "relationship": store.delete_relationship,
        "episode": store.delete_episode,
        "fact": store.delete_fact,
        "theme": store.delete_theme,
    }
    return table[kind]


async def apply_mutations(store: MemoryStore, mutations: Sequence[Mutation]) -> None:
    """Write ``mutations`` in order; consecutive puts of one record type go in one call.

    Call it inside a unit of work (``store.transaction()`` / ``exclusive_pass``): this
    function does not open one, so a failure midway is undone by the caller's block.
    """
    i = 0
    n = len(mutations)
    while i < n:
        m = mutations[i]
        if isinstance(m, Put):
            kind = m.kind
            j = i
            batch: list[Any] = []
            while j < n:
                nxt = mutations[j]
                if not isinstance(nxt, Put) or nxt.kind != kind:
                    break
                batch.append(nxt.record)
                j += 1
            await _putter(store, kind)(batch)
            i = j
        else:
            await _deleter(store, m.kind)(m.id)
            i += 1


def sync_index(index: MemoryIndex | None, mutations: Sequence[Mutation]) -> None:
    """Mirror applied mutations into an index that keeps its own copies.

    Indexes offering ``upsert_many`` / ``remove`` (the in-memory index) get the new
    records and lose the deleted ones; indexes that read the store's tables (pgvector)
    need nothing and are left alone.
    """
    if index is None:
        return
    upsert_many = getattr(index, "upsert_many", None)
    remove = getattr(index, "remove", None)
    if upsert_many is None:
        return
    records = [
        m.record for m in mutations if isinstance(m, Put) and not isinstance(m.record, Relationship)
    ]
    if records:
        upsert_many(records)
    if remove is not None:
        for m in mutations:
            if isinstance(m, Delete) and m.kind != "relationship":
                remove(m.id)

"""Undo log of the in-memory store's units of work (a rollback costs what the block wrote).

:meth:`~cycgraph_memory.inmemory.InMemoryMemoryStore.transaction` used to copy every record
dict of the store on entry, so each unit of work (every ``MemoryPipeline.ingest``) cost
time in proportion to the whole tenant. The store's dicts are now :class:`JournaledDict`:
while a unit of work is open, each change records the key's previous value in the store's
:class:`Journal`; a rollback replays the entries written since the block began in reverse.
Entering and leaving a block costs nothing whatever the store holds.

A unit of work belongs to the task (the context) that opened it, like a Postgres
transaction belongs to its connection: only the changes made from that context are
journaled under it, and a rollback puts back only those, and only where the value is
still the one the unit wrote. A write another task made meanwhile (outside the unit, or
in a unit of its own) survives the rollback, as it would on Postgres.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from contextvars import ContextVar, Token
from types import MappingProxyType
from typing import Any, TypeVar

__all__ = ["Journal", "JournaledDict", "Unit"]

K = TypeVar("K")
V = TypeVar("V")

_MISSING: Any = object()

_NO_UNITS: Mapping[Journal, object] = MappingProxyType({})
_OPEN_UNITS: ContextVar[Mapping[Journal, object]] = ContextVar(
    "cycgraph_inmemory_units_of_work", default=_NO_UNITS
)
"""The open unit of work (its owner token) of each journal, in the current context."""

Unit = tuple[int, object, "Token[Mapping[Journal, object]] | None"]
"""What :meth:`Journal.begin` returns: ``(mark, owner, token)``."""

_Entry = tuple[object, dict[Any, Any], Any, Any, Any]
"""``(owner, dict, key, previous value or missing, written value or missing)``."""


class Journal:
    """Entries of the open units of work, each tagged with the unit that wrote it."""

    __slots__ = ("depth", "entries")

    def __init__(self) -> None:
        self.depth = 0
        self.entries: list[_Entry] = []

    def begin(self) -> Unit:
        """Open a unit of work in the current context; returns ``(mark, owner, token)``.

        A block nested in an open one of the same context joins its owner (a savepoint:
        its mark is where its own entries start).
        """
        self.depth += 1
        units = _OPEN_UNITS.get()
        owner = units.get(self)
        token = None
        if owner is None:
            owner = object()
            token = _OPEN_UNITS.set(MappingProxyType({**units, self: owner}))
        return len(self.entries), owner, token

    def end(self, unit: Unit) -> None:
        """Close a unit of work; once none is open (in any task) the entries are forgotten."""
        token = unit[2]
        if token is not None:
            _OPEN_UNITS.reset(token)
        self.depth -= 1
        if self.depth == 0:
            self.entries.clear()

    def owner(self) -> object | None:
        """The unit of work open in the current context, if any (its writes are journaled)."""
        return _OPEN_UNITS.get().get(self)

    def undo(self, unit: Unit) -> None:
        """Put back what ``unit`` changed since its mark, newest first.

        Entries of other units are kept. A key whose value is no longer the one this unit
        wrote was written again by another task since: that write stays.
        """
        mark, owner, _ = unit
        entries = self.entries
        others: list[_Entry] = []
        for entry in reversed(entries[mark:]):
            who, target, key, old, new = entry
            if who is not owner:
                others.append(entry)
                continue
            if dict.get(target, key, _MISSING) is not new:
                continue
            if old is _MISSING:
                dict.pop(target, key, None)
            else:
                dict.__setitem__(target, key, old)
        del entries[mark:]
        entries.extend(reversed(others))


class JournaledDict(dict[K, V]):
    """A ``dict`` that records each change in a :class:`Journal` while one is open."""

    __slots__ = ("_journal",)

    def __init__(self, journal: Journal, items: Mapping[K, V] | None = None) -> None:
        super().__init__(items or {})
        self._journal = journal

    def _log(self, key: Any, new: Any) -> None:
        owner = self._journal.owner()
        if owner is not None:  # a write outside any unit of work is not undone by one
            self._journal.entries.append((owner, self, key, dict.get(self, key, _MISSING), new))

    def __setitem__(self, key: K, value: V) -> None:
        if self._journal.depth:
            self._log(key, value)
        dict.__setitem__(self, key, value)

    def __delitem__(self, key: K) -> None:
        if self._journal.depth and key in self:
            self._log(key, _MISSING)
        dict.__delitem__(self, key)

    def pop(self, key: K, *default: Any) -> Any:
        """Like ``dict.pop`` (journaled)."""
        if self._journal.depth and key in self:
            self._log(key, _MISSING)
        return dict.pop(self, key, *default)

    def popitem(self) -> tuple[K, V]:
        """Like ``dict.popitem`` (journaled)."""
        key, value = dict.popitem(self)
        if self._journal.depth:
            owner = self._journal.owner()
            if owner is not None:
                self._journal.entries.append((owner, self, key, value, _MISSING))
        return key, value

    def setdefault(self, key: K, default: Any = None) -> V:
        """Like ``dict.setdefault`` (journaled)."""
        if key not in self:
            self[key] = default
        return dict.__getitem__(self, key)

    def update(self, *args: Any, **kwargs: Any) -> None:
        """Like ``dict.update`` (journaled)."""
        items: Iterable[tuple[Any, Any]] = dict(*args, **kwargs).items()
        for key, value in items:
            self[key] = value

    def __ior__(self, other: Any) -> JournaledDict[K, V]:  # type: ignore[override,misc]
        self.update(other)
        return self

    def clear(self) -> None:
        """Like ``dict.clear`` (journaled)."""
        if self._journal.depth:
            for key in list(self):
                self._log(key, _MISSING)
        dict.clear(self)

"""Undo log of the in-memory store's units of work (a rollback costs what the block wrote).

:meth:`~cycgraph_memory.inmemory.InMemoryMemoryStore.transaction` used to copy every record
dict of the store on entry, so each unit of work (every ``MemoryPipeline.ingest``) cost
time in proportion to the whole tenant. The store's dicts are now :class:`JournaledDict`:
while a unit of work is open, each change records the key's previous value in the store's
:class:`Journal`; a rollback replays the entries written since the block began in reverse.
Entering and leaving a block costs nothing whatever the store holds.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, TypeVar

__all__ = ["Journal", "JournaledDict"]

K = TypeVar("K")
V = TypeVar("V")

_MISSING: Any = object()


class Journal:
    """Entries ``(dict, key, previous value or missing)`` of the open units of work."""

    __slots__ = ("depth", "entries")

    def __init__(self) -> None:
        self.depth = 0
        self.entries: list[tuple[dict[Any, Any], Any, Any]] = []

    def begin(self) -> int:
        """Open a unit of work; returns its mark (where its entries start)."""
        self.depth += 1
        return len(self.entries)

    def end(self) -> None:
        """Close a unit of work; the outermost one forgets the entries."""
        self.depth -= 1
        if self.depth == 0:
            self.entries.clear()

    def undo(self, mark: int) -> None:
        """Put back every value changed since ``mark``, newest first."""
        entries = self.entries
        for target, key, old in reversed(entries[mark:]):
            if old is _MISSING:
                dict.pop(target, key, None)
            else:
                dict.__setitem__(target, key, old)
        del entries[mark:]


class JournaledDict(dict[K, V]):
    """A ``dict`` that records each change in a :class:`Journal` while one is open."""

    __slots__ = ("_journal",)

    def __init__(self, journal: Journal, items: Mapping[K, V] | None = None) -> None:
        super().__init__(items or {})
        self._journal = journal

    def _log(self, key: Any) -> None:
        self._journal.entries.append((self, key, dict.get(self, key, _MISSING)))

    def __setitem__(self, key: K, value: V) -> None:
        if self._journal.depth:
            self._log(key)
        dict.__setitem__(self, key, value)

    def __delitem__(self, key: K) -> None:
        if self._journal.depth and key in self:
            self._log(key)
        dict.__delitem__(self, key)

    def pop(self, key: K, *default: Any) -> Any:
        """Like ``dict.pop`` (journaled)."""
        if self._journal.depth and key in self:
            self._log(key)
        return dict.pop(self, key, *default)

    def popitem(self) -> tuple[K, V]:
        """Like ``dict.popitem`` (journaled)."""
        key, value = dict.popitem(self)
        if self._journal.depth:
            self._journal.entries.append((self, key, value))
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
                self._log(key)
        dict.clear(self)

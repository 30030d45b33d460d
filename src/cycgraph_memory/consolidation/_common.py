"""Small helpers shared by the consolidation passes (option checks, capability lookup)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any, Literal

from cycgraph_memory._validate import check_method, check_text
from cycgraph_memory.errors import InvalidInputError, InvalidTypeError
from cycgraph_memory.records import MAX_TAG_LENGTH, QUARANTINE_TAG

__all__ = [
    "check_batch_size",
    "check_delete_mode",
    "check_index",
    "check_lifecycle_tag",
    "check_store",
    "check_unit_interval",
    "facts_reader_for_update",
    "require",
    "scan",
]

_STORE_METHODS = ("find_facts", "get_facts", "put_facts")


def check_store(store: Any) -> Any:
    """``store`` when it has the ``MemoryStore`` methods every pass calls.

    Checked when a pass is built: an object that is no store would otherwise fail later,
    mid-pass, with a bare ``AttributeError``.

    Raises:
        InvalidTypeError: ``store`` lacks a callable ``find_facts``, ``get_facts`` or
            ``put_facts``.
    """
    for method in _STORE_METHODS:
        check_method(store, method, "store", "MemoryStore")
    return store


def check_index(index: Any) -> Any:
    """``index`` when it is ``None`` or has ``MemoryIndex.search_facts``.

    A pass keeps an index it is given in sync after its commit only when the index offers
    ``upsert_many`` / ``remove`` (the in-memory one); anything else is skipped, so an object
    that is no index at all must be refused up front rather than silently never synced.

    Raises:
        InvalidTypeError: ``index`` is neither ``None`` nor an object with a callable
            ``search_facts``.
    """
    if index is not None:
        check_method(index, "search_facts", "index", "MemoryIndex")
    return index


def check_lifecycle_tag(name: str, tag: object) -> str:
    """``tag`` when a fact could carry it and it is not the quarantine tag.

    The same rule as ``RetentionPolicy``'s ``candidate_tag`` / ``verified_tag``: a tag no
    fact can carry would never match, and ``quarantined`` facts are outside consolidation.

    Raises:
        InvalidTypeError: ``tag`` is not a ``str``.
        InvalidInputError: ``tag`` is empty, longer than ``MAX_TAG_LENGTH``, holds a NUL or
            a lone surrogate, or is ``QUARANTINE_TAG``.
    """
    if not isinstance(tag, str):
        raise InvalidTypeError(f"{name} must be a str, got {type(tag).__name__}")
    if not 1 <= len(tag) <= MAX_TAG_LENGTH:
        raise InvalidInputError(f"{name} must be 1-{MAX_TAG_LENGTH} characters, got {len(tag)}")
    if tag == QUARANTINE_TAG:
        raise InvalidInputError(f"{name} cannot be {QUARANTINE_TAG!r}")
    try:
        check_text(tag, name)
    except ValueError as exc:
        raise InvalidInputError(str(exc)) from None
    return tag


def check_delete_mode(value: object) -> Any:
    """Return ``value`` when it is ``"soft"`` or ``"hard"``, else raise InvalidInputError."""
    if value not in ("soft", "hard"):
        raise InvalidInputError(f"delete_mode must be 'soft' or 'hard', got {value!r}")
    return value


def check_batch_size(value: object) -> int:
    """Return ``value`` when it is an int in [1, 100000], else raise InvalidInputError."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 100_000:
        raise InvalidInputError(f"batch_size must be an integer in [1, 100000], got {value!r}")
    return value


def check_unit_interval(name: str, value: object) -> float:
    """Return ``value`` as a float when it is a number in [0, 1], else raise."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
        raise InvalidInputError(f"{name} must be a number in [0, 1], got {value!r}")
    return float(value)


def require(store: object, method: str) -> Callable[..., Any]:
    """The store's optional batched-lookup method ``method``, or a clear error."""
    fn = getattr(store, method, None)
    if fn is None:
        raise InvalidInputError(
            f"{type(store).__name__} has no {method}(); consolidation needs the batched "
            "lookups that InMemoryMemoryStore and PostgresMemoryStore provide"
        )
    return fn  # type: ignore[no-any-return]


def facts_reader_for_update(store: Any) -> Callable[..., Any]:
    """``get_facts`` that locks the rows it reads until the unit of work ends, when it can.

    The optional store capability ``get_facts_for_update`` (Postgres: ``FOR UPDATE``),
    else plain ``get_facts``. A pass re-reads with it the facts it is about to write back
    whole: a writer outside the pass locks (``touch_facts``, the retrieval touch) then
    waits for the pass to commit instead of committing between its read and its write,
    where the write would undo it (a lost access count).

    Postgres locks each call's rows in ascending id order, the touch's order. A pass that
    calls it several times (batches) must ask for its ids in ONE ascending order across
    all the calls (sort them all, then cut the batches), and lock nothing lower later:
    holding a higher id while waiting for a lower one a touch holds deadlocks the two.
    """
    read = getattr(store, "get_facts_for_update", None)
    return read if callable(read) else store.get_facts  # type: ignore[no-any-return]


async def scan(
    store: Any, kind: Literal["facts", "entities"], page_size: int, **filters: Any
) -> AsyncIterator[list[Any]]:
    """Pages of every matching fact / entity, in the listing order.

    Uses the store's optional ``scan_facts`` / ``scan_entities`` capability (one sort in
    memory, keyset pages on Postgres) when present, else ``find_*`` with ``offset`` paging.
    """
    fast = getattr(store, f"scan_{kind}", None)
    if fast is not None:
        async for page in fast(page_size=page_size, **filters):
            yield page
        return
    finder = store.find_facts if kind == "facts" else store.find_entities
    offset = 0
    while True:
        page = await finder(limit=page_size, offset=offset, **filters)
        if page:
            yield page
        if len(page) < page_size:
            return
        offset += page_size

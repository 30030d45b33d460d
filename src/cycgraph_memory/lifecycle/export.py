"""Portable export/import: a versioned JSON Lines format carrying every record type.

Format (version 1), one JSON object per line, UTF-8:

* Line 1, the header: ``{"format":"cycgraph-memory","version":1,"embeddings":true}``.
* Then one line per record, ``{"type":T,"record":R}``, with ``T`` one of ``entity``,
  ``relationship``, ``episode``, ``fact``, ``theme`` and ``R`` the record exactly as its
  pydantic model serialises it (``model_dump_json``: validity windows, provenance, tags,
  soft-delete markers and, when the header says so, embeddings; an episode carries its
  messages, each with its embedding). Records come grouped by type in that order (edges
  after their endpoints) and, within a type, in the store's listing order (edges grouped
  by their source entity, in the entities' order, each group by ``(valid_from, id)``),
  soft-deleted records included; the bytes do not depend on the page size.
* Last line, the footer: ``{"type":"end","counts":{...}}`` (records per type), so a
  truncated file is detected.

``export`` streams page by page; ``import_`` reads line by line and writes in batches
(upserts by id: importing the same file twice stores every record once), so both run in
memory bounded by the page / batch size. Export, import into an empty store and export
again gives the same bytes.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import logging
import os
import secrets
import stat
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from typing import IO, Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError
from pydantic_core import from_json

from cycgraph_memory._exclusive import FACTS_LOCK, THEMES_LOCK, exclusive_passes
from cycgraph_memory._primary import primary_reads
from cycgraph_memory._validate import check_bool
from cycgraph_memory.errors import DanglingReferenceError, InvalidInputError, InvalidTypeError
from cycgraph_memory.observability import traced
from cycgraph_memory.records import (
    Entity,
    EntityFilter,
    Episode,
    FactFilter,
    ListOptions,
    Relationship,
    SemanticFact,
    Theme,
)

__all__ = [
    "DEFER_INDEXES_MIN_RECORDS",
    "EXPORT_FORMAT",
    "EXPORT_VERSION",
    "ExportReport",
    "ImportReport",
    "export",
    "export_lines",
    "import_",
]

_log = logging.getLogger(__name__)

EXPORT_FORMAT = "cycgraph-memory"
"""The ``format`` value of an export header."""

EXPORT_VERSION = 1
"""The export format version this library writes (and the newest it reads)."""

RecordType = Literal["entity", "relationship", "episode", "fact", "theme"]
_MODELS: dict[str, type[BaseModel]] = {
    "entity": Entity,
    "relationship": Relationship,
    "episode": Episode,
    "fact": SemanticFact,
    "theme": Theme,
}
_ORDER = ("entity", "relationship", "episode", "fact", "theme")


class ExportReport(BaseModel):
    """Records written by ``export``, by type (``entity``, ``relationship``, ...)."""

    model_config = ConfigDict(extra="forbid")

    counts: dict[str, int]
    lines: int


class ImportReport(BaseModel):
    """Records read and written by ``import_``, by type."""

    model_config = ConfigDict(extra="forbid")

    counts: dict[str, int]
    version: int


def _dumps(obj: Mapping[str, Any]) -> str:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False, sort_keys=True)


def _line(kind: str, record: BaseModel, embeddings: bool) -> str:
    exclude: Any = None
    if not embeddings:
        exclude = (
            {"embedding": True, "messages": {"__all__": {"embedding"}}}
            if kind == "episode"
            else ({"embedding"} if kind != "relationship" else None)
        )
    return f'{{"type":"{kind}","record":{record.model_dump_json(exclude=exclude)}}}'


async def _pages(
    store: Any, kind: str, page: int
) -> AsyncIterator[list[Any]]:
    """Every ``kind`` record (``entities`` or ``facts``), invalidated ones too, page by page.

    Uses the store's ``scan_<kind>`` when it has one (keyset paging), else ``find_<kind>``
    with offsets.
    """
    scan = getattr(store, f"scan_{kind}", None)
    if scan is not None:
        async for batch in scan(include_invalidated=True, page_size=page):
            yield batch
        return
    find = getattr(store, f"find_{kind}")
    make_filter = EntityFilter if kind == "entities" else FactFilter
    offset = 0
    while True:
        batch = await find(make_filter(include_invalidated=True, limit=page, offset=offset))
        if batch:
            yield batch
        if len(batch) < page:
            return
        offset += len(batch)


async def _prefetched(pages: AsyncIterator[list[Any]]) -> AsyncIterator[list[Any]]:
    """Yield ``pages`` while the next one is fetched (one fetch in flight at a time).

    The caller serialises a page while the database reads and sends the next: on
    Postgres the two run on two cores. The caller must not use the store meanwhile.
    """
    ahead: asyncio.Future[list[Any]] = asyncio.ensure_future(anext(pages))
    try:
        while True:
            try:
                page = await ahead
            except StopAsyncIteration:
                return
            ahead = asyncio.ensure_future(anext(pages))
            yield page
    finally:
        if not ahead.done():
            ahead.cancel()
            with contextlib.suppress(BaseException):
                await ahead


async def _listed(
    fetch: Callable[[ListOptions], Any], page: int
) -> AsyncIterator[list[Any]]:
    offset = 0
    while True:
        batch = await fetch(ListOptions(include_invalidated=True, limit=page, offset=offset))
        if batch:
            yield batch
        if len(batch) < page:
            return
        offset += len(batch)


_MAX_PAGE_SIZE = 100_000  # the stores' listing limit (``ListOptions.limit``)


def _check_page_size(page_size: object) -> None:
    if (
        isinstance(page_size, bool) or not isinstance(page_size, int)
        or not 1 <= page_size <= _MAX_PAGE_SIZE
    ):
        raise InvalidInputError(
            f"page_size must be an int in [1, {_MAX_PAGE_SIZE}], got {page_size!r}"
        )


async def export_lines(
    store: Any, *, embeddings: bool = True, page_size: int = 1000
) -> AsyncIterator[str]:
    """Yield the export of ``store`` line by line (no newline characters), page by page.

    Args:
        store: Any ``MemoryStore`` (stores with ``scan_*`` methods are read by keyset).
        embeddings: Include embeddings (records and messages).
        page_size: Records read per store call (1 to 100,000).

    Raises:
        InvalidInputError: A ``page_size`` out of range (before the first line).
        InvalidTypeError: ``embeddings`` is not a real ``bool`` (before the first line).
    """
    _check_page_size(page_size)
    check_bool(embeddings, "embeddings")
    counts = dict.fromkeys(_ORDER, 0)
    yield _dumps({"format": EXPORT_FORMAT, "version": EXPORT_VERSION, "embeddings": embeddings})
    async for entities in _pages(store, "entities", page_size):
        for e in entities:
            counts["entity"] += 1
            yield _line("entity", e, embeddings)
    # Each edge once, with its source entity: grouped by source in the entities' order,
    # each group in (valid_from, id) order, so the bytes do not depend on the page size.
    async for entities in _pages(store, "entities", page_size):
        edges = await store.get_relationships_for_entities(
            [e.id for e in entities], direction="outgoing", include_invalidated=True
        )
        position = {e.id: i for i, e in enumerate(entities)}
        edges = sorted(edges, key=lambda r: (position[r.source_id], r.valid_from, r.id))
        for r in edges:
            counts["relationship"] += 1
            yield _line("relationship", r, embeddings)
    async for episodes in _listed(store.list_episodes, page_size):
        if embeddings:
            stored = await store.get_messages([m.id for ep in episodes for m in ep.messages])
            episodes = [
                ep.model_copy(
                    update={"messages": [stored.get(m.id, m) for m in ep.messages]}
                )
                for ep in episodes
            ]
        for ep in episodes:
            counts["episode"] += 1
            yield _line("episode", ep, embeddings)
    async for facts in _prefetched(_pages(store, "facts", page_size)):
        for f in facts:
            counts["fact"] += 1
            yield _line("fact", f, embeddings)
    async for themes in _listed(store.list_themes, page_size):
        for t in themes:
            counts["theme"] += 1
            yield _line("theme", t, embeddings)
    yield _dumps({"type": "end", "counts": counts})


def _refuse_binary(handle: object, what: str) -> None:
    """Refuse a binary file object (``open(path, "rb")``, ``gzip.open(path)``, ``BytesIO``).

    The format is text: a binary handle would fail on its first line with a bare
    ``TypeError``. Wrap it (``io.TextIOWrapper(handle, encoding="utf-8")``) or open it in
    text mode.
    """
    if isinstance(handle, io.RawIOBase | io.BufferedIOBase):
        raise InvalidTypeError(
            f"expected a {what} text file, got the binary file {type(handle).__name__}: "
            "open it in text mode ('rt' / 'wt', encoding='utf-8') or wrap it in "
            "io.TextIOWrapper"
        )


def _staging_path(destination: str | os.PathLike[str]) -> tuple[str, str] | None:
    """``(temporary path, final path)`` for a path export, or ``None`` to write in place.

    A new file or an existing regular file (through symlinks) is written beside itself
    under a temporary name and renamed over the destination only when the export is
    complete, so a failed export leaves an existing file as it was. Anything else (a
    character device such as ``/dev/stdout``, a pipe) is written in place.
    """
    final = os.path.realpath(os.fspath(destination))
    try:
        mode = os.stat(final).st_mode
    except FileNotFoundError:
        mode = None
    if mode is not None and not stat.S_ISREG(mode):
        return None
    folder, name = os.path.split(final)
    return os.path.join(folder, f".{name}.{secrets.token_hex(6)}.tmp"), final


def _open_staged(temp: str, final: str) -> IO[str]:
    handle = open(temp, "x", encoding="utf-8", newline="\n")  # noqa: SIM115 (closed by export)
    with contextlib.suppress(OSError):
        # The replaced file's permission bits, not the umask's (a backup kept private stays so).
        os.chmod(temp, stat.S_IMODE(os.stat(final).st_mode))
    return handle


async def _open_write(destination: Any) -> tuple[IO[str], bool, tuple[str, str] | None]:
    """The handle to write, whether export owns it, and ``(temp, final)`` when staged."""
    if isinstance(destination, str | os.PathLike):
        staged = _staging_path(destination)
        if staged is not None:
            handle = await asyncio.to_thread(_open_staged, *staged)
            return handle, True, staged
        handle = await asyncio.to_thread(
            open, destination, "w", encoding="utf-8", newline="\n"
        )
        return handle, True, None
    if hasattr(destination, "write"):
        _refuse_binary(destination, "writable")
        return destination, False, None
    raise InvalidTypeError(
        f"expected a path or a writable text file, got {type(destination).__name__}"
    )


def _finish(handle: IO[str], staged: tuple[str, str] | None, ok: bool) -> None:
    """Close an owned handle; move a staged file into place, or remove it on failure."""
    handle.close()
    if staged is None:
        return
    temp, final = staged
    if ok:
        os.replace(temp, final)
    else:
        with contextlib.suppress(OSError):
            os.unlink(temp)


@traced("cycgraph.export", lambda report: {"rows": sum(report.counts.values())})
async def export(
    store: Any,
    destination: str | os.PathLike[str] | IO[str],
    *,
    embeddings: bool = True,
    page_size: int = 1000,
) -> ExportReport:
    """Write the export of ``store`` to a path or a text file, streaming.

    Args:
        store: Any ``MemoryStore``.
        destination: A path or a writable text file object. A path to a new or a
            regular file is written under a temporary name beside it and renamed over it
            when the export is complete (a failed export leaves an existing file as it
            was); a device or a pipe (``/dev/stdout``) is written in place.
        embeddings: Include embeddings.
        page_size: Records read per store call (bounds memory).

    Returns:
        Records written by type, and the number of lines.

    Raises:
        InvalidTypeError: ``destination`` is neither a path nor a text file (a binary file
            object is refused: open it in text mode), or ``embeddings`` is not a real
            ``bool`` (refused before a path is opened).
        InvalidInputError: A ``page_size`` out of range (1 to 100,000),
            refused before a path is opened (an existing file is left as it was).
    """
    _check_page_size(page_size)
    check_bool(embeddings, "embeddings")
    out, owned, staged = await _open_write(destination)
    lines = 0
    counts: dict[str, int] = {}
    chunk: list[str] = []
    ok = False
    try:
        async for line in export_lines(store, embeddings=embeddings, page_size=page_size):
            lines += 1
            if line.startswith('{"counts"'):
                counts = json.loads(line)["counts"]
            chunk.append(line + "\n")
            if len(chunk) >= page_size:
                await asyncio.to_thread(out.writelines, chunk)
                chunk = []
        if chunk:
            await asyncio.to_thread(out.writelines, chunk)
        ok = True
    finally:
        if owned:
            await asyncio.to_thread(_finish, out, staged, ok)
    return ExportReport(counts=counts, lines=lines)


_PREFIXES = {kind: f'{{"type":"{kind}","record":' for kind in _ORDER}


def _split_record_line(raw: str) -> tuple[str, str] | None:
    """``(type, record JSON)`` of a line in the exact layout ``export`` writes, else None."""
    if not raw.startswith('{"type":"'):
        return None
    end = raw.find('"', 9)
    kind = raw[9:end]
    prefix = _PREFIXES.get(kind)
    if prefix is None or not raw.startswith(prefix):
        return None
    body = raw.rstrip()
    if not body.endswith("}"):
        return None
    return kind, body[len(prefix) : -1]


def _read_chunks(source: IO[str], size: int) -> Iterator[list[str]]:
    while True:
        chunk = [line for _, line in zip(range(size), source, strict=False)]
        if not chunk:
            return
        yield chunk


@traced("cycgraph.import", lambda report: {"rows": sum(report.counts.values())})
async def import_(
    store: Any,
    source: str | os.PathLike[str] | IO[str],
    *,
    index: Any = None,
    batch_size: int = 1000,
    atomic: bool = True,
    defer_vector_indexes: bool | None = None,
) -> ImportReport:
    """Load an export into ``store`` (upserts by id: importing twice changes nothing).

    Every record is validated like any write. With ``atomic=True`` (default) the whole
    file lands in one unit of work: a bad line or a truncated file (no footer) leaves the
    store unchanged; that unit holds the ``facts`` and ``themes`` pass locks, so a
    consolidation, an ingest's theme assignment or another pass that rewrites themes
    waits for the import (or the import for it) instead of writing back a theme it read
    before the import committed. With ``atomic=False`` each batch commits on its own
    (re-running the import after a failure is safe: it is idempotent) and holds no pass
    lock: run such bulk loads when no pass runs on the tenant.

    Args:
        store: Any ``MemoryStore``.
        source: A path or a readable text file object.
        index: An index that keeps its own copies (the in-memory one) to update per batch.
        batch_size: Records written per store call (bounds memory).
        atomic: One unit of work for the whole file.
        defer_vector_indexes: Postgres only: drop the HNSW indexes of the tables being
            loaded for the import and rebuild them after it (see
            ``cycgraph_memory.postgres.bulk``: vector searches of every tenant use exact
            scans meanwhile). ``None`` (default) decides: defer when the file (a path or
            a seekable file, whose end line gives the counts) holds at least
            :data:`DEFER_INDEXES_MIN_RECORDS` records and at least a quarter as many as
            the vector tables already hold; inside an open transaction never.

    Returns:
        Records imported by type, and the file's format version.

    Raises:
        InvalidInputError: Not an export, an unsupported version, an unknown record type,
            a malformed line, text that is not UTF-8 or a missing/mismatched footer (with
            the line number).
        InvalidTypeError: ``source`` is neither a path nor a text file (a binary file
            object is refused: open it in text mode), ``atomic`` is not a real ``bool``
            (``atomic=None`` would commit batch by batch) or ``defer_vector_indexes`` is
            neither a ``bool`` nor ``None``; all checked before the file is opened.
        pydantic.ValidationError: A record that fails validation.
    """
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise InvalidInputError(f"batch_size must be a positive int, got {batch_size!r}")
    atomic = check_bool(atomic, "atomic")
    if defer_vector_indexes is not None:
        check_bool(defer_vector_indexes, "defer_vector_indexes")
    if isinstance(source, str | os.PathLike):
        handle: IO[str] = await asyncio.to_thread(open, source, encoding="utf-8")
        owned = True
    elif hasattr(source, "readline"):
        _refuse_binary(source, "readable")
        handle, owned = source, False
    else:
        raise InvalidTypeError(f"expected a path or a text file, got {type(source).__name__}")
    try:
        defer = await _should_defer(store, handle, defer_vector_indexes)
        async with contextlib.AsyncExitStack() as stack:
            if defer:
                await stack.enter_async_context(store.deferred_vector_indexes(_VECTOR_TABLES))
            if atomic:
                # The index is told only once the unit of work has committed: a file
                # refused half-way leaves the index as unchanged as the store.
                held: list[tuple[str, list[Any]]] = []
                # The locks of the passes that rewrite facts and themes (consolidation,
                # ingest's theme assignment, ...): none of them reads a theme before this
                # import commits and writes it back after, dropping the facts it brought.
                async with exclusive_passes(store, FACTS_LOCK, THEMES_LOCK):
                    report = await _import(store, handle, index, batch_size, held)
                for _kind, records in held:
                    index.upsert_many(records)
                return report
            return await _import(store, handle, index, batch_size, None)
    finally:
        if owned:
            await asyncio.to_thread(handle.close)


DEFER_INDEXES_MIN_RECORDS = 20_000
"""Fewest records of an import that ``defer_vector_indexes=None`` rebuilds HNSW for."""

_VECTOR_TABLES = ("entities", "episodes", "episode_messages", "facts", "themes")


def _footer_counts(handle: IO[str]) -> dict[str, int] | None:
    """The end line's counts of a seekable export, read from its last bytes (or None)."""
    try:
        if not handle.seekable():
            return None
        start = handle.tell()
        buffer = getattr(handle, "buffer", None)
        if buffer is None:
            return None
        size = buffer.seek(0, os.SEEK_END)
        buffer.seek(max(0, size - 4096))
        tail = buffer.read().decode("utf-8", errors="replace")
        handle.seek(start)
    except (OSError, ValueError):
        return None
    lines = tail.rstrip("\n").rsplit("\n", 1)
    try:
        footer = json.loads(lines[-1])
    except ValueError:
        return None
    counts = footer.get("counts") if isinstance(footer, dict) else None
    if not isinstance(counts, dict) or footer.get("type") != "end":
        return None
    return {str(k): int(v) for k, v in counts.items() if isinstance(v, int)}


async def _should_defer(store: Any, handle: IO[str], choice: bool | None) -> bool:
    capable = hasattr(store, "deferred_vector_indexes")
    if choice is not None:
        if choice and not capable:
            raise InvalidInputError(f"{type(store).__name__} has no vector indexes to defer")
        return bool(choice)
    if not capable or store.in_transaction():  # DDL cannot join a unit of work
        return False
    counts = await asyncio.to_thread(_footer_counts, handle)
    incoming = sum(counts.values()) if counts else 0
    if incoming < DEFER_INDEXES_MIN_RECORDS:
        return False
    existing = await store.vector_rows_estimate(_VECTOR_TABLES)
    return bool(incoming * 4 >= existing)


async def _flush(
    store: Any, index: Any, kind: str, records: list[Any],
    held: list[tuple[str, list[Any]]] | None, themes: set[uuid.UUID],
) -> None:
    if not records:
        return
    if hasattr(store, "write_batch"):  # both shipped stores (Postgres: COPY)
        # The records were just built by validation from the file's JSON. An export lists
        # facts before themes: the themes facts cite are checked at the end of the file.
        if kind == "fact":
            themes.update(f.theme_id for f in records if f.theme_id is not None)
            await store.write_batch(kind, records, validated=True, theme_references=False)
        else:
            await store.write_batch(kind, records, validated=True)
        _to_index(index, kind, records, held)
        return
    writer = {
        "entity": store.put_entities,
        "relationship": store.put_relationships,
        "episode": store.put_episodes,
        "fact": store.put_facts,
        "theme": store.put_themes,
    }[kind]
    await writer(records)
    _to_index(index, kind, records, held)


def _to_index(
    index: Any, kind: str, records: list[Any], held: list[tuple[str, list[Any]]] | None
) -> None:
    """Give an index that keeps its own copies the records (after the commit when held)."""
    if index is None or not hasattr(index, "upsert_many") or kind == "relationship":
        return
    if held is None:
        index.upsert_many(records)
    else:
        held.append((kind, records))


async def _check_themes(store: Any, theme_ids: set[uuid.UUID]) -> None:
    """Refuse an import whose facts cite themes neither in the file nor in the store."""
    ids = list(theme_ids)
    missing: list[object] = []
    for start in range(0, len(ids), 1000):
        chunk = ids[start : start + 1000]
        found = await store.get_themes(chunk)
        missing += [i for i in chunk if i not in found]
    if missing:
        raise DanglingReferenceError(
            "facts cite themes that are neither in the export nor in this store: "
            + ", ".join(str(i) for i in missing[:20]),
            missing_ids=missing,
        )


class _Parser:
    """Reads and validates an export chunk by chunk (runs in a worker thread)."""

    def __init__(self, handle: IO[str], batch_size: int) -> None:
        self.chunks = _read_chunks(handle, batch_size)
        self.counts = dict.fromkeys(_ORDER, 0)
        self.version: int | None = None
        self.footer: dict[str, Any] | None = None
        self.lineno = 0

    def next_records(self) -> list[tuple[str, Any]] | None:
        """The records of the next chunk of lines, validated; ``None`` at the end."""
        try:
            chunk = next(self.chunks, None)
        except UnicodeDecodeError as exc:
            # Text files decode in blocks: the bad byte is somewhere after the lines parsed.
            raise InvalidInputError(
                f"not UTF-8 text after line {self.lineno} ({exc.reason})"
            ) from None
        if chunk is None:
            return None
        out: list[tuple[str, Any]] = []
        for raw in chunk:
            self.lineno += 1
            lineno = self.lineno
            if self.footer is not None:
                if raw.strip():
                    raise InvalidInputError(f"line {lineno}: data after the end line")
                continue
            fast = _split_record_line(raw) if self.version is not None else None
            if fast is not None:
                # The layout export writes: validate the record straight from its JSON
                # text (pydantic's parser; no intermediate Python dict).
                fkind, body = fast
                try:
                    record = _MODELS[fkind].model_validate_json(body)
                except ValidationError:
                    _log.warning("import: line %d holds an invalid %s", lineno, fkind)
                    raise
                out.append((fkind, record))
                self.counts[fkind] += 1
                continue
            try:
                obj = from_json(raw)
            except ValueError as exc:
                raise InvalidInputError(f"line {lineno}: not JSON ({exc})") from exc
            if not isinstance(obj, dict):
                raise InvalidInputError(f"line {lineno}: expected a JSON object")
            if self.version is None:
                if obj.get("format") != EXPORT_FORMAT:
                    raise InvalidInputError("not a cycgraph-memory export (bad header line)")
                v = obj.get("version")
                if type(v) is not int or not 1 <= v <= EXPORT_VERSION:
                    raise InvalidInputError(
                        f"unsupported export version {v!r} (this library reads 1..{EXPORT_VERSION})"
                    )
                self.version = v
                continue
            kind: Any = obj.get("type")
            if kind == "end":
                self.footer = obj
                continue
            model = _MODELS.get(kind) if isinstance(kind, str) else None
            if model is None:
                raise InvalidInputError(f"line {lineno}: unknown record type {kind!r}")
            kind = str(kind)
            try:
                record = model.model_validate(obj.get("record"))
            except ValidationError:
                _log.warning("import: line %d holds an invalid %s", lineno, kind)
                raise
            out.append((kind, record))
            self.counts[kind] += 1
        return out


async def _import(
    store: Any, handle: IO[str], index: Any, batch_size: int,
    held: list[tuple[str, list[Any]]] | None,
) -> ImportReport:
    parser = _Parser(handle, batch_size)
    themes: set[uuid.UUID] = set()
    pending: list[Any] = []
    pending_kind: str | None = None
    # Pipelined: the next chunk is read and validated in a worker thread while this one
    # is written (on Postgres the server works meanwhile: two cores busy).
    ahead = asyncio.ensure_future(asyncio.to_thread(parser.next_records))
    try:
        while True:
            records = await ahead
            if records is None:
                break
            ahead = asyncio.ensure_future(asyncio.to_thread(parser.next_records))
            for kind, record in records:
                if kind != pending_kind or len(pending) >= batch_size:
                    await _flush(store, index, pending_kind or kind, pending, held, themes)
                    pending, pending_kind = [], kind
                pending.append(record)
    finally:
        if not ahead.done():
            with contextlib.suppress(BaseException):
                await ahead
    if parser.version is None:
        raise InvalidInputError("empty input: not a cycgraph-memory export")
    if parser.footer is None:
        raise InvalidInputError("truncated export: the end line is missing")
    counts = parser.counts
    if parser.footer.get("counts") != counts:
        raise InvalidInputError(
            f"record counts {counts} differ from the end line's {parser.footer.get('counts')}"
        )
    await _flush(store, index, pending_kind or "entity", pending, held, themes)
    if themes and hasattr(store, "write_batch"):
        # On the primary: the themes were just written there (a non-atomic import
        # committed them), a lagging read engine may not have them yet.
        with primary_reads(store):
            await _check_themes(store, themes)
    return ImportReport(counts=counts, version=parser.version)

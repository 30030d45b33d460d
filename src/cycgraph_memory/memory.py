"""``Memory``: one object over the building blocks, for the common path.

::

    async with await Memory.open("memory://", tenant="acme") as memory:
        await memory.add([{"role": "user", "content": "Alice Smith maintains billing."}])
        found = await memory.search("who maintains billing?")
        print(found.prompt)

:meth:`Memory.open` builds a store, an index, an outcome ledger, an embedder and a
:class:`~cycgraph_memory.hierarchy.MemoryPipeline` for one tenant:

* ``dsn="memory://"``: the in-memory backends (nothing persists);
* a ``postgresql://`` DSN: the Postgres backends on a new engine (disposed by
  :meth:`Memory.close`);
* no DSN: an embedded PostgreSQL server whose data lives in ``data_dir`` (the
  ``embedded`` extra), stopped when the process exits.

On Postgres the schema is checked, not silently migrated: a database behind the shipped
migrations raises :class:`~cycgraph_memory.errors.SchemaNotReadyError` unless
``migrate=True`` (or ``cycgraph-memory db upgrade`` was run).

Every method calls the public building blocks (``MemoryPipeline.ingest``,
``retrieve_memory``, ``render_memory_section``, ``memory_writer``, the store's ``put_facts``,
:func:`~cycgraph_memory.inspection.memory_stats`); the facade adds no behaviour of its own,
and the objects it built stay reachable as attributes (``store``, ``index``, ``ledger``,
``embedder``, ``pipeline``) for everything it does not cover.

A closed memory (:meth:`Memory.close`, or the end of its ``async with`` block) refuses
every operation with :class:`~cycgraph_memory.errors.MemoryClosedError`.
"""

from __future__ import annotations

import inspect
import logging
import re
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, Self

from pydantic import BaseModel, ConfigDict

from cycgraph_memory._exclusive import FACTS_LOCK, exclusive_passes
from cycgraph_memory._options import coerce_options
from cycgraph_memory._validate import check_bool, check_same_tenant, string_list
from cycgraph_memory.consolidation._common import facts_reader_for_update
from cycgraph_memory.consolidation.plan import Put, sync_index
from cycgraph_memory.contracts import EmbeddingProvider, MemoryIndex, MemoryStore, OutcomeLedger
from cycgraph_memory.errors import (
    EmbeddingDimensionMismatchError,
    ErasureNotAvailableError,
    InvalidInputError,
    InvalidTenantError,
    InvalidTypeError,
    MemoryClosedError,
    RecordNotFoundError,
    SchemaNotReadyError,
)
from cycgraph_memory.hierarchy.pipeline import IngestReport, MemoryPipeline, _IngestOptions
from cycgraph_memory.hierarchy.theme_upkeep import refresh_themes, themes_lock_for
from cycgraph_memory.inspection import MemoryStats, memory_stats
from cycgraph_memory.integration import (
    _counting_writer,
    memory_result_to_dicts,
    render_memory_section,
)
from cycgraph_memory.lifecycle import PurgeReport, PurgeSelector, purge
from cycgraph_memory.observability import span
from cycgraph_memory.progress import ProgressCallback
from cycgraph_memory.records import (
    MemoryQuery,
    MemoryResult,
    Message,
    RetrievalOptions,
    SemanticFact,
    Theme,
    utc_now,
)
from cycgraph_memory.retrieval import retrieve_memory
from cycgraph_memory.textsearch import name_candidates

__all__ = [
    "DEFAULT_DATA_DIR",
    "FORGOTTEN_BY",
    "IN_MEMORY_DSN",
    "ForgetReport",
    "Memory",
    "SearchResult",
]

_log = logging.getLogger(__name__)

IN_MEMORY_DSN = "memory://"
"""The DSN that selects the in-memory backends."""

DEFAULT_DATA_DIR = Path(".cycgraph-memory") / "pgdata"
"""Where the embedded server keeps its data when no DSN and no ``data_dir`` are given."""

FORGOTTEN_BY = "forgotten"
"""``invalidated_by`` value :meth:`Memory.forget` writes on the facts it soft-deletes."""

_LESSON_TAG = "lesson"
_CANDIDATE_TAG = "candidate"
_DEFAULT_DIM = 384
_NAME_MATCHES = 20  # entities the index is asked for when search(entity=) names one
_TENANT_RE = re.compile(r"[A-Za-z0-9_.:\-]{1,64}")

Mode = Literal["vector", "text", "hybrid"]


class SearchResult(BaseModel):
    """What :meth:`Memory.search` returns.

    Attributes:
        result: The full :class:`~cycgraph_memory.records.MemoryResult` (facts with their
            ``fact_scores``, themes, episodes, entities, relationships, messages).
        prompt: The prompt-ready ``## Relevant Memory`` block
            (:func:`~cycgraph_memory.integration.render_memory_section`); ``""`` when
            nothing was found.
    """

    model_config = ConfigDict(extra="forbid")

    result: MemoryResult
    prompt: str


class ForgetReport(BaseModel):
    """What :meth:`Memory.forget` did.

    Attributes:
        forgotten: Ids of the facts soft-deleted by this call.
        already_forgotten: Ids that were already invalidated (left as they were).
        missing: Ids that name no fact of this tenant.
    """

    model_config = ConfigDict(extra="forbid")

    forgotten: list[uuid.UUID]
    already_forgotten: list[uuid.UUID]
    missing: list[uuid.UUID]


def _ids(values: Iterable[uuid.UUID | str] | uuid.UUID | str) -> list[uuid.UUID]:
    if isinstance(values, uuid.UUID | str):
        values = [values]
    if isinstance(values, bytes | bytearray) or not isinstance(values, Iterable):
        raise InvalidTypeError(
            f"expected fact ids (a UUID, a string or a list of them), got {type(values).__name__}"
        )
    out: list[uuid.UUID] = []
    for value in values:
        if not isinstance(value, uuid.UUID | str):
            raise InvalidTypeError(f"not a fact id: {value!r} ({type(value).__name__})")
        try:
            out.append(value if isinstance(value, uuid.UUID) else uuid.UUID(value))
        except ValueError:
            raise InvalidInputError(f"not a fact id: {value!r}") from None
    return list(dict.fromkeys(out))


def _check_pipeline_options(options: Mapping[str, Any] | None) -> None:
    """Refuse ``pipeline_options`` that ``MemoryPipeline`` does not take (before any I/O)."""
    if options is None:
        return
    if not isinstance(options, Mapping):
        raise InvalidTypeError(f"pipeline_options must be a mapping, got {type(options).__name__}")
    # The facade passes the store, the index and the embedder itself.
    known = set(inspect.signature(MemoryPipeline).parameters) - {
        "store",
        "options",
        "index",
        "embedder",
    }
    unknown = sorted(str(k) for k in options if k not in known)
    if unknown:
        raise InvalidInputError(
            f"unknown pipeline_options {unknown}; MemoryPipeline takes {sorted(known)}"
        )


class Memory:
    """A tenant's memory: ingest, search, remember, forget and inspect through one object.

    Build it with :meth:`open`, or wrap objects you built yourself::

        memory = Memory(store, index, embedder=embedder, ledger=ledger)

    Args:
        store: Any ``MemoryStore``.
        index: The ``MemoryIndex`` over the same records.
        embedder: Embeds messages, facts and search text (``None``: text search only).
        ledger: The ``OutcomeLedger`` used by :meth:`stats` (optional).
        pipeline: The ingest pipeline (default: ``MemoryPipeline(store, embedder=...,
            index=...)``).
        retrieval_options: Passed to ``retrieve_memory`` on every search.
        tenant: The tenant name, for logs and spans (1-64 characters of
            ``[A-Za-z0-9_.:-]``). Default: the store's ``tenant_id`` (Postgres), else
            ``"default"``. A Postgres store, index or ledger of another tenant is refused.
        on_close: Called (and awaited if it returns an awaitable) once, by the first
            :meth:`close`. :meth:`open` passes the disposal of what it created; without
            it, :meth:`close` releases nothing: the objects you passed stay yours, open.

    Attributes:
        store, index, embedder, ledger, pipeline: The building blocks, for everything the
            facade does not cover.
        closed: Whether :meth:`close` was called (the facade's operations then raise
            :class:`~cycgraph_memory.errors.MemoryClosedError`).

    Raises:
        InvalidTenantError: A malformed ``tenant``, or one that is not the store's.
        InvalidInputError: The index, ledger or pipeline's store belongs to a tenant other
            than the store's (Postgres backends).
    """

    def __init__(
        self,
        store: MemoryStore,
        index: MemoryIndex,
        *,
        embedder: EmbeddingProvider | None = None,
        ledger: OutcomeLedger | None = None,
        pipeline: MemoryPipeline | None = None,
        retrieval_options: RetrievalOptions | Mapping[str, Any] | None = None,
        tenant: str | None = None,
        on_close: Callable[[], Any] | None = None,
    ) -> None:
        backend_tenant = getattr(store, "tenant_id", None)
        if tenant is None:
            tenant = backend_tenant if isinstance(backend_tenant, str) else "default"
        _check_tenant(tenant)
        if backend_tenant is not None and tenant != backend_tenant:
            raise InvalidTenantError(
                f"tenant {tenant!r} is not the store's tenant {backend_tenant!r}"
            )
        # One tenant throughout: another tenant's index would serve its rows to searches,
        # another tenant's ledger would count its runs in stats.
        check_same_tenant(store, index=index, ledger=ledger)
        if pipeline is not None:
            check_same_tenant(store, pipeline_store=getattr(pipeline, "store", None))
        self.store = store
        self.index = index
        self.embedder = embedder
        self.ledger = ledger
        self.pipeline = pipeline or MemoryPipeline(store, embedder=embedder, index=index)
        # Validated now (a wrong key is refused here, not at the first search).
        self.retrieval_options: RetrievalOptions | None = (
            None
            if retrieval_options is None
            else coerce_options(RetrievalOptions, retrieval_options, {})
        )
        self.tenant = tenant
        self._on_close = on_close
        self._closed = False
        # memory_writer's callable, also telling how many facts it wrote (the span's rows).
        self._write = _counting_writer(store, index=index, embedder=embedder)

    # ------------------------------------------------------------------ construction

    @classmethod
    async def open(
        cls,
        dsn: str | None = None,
        *,
        tenant: str = "default",
        embedder: EmbeddingProvider | None = None,
        migrate: bool = False,
        embedding_dim: int | None = None,
        data_dir: str | Path | None = None,
        pipeline_options: Mapping[str, Any] | None = None,
        retrieval_options: RetrievalOptions | Mapping[str, Any] | None = None,
        engine_options: Mapping[str, Any] | None = None,
    ) -> Memory:
        """Open a tenant's memory on a backend chosen by ``dsn``.

        Args:
            dsn: ``"memory://"`` (in-memory), a ``postgresql://`` URL, or ``None`` for an
                embedded server in ``data_dir``: the one already running there (left
                running), else one started for this process (stopped when it exits).
            tenant: The tenant whose records are read and written.
            embedder: The embedding provider. ``None``: a ``HashingEmbeddingProvider``
                (deterministic, no model, lexical similarity) of the schema's dimension,
                with theme thresholds suited to it.
            migrate: Run the shipped migrations when the database is behind them (on
                Postgres); otherwise an outdated schema raises ``SchemaNotReadyError``.
            embedding_dim: Vector width of a schema created by ``migrate=True`` and of the
                in-memory backends (default: the database's recorded width, else 384).
            data_dir: The embedded server's data directory (default
                :data:`DEFAULT_DATA_DIR`, relative to the working directory).
            pipeline_options: Extra keywords for ``MemoryPipeline`` (``extractor``,
                ``clusterer``, ``segmenter``, ...).
            retrieval_options: Passed to ``retrieve_memory`` on every search.
            engine_options: Extra keywords for ``create_engine_from_dsn``.

        Raises:
            SchemaNotReadyError: The Postgres schema is not at the shipped head and
                ``migrate`` is false, or it is at a revision this release does not ship
                (migrated by a newer release; ``migrate`` cannot help).
            EmbeddingDimensionMismatchError: ``embedder`` or ``embedding_dim`` disagrees
                with the database's vector width.
            InvalidTenantError: A malformed tenant name.
            InvalidTypeError: ``dsn`` is not a string, ``embedder`` is not an embedding
                provider, ``pipeline_options`` / ``engine_options`` is not a mapping, or
                ``migrate`` is not a real ``bool`` (``migrate="no"`` would migrate).
            MissingExtraError: The ``postgres`` / ``embedded`` extra is missing.
        """
        if dsn is not None and not isinstance(dsn, str):
            raise InvalidTypeError(f"dsn must be a string or None, got {type(dsn).__name__}")
        migrate = check_bool(migrate, "migrate")
        if embedding_dim is not None and (type(embedding_dim) is not int or embedding_dim < 1):
            raise InvalidInputError(
                f"embedding_dim must be a positive int or None, got {embedding_dim!r}"
            )
        _check_pipeline_options(pipeline_options)
        _check_embedder(embedder)
        if engine_options is not None and not isinstance(engine_options, Mapping):
            raise InvalidTypeError(
                f"engine_options must be a mapping, got {type(engine_options).__name__}"
            )
        if retrieval_options is not None:
            retrieval_options = coerce_options(RetrievalOptions, retrieval_options, {})
        pipeline_kwargs = dict(pipeline_options or {})
        if dsn == IN_MEMORY_DSN:
            from cycgraph_memory.inmemory import InMemoryMemoryIndex, InMemoryMemoryStore
            from cycgraph_memory.inmemory.ledger import InMemoryOutcomeLedger

            _check_tenant(tenant)
            dim = embedding_dim or (embedder.dimensions if embedder else _DEFAULT_DIM)
            if embedder is not None and embedder.dimensions != dim:
                raise EmbeddingDimensionMismatchError(dim, embedder.dimensions, "embedder")
            embedder = _default_embedder(embedder, dim, pipeline_kwargs)
            return cls._assemble(
                InMemoryMemoryStore(expected_dimensions=dim),
                InMemoryMemoryIndex(expected_dimensions=dim),
                InMemoryOutcomeLedger(),
                embedder,
                pipeline_kwargs,
                retrieval_options,
                tenant,
                None,
            )
        from cycgraph_memory.postgres import (
            PostgresMemoryIndex,
            PostgresMemoryStore,
            PostgresOutcomeLedger,
            create_engine_from_dsn,
            instrument_engine,
            start_embedded_server,
            validate_tenant,
        )
        from cycgraph_memory.postgres.migrate import is_known_revision, schema_status, upgrade

        validate_tenant(tenant)
        if dsn is None:
            from cycgraph_memory.postgres.embedded import embedded_server_dsn

            where = data_dir or DEFAULT_DATA_DIR
            # A server already running there (`cycgraph-memory db embedded start`, another
            # program) is joined without a stop at exit: this process never stops a server
            # it did not start. One it starts stops when the last process using it exits.
            running = embedded_server_dsn(where) is not None
            dsn = start_embedded_server(where, cleanup_mode=None if running else "stop").dsn
        engine = create_engine_from_dsn(dsn, **dict(engine_options or {}))
        try:
            instrument_engine(engine)
            current, head, recorded = await schema_status(engine)
            if current is not None and current != head and not is_known_revision(current):
                # Migrated by a newer release (a rolling deploy, a rollback): neither
                # "upgrade" nor migrate=True can help this release.
                raise SchemaNotReadyError(
                    f"database schema is at {current}, which this release of "
                    f"cycgraph-memory does not know (its newest revision is {head}): the "
                    "database was migrated by a newer release; run that release, or "
                    "downgrade the database with its migrations"
                )
            if current != head:
                if not migrate:
                    raise SchemaNotReadyError(
                        f"database schema is at {current or 'no revision'}, the library "
                        f"needs {head}: run `cycgraph-memory db upgrade` or open with "
                        "migrate=True"
                    )
                wanted = embedding_dim or (embedder.dimensions if embedder else None)
                await upgrade(engine, embedding_dim=wanted)
                _, _, recorded = await schema_status(engine)
            dim = recorded or embedding_dim or _DEFAULT_DIM
            for wanted, what in (
                (embedding_dim, "embedding_dim"),
                (embedder.dimensions if embedder is not None else None, "embedder"),
            ):
                if wanted is not None and wanted != dim:
                    raise EmbeddingDimensionMismatchError(dim, wanted, f"{what} vs database")
            embedder = _default_embedder(embedder, dim, pipeline_kwargs)
            return cls._assemble(
                PostgresMemoryStore(engine, tenant_id=tenant, embedding_dim=dim),
                PostgresMemoryIndex(engine, tenant_id=tenant),
                PostgresOutcomeLedger(engine, tenant_id=tenant),
                embedder,
                pipeline_kwargs,
                retrieval_options,
                tenant,
                engine.dispose,
            )
        except BaseException:
            await engine.dispose()
            raise

    @classmethod
    def _assemble(
        cls,
        store: Any,
        index: Any,
        ledger: Any,
        embedder: EmbeddingProvider,
        pipeline_kwargs: dict[str, Any],
        retrieval_options: RetrievalOptions | Mapping[str, Any] | None,
        tenant: str,
        on_close: Callable[[], Any] | None,
    ) -> Memory:
        pipeline = MemoryPipeline(store, embedder=embedder, index=index, **pipeline_kwargs)
        memory = cls(
            store,
            index,
            embedder=embedder,
            ledger=ledger,
            pipeline=pipeline,
            retrieval_options=retrieval_options,
            tenant=tenant,
            on_close=on_close,
        )
        _log.info("memory opened for tenant %s on %s", tenant, type(store).__name__)
        return memory

    # ------------------------------------------------------------------ lifecycle

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed

    def _check_open(self) -> None:
        if self._closed:
            raise MemoryClosedError(
                f"this Memory (tenant {self.tenant!r}) is closed; open a new one"
            )

    async def close(self) -> None:
        """Close the memory: every later operation raises ``MemoryClosedError``.

        The first call runs ``on_close``: for a memory built by :meth:`open` on Postgres,
        it disposes the engine :meth:`open` created (its connections are closed). A memory
        wrapping objects you passed to the constructor releases none of them: your
        store, index, ledger, engine and embedder stay open and usable, yours to close.
        Calling ``close`` again (or leaving an ``async with`` block after it) does nothing.
        """
        if self._closed:
            return
        self._closed = True
        if self._on_close is not None:
            result = self._on_close()
            if hasattr(result, "__await__"):
                await result

    async def __aenter__(self) -> Self:
        """Enter the ``async with`` block; a closed memory raises ``MemoryClosedError``."""
        self._check_open()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    # ------------------------------------------------------------------ operations

    async def add(
        self,
        messages: Iterable[Message | Mapping[str, Any]],
        *,
        tags: Sequence[str] = (),
        run_id: str | None = None,
        agent_id: str | None = None,
        progress: ProgressCallback | None = None,
    ) -> IngestReport:
        """Ingest conversation messages (``MemoryPipeline.ingest``).

        Args:
            messages: ``Message`` records or dicts (``role``, ``content``, optional
                ``timestamp``, ``id``, ``metadata``).
            tags: Tags added to every new fact.
            run_id: Workflow run recorded in the provenance.
            agent_id: Agent recorded in the provenance.
            progress: Called with ``ProgressEvent("ingest", ...)`` as episodes are
                extracted and written.

        Returns:
            The :class:`~cycgraph_memory.hierarchy.IngestReport`. Messages are matched by
            id: re-adding messages with the same ids writes nothing, while a dict without
            an ``id`` gets a new one on every call, so re-adding it stores it again (give
            your messages stable ids to make re-adding a no-op).

        Raises:
            MemoryClosedError: The memory is closed.
        """
        self._check_open()
        with span("cycgraph.memory.add", tenant=self.tenant) as sp:
            report = await self.pipeline.ingest(
                messages, tags=tags, run_id=run_id, agent_id=agent_id, progress=progress
            )
            sp.set(rows=len(report.fact_ids), messages=report.messages_ingested)
        return report

    async def search(
        self,
        text: str | None = None,
        *,
        mode: Mode | None = None,
        limit: int = 10,
        tags: Sequence[str] | None = None,
        entity: str | None = None,
        max_hops: int = 2,
        min_similarity: float | None = None,
        valid_at: datetime | None = None,
        include_invalidated: bool = False,
    ) -> SearchResult:
        """Retrieve memory for a question, a tag scope or an entity (``retrieve_memory``).

        Args:
            text: The question (hierarchical / hybrid / text retrieval).
            mode: ``"vector"``, ``"text"`` or ``"hybrid"`` (default: hybrid when possible).
            limit: Most records per type (1-100).
            tags: Tag scope (any-of); alone, a tag listing.
            entity: An entity name: the subgraph around the live entities of that name
                (the whole name, case-insensitive, of any length or punctuation) and the
                facts mentioning them.
            max_hops: Subgraph depth for ``entity`` (0-5).
            min_similarity: Lowest cosine a vector hit needs (default the query's 0.5;
                lexical embedders such as the hashing one score lower, try 0.2).
            valid_at: Only records valid at this time.
            include_invalidated: Also serve soft-deleted records.

        Returns:
            The :class:`SearchResult` (the full result and the prompt block).

        Raises:
            MemoryClosedError: The memory is closed.
            InvalidInputError: ``mode`` is not one of the three modes.
            RecordNotFoundError: ``entity`` names no live entity.
            pydantic.ValidationError: Out-of-range ``limit`` / ``max_hops``.
        """
        self._check_open()
        # Every call has its span, a refused one too (error status, the error's type only).
        with span("cycgraph.memory.search", tenant=self.tenant) as sp:
            if mode is not None and mode not in ("vector", "text", "hybrid"):
                raise InvalidInputError(
                    f"mode must be 'vector', 'text' or 'hybrid', got {mode!r}"
                )
            # Set once checked: cycgraph.mode is a mode, never what was passed in its place.
            sp.set(mode=mode)
            query: dict[str, Any] = {
                "text": text,
                "limit": limit,
                "max_hops": max_hops,
                "valid_at": valid_at,
                "include_invalidated": include_invalidated,
                "tags": string_list(tags or [], "tags"),
            }
            if min_similarity is not None:
                query["min_similarity"] = min_similarity
            if entity is not None:
                query["entity_ids"] = [e.id for e in await self._entities_named(entity)]
                if text is not None:
                    query["text"] = None  # the entity path wins; keep the query unambiguous
            result = await retrieve_memory(
                self.store,
                self.index,
                MemoryQuery.model_validate(query),
                embedder=self.embedder,
                options=self.retrieval_options,
                mode=mode,
            )
            sp.set(rows=len(result.facts))
        prompt = render_memory_section(memory_result_to_dicts(result))
        return SearchResult(result=result, prompt=prompt)

    async def _entities_named(self, name: str) -> list[Any]:
        if not isinstance(name, str):
            raise InvalidTypeError(f"entity must be a name (str), got {type(name).__name__}")
        wanted = name.strip().lower()
        if not wanted:
            raise RecordNotFoundError("entity", name)
        match = getattr(self.index, "match_entity_names", None)
        found: list[Any] = []
        complete = False
        if match is not None:
            # Fast path: the index finds names that are word n-grams of the text (1-4
            # words, punctuation and possessives stripped, stop words skipped), compared
            # differently per backend. A name it cannot see ("Acme Inc.", five words,
            # "The Who") or a full page of near-misses falls back to reading the names
            # (a page scan of the tenant's entities).
            hits = await match(name, limit=_NAME_MATCHES)
            found = [e for e in hits if e.name.lower() == wanted]
            # A name that is itself one of the candidates (plain words) is compared as is
            # on both backends: fewer hits than a page is then the whole answer, also for
            # an unknown name (no scan for a typo).
            visible = wanted in name_candidates(name)
            complete = len(hits) < _NAME_MATCHES and (bool(found) or visible)
        if not complete:
            from cycgraph_memory.consolidation._common import scan

            found = []
            async for page in scan(self.store, "entities", 1000):
                found += [e for e in page if e.superseded_by is None and e.name.lower() == wanted]
        if not found:
            raise RecordNotFoundError("entity", name)
        return found

    async def remember(
        self,
        fact: str,
        *,
        tags: Sequence[str] = (_LESSON_TAG,),
        candidate: bool = True,
        idempotency_key: str | None = None,
        run_id: str | None = None,
        agent_id: str | None = None,
    ) -> uuid.UUID:
        """Store a fact an agent wrote (a lesson), with ``agent`` provenance.

        Written through :func:`~cycgraph_memory.integration.memory_writer`: embedded, then
        stored; a repeated ``idempotency_key`` writes nothing and returns the first id.

        Args:
            fact: The lesson text (not blank: at least one non-whitespace character).
            tags: Its tags (default ``["lesson"]``).
            candidate: Also tag it ``candidate`` so the retention gate rules on it before
                it is served as verified (``retrieve_gated_lessons``).
            idempotency_key: E.g. ``run_id:node_id:iteration``.
            run_id: Workflow run recorded in the provenance.
            agent_id: Agent recorded in the provenance.

        Returns:
            The fact's id.

        Raises:
            MemoryClosedError: The memory is closed.
            InvalidInputError: ``fact`` is empty or only whitespace (no extractor ever
                stores such a fact; it would render as an empty bullet); nothing written.
            InvalidTypeError: ``tags`` is not a list of strings or ``candidate`` is not a
                real ``bool`` (``candidate="no"`` would tag it a candidate).
            pydantic.ValidationError: The fact or a tag is invalid, or ``run_id`` /
                ``agent_id`` is not 1-256 characters (the rule of :meth:`add`); nothing
                written.
        """
        self._check_open()
        with span("cycgraph.memory.remember", tenant=self.tenant) as sp:
            if isinstance(fact, str) and not fact.strip():
                raise InvalidInputError(
                    "fact must not be blank (empty or only whitespace), "
                    f"got {fact!r}; nothing written"
                )
            given = string_list(tags, "tags")
            candidate = check_bool(candidate, "candidate")
            # The ids :meth:`add` accepts, no others: an empty run id is no run.
            _IngestOptions(run_id=run_id, agent_id=agent_id)
            all_tags = list(dict.fromkeys([*given, *([_CANDIDATE_TAG] if candidate else [])]))
            provenance = {"source": "agent", "run_id": run_id, "agent_id": agent_id}
            raw = {
                "content": fact,
                "tags": all_tags,
                "provenance": {k: v for k, v in provenance.items() if v is not None},
            }
            options = (
                {"idempotency_key": idempotency_key} if idempotency_key is not None else None
            )
            ids, wrote = await self._write([raw], options)
            # 0 when a repeated idempotency key returned the earlier id and wrote nothing.
            sp.set(rows=wrote)
        return uuid.UUID(ids[0])

    async def forget(
        self,
        fact_ids: Iterable[uuid.UUID | str] | uuid.UUID | str,
        *,
        erase: bool = False,
    ) -> ForgetReport:
        """Soft-delete facts: they stop being served but stay stored and auditable.

        Each live fact gets ``invalidated_by = "forgotten"`` (:data:`FORGOTTEN_BY`), in one
        unit of work. Their themes are re-centred and relabelled without them (soft-deleted
        when no live fact is left), under the ``themes`` lock. ``erase=True`` is refused with
        :class:`~cycgraph_memory.errors.ErasureNotAvailableError` (nothing changes): hard
        erasure goes by sources, with :meth:`erase`.

        Returns:
            A :class:`ForgetReport`; forgetting again changes nothing.

        Raises:
            MemoryClosedError: The memory is closed.
            ErasureNotAvailableError: ``erase=True``.
            InvalidInputError: An id that is not a UUID.
            InvalidTypeError: ``erase`` is not a real ``bool``.
        """
        self._check_open()
        with span("cycgraph.memory.forget", tenant=self.tenant) as sp:
            ids = _ids(fact_ids)
            if check_bool(erase, "erase"):
                return await self._erase(ids)
            async with exclusive_passes(self.store, "forget", FACTS_LOCK):
                found = await self.store.get_facts(ids)
                live = [found[i] for i in ids if i in found and found[i].invalidated_by is None]
                # A forgotten fact stops shaping (and being quoted by) its theme: the themes
                # lock is taken before any write (an ingest holding it may rewrite these
                # rows), and the facts are read again under it (their theme may have moved),
                # the rows locked (Postgres) until the pass commits: a concurrent touch
                # waits instead of being overwritten by the write-back. Locked only after
                # the themes lock: an ingest holding that lock may be writing these rows.
                async with themes_lock_for(self.store, live):
                    found = await facts_reader_for_update(self.store)(ids)
                    live = [found[i] for i in ids if i in found and found[i].invalidated_by is None]
                    updated: list[SemanticFact] = [
                        f.model_copy(update={"invalidated_by": FORGOTTEN_BY}) for f in live
                    ]
                    themes: list[Theme] = []
                    if updated:
                        await self.store.put_facts(updated)
                        themes = await refresh_themes(self.store, updated, now=utc_now())
                        if themes:
                            await self.store.put_themes(themes)
            puts = [Put(f, "fact_forgotten") for f in updated]
            puts += [Put(t, "theme_updated") for t in themes]
            sync_index(self.index, puts)
            sp.set(rows=len(puts))
        _log.info("forgot %d facts for tenant %s", len(puts), self.tenant)
        return ForgetReport(
            forgotten=[f.id for f in live],
            already_forgotten=[i for i in ids if i in found and found[i].invalidated_by],
            missing=[i for i in ids if i not in found],
        )

    async def _erase(self, ids: list[uuid.UUID]) -> ForgetReport:
        """``forget(fact_ids, erase=True)``: refused; hard erasure goes by what was said.

        Erasure removes a fact together with the messages, episodes and entities it came
        from (:meth:`erase`); erasing a fact id alone would leave its sources to re-derive
        it, so this path changes nothing and names the call that erases.
        """
        raise ErasureNotAvailableError(
            "forget(..., erase=True) cannot erase facts one by one (their source messages "
            "would remain); use Memory.erase(entity_ids=..., message_ids=..., run_id=...) "
            f"to erase for good. {len(ids)} fact(s) left unchanged"
        )

    async def erase(
        self,
        selector: PurgeSelector | Mapping[str, Any] | None = None,
        /,
        *,
        dry_run: bool = False,
        **criteria: Any,
    ) -> PurgeReport:
        """Erase for good what a selector names, with everything derived from it (``purge``).

        Calls :func:`~cycgraph_memory.lifecycle.purge` on this tenant's store, index and
        ledger: entity ids, message ids, a provenance (``run_id``, ``agent_id``,
        ``source``) or ``tenant=True``; one unit of work, an erasure entry in the ledger's
        erasure log.

        Args:
            selector: A :class:`~cycgraph_memory.lifecycle.PurgeSelector` or a dict.
            dry_run: Report what would be erased; change nothing.
            **criteria: The selector's fields, when ``selector`` is not given.

        Returns:
            The :class:`~cycgraph_memory.lifecycle.PurgeReport`.

        Raises:
            MemoryClosedError: The memory is closed.
        """
        self._check_open()
        with span("cycgraph.memory.erase", tenant=self.tenant) as sp:
            report = await purge(
                self.store,
                selector,
                index=self.index,
                ledger=self.ledger,
                dry_run=dry_run,
                **criteria,
            )
            sp.set(dry_run=dry_run)
        _log.info("erase (dry_run=%s) for tenant %s", dry_run, self.tenant)
        return report

    async def stats(self, *, progress: ProgressCallback | None = None) -> MemoryStats:
        """Count what the tenant holds (:func:`~cycgraph_memory.inspection.memory_stats`).

        Raises:
            MemoryClosedError: The memory is closed.
        """
        self._check_open()
        with span("cycgraph.memory.stats", tenant=self.tenant):
            return await memory_stats(
                self.store, index=self.index, ledger=self.ledger, progress=progress
            )

    def __repr__(self) -> str:
        return f"Memory(tenant={self.tenant!r}, store={type(self.store).__name__})"


def _default_embedder(
    embedder: EmbeddingProvider | None, dim: int, pipeline_kwargs: dict[str, Any]
) -> EmbeddingProvider:
    if embedder is not None:
        return embedder
    from cycgraph_memory.embeddings.hashing import HashingEmbeddingProvider
    from cycgraph_memory.hierarchy.clustering import ConsolidatingThemeClusterer

    # Hashing vectors are lexical: unrelated sentences sit near 0.1-0.3 cosine, so the
    # clusterer's defaults (tuned for neural embeddings) would give one theme per fact.
    pipeline_kwargs.setdefault(
        "clusterer", ConsolidatingThemeClusterer(assignment_threshold=0.3, merge_threshold=0.4)
    )
    return HashingEmbeddingProvider(dimensions=dim)


def _check_embedder(embedder: object) -> None:
    """Refuse an ``embedder`` that is not an embedding provider (before any I/O)."""
    if embedder is None:
        return
    dims = getattr(embedder, "dimensions", None)
    if (
        not callable(getattr(embedder, "embed", None))
        or isinstance(dims, bool)
        or not isinstance(dims, int)
        or dims < 1
    ):
        raise InvalidTypeError(
            "embedder must be an EmbeddingProvider (an embed() method and a positive int "
            f"dimensions), got {type(embedder).__name__}"
        )


def _check_tenant(tenant: object) -> None:
    # The same rule as cycgraph_memory.postgres.validate_tenant, without importing SQLAlchemy.
    if not isinstance(tenant, str) or _TENANT_RE.fullmatch(tenant) is None:
        raise InvalidTenantError(
            f"tenant id must be 1-64 characters of [A-Za-z0-9_.:-], got {tenant!r}"
        )

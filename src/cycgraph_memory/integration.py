"""Agent-runner adapters: read memory before a node runs, write reflections after it.

* :func:`memory_retriever` returns ``retrieve(query, options=None)``, an async callable
  taking a node's memory query (``text`` / ``tags`` / ``entity_ids`` / ``max_facts``) and
  returning facts, entities and themes as plain dicts;
* :func:`render_memory_section` turns that into the ``## Relevant Memory`` prompt block;
* :func:`memory_writer` returns ``write(facts, options=None)``, an async callable that
  stores reflection facts with provenance and tags and honours
  ``options["idempotency_key"]`` (``run_id:node_id:iteration``): a repeated key writes
  nothing and returns the same fact ids.

Query shapes (the spec's ``memory_query`` directive):

========================  =======================================================
``{}``                    ``text`` defaults to ``options["goal"]`` (RAG, zero config)
``{"tags": [...]}``       tag-only retrieval, no text fallback
``{"entity_ids": [...]}`` knowledge-graph subgraph extraction
``{"text": "..."}``       semantic search (needs an ``embedder``)
========================  =======================================================
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from cycgraph_memory._validate import (
    check_method,
    check_same_tenant,
    string_list,
    validate_record,
)
from cycgraph_memory.contracts import EmbeddingProvider, MemoryIndex, MemoryStore
from cycgraph_memory.errors import (
    EmbeddingDimensionMismatchError,
    InvalidInputError,
    InvalidTypeError,
)
from cycgraph_memory.records import (
    MemoryQuery,
    MemoryResult,
    Provenance,
    RetrievalOptions,
    SemanticFact,
    utc_now,
)
from cycgraph_memory.retrieval import retrieve_memory

__all__ = [
    "MAX_IDEMPOTENCY_KEY_LENGTH",
    "MEMORY_SECTION_HEADING",
    "MemoryRetrieverFn",
    "MemoryWriterFn",
    "memory_retriever",
    "memory_result_to_dicts",
    "memory_writer",
    "render_memory_section",
]

MEMORY_SECTION_HEADING = "## Relevant Memory"
"""Heading of the prompt block rendered by :func:`render_memory_section`."""

MAX_IDEMPOTENCY_KEY_LENGTH = 512
"""Longest ``idempotency_key`` :func:`memory_writer` accepts (characters).

Postgres keeps the key in a primary-key index, whose entries cannot exceed 2,704 bytes:
512 characters of UTF-8 fit with room to spare, on both backends alike."""

MemoryRetrieverFn = Callable[..., Awaitable[dict[str, list[dict[str, Any]]]]]
"""``async (query, options=None) -> {"facts": [...], "entities": [...], "themes": [...]}``."""

MemoryWriterFn = Callable[..., Awaitable[dict[str, list[str]]]]
"""``async (facts, options=None) -> {"fact_ids": [...]}``."""

_QUERY_KEYS = frozenset({"text", "tags", "entity_ids", "max_facts"})
_FACT_KEYS = frozenset(
    {"content", "tags", "provenance", "entity_ids", "source_episode_ids", "valid_from",
     "embedding"}
)


def _mapping(value: object, name: str) -> Mapping[str, Any]:
    """``value`` as a mapping (``None`` is empty); anything else is a typed error."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise InvalidTypeError(f"{name} must be a mapping, got {type(value).__name__}")
    return value


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def memory_result_to_dicts(result: MemoryResult) -> dict[str, list[dict[str, Any]]]:
    """Flatten a :class:`MemoryResult` into the plain dicts an agent runner consumes."""
    return {
        "facts": [
            {
                "id": str(f.id),
                "content": f.content,
                "valid_from": _iso(f.valid_from),
                "tags": list(f.tags),
            }
            for f in result.facts
        ],
        "entities": [
            {"id": str(e.id), "name": e.name, "type": e.entity_type} for e in result.entities
        ],
        "themes": [{"id": str(t.id), "label": t.label} for t in result.themes],
    }


def memory_retriever(
    store: MemoryStore,
    index: MemoryIndex,
    embedder: EmbeddingProvider | None = None,
    *,
    default_max_facts: int = 20,
    options: RetrievalOptions | Mapping[str, Any] | None = None,
) -> MemoryRetrieverFn:
    """Build the ``memory_retriever`` callable an agent runner injects.

    Args:
        store: The memory store.
        index: The index over the same records.
        embedder: Embeds ``text`` queries (and the ``goal`` fallback). Without one a
            text query raises ``InvalidInputError``.
        default_max_facts: ``limit`` when neither the query nor the options give
            ``max_facts`` (1-100).
        options: Passed to :func:`~cycgraph_memory.retrieval.retrieve_memory`.

    Raises:
        InvalidTypeError: ``store``, ``index`` or ``embedder`` lacks the method of its
            contract (``find_facts``, ``search_facts``, ``embed``).
        InvalidInputError: ``default_max_facts`` outside 1-100, or a Postgres ``index``
            of another tenant than the store's.

    Returns:
        ``async retrieve(query, options=None)``. ``query`` keys: ``text``, ``tags``,
        ``entity_ids``, ``max_facts``; ``options`` keys: ``max_facts``, ``goal`` (used as
        ``text`` when the query is empty). The result is
        ``{"facts": [{id, content, valid_from, tags}], "entities": [{id, name, type}],
        "themes": [{id, label}]}``.
    """
    check_method(store, "find_facts", "store", "MemoryStore")
    check_method(index, "search_facts", "index", "MemoryIndex")
    check_same_tenant(store, index=index)
    if embedder is not None:
        check_method(embedder, "embed", "embedder", "EmbeddingProvider")
    if (
        isinstance(default_max_facts, bool)
        or not isinstance(default_max_facts, int)
        or not 1 <= default_max_facts <= 100
    ):
        raise InvalidInputError(f"default_max_facts must be 1-100, got {default_max_facts!r}")

    retrieval_options = options

    async def retrieve(
        query: Mapping[str, Any] | None = None, options: Mapping[str, Any] | None = None
    ) -> dict[str, list[dict[str, Any]]]:
        q = dict(_mapping(query, "query"))
        extra = dict(_mapping(options, "options"))
        unknown = set(q) - _QUERY_KEYS
        if unknown:
            raise InvalidInputError(f"unknown memory query keys: {sorted(unknown)}")
        # ``is None`` (not ``or``): max_facts=0 is refused by the query model, not replaced.
        max_facts = q.pop("max_facts", None)
        if max_facts is None:
            max_facts = extra.get("max_facts")
        if max_facts is None:
            max_facts = default_max_facts
        if not (q.get("text") or q.get("tags") or q.get("entity_ids")) and extra.get("goal"):
            q["text"] = extra["goal"]
        memory_query = MemoryQuery.model_validate({**q, "limit": max_facts})
        result = await retrieve_memory(
            store, index, memory_query, embedder=embedder, options=retrieval_options
        )
        return memory_result_to_dicts(result)

    return retrieve


def render_memory_section(memory: Mapping[str, Sequence[Mapping[str, Any]]]) -> str:
    """Render retrieved memory as the ``## Relevant Memory`` prompt block.

    Args:
        memory: What a :func:`memory_retriever` callable returned (or the same shape).

    Returns:
        The block (facts, then entities, then themes; empty groups omitted), or ``""``
        when nothing was retrieved so the prompt gets no empty heading. Every record is
        one bullet line: line breaks inside a text are rendered as spaces, so a stored
        text cannot end the list or open a heading of its own in the prompt.
    """
    facts = list(memory.get("facts", ()))
    entities = list(memory.get("entities", ()))
    themes = list(memory.get("themes", ()))
    if not (facts or entities or themes):
        return ""
    lines = [MEMORY_SECTION_HEADING, ""]
    if facts:
        lines.append("### Facts")
        for f in facts:
            since = f.get("valid_from")
            suffix = f" (since {str(since)[:10]})" if since else ""
            lines.append(f"- {_one_line(f['content'])}{suffix}")
        lines.append("")
    if entities:
        lines.append("### Entities")
        lines.extend(f"- {_one_line(e['name'])} ({_one_line(e['type'])})" for e in entities)
        lines.append("")
    if themes:
        lines.append("### Themes")
        lines.extend(f"- {_one_line(t['label'])}" for t in themes)
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def _one_line(text: object) -> str:
    """``text`` with every run of whitespace (line breaks included) as one space."""
    return " ".join(str(text).split())


def _to_fact(raw: SemanticFact | Mapping[str, Any], now: datetime) -> SemanticFact:
    if isinstance(raw, SemanticFact):
        return raw
    if not isinstance(raw, Mapping):
        raise InvalidTypeError(f"expected a fact mapping or SemanticFact, got {type(raw).__name__}")
    unknown = set(raw) - _FACT_KEYS
    if unknown:
        raise InvalidInputError(f"unknown reflection fact keys: {sorted(unknown)}")
    prov = dict(_mapping(raw.get("provenance"), "provenance"))
    prov.setdefault("source", "agent")
    prov.setdefault("created_at", now)
    return SemanticFact(
        id=uuid.uuid4(),
        content=raw.get("content"),
        tags=string_list(raw.get("tags") or [], "tags"),
        entity_ids=string_list(raw.get("entity_ids") or [], "entity_ids"),
        source_episode_ids=string_list(
            raw.get("source_episode_ids") or [], "source_episode_ids"
        ),
        embedding=raw.get("embedding"),
        provenance=Provenance.model_validate(prov),
        valid_from=raw.get("valid_from") or now,
    )


def _check_key(key: object) -> None:
    """Refuse a key no backend can store, before anything is embedded or written."""
    if not isinstance(key, str) or not key:
        raise InvalidInputError("idempotency_key must be a non-empty string")
    if len(key) > MAX_IDEMPOTENCY_KEY_LENGTH:
        raise InvalidInputError(
            f"idempotency_key is {len(key):,} characters long; the limit is "
            f"{MAX_IDEMPOTENCY_KEY_LENGTH} (run_id:node_id:iteration is far shorter)"
        )
    if "\x00" in key:
        raise InvalidInputError("idempotency_key must not contain NUL characters")
    try:
        key.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidInputError("idempotency_key must not contain lone surrogates") from exc


def memory_writer(
    store: MemoryStore,
    *,
    index: Any = None,
    embedder: EmbeddingProvider | None = None,
    clock: Callable[[], datetime] = utc_now,
) -> MemoryWriterFn:
    """Build the ``memory_writer`` callable a reflection node calls.

    Args:
        store: Where facts go. A store with ``put_facts_once`` (both shipped backends)
            enforces the idempotency key itself, durably on Postgres (a unique key row
            written in the facts' transaction); for other stores the key is remembered
            in this callable only (per process, not durable).
        index: Optional index to update with the new facts when it has ``upsert_many``
            (the in-memory index; the Postgres index reads the table directly).
        embedder: Embeds fact contents that carry no embedding, so hierarchical
            retrieval can find them.
        clock: Time source for ``valid_from`` and ``provenance.created_at`` defaults.

    Raises:
        InvalidTypeError: ``store``, ``index`` or ``embedder`` lacks the method of its
            contract (``put_facts``, ``search_facts``, ``embed``).
        InvalidInputError: A Postgres ``index`` of another tenant than the store's.

    Returns:
        ``async write(facts, options=None) -> {"fact_ids": [...]}``. Each fact is a
        ``SemanticFact`` or a dict with ``content``, ``tags``, ``provenance`` (``source``
        defaults to ``agent``) and optionally ``entity_ids``, ``source_episode_ids``,
        ``valid_from``, ``embedding``. ``options["idempotency_key"]``
        (``run_id:node_id:iteration``, a non-empty string of at most
        :data:`MAX_IDEMPOTENCY_KEY_LENGTH` characters without NUL): a repeated key writes
        nothing and returns the first write's ids. Every fact and the key are validated
        before anything is embedded or written (``InvalidInputError`` for a bad key).
    """
    check_same_tenant(store, index=index)
    counted = _counting_writer(store, index=index, embedder=embedder, clock=clock)

    async def write(
        facts: Iterable[SemanticFact | Mapping[str, Any]],
        options: Mapping[str, Any] | None = None,
    ) -> dict[str, list[str]]:
        ids, _ = await counted(facts, options)
        return {"fact_ids": ids}

    return write


_CountingWriterFn = Callable[..., Awaitable[tuple[list[str], int]]]
"""``async write(facts, options=None) -> (fact ids, number of facts written)``."""


def _counting_writer(
    store: MemoryStore,
    *,
    index: Any = None,
    embedder: EmbeddingProvider | None = None,
    clock: Callable[[], datetime] = utc_now,
) -> _CountingWriterFn:
    """:func:`memory_writer`'s callable, also telling how many facts it wrote.

    Same arguments and checks; the callable returns ``(fact_ids, written)``, ``written``
    being 0 when a repeated ``idempotency_key`` wrote nothing (``Memory.remember`` sets
    its span's ``cycgraph.rows`` from it).
    """
    check_method(store, "put_facts", "store", "MemoryStore")
    if index is not None:
        check_method(index, "search_facts", "index", "MemoryIndex")
    if embedder is not None:
        check_method(embedder, "embed", "embedder", "EmbeddingProvider")
    seen: dict[str, list[uuid.UUID]] = {}
    lock = asyncio.Lock()
    put_once = getattr(store, "put_facts_once", None)

    async def _embed(records: list[SemanticFact]) -> list[SemanticFact]:
        missing = [i for i, r in enumerate(records) if r.embedding is None]
        out = list(records)
        if embedder is not None and missing:
            vectors = await embedder.embed([records[i].content for i in missing])
            if len(vectors) != len(missing):
                raise InvalidInputError(
                    f"embedder returned {len(vectors)} vectors for {len(missing)} texts"
                )
            for i, v in zip(missing, vectors, strict=True):
                out[i] = validate_record(
                    SemanticFact, records[i].model_copy(update={"embedding": list(v)})
                )
        # The index's width is checked before anything is written: a fact stored but
        # refused by the index afterwards would be unsearchable, and its key used up.
        width = getattr(index, "dimensions", None)
        if isinstance(width, int):
            for r in out:
                if r.embedding is not None and len(r.embedding) != width:
                    raise EmbeddingDimensionMismatchError(
                        width, len(r.embedding), f"fact {r.id} embedding"
                    )
        return out

    async def _index(records: Iterable[SemanticFact]) -> None:
        upsert = getattr(index, "upsert_many", None)
        if upsert is not None:
            upsert([r for r in records if r.embedding is not None])

    async def write(
        facts: Iterable[SemanticFact | Mapping[str, Any]],
        options: Mapping[str, Any] | None = None,
    ) -> tuple[list[str], int]:
        if isinstance(facts, Mapping | str | SemanticFact):
            raise InvalidTypeError("expected a list of facts, got a single value")
        if not isinstance(facts, Iterable):
            raise InvalidTypeError(f"expected a list of facts, got {type(facts).__name__}")
        key = _mapping(options, "options").get("idempotency_key")
        now = clock()
        records = [_to_fact(f, now) for f in facts]
        if key is not None:
            _check_key(key)
        if key is None:
            records = await _embed(records)
            await store.put_facts(records)
            await _index(records)
            return [str(r.id) for r in records], len(records)
        if put_once is not None:
            # Optional store capability: a repeated key (a retried node) is answered
            # before the embedder is called again; put_facts_once stays the authority.
            lookup = getattr(store, "writer_key_ids", None)
            done = await lookup(key) if lookup is not None else None
            if done is not None:
                return [str(i) for i in done], 0
            records = await _embed(records)
            ids, wrote = await put_once(key, records)
            if wrote:
                await _index(records)
            return [str(i) for i in ids], len(records) if wrote else 0
        async with lock:
            if key in seen:
                return [str(i) for i in seen[key]], 0
            records = await _embed(records)
            await store.put_facts(records)
            seen[key] = [r.id for r in records]
        await _index(records)
        return [str(r.id) for r in records], len(records)

    return write

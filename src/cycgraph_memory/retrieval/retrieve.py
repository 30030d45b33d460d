"""``retrieve_memory``: the single read entry point, dispatching on the query's shape.

Strategy, checked in this order (the spec's):

1. ``entity_ids`` -> subgraph path: :func:`extract_subgraph`, then the facts mentioning
   the visited entities, their themes and episodes;
2. ``embedding`` (or ``text`` embedded with the given ``EmbeddingProvider``) ->
   hierarchical path: themes by similarity -> their facts, plus a direct fact search ->
   fact filters -> one similarity ranking -> ``limit`` -> episodes, entities and
   relationships of the served facts;
3. ``tags`` only -> tag listing (facts only, store order ``(valid_from, id)``);
4. otherwise an empty result.

Path 2 has three modes (``mode=``): ``"vector"`` (the hierarchical path above),
``"text"`` (lexical search only, no embedder needed) and ``"hybrid"`` (vector and text
signals fused by reciprocal rank, see :mod:`cycgraph_memory.retrieval.hybrid`). The
default is ``"hybrid"`` when the query has text, a vector (or an embedder) and the index
offers text search, else ``"vector"``. Every mode also returns ``messages`` (the turns
behind the served facts and the directly matched turns) and ``fact_scores``.

Every path applies the query's tag scope, ``valid_at`` / ``changed_since``,
``include_invalidated``, ``entity_types`` / ``relation_types`` and ``limit`` (per record
type); without ``include_invalidated`` a relationship is served only when both its
endpoints are live entities (the subgraph never visits a dead one; the expansion of the
served facts drops an edge leading to one before the ``limit`` cut); quarantined facts
are excluded unless the query's tags name ``quarantined``; the served facts are touched
with one batched ``touch_facts`` call when the store has it (the returned facts show the
counters as read, before that touch).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping, Sequence
from contextlib import nullcontext
from typing import Any

from pydantic import ValidationError

from cycgraph_memory._construct import trusted
from cycgraph_memory._validate import check_same_tenant
from cycgraph_memory.contracts import EmbeddingProvider, MemoryIndex, MemoryStore, embed_queries
from cycgraph_memory.errors import InvalidInputError, InvalidTypeError
from cycgraph_memory.observability import span, tenant_of
from cycgraph_memory.records import (
    DEFAULT_MAX_SUBGRAPH_ENTITIES,
    Entity,
    Episode,
    FactScore,
    MemoryQuery,
    MemoryResult,
    Relationship,
    RetrievalOptions,
    SemanticFact,
    Theme,
)
from cycgraph_memory.retrieval.hybrid import (
    GRAPH_COUNT_CAP,
    RetrievalMode,
    entity_match_fetch,
    hybrid_candidates,
    message_signals,
    supports_text_search,
)
from cycgraph_memory.retrieval.pipeline import (
    MAX_SEARCH_FETCH,
    FactScope,
    by_citation,
    cut,
    entity_is_live,
    filter_entities,
    filter_relationships,
    merge_unique,
    ordered_ids,
    rank_by_similarity,
    rank_relationships,
    rank_subgraph_facts,
    rank_themes,
)
from cycgraph_memory.retrieval.subgraph import extract_subgraph

__all__ = ["DEFAULT_RETRIEVAL_OPTIONS", "coerce_query", "retrieve_memory"]

_log = logging.getLogger(__name__)

DEFAULT_RETRIEVAL_OPTIONS = RetrievalOptions()
"""The default tuning (frozen; derive variants with ``model_copy(update=...)``)."""


def coerce_query(query: MemoryQuery | Mapping[str, Any]) -> MemoryQuery:
    """Validate a query given as a model or a plain dict (before any I/O).

    Raises:
        pydantic.ValidationError: Out-of-range ``limit`` (1-100), ``max_hops`` (0-5),
            ``min_similarity`` (0-1), unknown keys, malformed values.
        InvalidTypeError: Neither a ``MemoryQuery`` nor a mapping (also a ``TypeError``).
    """
    if isinstance(query, MemoryQuery):
        # Re-validate: a model built with model_construct or mutated unsafely is checked too.
        return MemoryQuery.model_validate(query.model_dump())
    if isinstance(query, Mapping):
        return MemoryQuery.model_validate(dict(query))
    raise InvalidTypeError(f"expected a MemoryQuery or a mapping, got {type(query).__name__}")


def _coerce_options(options: RetrievalOptions | Mapping[str, Any] | None) -> RetrievalOptions:
    if options is None:
        return DEFAULT_RETRIEVAL_OPTIONS
    if isinstance(options, RetrievalOptions):
        return options
    if isinstance(options, Mapping):
        return RetrievalOptions.model_validate(dict(options))
    raise InvalidTypeError(
        f"expected RetrievalOptions or a mapping, got {type(options).__name__}"
    )


async def retrieve_memory(
    store: MemoryStore,
    index: MemoryIndex,
    query: MemoryQuery | Mapping[str, Any],
    *,
    embedder: EmbeddingProvider | None = None,
    options: RetrievalOptions | Mapping[str, Any] | None = None,
    mode: RetrievalMode | None = None,
) -> MemoryResult:
    """Retrieve memory for one query (strategy by query shape; see the module docstring).

    Args:
        store: The ``MemoryStore`` to read.
        index: The ``MemoryIndex`` over the same records (hierarchical path).
        query: A :class:`MemoryQuery` or a dict with the same keys.
        embedder: Embeds ``text`` when the query carries text but no embedding.
        options: Bounds of the paths (:class:`RetrievalOptions`); defaults documented
            there.
        mode: ``"vector"``, ``"text"`` or ``"hybrid"`` for queries with text or an
            embedding (see the module docstring); ``None`` picks hybrid when both signals
            exist.

    Returns:
        Themes, facts, episodes, entities and relationships, each at most ``limit`` long
        and deterministically ordered.

    Raises:
        pydantic.ValidationError: An invalid query or options (nothing was read).
        InvalidInputError: ``text`` without ``embedding`` and without an ``embedder``,
            an embedder that returned no vector, or a Postgres ``index`` of another
            tenant than the store's (checked after the query, before anything is read).
        EmbeddingDimensionMismatchError: The query vector does not fit the index.
    """
    q = coerce_query(query)
    opts = _coerce_options(options)
    if mode is not None and mode not in ("vector", "text", "hybrid"):
        raise InvalidInputError(f"mode must be 'vector', 'text' or 'hybrid', got {mode!r}")
    check_same_tenant(store, index=index)
    with span("cycgraph.retrieve", tenant=tenant_of(store), mode=mode) as sp:
        result = await _retrieve(store, index, q, embedder, opts, mode)
        sp.set(rows=len(result.facts))
    return result


async def _retrieve(
    store: MemoryStore,
    index: MemoryIndex,
    q: MemoryQuery,
    embedder: EmbeddingProvider | None,
    opts: RetrievalOptions,
    mode: RetrievalMode | None,
) -> MemoryResult:
    text_only = mode == "text" and q.text is not None and not q.entity_ids
    if not text_only and not q.entity_ids and q.embedding is None and q.text is not None:
        if embedder is None:
            raise InvalidInputError(
                "query has text but no embedding: pass embedder=... to retrieve_memory "
                "(or give the query an embedding)"
            )
        q = await _embed_query(q, embedder)
    if not (q.entity_ids or q.embedding is not None or q.tags or text_only):
        return MemoryResult()
    # Optional store capability: consecutive store calls share one session.
    read_scope = getattr(store, "read_scope", None)
    async with read_scope() if read_scope is not None else nullcontext():
        if q.entity_ids:
            return await _subgraph_path(store, q, opts)
        if text_only:
            return await _fused_path(store, index, q, opts, "text")
        if q.embedding is not None:
            if mode is None:
                both = q.text is not None and supports_text_search(index)
                mode = "hybrid" if both else "vector"
            if mode == "vector":
                reader, searcher = await _prefetched(store, index, q, opts, "vector")
                result, sims = await _hierarchical_path(
                    store, index, q, opts, (reader, searcher)
                )
                return await _with_messages(reader, searcher, q, opts, result, sims)
            return await _fused_path(store, index, q, opts, mode)
        return await _tag_path(store, q, opts)


async def _embed_query(q: MemoryQuery, embedder: EmbeddingProvider) -> MemoryQuery:
    assert q.text is not None
    vectors = await embed_queries(embedder, [q.text])  # embed_query when it has one
    if len(vectors) != 1:
        raise InvalidInputError(f"embedder returned {len(vectors)} vectors for one text")
    try:
        return q.model_copy(update={"embedding": MemoryQuery(embedding=vectors[0]).embedding})
    except ValidationError as exc:
        raise InvalidInputError(f"embedder returned an invalid vector: {exc}") from exc


async def _touch(store: MemoryStore, facts: Sequence[SemanticFact]) -> None:
    touch = getattr(store, "touch_facts", None)
    if touch is not None and facts:
        await touch([f.id for f in facts])


# ----------------------------------------------------------------------------- paths


async def _hierarchical_path(
    store: MemoryStore,
    index: MemoryIndex,
    q: MemoryQuery,
    opts: RetrievalOptions,
    views: tuple[Any, Any] | None = None,
) -> tuple[MemoryResult, list[float]]:
    """The hierarchical result and the served facts' similarities (from the ranking)."""
    reader, searcher = views or (store, index)
    ranked, themes = await _vector_ranking(reader, searcher, q, opts, depth=q.limit)
    served = ranked[: q.limit]
    facts = await _current_facts(store, q, _complete(searcher, [f for f, _ in served]))
    if len(facts) != len(served):
        kept = {f.id for f in facts}
        served = [(f, s) for f, s in served if f.id in kept]
    result = await _expand(store, q, facts, themes=cut(themes, q.limit), touch=True)
    return result, [s for _, s in served]


async def _current_facts(
    store: MemoryStore, q: MemoryQuery, facts: list[SemanticFact]
) -> list[SemanticFact]:
    """The served facts as the store holds them now, those the query no longer admits out.

    An index keeps its own copies of the records (the in-memory one does): a fact the
    store has since invalidated, quarantined, re-tagged or deleted without the index
    being told would otherwise be served as the index last saw it. A store that expands
    served facts natively (Postgres: ``expand_facts``) is read by an index over the same
    tables, so its facts are current already.
    """
    if not facts or getattr(store, "expand_facts", None) is not None:
        return facts
    found = await store.get_facts([f.id for f in facts])
    scope = FactScope.for_query(q)
    return [found[f.id] for f in facts if f.id in found and scope.admits(found[f.id])]


async def _current_themes(
    store: MemoryStore, q: MemoryQuery, themes: list[Theme]
) -> list[Theme]:
    """The matched themes as the store holds them now (see :func:`_current_facts`).

    A theme the store has since soft-deleted (unless the query includes invalidated
    records) or deleted is dropped; the others are the store's records (label, members).
    """
    if not themes or getattr(store, "expand_facts", None) is not None:
        return themes
    found = await store.get_themes([t.id for t in themes])
    return [
        found[t.id]
        for t in themes
        if t.id in found and (q.include_invalidated or found[t.id].invalidated_at is None)
    ]


async def _vector_ranking(
    store: MemoryStore,
    index: MemoryIndex,
    q: MemoryQuery,
    opts: RetrievalOptions,
    *,
    depth: int | None = None,
) -> tuple[list[tuple[SemanticFact, float]], list[Theme]]:
    """The hierarchical path's candidates ranked by similarity, and the matched themes.

    ``depth``: the caller keeps only the first ``depth`` facts of the ranking, so a
    native backend may read only the ``depth`` best theme facts (by its own distances,
    keeping the near ties past the last of them that rounding could order differently
    here); ``None`` ranks every candidate.
    The vector mode keeps ``limit`` facts, the hybrid mode :func:`vector_depth`.
    """
    assert q.embedding is not None
    vector = q.embedding
    scope = FactScope.for_query(q)
    native = getattr(index, "hierarchical_candidates", None) if opts.native_paths else None
    fetch = opts.direct_fact_candidates or min(MAX_SEARCH_FETCH, 2 * q.limit)
    # The temporal filters apply after the direct search: when they drop so many of its
    # hits that fewer than the facts wanted pass, a default-sized search is widened
    # (4 times per round, up to MAX_SEARCH_FETCH) until enough pass or it is exhausted,
    # so a valid fact is never lost behind better-matching expired ones. Enough: as many
    # as the first search would bring without the filters, at most the facts kept.
    wanted = min(fetch, q.limit if depth is None else max(depth, q.limit))
    while True:
        if native is not None:
            # The cut arguments are passed only when wanted, so an index written against
            # the earlier signature keeps working.
            cut_args: dict[str, Any] = {}
            if depth is not None:
                cut_args = {"theme_fact_limit": depth, "valid_at": scope.valid_at,
                            "changed_since": scope.changed_since}
            found_themes, direct, theme_facts = await native(
                vector,
                theme_limit=opts.theme_limit,
                max_facts_per_theme=opts.max_facts_per_theme,
                fact_limit=fetch,
                min_similarity=q.min_similarity,
                include_invalidated=q.include_invalidated,
                tags=sorted(scope.tags) or None,
                exclude_tags=sorted(scope.exclude_tags) or None,
                **cut_args,
            )
            themes = rank_themes(found_themes, vector, q.min_similarity)
        else:
            themes, direct, theme_facts = await _candidates(store, index, q, opts, scope, fetch)
        wider = scope.widened(
            fetch, returned=len(direct), candidates=direct,
            wanted=wanted, fixed=opts.direct_fact_candidates is not None,
        )
        if wider is None:
            break
        fetch = wider
    # One similarity ranking over every candidate, then the cut.
    candidates = scope.apply(merge_unique(direct, theme_facts))
    # Optional index capability: the candidates' vectors as arrays (a prefetching index
    # decodes them into lists only for the facts it serves, see _complete).
    vectors = getattr(index, "candidate_vectors", None)
    embeddings = vectors(candidates) if vectors is not None else None
    ranked = rank_by_similarity(candidates, vector, q.min_similarity, embeddings)
    return ranked, themes


def vector_depth(q: MemoryQuery, opts: RetrievalOptions) -> int:
    """How many facts of the vector ranking the hybrid mode fuses (``vector_candidates``)."""
    return opts.vector_candidates or min(1000, 4 * q.limit)


def _complete(index: Any, facts: list[SemanticFact]) -> list[SemanticFact]:
    """The served facts with every field set (see ``candidate_vectors``)."""
    complete = getattr(index, "complete_facts", None)
    if complete is not None:
        complete(facts)
    return facts


async def _candidates(
    store: MemoryStore,
    index: MemoryIndex,
    q: MemoryQuery,
    opts: RetrievalOptions,
    scope: FactScope,
    fetch: int,
) -> tuple[list[Theme], list[SemanticFact], list[SemanticFact]]:
    """Matched themes, ``fetch`` direct fact hits and the themes' other facts (contract calls)."""
    assert q.embedding is not None
    vector = q.embedding
    themes: list[Theme] = []
    if opts.theme_limit:
        hits = await index.search_themes(
            vector,
            limit=opts.theme_limit,
            min_similarity=q.min_similarity,
            include_invalidated=q.include_invalidated,
        )
        themes = rank_themes(
            await _current_themes(store, q, [h.item for h in hits]), vector, q.min_similarity
        )
    theme_fact_ids = ordered_ids(t.fact_ids[: opts.max_facts_per_theme] for t in themes)
    # A direct fact search for coverage (tag scope pushed into the index).
    direct = await index.search_facts(
        vector,
        limit=fetch,
        min_similarity=q.min_similarity,
        include_invalidated=q.include_invalidated,
        tags=sorted(scope.tags) or None,
        exclude_tags=sorted(scope.exclude_tags) or None,
    )
    # Facts the direct search already returned are not read again.
    direct_ids = {h.item.id for h in direct}
    theme_fact_ids = [i for i in theme_fact_ids if i not in direct_ids]
    found = await store.get_facts(theme_fact_ids) if theme_fact_ids else {}
    return themes, [h.item for h in direct], by_citation(found, theme_fact_ids)


async def _fused_path(
    store: MemoryStore,
    index: MemoryIndex,
    q: MemoryQuery,
    opts: RetrievalOptions,
    mode: RetrievalMode,
) -> MemoryResult:
    vector: tuple[list[tuple[SemanticFact, float]], list[Theme]] | None = None
    reader, searcher = await _prefetched(store, index, q, opts, mode)
    if mode == "hybrid":
        depth = vector_depth(q, opts)
        ranked, themes = await _vector_ranking(reader, searcher, q, opts, depth=depth)
        vector = (ranked[:depth], themes)
    facts, scores, messages, themes = await hybrid_candidates(
        reader, searcher, q, opts, mode, vector=vector
    )
    facts = await _current_facts(store, q, _complete(searcher, facts))
    if len(facts) != len(scores):
        kept = {f.id for f in facts}
        scores = {k: v for k, v in scores.items() if k in kept}
    result = await _expand(store, q, facts, themes=themes, touch=True)
    result.messages = messages
    result.fact_scores = scores
    return result


async def _prefetched(
    store: MemoryStore,
    index: MemoryIndex,
    q: MemoryQuery,
    opts: RetrievalOptions,
    mode: RetrievalMode,
) -> tuple[Any, Any]:
    """The store and index to read the signals through.

    Optional index capability (``prefetch_signals``): the candidates of every signal in
    one statement, and stand-ins for the store and the index that answer the planned
    calls from it (each exactly as the call itself would) and pass any other call on.
    """
    prefetch = getattr(index, "prefetch_signals", None) if opts.native_paths else None
    if prefetch is None:
        return store, index
    views: tuple[Any, Any] = await prefetch(store, **_signal_plan(q, opts, mode))
    return views


def _signal_plan(q: MemoryQuery, opts: RetrievalOptions, mode: RetrievalMode) -> dict[str, Any]:
    """The index and store calls a fused retrieval makes, with their exact arguments.

    What ``_vector_ranking`` and ``hybrid_candidates`` will ask for this query, so that an
    index able to run them at once (``prefetch_signals``) can; a call not planned here, or
    planned with other arguments, simply runs on its own.
    """
    scope = FactScope.for_query(q)
    tags = sorted(scope.tags) or None
    exclude = sorted(scope.exclude_tags) or None
    use_vector = mode in ("vector", "hybrid") and q.embedding is not None
    use_text = mode in ("text", "hybrid") and q.text is not None
    depth = opts.text_candidates or min(1000, 4 * q.limit)
    plan: dict[str, Any] = {}
    if use_vector:
        hierarchical: dict[str, Any] = {
            "theme_limit": opts.theme_limit,
            "max_facts_per_theme": opts.max_facts_per_theme,
            "fact_limit": opts.direct_fact_candidates or min(1000, 2 * q.limit),
            "min_similarity": q.min_similarity,
            "include_invalidated": q.include_invalidated,
            "tags": tags,
            "exclude_tags": exclude,
        }
        # _vector_ranking(depth=...): q.limit (_hierarchical_path), vector_depth (hybrid).
        ranked_depth = q.limit if mode == "vector" else vector_depth(q, opts)
        hierarchical.update(theme_fact_limit=ranked_depth, valid_at=scope.valid_at,
                            changed_since=scope.changed_since)
        plan["hierarchical"] = (q.embedding, hierarchical)
    if use_text:
        assert q.text is not None
        plan["text_facts"] = (q.text, {
            "limit": depth, "include_invalidated": q.include_invalidated,
            "tags": tags, "exclude_tags": exclude,
        })
        if opts.entity_match_limit:
            plan["entity_names"] = (q.text, {
                "limit": entity_match_fetch(q, opts),
                "include_invalidated": q.include_invalidated,
            })
            plan["entity_count_cap"] = GRAPH_COUNT_CAP
            plan["entity_facts"] = {
                "per_entity_limit": depth,
                "include_invalidated": scope.include_invalidated,
                "tags": tags,
                "exclude_tags": exclude,
                "valid_at": scope.valid_at,
                "changed_since": scope.changed_since,
            }
    message_limit = q.limit if opts.message_limit is None else opts.message_limit
    if message_limit and not q.tags:
        candidates = opts.message_candidates or min(1000, 2 * q.limit)
        if use_vector:
            plan["messages_knn"] = (q.embedding, {
                "limit": candidates, "min_similarity": q.min_similarity,
                "include_invalidated": q.include_invalidated,
            })
        if use_text:
            plan["messages_text"] = (q.text, {
                "limit": candidates, "include_invalidated": q.include_invalidated,
            })
        if opts.episode_weight > 0.0:  # message_signals: the episode lists
            episode_limit = opts.episode_candidates or q.limit
            if use_vector:
                plan["episodes_knn"] = (q.embedding, {
                    "limit": episode_limit, "min_similarity": q.min_similarity,
                    "include_invalidated": q.include_invalidated,
                })
            if use_text:
                plan["episodes_text"] = (q.text, {
                    "limit": episode_limit, "include_invalidated": q.include_invalidated,
                })
    return plan


async def _with_messages(
    store: MemoryStore,
    index: MemoryIndex,
    q: MemoryQuery,
    opts: RetrievalOptions,
    result: MemoryResult,
    sims: Sequence[float],
) -> MemoryResult:
    """Add the vector mode's messages and score breakdowns to a hierarchical result.

    ``sims``: the served facts' cosine similarities, as the ranking computed them.
    """
    assert q.embedding is not None
    # Library-computed values of the right types: built without re-validation.
    result.fact_scores = {
        f.id: trusted(
            FactScore, vector_rank=i + 1, vector_score=s, text_rank=None, text_score=None,
            graph_distance=None, graph_weight=None, fused_score=1.0 / (opts.rrf_k + i + 1),
        )
        for i, (f, s) in enumerate(zip(result.facts, sims, strict=True))
    }
    result.messages = await message_signals(
        store, index, q, opts, {"vector": result.facts}, use_vector=True, use_text=False
    )
    return result


async def _expand(
    store: MemoryStore,
    q: MemoryQuery,
    facts: list[SemanticFact],
    *,
    themes: list[Theme],
    touch: bool = False,
) -> MemoryResult:
    """Episodes, entities and relationships of the served facts (hierarchical path).

    The relationships are those touching a served entity and, unless the query includes
    invalidated records, leading to a live entity (the entity path's rule, see
    :func:`_relationships_of`); the ``limit`` cut comes after every filter.
    ``touch``: also touch the served facts (after reading them), with the expansion when
    the store can do both in one call. Under a tag scope (``q.tags``) a matched theme is
    served only when it lists one of the served facts: a theme carries no tags, and one
    made of another scope's facts would leak that scope into the result.
    """
    if q.tags:
        served = {f.id for f in facts}
        themes = [t for t in themes if not served.isdisjoint(t.fact_ids)]
    entity_ids = ordered_ids(f.entity_ids for f in facts)
    # Store order (valid_from, id) is the ranking of relationships here: without
    # post-filters the store can cut at the limit itself.
    post = q.valid_at or q.changed_since or q.relation_types
    # Optional store capability: entities, their relationships, the episodes and the
    # touch of the served facts in one call (one statement on Postgres).
    native = getattr(store, "expand_facts", None) if touch else None
    fetched: list[Relationship] = []
    touched = False
    if native is not None:
        episode_ids = ordered_ids(f.source_episode_ids for f in facts)
        found, fetched, touched, found_episodes, _ = await native(
            entity_ids,
            include_invalidated=q.include_invalidated,
            entity_types=q.entity_types,
            relationship_limit=None if post else q.limit,
            touch=[f.id for f in facts],
            episode_ids=episode_ids,
            entity_limit=q.limit,  # only the entities served are read whole
        )
        episodes = _cited_episodes(q, found_episodes, episode_ids)
    else:
        episodes = await _episodes_of(store, q, facts)
        found = await store.get_entities(entity_ids) if entity_ids else {}
    entities = filter_entities(
        by_citation(found, entity_ids),
        include_invalidated=q.include_invalidated,
        entity_types=q.entity_types,
    )
    relationships: list[Relationship] = []
    if entities:
        ids = [e.id for e in entities]
        if native is None:
            fetched = await _relationships_of(
                store, q, ids, found, limit=None if post else q.limit
            )
        kept = filter_relationships(
            fetched,
            include_invalidated=q.include_invalidated,
            valid_at=q.valid_at,
            changed_since=q.changed_since,
            relation_types=q.relation_types,
        )
        if native is None:
            relationships = rank_relationships(kept, dict.fromkeys(ids, 0))
        else:
            # Each touches a cited entity (hop 0), not necessarily one of the ``limit``
            # served in ``entities``: the hop ranking is (valid_from, id).
            relationships = sorted(kept, key=lambda r: (r.valid_from, r.id.int))
    if touch and not touched:
        await _touch(store, facts)
    return MemoryResult(
        themes=themes,
        facts=facts,
        episodes=episodes,
        entities=cut(entities, q.limit),
        relationships=cut(relationships, q.limit),
    )


async def _relationships_of(
    store: MemoryStore,
    q: MemoryQuery,
    ids: list[uuid.UUID],
    known: Mapping[uuid.UUID, Entity],
    *,
    limit: int | None,
) -> list[Relationship]:
    """The edges touching ``ids`` the query admits, in store order, at most ``limit``.

    Unless the query includes invalidated records, an edge is served only when both its
    endpoints are live entities: the entity path never visits an invalidated or
    superseded entity, so it never returns an edge leading to one. The endpoints not in
    ``known`` are read (one ``get_entities`` call per page of edges). The edges are read
    in pages from ``limit`` on, so the ``limit`` cut comes after this filter (a dead
    endpoint among the first ``limit`` edges does not leave the result short).
    """
    if q.include_invalidated:
        return await store.get_relationships_for_entities(
            ids, include_invalidated=True, limit=limit
        )
    live = {i for i, e in known.items() if entity_is_live(e)}
    dead = set(known) - live
    kept: list[Relationship] = []
    offset, page = 0, limit
    while True:
        batch = await store.get_relationships_for_entities(
            ids, include_invalidated=False, limit=page, offset=offset
        )
        unknown = {i for r in batch for i in (r.source_id, r.target_id)} - live - dead
        if unknown:
            got = await store.get_entities(sorted(unknown, key=str))
            for i in unknown:
                (live if i in got and entity_is_live(got[i]) else dead).add(i)
        kept.extend(r for r in batch if r.source_id in live and r.target_id in live)
        if page is None or len(batch) < page or (limit is not None and len(kept) >= limit):
            return kept if limit is None else kept[:limit]
        offset += page
        page *= 4


async def _episodes_of(
    store: MemoryStore, q: MemoryQuery, facts: Sequence[SemanticFact]
) -> list[Episode]:
    episode_ids = ordered_ids(f.source_episode_ids for f in facts)
    if not episode_ids:
        return []
    return _cited_episodes(q, await store.get_episodes(episode_ids), episode_ids)


def _cited_episodes(
    q: MemoryQuery, found: Mapping[uuid.UUID, Episode], episode_ids: Sequence[uuid.UUID]
) -> list[Episode]:
    """The episodes in citation order, live unless the query includes invalidated ones."""
    episodes = [
        e
        for e in by_citation(found, episode_ids)
        if q.include_invalidated or e.invalidated_at is None
    ]
    return cut(episodes, q.limit)


async def _subgraph_path(
    store: MemoryStore, q: MemoryQuery, opts: RetrievalOptions
) -> MemoryResult:
    assert q.entity_ids
    sub = await extract_subgraph(
        store,
        q.entity_ids,
        max_hops=q.max_hops,
        valid_at=q.valid_at,
        include_invalidated=q.include_invalidated,
        max_entities=DEFAULT_MAX_SUBGRAPH_ENTITIES,
        relation_types=q.relation_types,
        native=opts.native_paths,
    )
    entities: list[Entity] = filter_entities(
        sub.entities, include_invalidated=q.include_invalidated, entity_types=q.entity_types
    )
    scope = FactScope.for_query(q)
    facts: list[SemanticFact] = []
    if entities:
        order = [e.id for e in entities]
        by_entity = await _facts_of_ranked_entities(
            store, order, q.limit, opts.max_facts_per_entity or q.limit, scope,
            first_chunk=sum(1 for e in entities if sub.hops.get(e.id) == 0),
        )
        facts = cut(scope.apply(rank_subgraph_facts(by_entity, order)), q.limit)
    relationships = rank_relationships(
        filter_relationships(
            sub.relationships,
            include_invalidated=q.include_invalidated,
            valid_at=q.valid_at,
            changed_since=q.changed_since,
            relation_types=q.relation_types,
        ),
        sub.hops,
    )
    theme_ids = ordered_ids([f.theme_id] for f in facts if f.theme_id is not None)
    # Optional store capability: the themes, the episodes and the touch of the served
    # facts in one call (one statement on Postgres; no entity to expand here).
    native = getattr(store, "expand_facts", None) if opts.native_paths else None
    if native is not None:
        episode_ids = ordered_ids(f.source_episode_ids for f in facts)
        _, _, touched, found_episodes, found_themes = await native(
            [], include_invalidated=q.include_invalidated, entity_types=None,
            relationship_limit=0, touch=[f.id for f in facts], episode_ids=episode_ids,
            theme_ids=theme_ids,
        )
        episodes = _cited_episodes(q, found_episodes, episode_ids)
        if not touched:
            await _touch(store, facts)
    else:
        found_themes = await store.get_themes(theme_ids) if theme_ids else {}
        episodes = await _episodes_of(store, q, facts)
        await _touch(store, facts)
    themes = [
        t
        for t in by_citation(found_themes, theme_ids)
        if q.include_invalidated or t.invalidated_at is None
    ]
    return MemoryResult(
        themes=cut(themes, q.limit),
        facts=facts,
        episodes=episodes,
        entities=cut(entities, q.limit),
        relationships=cut(relationships, q.limit),
    )


async def _facts_of_ranked_entities(
    store: MemoryStore,
    order: list[uuid.UUID],
    limit: int,
    per_entity: int,
    scope: FactScope,
    *,
    first_chunk: int,
) -> dict[uuid.UUID, list[SemanticFact]]:
    """Facts of the best-ranked entities, fetched in growing chunks of the ranking.

    Facts rank by their best entity first, so once the entities fetched so far carry
    ``limit`` distinct facts, no fact of a later entity can enter the top ``limit``: the
    remaining entities are not read. One store call per chunk (usually one in all).
    """
    found: dict[uuid.UUID, list[SemanticFact]] = {}
    seen: set[uuid.UUID] = set()
    start, chunk = 0, max(1, first_chunk)
    while start < len(order):
        part = await store.get_facts_for_entities(
            order[start : start + chunk],
            per_entity_limit=per_entity,
            include_invalidated=scope.include_invalidated,
            tags=sorted(scope.tags) or None,
            exclude_tags=sorted(scope.exclude_tags) or None,
            valid_at=scope.valid_at,
            changed_since=scope.changed_since,
        )
        found.update(part)
        seen.update(f.id for facts in part.values() for f in facts)
        start += chunk
        if len(seen) >= limit:
            break
        chunk *= 4
    return found


async def _tag_path(store: MemoryStore, q: MemoryQuery, opts: RetrievalOptions) -> MemoryResult:
    scope = FactScope.for_query(q)
    # Optional store capability: the listing and the touch of what it lists in one call
    # (one statement on Postgres). Without a temporal condition the first page is served
    # whole (every other condition is applied by the listing itself).
    list_and_touch = getattr(store, "list_and_touch_facts", None)
    if list_and_touch is not None and not scope.temporal and scope.tags:
        served: list[SemanticFact] = await list_and_touch(
            tags=sorted(scope.tags),
            exclude_tags=sorted(scope.exclude_tags) or None,
            include_invalidated=q.include_invalidated,
            limit=q.limit,
        )
        return MemoryResult(facts=cut(scope.apply(served), q.limit))
    page = q.limit
    if scope.temporal:
        page = opts.tag_page_size or max(4 * q.limit, 100)
    facts: list[SemanticFact] = []
    offset = 0
    while len(facts) < q.limit:
        batch = await store.find_facts(
            tags=sorted(scope.tags),
            exclude_tags=sorted(scope.exclude_tags) or None,
            include_invalidated=q.include_invalidated,
            limit=page,
            offset=offset,
        )
        facts.extend(scope.apply(batch))
        if len(batch) < page:
            break
        offset += page
    facts = cut(facts, q.limit)
    await _touch(store, facts)
    return MemoryResult(facts=facts)

"""Hybrid retrieval: vector and text signals fused by reciprocal rank (the text/hybrid modes).

``retrieve_memory(..., mode=...)`` runs this path for ``mode="text"`` and
``mode="hybrid"`` (the default when the query has text, a vector is available and the
index offers text search). Signals, each one index call:

* facts, vector: themes by similarity -> their facts, plus a direct kNN (exactly the
  hierarchical path's candidates), filtered by the query's fact scope and ranked by
  cosine similarity, its first ``RetrievalOptions.vector_candidates`` fused (default
  ``4 * limit``, the text signal's depth); ``min_similarity`` applies to this signal;
* facts, text: ``index.text_search_facts`` (BM25 over ``textsearch.tokenize``, the same
  ranking on both backends), tag scope pushed into the index, then the same fact scope;
* messages, vector and text: ``index.search_messages`` / ``index.text_search_messages``;
* graph (text and hybrid modes, when the index has ``match_entity_names``): the entities
  whose name appears in the question (at most ``entity_match_limit``, of the query's
  ``entity_types`` when given, filtered before the limit among the first
  ``GRAPH_TYPED_MATCH_FETCH`` named; read back from the store when the index keeps its
  own copies, so one soft-deleted since is dropped), each weighed by its specificity
  (:func:`entity_specificity`: its IDF over the tenant's facts, from the index's
  ``entity_fact_counts``, scaled to 0-1). An entity below ``GRAPH_CONTEXT_SPECIFICITY``
  (a participant of the conversation, cited by a large share of the facts) is context and
  is ignored; every other one gives one list of its facts (``store.get_facts_for_entities``,
  same fact scope), ordered by their best rank in the other fact signals, then newest
  first, with RRF weight ``graph_weight * specificity``; graph distance 0.

Facts are ordered by RRF over their signals (``RetrievalOptions.rrf_k``; text signals
weigh ``text_weight``, each graph list ``graph_weight`` times its entity's specificity,
vector signals 1), ties by the
best raw score, then id, and cut to ``limit``; each gets a :class:`FactScore`. Messages
are ordered by one RRF at the message level (:func:`message_signals`): each fact signal
projected to the messages grounding its first ``message_candidates`` facts (the fact
weights), the direct message hits by vector and by text (``message_hit_weight`` each) and
the messages of the episodes found by vector and by text (``episode_weight`` each); they
are cut to ``message_limit``. When the query has tags, messages come only from the fact
lists (a direct message or episode hit cannot be scoped by tags); ``valid_at`` /
``changed_since`` drop messages sent after ``valid_at`` / not after ``changed_since``.
Served facts are touched once; episodes, entities and relationships are those of the
served facts, as on the hierarchical path.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Mapping, Sequence
from operator import attrgetter
from typing import Any, Literal

from cycgraph_memory.contracts import MemoryIndex, MemoryStore
from cycgraph_memory.errors import InvalidInputError
from cycgraph_memory.records import (
    FactScore,
    MemoryQuery,
    Message,
    RetrievalOptions,
    SemanticFact,
    Theme,
)
from cycgraph_memory.retrieval.fusion import rrf_fuse
from cycgraph_memory.retrieval.pipeline import (
    MAX_SEARCH_FETCH,
    FactScope,
    cut,
    entity_is_live,
    ordered_ids,
)

__all__ = [
    "GRAPH_CONTEXT_SPECIFICITY",
    "GRAPH_COUNT_CAP",
    "GRAPH_TYPED_MATCH_FETCH",
    "RetrievalMode",
    "entity_match_fetch",
    "entity_specificity",
    "hybrid_candidates",
    "message_signals",
    "project_to_messages",
    "supports_text_search",
]

RetrievalMode = Literal["vector", "text", "hybrid"]
"""``retrieve_memory`` modes: dense only, lexical only, or both fused."""

GRAPH_CONTEXT_SPECIFICITY = 0.5
"""Below this specificity a named entity is context: the graph signal ignores it."""
GRAPH_COUNT_CAP = 1000
"""Facts counted per named entity when weighing it (the count stops there)."""
GRAPH_TYPED_MATCH_FETCH = 100
"""Named entities read when the query has ``entity_types`` (filtered, then limited)."""


_ID_INT = attrgetter("id.int")
_VALID_FROM = attrgetter("valid_from")


def supports_text_search(index: object) -> bool:
    """Whether the index offers the text-search methods the text/hybrid modes need."""
    return all(
        callable(getattr(index, name, None))
        for name in ("text_search_facts", "text_search_messages")
    )


def entity_specificity(cited_by: int, facts: int) -> float:
    """How much naming an entity narrows the tenant's facts, from 0 to 1.

    The entity's IDF over the tenant's facts, ``ln(1 + (N - n + 0.5) / (n + 0.5))`` for an
    entity cited by ``n`` of ``N`` facts, divided by the IDF of an entity cited by one fact:
    1.0 for an entity cited once, ~0.25 for one cited by a third of 50 facts, ~0.1 for one
    cited by a third of 10,000. Unknown counts (``N`` or ``n`` zero) give 1.0.
    """
    if facts <= 1 or cited_by <= 0:
        return 1.0
    cited_by = min(cited_by, facts)
    idf = math.log(1.0 + (facts - cited_by + 0.5) / (cited_by + 0.5))
    best = math.log(1.0 + (facts - 0.5) / 1.5)
    return max(0.0, min(1.0, idf / best))


async def _graph_signals(
    store: MemoryStore,
    index: MemoryIndex,
    q: MemoryQuery,
    opts: RetrievalOptions,
    scope: FactScope,
    signals: dict[str, list[tuple[uuid.UUID, float]]],
) -> tuple[dict[str, list[SemanticFact]], dict[str, float]]:
    """One graph list per entity named in the question, and its RRF weight.

    Each entity weighs ``graph_weight`` times its specificity (:func:`entity_specificity`,
    from the index's ``entity_fact_counts`` when it has one, else 1.0). An entity whose
    specificity is below ``GRAPH_CONTEXT_SPECIFICITY`` (a participant of the conversation,
    named in most questions and cited by a large share of the facts) is context, not
    evidence: it gets no list (its facts neither join the candidates nor move up; the text
    and vector signals already see its name).
    """
    match = getattr(index, "match_entity_names", None)
    if match is None or q.text is None or opts.entity_match_limit == 0:
        return {}, {}
    entities = await match(
        q.text, limit=entity_match_fetch(q, opts), include_invalidated=q.include_invalidated
    )
    if entities and getattr(store, "expand_facts", None) is None:
        # An index that keeps its own copies (the in-memory one) may name an entity the
        # store has since soft-deleted, merged away or deleted: the store's records rule.
        found = await store.get_entities([e.id for e in entities])
        entities = [
            found[e.id]
            for e in entities
            if e.id in found and (q.include_invalidated or entity_is_live(found[e.id]))
        ]
    if q.entity_types is not None:
        entities = [e for e in entities if e.entity_type in q.entity_types]
    entities = entities[: opts.entity_match_limit]
    if not entities:
        return {}, {}
    counter = getattr(index, "entity_fact_counts", None)
    specificity = {e.id: 1.0 for e in entities}
    if counter is not None:
        counts, total = await counter([e.id for e in entities], cap=GRAPH_COUNT_CAP)
        specificity = {e.id: entity_specificity(counts.get(e.id, 0), total) for e in entities}
    entities = [e for e in entities if specificity[e.id] >= GRAPH_CONTEXT_SPECIFICITY]
    if not entities:
        return {}, {}
    by_entity = await store.get_facts_for_entities(
        [e.id for e in entities],
        per_entity_limit=opts.text_candidates or min(1000, 4 * q.limit),
        include_invalidated=scope.include_invalidated,
        tags=sorted(scope.tags) or None,
        exclude_tags=sorted(scope.exclude_tags) or None,
        valid_at=scope.valid_at,
        changed_since=scope.changed_since,
    )
    best: dict[uuid.UUID, int] = {}
    for ranked in signals.values():
        for rank, (fact_id, _) in enumerate(ranked):
            best[fact_id] = min(best.get(fact_id, rank), rank)
    far = len(best) + 1
    lists: dict[str, list[SemanticFact]] = {}
    weights: dict[str, float] = {}
    for number, entity in enumerate(entities):
        facts = scope.apply(by_entity.get(entity.id, []))
        weight = opts.graph_weight * specificity[entity.id]
        if not facts or weight <= 0.0:
            continue
        newest_first = sorted(facts, key=_ID_INT)
        newest_first.sort(key=_VALID_FROM, reverse=True)
        name = f"graph:{number}"
        # Stable sort by the best rank (positions sorted by a list's __getitem__: no
        # Python call per fact).
        best_rank = [best.get(f.id, far) for f in newest_first]
        order = sorted(range(len(best_rank)), key=best_rank.__getitem__)
        lists[name] = [newest_first[i] for i in order]
        weights[name] = weight
    return lists, weights


def entity_match_fetch(q: MemoryQuery, opts: RetrievalOptions) -> int:
    """How many named entities the graph signal asks ``match_entity_names`` for.

    ``entity_match_limit``; with ``entity_types`` in the query, up to
    :data:`GRAPH_TYPED_MATCH_FETCH` (at least the limit): the type filter runs before the
    limit, so entities of other types named first do not use up its places.
    """
    if q.entity_types is None:
        return opts.entity_match_limit
    return max(opts.entity_match_limit, GRAPH_TYPED_MATCH_FETCH)


def _graph_weight(ranks: dict[str, int], weights: dict[str, float]) -> float | None:
    used = [w for name, w in weights.items() if name in ranks]
    return sum(used) if used else None


def _message_admitted(message: Message, q: MemoryQuery) -> bool:
    if q.valid_at is not None and message.timestamp > q.valid_at:
        return False
    return q.changed_since is None or message.timestamp > q.changed_since


async def hybrid_candidates(
    store: MemoryStore,
    index: MemoryIndex,
    q: MemoryQuery,
    opts: RetrievalOptions,
    mode: RetrievalMode,
    *,
    vector: tuple[list[tuple[SemanticFact, float]], list[Theme]] | None = None,
) -> tuple[list[SemanticFact], dict[uuid.UUID, FactScore], list[Message], list[Theme]]:
    """Run the signals of ``mode`` and fuse them (see the module docstring).

    Args:
        store: The store.
        index: The index (text search needed for the text signal).
        q: The validated query (with its embedding for the vector signal).
        opts: Retrieval options.
        mode: Which signals to use.
        vector: The vector signal already computed by the hierarchical path: facts
            ranked by similarity and the matched themes (required for vector signals).

    Returns:
        The served facts (cut to ``limit``), their score breakdowns, the messages (cut to
        ``message_limit``) and the matched themes (cut to ``limit``).

    Raises:
        InvalidInputError: A text signal is needed but the query has no text or the index
            has no text search; a vector signal is needed but the query has no vector.
    """
    scope = FactScope.for_query(q)
    text_index: Any = index
    use_vector = mode in ("vector", "hybrid")
    use_text = mode in ("text", "hybrid")
    if use_text and (q.text is None or not supports_text_search(index)):
        raise InvalidInputError(
            f"mode={mode!r} needs query text and an index with text search "
            "(text_search_facts / text_search_messages)"
        )
    if use_vector and (q.embedding is None or vector is None):
        raise InvalidInputError(f"mode={mode!r} needs a query embedding or an embedder")

    fact_signals: dict[str, list[tuple[uuid.UUID, float]]] = {}
    facts_by_id: dict[uuid.UUID, SemanticFact] = {}
    themes: list[Theme] = []
    if use_vector:
        assert vector is not None
        ranked, themes = vector
        fact_signals["vector"] = [(f.id, s) for f, s in ranked]
        facts_by_id.update({f.id: f for f, _ in ranked})
    if use_text:
        assert q.text is not None
        depth = opts.text_candidates or min(MAX_SEARCH_FETCH, 4 * q.limit)
        fetch = depth
        while True:
            hits = await text_index.text_search_facts(
                q.text,
                limit=fetch,
                include_invalidated=q.include_invalidated,
                tags=sorted(scope.tags) or None,
                exclude_tags=sorted(scope.exclude_tags) or None,
            )
            admitted = [(h.item, h.score) for h in hits if scope.admits(h.item)]
            wider = scope.widened(
                fetch, returned=len(hits), passed=len(admitted), wanted=depth,
                fixed=opts.text_candidates is not None,
            )
            if wider is None:
                break
            fetch = wider
        admitted = admitted[:depth]
        fact_signals["text"] = [(f.id, s) for f, s in admitted]
        for fact, _ in admitted:
            facts_by_id.setdefault(fact.id, fact)

    graph, graph_weights = (
        await _graph_signals(store, index, q, opts, scope, fact_signals) if use_text else ({}, {})
    )
    for name, listed in graph.items():
        fact_signals[name] = [(f.id, 0.0) for f in listed]
        for fact in listed:
            facts_by_id.setdefault(fact.id, fact)
    fused = cut(
        rrf_fuse(
            fact_signals,
            k=opts.rrf_k,
            weights={"text": opts.text_weight, **graph_weights},
        ),
        q.limit,
    )
    facts = [facts_by_id[h.id] for h in fused]
    scores = {
        h.id: FactScore(
            vector_rank=h.ranks.get("vector"),
            vector_score=h.scores.get("vector"),
            text_rank=h.ranks.get("text"),
            text_score=h.scores.get("text"),
            graph_distance=0 if any(n in graph for n in h.ranks) else None,
            graph_weight=_graph_weight(h.ranks, graph_weights),
            fused_score=h.fused,
        )
        for h in fused
    }
    fact_lists: dict[str, list[SemanticFact]] = {
        name: [facts_by_id[i] for i, _ in ranked] for name, ranked in fact_signals.items()
    }
    messages = await message_signals(
        store, index, q, opts, fact_lists, {"text": opts.text_weight, **graph_weights},
        use_vector=use_vector, use_text=use_text,
    )
    return facts, scores, messages, cut(themes, q.limit)


def project_to_messages(
    facts: Sequence[SemanticFact], depth: int
) -> list[tuple[uuid.UUID, float]]:
    """The messages grounding the first ``depth`` facts, in the facts' order (first seen)."""
    return [(i, 0.0) for i in ordered_ids(f.source_message_ids for f in facts[:depth])]


def _episode_messages(
    hits: Sequence[Any], records: dict[uuid.UUID, Message]
) -> list[tuple[uuid.UUID, float]]:
    """Every message of the ranked episodes, episode by episode (each keeps its best)."""
    ranked: list[tuple[uuid.UUID, float]] = []
    for hit in hits:
        for message in hit.item.messages:
            records.setdefault(message.id, message)
            ranked.append((message.id, hit.score))
    return ranked


async def message_signals(
    store: MemoryStore,
    index: MemoryIndex,
    q: MemoryQuery,
    opts: RetrievalOptions,
    fact_lists: Mapping[str, Sequence[SemanticFact]],
    fact_weights: Mapping[str, float] | None = None,
    *,
    use_vector: bool,
    use_text: bool,
) -> list[Message]:
    """The messages of a result: one reciprocal-rank fusion at the message level.

    Lists fused (each best first; a message keeps its best rank within a list):

    * every fact signal of ``fact_lists`` (name -> facts in that signal's order), projected
      to the messages grounding its first ``message_candidates`` facts, weighted as in the
      fact fusion (``fact_weights``: vector 1, text ``text_weight``, graph lists their
      specificity weight; a name it lacks weighs 1);
    * the direct message hits, by vector and by text (``message_hit_weight`` each);
    * the messages of the episodes found by vector and by text (``episode_weight`` each),
      episode after episode: a turn that does not repeat the question's words is still
      reached through the conversation around it.

    Vector lists are used when ``use_vector``, text lists when ``use_text``. Under a tag
    scope only the fact lists count (a message or an episode cannot be scoped by tags);
    ``valid_at`` / ``changed_since`` drop messages sent after ``valid_at`` / not after
    ``changed_since``. Messages of invalidated episodes are left out unless the query
    includes invalidated records (grounding turns through the store's
    ``get_live_messages`` when it has one).
    """
    limit = q.limit if opts.message_limit is None else opts.message_limit
    if limit == 0:
        return []
    candidates = opts.message_candidates or min(1000, 2 * q.limit)
    signals: dict[str, list[tuple[uuid.UUID, float]]] = {}
    weights: dict[str, float] = {}
    records: dict[uuid.UUID, Message] = {}
    for name, facts in fact_lists.items():
        projected = project_to_messages(facts, candidates)
        if projected:
            signals[f"facts:{name}"] = projected
            weights[f"facts:{name}"] = 1.0 if fact_weights is None else fact_weights.get(name, 1.0)
    direct = not q.tags
    search_messages = getattr(index, "search_messages", None)
    text_index: Any = index
    if direct and use_vector and q.embedding is not None and search_messages is not None:
        hits = await search_messages(
            q.embedding,
            limit=candidates,
            min_similarity=q.min_similarity,
            include_invalidated=q.include_invalidated,
        )
        signals["vector"] = [(h.item.id, h.score) for h in hits]
        weights["vector"] = opts.message_hit_weight
        for h in hits:
            records.setdefault(h.item.id, h.item)
    if direct and use_text and q.text is not None:
        hits = await text_index.text_search_messages(
            q.text, limit=candidates, include_invalidated=q.include_invalidated
        )
        signals["text"] = [(h.item.id, h.score) for h in hits]
        weights["text"] = opts.message_hit_weight
        for h in hits:
            records.setdefault(h.item.id, h.item)
    if direct and opts.episode_weight > 0.0:
        episode_limit = opts.episode_candidates or q.limit
        by_vector = getattr(index, "search_episodes", None)
        if use_vector and q.embedding is not None and by_vector is not None:
            episodes = await by_vector(
                q.embedding,
                limit=episode_limit,
                min_similarity=q.min_similarity,
                include_invalidated=q.include_invalidated,
            )
            signals["episodes:vector"] = _episode_messages(episodes, records)
            weights["episodes:vector"] = opts.episode_weight
        by_text = getattr(index, "text_search_episodes", None)
        if use_text and q.text is not None and by_text is not None:
            episodes = await by_text(
                q.text, limit=episode_limit, include_invalidated=q.include_invalidated
            )
            signals["episodes:text"] = _episode_messages(episodes, records)
            weights["episodes:text"] = opts.episode_weight
    # An index that keeps its own copies (the in-memory one) may hold turns the store
    # has since changed or soft-deleted: every turn is then read from the store. A store
    # that expands natively (Postgres) shares its tables with the index.
    current = getattr(store, "expand_facts", None) is None
    grounding = [
        i for ranked in signals.values() for i, _ in ranked if current or i not in records
    ]
    if grounding:
        # Optional store capability: the turns of soft-deleted episodes left out (the
        # direct hits above already are); without it, the turns as get_messages has them.
        read = store.get_messages
        if not q.include_invalidated:
            read = getattr(store, "get_live_messages", read)
        fetched = await read(ordered_ids([grounding]))
        if current:
            records = fetched
        else:
            records.update(fetched)
    out: list[Message] = []
    for hit in rrf_fuse(signals, k=opts.rrf_k, weights=weights):
        message = records.get(hit.id)
        if message is None or not _message_admitted(message, q):
            continue
        if message.embedding is not None:
            message = message.model_copy(update={"embedding": None})
        out.append(message)
        if len(out) == limit:
            break
    return out

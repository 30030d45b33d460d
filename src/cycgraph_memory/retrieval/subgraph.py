"""``extract_subgraph``: breadth-first traversal of the knowledge graph from seed entities.

The generic algorithm is written against the store contract and makes one batched
``get_relationships_for_entities`` call and one ``get_entities`` call per hop (never one
call per entity). A store that offers ``extract_subgraph_native`` (the Postgres store:
one recursive CTE) is used instead; it returns exactly the same subgraph.

Traversal rules (the native path implements the same):

1. Seeds are de-duplicated. A seed that is superseded (``superseded_by`` set, as the
   losers of :class:`~cycgraph_memory.EntityResolver` are) is forwarded: its pointer is
   followed, through chains ``A -> B -> C``, to the first entity that is not superseded
   (the canonical), which becomes a seed too. A chain that reaches a missing (or
   hard-deleted) entity, loops, or needs more than :data:`MAX_FORWARDING_STEPS` pointers
   forwards nowhere: the seed stays as it is. Forwarding only adds seeds; every seed
   then follows the usual rule: missing seeds are dropped, and so are invalidated or
   superseded ones unless ``include_invalidated`` (with it, a superseded seed is visited
   as well as its canonical; without it, the canonical takes its place). If more than
   ``max_entities`` remain, the first ``max_entities`` by id are kept. Seeds are at hop 0.
2. At hop ``h`` (1..``max_hops``) the edges touching the previous hop's entities (the
   frontier) are fetched; edges that are soft-deleted (unless ``include_invalidated``),
   not valid at ``valid_at`` or of a type outside ``relation_types`` are ignored.
3. Their endpoints not yet visited are candidates; candidates that do not exist or are
   invalidated/superseded (unless asked) are skipped; the rest are admitted in id order
   while fewer than ``max_entities`` entities are visited. Admitted entities are at hop
   ``h`` and form the next frontier.
4. A fetched edge is returned when both its endpoints are visited.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, StrictBool, StrictInt, StrictStr

from cycgraph_memory._ids import parse_ids
from cycgraph_memory._validate import (
    changed_from_defaults,
    check_bool,
    check_text,
    option_bundle,
    string_list,
    utc_in_range,
)
from cycgraph_memory.contracts import MemoryStore
from cycgraph_memory.errors import InvalidInputError, InvalidTypeError
from cycgraph_memory.records import (
    DEFAULT_MAX_SUBGRAPH_ENTITIES,
    MAX_FORWARDING_STEPS,
    Entity,
    Relationship,
    SubgraphResult,
)
from cycgraph_memory.retrieval.pipeline import entity_is_live, filter_relationships

__all__ = [
    "DEFAULT_MAX_SUBGRAPH_ENTITIES",
    "MAX_FORWARDING_STEPS",
    "MAX_SUBGRAPH_HOPS",
    "SubgraphOptions",
    "extract_subgraph",
]

MAX_SUBGRAPH_HOPS = 5
"""Largest ``max_hops`` accepted (the spec's 0-5 range)."""


class SubgraphOptions(BaseModel):
    """The options of :func:`extract_subgraph` as one object (the spec's ``opts``).

    ``extract_subgraph(store, seeds, SubgraphOptions(max_hops=1))``, or a plain dict with
    the same keys, is the same call as ``extract_subgraph(store, seeds, max_hops=1)``.
    Ranges are checked by the function (``InvalidInputError``), as for the keyword form.

    Attributes:
        max_hops: Maximum BFS hops from the seeds (default 2, range 0-5).
        valid_at: Only traverse relationships valid at this instant.
        include_invalidated: Also traverse soft-deleted relationships (default False).
        max_entities: Hard cap on visited entities
            (:data:`DEFAULT_MAX_SUBGRAPH_ENTITIES` = 500).
        relation_types: Only traverse relationships of these types (``None`` = all).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_hops: StrictInt = 2
    valid_at: datetime | None = None
    include_invalidated: StrictBool = False
    max_entities: StrictInt = DEFAULT_MAX_SUBGRAPH_ENTITIES
    relation_types: list[StrictStr] | None = None


def _utc(value: datetime | None) -> datetime | None:
    if value is None:
        return None
    if not isinstance(value, datetime):
        raise InvalidInputError(f"valid_at must be a datetime, got {type(value).__name__}")
    try:
        return utc_in_range(value)  # MemoryQuery's rule: the UTC range, ends excluded
    except ValueError as exc:
        raise InvalidInputError(f"valid_at: {exc}") from None


def _check(max_hops: object, max_entities: object) -> None:
    if not isinstance(max_hops, int) or isinstance(max_hops, bool):
        raise InvalidInputError(f"max_hops must be an int, got {max_hops!r}")
    if not 0 <= max_hops <= MAX_SUBGRAPH_HOPS:
        raise InvalidInputError(f"max_hops must be in 0..{MAX_SUBGRAPH_HOPS}, got {max_hops}")
    if not isinstance(max_entities, int) or isinstance(max_entities, bool) or max_entities < 1:
        raise InvalidInputError(f"max_entities must be a positive int, got {max_entities!r}")
    if max_entities > MAX_SUBGRAPH_ENTITIES:
        raise InvalidInputError(
            f"max_entities must be at most {MAX_SUBGRAPH_ENTITIES:,}, got {max_entities:,}"
        )


MAX_SUBGRAPH_ENTITIES = 2**31 - 1
"""Largest accepted ``max_entities`` (a 32-bit count; far past any graph one call reads)."""


def _check_types(relation_types: object) -> list[str] | None:
    """``relation_types`` as a list of valid texts (``None``: every type)."""
    if relation_types is None:
        return None
    types = string_list(relation_types, "relation_types")
    for t in types:
        if not isinstance(t, str):
            raise InvalidTypeError(f"relation_types must hold strings, got {t!r}")
        try:
            check_text(t, "a relation type")
        except ValueError as exc:
            raise InvalidInputError(str(exc)) from None
    return types


def _id_key(i: uuid.UUID) -> str:
    return str(i)


def sort_subgraph(
    entities: Iterable[Entity],
    relationships: Iterable[Relationship],
    hops: dict[uuid.UUID, int],
) -> SubgraphResult:
    """Build a :class:`SubgraphResult` in its canonical order."""
    ents = sorted(entities, key=lambda e: (hops[e.id], e.id.int))
    rels = sorted(relationships, key=lambda r: (r.valid_from, r.id.int))
    return SubgraphResult(entities=ents, relationships=rels, hops=hops)


async def extract_subgraph(
    store: MemoryStore,
    seed_entity_ids: Iterable[uuid.UUID | str],
    opts: SubgraphOptions | Mapping[str, Any] | None = None,
    /,
    *,
    max_hops: int = 2,
    valid_at: datetime | None = None,
    include_invalidated: bool = False,
    max_entities: int = DEFAULT_MAX_SUBGRAPH_ENTITIES,
    relation_types: Sequence[str] | None = None,
    native: bool = True,
) -> SubgraphResult:
    """Breadth-first subgraph around seed entities (rules in the module docstring).

    Args:
        store: Any ``MemoryStore``.
        seed_entity_ids: Entity ids to start from (UUIDs or their strings). A superseded
            one also starts from the entity its ``superseded_by`` chain ends at, so an id
            kept from before an entity resolution still finds the merged entity (rule 1
            of the module docstring).
        opts: The options below as one :class:`SubgraphOptions` or dict (the spec's
            ``extractSubgraph(store, seeds, opts)``); not together with keyword options.
        max_hops: Maximum BFS hops from the seeds (0-5; 0 returns the seeds only).
        valid_at: Only traverse relationships valid at this instant (naive = UTC).
        include_invalidated: Also traverse soft-deleted relationships and visit
            invalidated or superseded entities (a superseded seed is then visited
            together with the canonical it forwards to).
        max_entities: Hard cap on visited entities, seeds included
            (:data:`DEFAULT_MAX_SUBGRAPH_ENTITIES` = 500).
        relation_types: Only traverse relationships of these types (``None`` = all).
        native: Use the store's ``extract_subgraph_native`` when it has one (one round
            trip); ``False`` forces the generic per-hop algorithm.

    Returns:
        Visited entities ordered by ``(hop, id)``, traversed relationships ordered by
        ``(valid_from, id)`` and each entity's hop.

    Raises:
        InvalidInputError: ``max_hops`` outside 0-5, ``max_entities`` outside
            1..:data:`MAX_SUBGRAPH_ENTITIES`, a malformed id, a relation type with a NUL
            character, a ``valid_at`` that is not a datetime or is outside the UTC range
            (``MemoryQuery``'s rule: the first and last instants excluded);
            :class:`InvalidTypeError` for ``include_invalidated`` that is not a bool or
            ``relation_types`` given as one string, or ``opts`` that is neither a
            ``SubgraphOptions`` nor a mapping (a mapping that does not validate raises
            ``pydantic.ValidationError``); ``InvalidInputError`` for ``opts`` together
            with keyword options.
    """
    if opts is not None:
        explicit = changed_from_defaults(
            ("max_hops", max_hops, 2),
            ("valid_at", valid_at, None),
            ("include_invalidated", include_invalidated, False),
            ("max_entities", max_entities, DEFAULT_MAX_SUBGRAPH_ENTITIES),
            ("relation_types", relation_types, None),
        )
        bundle = option_bundle(SubgraphOptions, opts, explicit, "extract_subgraph")
        max_hops = bundle["max_hops"]
        valid_at = bundle["valid_at"]
        include_invalidated = bundle["include_invalidated"]
        max_entities = bundle["max_entities"]
        relation_types = bundle["relation_types"]
    _check(max_hops, max_entities)
    if not isinstance(include_invalidated, bool):
        raise InvalidTypeError(
            f"include_invalidated must be a bool, got {include_invalidated!r}"
        )
    native = check_bool(native, "native")
    seeds = parse_ids(seed_entity_ids)
    types = _check_types(relation_types)
    at = _utc(valid_at)
    if not seeds:
        return SubgraphResult()
    native_fn = getattr(store, "extract_subgraph_native", None) if native else None
    if native_fn is not None:
        result: SubgraphResult = await native_fn(
            seeds,
            max_hops=max_hops,
            valid_at=at,
            include_invalidated=include_invalidated,
            max_entities=max_entities,
            relation_types=types,
        )
        return result
    return await _bfs(store, seeds, max_hops, at, include_invalidated, max_entities, types)


async def _forwarding_targets(
    store: MemoryStore, seeds: Mapping[uuid.UUID, Entity]
) -> dict[uuid.UUID, Entity]:
    """The entities the superseded ``seeds`` forward to (rule 1 of the module docstring).

    Each superseded seed's ``superseded_by`` chain is followed to the first entity that
    is not superseded, at most :data:`MAX_FORWARDING_STEPS` pointers; a chain through a
    missing entity or round a loop yields nothing. One ``get_entities`` call per step,
    none when no seed is superseded.

    Args:
        store: The store the seeds were read from.
        seeds: The seeds found in the store, by id.

    Returns:
        The chain ends by id (a seed that is itself one is included again, unchanged).
    """
    known: dict[uuid.UUID, Entity] = dict(seeds)
    # origin -> (the entity its chain points at next, the ids the chain has passed)
    tips: dict[uuid.UUID, tuple[uuid.UUID, set[uuid.UUID]]] = {
        i: (e.superseded_by, {i}) for i, e in seeds.items() if e.superseded_by is not None
    }
    ends: dict[uuid.UUID, Entity] = {}
    for _ in range(MAX_FORWARDING_STEPS):
        if not tips:
            break
        wanted = sorted({t for t, _ in tips.values() if t not in known}, key=_id_key)
        if wanted:
            known.update(await store.get_entities(wanted))
        moved: dict[uuid.UUID, tuple[uuid.UUID, set[uuid.UUID]]] = {}
        for origin, (tip, passed) in tips.items():
            entity = known.get(tip)
            if entity is None:  # a missing or hard-deleted entity: no forwarding
                continue
            if entity.superseded_by is None:
                ends[tip] = entity
            elif tip not in passed:  # else a loop: no forwarding
                moved[origin] = (entity.superseded_by, passed | {tip})
        tips = moved
    return ends


async def _bfs(
    store: MemoryStore,
    seeds: list[uuid.UUID],
    max_hops: int,
    valid_at: datetime | None,
    include_invalidated: bool,
    max_entities: int,
    relation_types: Sequence[str] | None,
) -> SubgraphResult:
    found = await store.get_entities(seeds)
    found.update(await _forwarding_targets(store, found))
    admitted = sorted(
        (i for i, e in found.items() if include_invalidated or entity_is_live(e)),
        key=_id_key,
    )[:max_entities]
    entities: dict[uuid.UUID, Entity] = {i: found[i] for i in admitted}
    hops: dict[uuid.UUID, int] = dict.fromkeys(admitted, 0)
    edges: dict[uuid.UUID, Relationship] = {}
    frontier = admitted
    for hop in range(1, max_hops + 1):
        if not frontier:
            break
        fetched = await store.get_relationships_for_entities(
            frontier, include_invalidated=include_invalidated
        )
        rels = filter_relationships(
            fetched,
            include_invalidated=include_invalidated,
            valid_at=valid_at,
            changed_since=None,
            relation_types=relation_types,
        )
        candidates = sorted(
            {i for r in rels for i in (r.source_id, r.target_id) if i not in hops},
            key=_id_key,
        )
        next_frontier: list[uuid.UUID] = []
        if candidates and len(hops) < max_entities:
            got = await store.get_entities(candidates)
            room = max_entities - len(hops)
            for i in candidates:
                if len(next_frontier) >= room:
                    break
                e = got.get(i)
                if e is not None and (include_invalidated or entity_is_live(e)):
                    next_frontier.append(i)
                    entities[i] = e
            for i in next_frontier:
                hops[i] = hop
        for r in rels:
            if r.source_id in hops and r.target_id in hops:
                edges[r.id] = r
        frontier = next_frontier
    return sort_subgraph(entities.values(), edges.values(), hops)

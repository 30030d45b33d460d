"""The candidates of every retrieval signal in one statement (``prefetch_signals``).

A hybrid retrieval asks the index and the store for nine candidate lists (matched themes,
direct fact kNN, the themes' facts, BM25 facts, entities named in the question with their
fact counts and their facts, message kNN, BM25 messages, episode kNN and BM25 episodes, each
episode with its messages). Asked one by one that is nine statements;
:meth:`SignalPrefetch.prefetch_signals` runs them as the branches of ONE ``UNION ALL``
statement (after the transaction's settings), then hands back a view of the
index and one of the store that answer those calls from the rows read, and send any other
call (or a call with other arguments) to the real object.

Every answer is what the real method returns for the same arguments: the branches are the
real methods' queries (same filters, limits, order), and the Python side re-applies the
real methods' cuts and tie checks. Where a real method would widen its fetch (an exact tie
in distance straddling the cut) or the query cannot be scored (a zero vector, NaN
distances), that answer is withheld and the call goes to the real method.

Vectors travel as ``vector_send(embedding)`` (pgvector's binary form, decoded with
``numpy.frombuffer``), not as ``real[]`` (one Python float object per component in the
driver).
"""

from __future__ import annotations

import json
import math
import uuid
from collections.abc import Callable, Mapping, Sequence
from functools import lru_cache
from itertools import chain
from operator import itemgetter
from typing import TYPE_CHECKING, Any

import numpy as np
from asyncpg.pgproto.pgproto import UUID as _DriverUUID
from sqlalchemy import (
    ColumnElement,
    Double,
    Integer,
    LargeBinary,
    Select,
    Table,
    Text,
    and_,
    any_,
    bindparam,
    case,
    cast,
    func,
    literal,
    not_,
    null,
    select,
    true,
    type_coerce,
    union_all,
)
from sqlalchemy.dialects.postgresql import array
from sqlalchemy.sql import literal_column
from sqlalchemy.types import NullType

from cycgraph_memory._construct import trusted
from cycgraph_memory._options import coerce_options
from cycgraph_memory.normalize import name_candidate_keys
from cycgraph_memory.postgres import convert, driver_sql
from cycgraph_memory.postgres._base import PostgresBackend, PostgresIndexMixin
from cycgraph_memory.postgres.bm25 import CORPORA, TEXT_CANDIDATES, bm25_ranked, bm25_terms
from cycgraph_memory.postgres.definer_lookups import (
    entity_fact_count,
    entity_fact_rows,
    entity_name_rows,
    null_texts,
)
from cycgraph_memory.postgres.schema import MAX_VECTOR_HNSW_DIM
from cycgraph_memory.postgres.statements import (
    ENTITIES,
    EPISODES,
    FACTS,
    MESSAGES,
    THEMES,
    cast_any,
    episode_messages_column,
    knn_corpus,
    nearest,
    nearest_listed,
    query_distance,
    temporal_conditions,
)
from cycgraph_memory.records import (
    EntityFactsFilter,
    Episode,
    Message,
    ScoredResult,
    SearchOptions,
    SemanticFact,
    Theme,
)

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncSession

__all__ = ["SignalPrefetch", "signals_statement"]

_ANY = NullType()

# Row kinds of the statement (column ``k``).
(
    THEME, DIRECT, THEME_FACT, TEXT_FACT, ENTITY, GRAPH_FACT, MESSAGE_KNN, MESSAGE_TEXT,
    EPISODE_KNN, EPISODE_TEXT,
) = range(10)

# Columns of every branch, in order; a branch fills what its record needs, NULL elsewhere.
# A fact's ``source_episode_ids``, ``entity_ids`` and ``theme_id`` travel as text (see
# ``_fact_values``); a theme's or an episode's fact ids as ``uuid[]`` in ``fact_ids``.
_COLUMNS = (
    "k", "pos", "eid", "id", "score", "emb", "content", "source_episode_ids", "entity_ids",
    "theme_id", "provenance", "valid_from", "valid_until", "invalidated_by", "access_count",
    "last_accessed_at", "tags", "source_message_ids", "doc", "fact_ids",
)
_I = {name: i for i, name in enumerate(_COLUMNS)}
_POS = itemgetter(1)  # a row's ``pos`` (a sort key without a Python call per row)


def _p(name: str, type_: Any) -> Any:
    return bindparam(name, type_=type_)


def _texts() -> Any:
    from sqlalchemy.dialects.postgresql import ARRAY

    return ARRAY(Text())


@lru_cache(maxsize=1)
def _column_types() -> dict[str, Any]:
    from sqlalchemy import BigInteger, DateTime
    from sqlalchemy.dialects.postgresql import ARRAY, JSONB
    from sqlalchemy.types import Uuid

    uid = Uuid(as_uuid=True)
    return {
        "pos": BigInteger(), "eid": Text(), "id": uid, "score": Double(), "emb": LargeBinary(),
        "content": Text(), "source_episode_ids": Text(), "entity_ids": Text(),
        "theme_id": Text(), "provenance": Text(), "valid_from": DateTime(timezone=True),
        "valid_until": DateTime(timezone=True), "invalidated_by": Text(),
        "access_count": BigInteger(), "last_accessed_at": DateTime(timezone=True),
        "tags": ARRAY(Text()), "source_message_ids": ARRAY(uid), "doc": JSONB(),
        "fact_ids": ARRAY(uid),
    }


def _row(k: int, values: Mapping[str, Any]) -> Select[Any]:
    """One branch: ``values`` placed in the statement's columns.

    Every column is cast to its type in every branch (``UNION`` resolves a column's type
    pairwise, and two NULLs would make it text), then typed ``NullType`` for SQLAlchemy:
    values arrive as the driver decodes them, without a result processor.
    """
    from sqlalchemy import cast

    types = _column_types()
    cols: list[Any] = [literal_column(str(k), Integer()).label("k")]
    for name in _COLUMNS[1:]:
        value = values.get(name)
        if value is None:
            expr: Any = cast(null(), types[name])
        elif name in ("pos",):
            expr = cast(value, types[name])
        else:
            expr = value
        cols.append(type_coerce(expr, _ANY).label(name))
    return select(*cols)


def _as_text(column: Any) -> Any:
    # The provenance of fact and episode rows travels as text: the driver would decode
    # jsonb into a dict for every candidate, and only the served facts need it.
    from sqlalchemy import cast

    return cast(column, Text())


def _fact_values(t: Any) -> dict[str, Any]:
    # The ids only a served fact needs (its episodes, entities and theme: the expansion's
    # input) travel as text, decoded for the served facts only (``_View.complete_facts``):
    # as uuid[] they were a list and a UUID object per id on every candidate row (~150 per
    # hybrid call), objects the garbage collector tracks. The ranking and the fusion read
    # a candidate's id, tags, validity and message ids (the message projection).
    return {
        "id": t.c.id, "emb": func.vector_send(t.c.embedding), "content": t.c.content,
        "source_episode_ids": _as_text(t.c.source_episode_ids),
        "entity_ids": _as_text(t.c.entity_ids),
        "theme_id": _as_text(t.c.theme_id), "provenance": _as_text(t.c.provenance),
        "valid_from": t.c.valid_from,
        "valid_until": t.c.valid_until, "invalidated_by": t.c.invalidated_by,
        "access_count": t.c.access_count, "last_accessed_at": t.c.last_accessed_at,
        "tags": t.c.tags, "source_message_ids": t.c.source_message_ids,
    }


def _episode_values(e: Any) -> dict[str, Any]:
    # An episode in the fact columns: topic -> content, started_at / ended_at ->
    # valid_from / valid_until, invalidated_at ->
    # last_accessed_at; its messages (as every episode read: a jsonb array) -> doc.
    messages: Any = episode_messages_column(e).element
    return {
        "id": e.c.id, "emb": func.vector_send(e.c.embedding), "content": e.c.topic,
        "valid_from": e.c.started_at, "valid_until": e.c.ended_at,
        "fact_ids": e.c.fact_ids, "provenance": _as_text(e.c.provenance),
        "last_accessed_at": e.c.invalidated_at, "doc": messages,
    }


def _similarity_ok(distance: Any) -> ColumnElement[bool]:
    # knn(min_similarity=True): coalesce(nullif(1 - distance, 'NaN'), 0) >= :min_similarity
    sim = func.coalesce(func.nullif(1 - distance, literal(math.nan)), 0.0)
    result: ColumnElement[bool] = sim >= _p("min_similarity", Double())
    return result


def _fact_filters(
    *, include_invalidated: bool, tags: bool, exclude_tags: bool, prefix: str = ""
) -> list[ColumnElement[bool]]:
    f = FACTS
    out: list[ColumnElement[bool]] = []
    if not include_invalidated:
        out.append(f.c.invalidated_by.is_(None))
    if tags:
        out.append(f.c.tags.overlap(_p(f"{prefix}any_tags", _texts())))
    if exclude_tags:
        out.append(not_(f.c.tags.overlap(_p(f"{prefix}no_tags", _texts()))))
    return out


def _message_live() -> ColumnElement[bool]:
    from cycgraph_memory.postgres.statements import episode_live

    return episode_live()


@lru_cache(maxsize=128)
def signals_statement(
    dim: int,
    *,
    themes: bool,
    themes_invalidated: bool,
    direct: tuple[bool, bool, bool] | None,
    theme_cut: tuple[bool, bool, bool] | None = None,
    text_facts: tuple[bool, bool, bool] | None,
    entities: bool,
    entities_invalidated: bool,
    graph: tuple[bool, bool, bool, bool, bool] | None,
    messages_knn: bool | None,
    messages_text: bool | None,
    episodes_knn: bool | None = None,
    episodes_text: bool | None = None,
    definer: bool = False,
) -> Select[Any]:
    """The ``UNION ALL`` of the wanted branches (``None`` / ``False``: branch absent).

    ``definer``: the GIN lookups (BM25 candidates, an entity's facts and their count)
    through the functions of migration 0016, for a role under row-level security (see
    :mod:`~cycgraph_memory.postgres.definer_lookups`).

    ``direct`` / ``text_facts``: ``(include_invalidated, tags, exclude_tags)``; ``graph``:
    ``(include_invalidated, tags, exclude_tags, valid_at, changed_since)``;
    ``messages_knn`` / ``messages_text`` / ``episodes_knn`` / ``episodes_text``:
    ``include_invalidated``. Bind parameters:
    ``tenant``, ``q``, ``min_similarity``, ``theme_fetch``, ``theme_limit``,
    ``per_theme``, ``fact_fetch``, ``any_tags``, ``no_tags``, ``bm25_terms``,
    ``text_limit``, ``t_any_tags``, ``t_no_tags``, ``names``, ``match_limit``,
    ``count_cap``, ``per_entity``, ``g_any_tags``, ``g_no_tags``, ``valid_at``,
    ``changed_since``, ``message_fetch``, ``message_text_limit``, ``episode_fetch``,
    ``episode_text_limit``.
    """
    tenant = _p("tenant", Text())
    branches: list[Select[Any]] = []
    f = FACTS

    if themes:
        t = THEMES
        t_conds = [t.c.tenant_id == tenant]
        if not themes_invalidated:
            t_conds.append(t.c.invalidated_at.is_(None))
        near = nearest(t, dim, t_conds, _p("theme_fetch", Integer()), "th").subquery("th_near")
        # ``place``: a theme's place by (distance, id); only the first ``theme_limit``
        # (the matched themes, see ``th_top``) send their fact ids: the extra row read
        # for the tie check needs its distance only (~100 ids and a list it would cost).
        place = func.row_number().over(order_by=(near.c.distance, near.c.id))
        th = (
            select(near.c.id, t.c.fact_ids, near.c.distance, place.label("place"))
            .select_from(near.join(t, and_(t.c.tenant_id == tenant, t.c.id == near.c.id)))
            .where(_similarity_ok(near.c.distance))
            .cte("th")
        )
        doc = func.jsonb_build_object(
            "label", t.c.label, "description", t.c.description,
            "provenance", t.c.provenance, "invalidated_at", t.c.invalidated_at,
        )
        branches.append(
            _row(THEME, {"id": t.c.id, "score": th.c.distance,
                         "fact_ids": case((th.c.place <= _p("theme_limit", Integer()),
                                           th.c.fact_ids)),
                         "emb": func.vector_send(t.c.embedding), "doc": doc})
            .select_from(th.join(t, and_(t.c.tenant_id == tenant, t.c.id == th.c.id)))
        )
        top = select(th.c.fact_ids).order_by(th.c.distance, th.c.id).limit(
            _p("theme_limit", Integer())
        ).subquery("th_top")
        listed = func.unnest(top.c.fact_ids[1 : _p("per_theme", Integer())]).table_valued(
            "fid"
        ).render_derived(name="listed")
        wanted = select(listed.c.fid).select_from(top).join(listed, true()).subquery("wanted")

    if direct is not None:
        inc, tags, exclude = direct
        near_f = nearest(
            f, dim,
            [f.c.tenant_id == tenant,
             *_fact_filters(include_invalidated=inc, tags=tags, exclude_tags=exclude)],
            _p("fact_fetch", Integer()), "direct",
        ).cte("direct")
        branches.append(
            _row(DIRECT, {**_fact_values(f), "score": near_f.c.distance})
            .select_from(near_f.join(f, and_(f.c.tenant_id == tenant, f.c.id == near_f.c.id)))
            .where(1 - near_f.c.distance >= _p("min_similarity", Double()))
        )

    if themes:
        tdist = query_distance(f, dim)
        theme_facts = _row(THEME_FACT, {**_fact_values(f), "score": tdist})
        if theme_cut is None or direct is None:
            # hierarchical_facts(themes="all"): every listed fact, unfiltered.
            branches.append(theme_facts.where(
                f.c.tenant_id == tenant, f.c.id.in_(select(wanted.c.fid))
            ))
        else:
            # hierarchical_facts(themes="cut"): the nearest listed facts passing the
            # query's conditions, direct hits not read twice (and the unscorable ones).
            valid_at, changed_since, unscored = theme_cut
            inc, tags, exclude = direct
            min_sim = _p("min_similarity", Double())
            served = select(near_f.c.id).where(1 - near_f.c.distance >= min_sim)
            scope = [
                f.c.tenant_id == tenant,
                *_fact_filters(include_invalidated=inc, tags=tags, exclude_tags=exclude),
                *temporal_conditions(
                    f,
                    _p("h_valid_at", _tz()) if valid_at else None,
                    _p("h_changed_since", _tz()) if changed_since else None,
                ),
                f.c.id.in_(select(wanted.c.fid)),
                f.c.id.not_in(served),
            ]
            top = nearest_listed(dim, scope, unscored=unscored)
            branches.append(
                _row(THEME_FACT, {**_fact_values(f), "score": top.c.distance})
                .select_from(top.join(f, and_(f.c.tenant_id == tenant, f.c.id == top.c.id)))
            )

    if text_facts is not None:
        inc, tags, exclude = text_facts
        ranked = bm25_ranked(
            f, cast_any(tenant), (),
            _fact_filters(include_invalidated=inc, tags=tags, exclude_tags=exclude,
                          prefix="t_"),
            cast_any(_p("text_limit", Integer())), candidates=TEXT_CANDIDATES,
            definer=(not inc, (
                _p("t_any_tags", _texts()) if tags else null_texts(),
                _p("t_no_tags", _texts()) if exclude else null_texts(),
            )) if definer else None,
        ).subquery("text_facts")
        pos = func.row_number().over(order_by=(ranked.c.text_rank.desc(), ranked.c.id))
        branches.append(
            _row(TEXT_FACT, {**_fact_values(f), "score": ranked.c.text_rank, "pos": pos})
            .select_from(ranked.join(f, and_(f.c.tenant_id == tenant, f.c.id == ranked.c.id)))
        )

    if entities:
        e = ENTITIES
        # ``names``: the question's name keys (name_candidate_keys), matched on name_key.
        position = func.array_position(_p("names", _texts()), e.c.name_key)
        names = _p("names", _texts())
        matched = select(e.c.id, position.label("pos")).where(
            e.c.tenant_id == tenant,
            e.c.id.in_(entity_name_rows(names)) if definer else e.c.name_key == any_(names),
        )
        if not entities_invalidated:
            matched = matched.where(e.c.invalidated_at.is_(None), e.c.superseded_by.is_(None))
        em = matched.order_by(position, e.c.id).limit(_p("match_limit", Integer())).cte("em")
        count: Any
        if definer:
            count = entity_fact_count(em.c.id, _p("count_cap", Integer()))
        else:
            cited = (
                select(f.c.id)
                .where(f.c.tenant_id == tenant, f.c.entity_ids.contains(array([em.c.id])))
                .limit(_p("count_cap", Integer()))
                .correlate(em)
                .subquery("cited")
            )
            count = select(func.count()).select_from(cited).scalar_subquery()
        total = (
            select(CORPORA.c.documents)
            .where(CORPORA.c.tenant_id == tenant, CORPORA.c.corpus == FACTS.name)
            .scalar_subquery()
        )
        doc = func.jsonb_build_object(
            "name", e.c.name, "entity_type", e.c.entity_type, "attributes", e.c.attributes,
            "provenance", e.c.provenance, "created_at", e.c.created_at,
            "updated_at", e.c.updated_at, "invalidated_at", e.c.invalidated_at,
            "superseded_by", e.c.superseded_by, "count", count,
            "total", func.coalesce(total, 0),
        )
        branches.append(
            _row(ENTITY, {"id": e.c.id, "pos": em.c.pos, "doc": doc,
                          "emb": func.vector_send(e.c.embedding)})
            .select_from(em.join(e, and_(e.c.tenant_id == tenant, e.c.id == em.c.id)))
        )
        if graph is not None:
            inc, tags, exclude, valid_at, changed_since = graph
            conds = [
                f.c.tenant_id == tenant,
                f.c.entity_ids.contains(array([em.c.id])),
                *_fact_filters(include_invalidated=inc, tags=tags, exclude_tags=exclude,
                               prefix="g_"),
                *temporal_conditions(
                    f,
                    _p("valid_at", _tz()) if valid_at else None,
                    _p("changed_since", _tz()) if changed_since else None,
                ),
            ]
            newest: Any
            if definer:
                rows = entity_fact_rows(
                    em.c.id,
                    live=not inc,
                    any_tags=_p("g_any_tags", _texts()) if tags else null_texts(),
                    no_tags=_p("g_no_tags", _texts()) if exclude else null_texts(),
                    valid_at=_p("valid_at", _tz()) if valid_at else cast(null(), _tz()),
                    changed_since=(_p("changed_since", _tz()) if changed_since
                                   else cast(null(), _tz())),
                    limit=_p("per_entity", Integer()),
                    name="r",
                )
                newest = select(rows.c.id, rows.c.valid_from).correlate(em).lateral("newest")
            else:
                # As facts_of_entities: the GIN lookup in its own subquery (OFFSET 0), sorted.
                matching = select(f.c.id, f.c.valid_from).where(*conds).correlate(em).offset(0)
                m = matching.subquery("m")
                newest = (
                    select(m.c.id, m.c.valid_from)
                    .order_by(m.c.valid_from.desc(), m.c.id)
                    .limit(_p("per_entity", Integer()))
                    .lateral("newest")
                )
            order = func.row_number().over(
                partition_by=em.c.id, order_by=(newest.c.valid_from.desc(), newest.c.id)
            )
            pairs = (
                select(em.c.id.label("eid"), newest.c.id.label("fid"), order.label("pos"))
                .select_from(em.join(newest, true()))
                .subquery("pairs")
            )
            branches.append(
                # ``eid`` as text: a UUID object per row otherwise, for a few entities.
                _row(GRAPH_FACT, {**_fact_values(f), "eid": _as_text(pairs.c.eid),
                                  "pos": pairs.c.pos})
                .select_from(pairs.join(f, and_(f.c.tenant_id == tenant,
                                                 f.c.id == pairs.c.fid)))
            )

    if messages_knn is not None:
        m_ = MESSAGES
        m_conds = [m_.c.tenant_id == tenant]
        if not messages_knn:
            m_conds.append(_message_live())
        near_m = nearest(
            m_, dim, m_conds, _p("message_fetch", Integer()), "mk"
        ).subquery("mk")
        branches.append(
            _row(MESSAGE_KNN, {"id": m_.c.id, "score": near_m.c.distance,
                               "doc": _message_doc(m_)})
            .select_from(near_m.join(m_, and_(m_.c.tenant_id == tenant,
                                               m_.c.id == near_m.c.id)))
            .where(_similarity_ok(near_m.c.distance))
        )

    if messages_text is not None:
        m_ = MESSAGES
        filters = [] if messages_text else [_message_live()]
        ranked_m = bm25_ranked(
            m_, cast_any(tenant), (), filters,
            cast_any(_p("message_text_limit", Integer())), candidates=TEXT_CANDIDATES,
            definer=(not messages_text, None) if definer else None,
        ).subquery("text_messages")
        pos = func.row_number().over(order_by=(ranked_m.c.text_rank.desc(), ranked_m.c.id))
        branches.append(
            _row(MESSAGE_TEXT, {"id": m_.c.id, "score": ranked_m.c.text_rank, "pos": pos,
                                "doc": _message_doc(m_)})
            .select_from(ranked_m.join(m_, and_(m_.c.tenant_id == tenant,
                                                 m_.c.id == ranked_m.c.id)))
        )

    if episodes_knn is not None:
        # As search_episodes: knn("episodes") with min_similarity, joined to the rows.
        e_ = EPISODES
        e_conds = [e_.c.tenant_id == tenant]
        if not episodes_knn:
            e_conds.append(e_.c.invalidated_at.is_(None))
        near_e = nearest(
            e_, dim, e_conds, _p("episode_fetch", Integer()), "ek"
        ).subquery("ek")
        branches.append(
            _row(EPISODE_KNN, {**_episode_values(e_), "score": near_e.c.distance})
            .select_from(near_e.join(e_, and_(e_.c.tenant_id == tenant,
                                               e_.c.id == near_e.c.id)))
            .where(_similarity_ok(near_e.c.distance))
        )

    if episodes_text is not None:
        # As text_search_episodes: text_ranked("episodes").
        e_ = EPISODES
        e_filters = [] if episodes_text else [e_.c.invalidated_at.is_(None)]
        ranked_e = bm25_ranked(
            e_, cast_any(tenant), (), e_filters,
            cast_any(_p("episode_text_limit", Integer())), candidates=TEXT_CANDIDATES,
            definer=(not episodes_text, None) if definer else None,
        ).subquery("text_episodes")
        pos = func.row_number().over(order_by=(ranked_e.c.text_rank.desc(), ranked_e.c.id))
        branches.append(
            _row(EPISODE_TEXT, {**_episode_values(e_), "score": ranked_e.c.text_rank,
                                "pos": pos})
            .select_from(ranked_e.join(e_, and_(e_.c.tenant_id == tenant,
                                                 e_.c.id == ranked_e.c.id)))
        )

    if len(branches) == 1:
        return branches[0]
    return select(union_all(*branches).subquery("signals"))


def _tz() -> Any:
    from sqlalchemy import DateTime

    return DateTime(timezone=True)


def _message_doc(m: Table) -> Any:
    return func.jsonb_build_object(
        "role", m.c.role, "content", m.c.content, "timestamp", m.c.timestamp,
        "metadata", m.c.metadata,
    )


# ----------------------------------------------------------------------------- decoding


def _vec(raw: bytes | None) -> list[float] | None:
    """A vector from ``vector_send``: int16 dim, int16 unused, big-endian float4s."""
    if raw is None:
        return None
    values: list[float] = np.frombuffer(raw, dtype=">f4", offset=4).tolist()
    return values


_new = object.__new__
_set = object.__setattr__
_FACT_FIELDS = frozenset(SemanticFact.model_fields)


def _lean_fact(row: Sequence[Any], fields_set: set[str]) -> SemanticFact:
    """A fact of a row with the fields only a served fact needs still raw, see ``lean``.

    Raw until ``_View.complete_facts`` decodes them: ``embedding`` (the ``vector_send``
    bytes), ``provenance`` (its jsonb as text), ``source_episode_ids``, ``entity_ids`` and
    ``theme_id`` (as text). What ``trusted(SemanticFact, ...)`` builds (every field
    given), with the instance state set here directly: a hybrid call builds ~110 of
    these, and the keyword arguments of ``trusted`` cost a dict and a call of their own
    per fact.
    The id columns are uuid / uuid[] typed: the driver's values (uuid.UUID instances)
    are kept, and so are its lists: a row builds one record (_Answers.lean builds one
    per fact id) and nothing else reads them. ``fields_set``: the call's one set of
    the field names (every field), shared by the facts still raw (it is how
    ``complete_facts`` knows them); a fact gets its own when it is completed (a candidate
    never served is never handed to a caller).
    """
    tags = row[16]
    message_ids = row[17]
    fact = _new(SemanticFact)
    _set(fact, "__dict__", {
        "id": row[3],
        "content": row[6],
        "source_episode_ids": row[7],
        "entity_ids": row[8],
        "theme_id": row[9],
        "embedding": row[5],
        "provenance": row[10],
        "valid_from": row[11],
        "valid_until": row[12],
        "invalidated_by": row[13],
        "access_count": row[14],
        "last_accessed_at": row[15],
        "tags": [] if tags is None else tags,
        "source_message_ids": [] if message_ids is None else message_ids,
    })
    _set(fact, "__pydantic_fields_set__", fields_set)
    _set(fact, "__pydantic_extra__", None)
    _set(fact, "__pydantic_private__", None)
    return fact


def _text_uuids(value: str | None) -> list[uuid.UUID | None]:
    """The ids of a ``uuid[]`` column sent as text (``{id,id}``), as the driver decodes them.

    Built as the driver's own UUID class (what a ``uuid[]`` column gives), so a fact
    completed here is the record ``get_facts`` returns, to the ids' type; a NULL element
    (which the store never writes) is ``None``, as the driver decodes it.
    """
    if value is None or value == "{}":
        return []
    ids = value[1:-1].split(",")
    if "NULL" in ids:
        return [None if v == "NULL" else _DriverUUID(v) for v in ids]
    return [_DriverUUID(v) for v in ids]


def _provenance(value: str) -> Any:
    """The provenance of a fact or episode row (its jsonb as text, see ``_as_text``)."""
    return convert.provenance_from_json(json.loads(value))


def _ts_opt(value: Any) -> Any:
    return None if value is None else convert._ts(value)


def _theme(row: Sequence[Any]) -> Theme:
    doc = row[18]
    return trusted(
        Theme,
        id=row[3],  # a uuid column: the driver's uuid.UUID
        label=doc["label"],
        description=doc["description"],
        fact_ids=row[19] or [],  # the uuid[] column ``fact_ids``: the driver's list
        embedding=_vec(row[5]),
        provenance=convert.provenance_from_json(doc["provenance"]),
        invalidated_at=_ts_opt(doc["invalidated_at"]),
    )


def _entity(row: Sequence[Any]) -> Any:
    from cycgraph_memory.records import Entity

    doc = row[18]
    sup = doc["superseded_by"]
    return trusted(
        Entity,
        id=row[3],  # a uuid column: the driver's uuid.UUID
        name=doc["name"],
        entity_type=doc["entity_type"],
        attributes=doc["attributes"],
        embedding=_vec(row[5]),
        provenance=convert.provenance_from_json(doc["provenance"]),
        created_at=convert._ts(doc["created_at"]),
        updated_at=convert._ts(doc["updated_at"]),
        invalidated_at=_ts_opt(doc["invalidated_at"]),
        superseded_by=None if sup is None else uuid.UUID(sup),
    )


def _message(row: Sequence[Any]) -> Message:
    doc = row[18]
    return trusted(
        Message,
        id=row[3],  # a uuid column: the driver's uuid.UUID
        role=doc["role"],
        content=doc["content"],
        timestamp=convert._ts(doc["timestamp"]),
        metadata=doc["metadata"],
        embedding=None,
    )


def _episode(row: Sequence[Any]) -> Episode:
    """An episode from its row (see ``_episode_values``), as ``search_episodes`` builds it."""
    return trusted(
        Episode,
        id=row[3],  # a uuid column: the driver's uuid.UUID
        topic=row[6],
        messages=[convert.message_from_row(m) for m in row[18] or ()],
        started_at=row[11],
        ended_at=row[12],
        embedding=_vec(row[5]),
        fact_ids=row[19] or [],
        provenance=_provenance(row[10]),
        invalidated_at=row[15],
    )


def _distance(value: Any) -> float:
    return math.inf if value is None or math.isnan(value) else float(value)


def _ranked_ok(rows: list[Sequence[Any]], limit: int, fetch: int) -> list[Sequence[Any]] | None:
    """Rows by ``(distance, id)``, cut to ``limit``.

    ``None`` where the real search would widen its fetch (a tie straddling the cut) or
    could not score a row.
    """
    keyed = []
    for r in rows:
        d = r[4]
        if d is None or math.isnan(d):
            return None
        keyed.append((float(d), r[3], r))  # ``id``: a uuid column (a uuid.UUID)
    keyed.sort(key=lambda x: (x[0], x[1]))
    if len(keyed) >= fetch and keyed[limit - 1][0] == keyed[-1][0]:
        return None
    return [r for _, _, r in keyed[:limit]]


# ----------------------------------------------------------------------------- answers


_SCALARS = frozenset({bool, int, float, str})


def _freeze(v: Any) -> Any:
    """``v`` as a hashable value (lists and tuples as tuples, mappings as sorted pairs).

    A module-level function: a recursive closure would be a reference cycle (function ->
    cell -> function) left to the cyclic garbage collector on every call.
    """
    if v is None or type(v) in _SCALARS:  # most arguments (before the ABC check)
        return v
    if isinstance(v, list | tuple):
        if v and type(v[0]) is float:  # a vector: its floats, in C
            return tuple(v)
        return tuple(_freeze(x) for x in v)
    if isinstance(v, Mapping):
        return tuple(sorted((k, _freeze(x)) for k, x in v.items()))
    return v


def _same(planned: Any, given: Any) -> bool:
    """Whether two calls' arguments are the same (as :func:`_freeze` would compare them).

    ``==`` first (the caller passes the planned values, often the same objects: a list
    compare in C), the frozen forms when it fails (a tuple for a list, another mapping
    type); arguments that cannot be compared are not the same.
    """
    try:
        return bool(planned == given) or _freeze(planned) == _freeze(given)
    except (TypeError, ValueError):
        return False


class _Answers:
    """Answers by ``(method, args)``: each is given out once, then the real method runs.

    Every stored answer is a function that is handed this object when it runs, rather
    than a closure over it: a closure would make a reference cycle (this object -> its
    answers -> the closure -> this object), and the rows, records and vectors of a
    retrieval (thousands of objects for a hybrid call) would then wait for the cyclic
    garbage collector instead of being freed when the call returns; the collections that
    garbage triggers were a full collection every ten or so hybrid calls (tens to
    hundreds of ms each, depending on the process's heap).
    """

    def __init__(self) -> None:
        # The planned call of each method: its arguments and its answer.
        self.calls: dict[
            str, tuple[tuple[Any, ...], dict[str, Any], Callable[[_Answers], Any]]
        ] = {}
        self.subset: dict[str, Callable[[_Answers, tuple[Any, ...], Mapping[str, Any]], Any]] = {}
        # The fact built for each id: a fact on several rows (a direct hit that a theme
        # lists, a text hit of a matched entity: 15-20% of a hybrid call's fact rows) is
        # built once and the same record handed to every list.
        self.built: dict[Any, SemanticFact] = {}
        # The field names of every lean fact until it is completed: a fact whose
        # ``__pydantic_fields_set__`` is this set still holds its vector, provenance,
        # episode, entity and theme ids raw (see _lean_fact, _View.candidate_vectors /
        # complete_facts).
        self.fields_set = set(_FACT_FIELDS)

    def lean(self, row: Sequence[Any]) -> SemanticFact:
        """A fact with its vector, provenance, episode, entity and theme ids still raw.

        The ranking reads the vectors as arrays (``candidate_vectors``) and none of the
        others; only the served facts get them (``complete_facts``): hundreds of
        384-float lists, provenance records, id lists and ids per call otherwise (a hybrid
        call ranks every fact of the matched themes, and the text and graph candidates).
        """
        fact = self.built.get(row[3])
        if fact is None:
            fact = self.built[row[3]] = _lean_fact(row, self.fields_set)
        return fact

    def put(self, name: str, args: tuple[Any, ...], kwargs: Mapping[str, Any],
            answer: Callable[[_Answers], Any]) -> None:
        """Plan the answer of ``name(*args, **kwargs)`` (one planned call per method)."""
        self.calls[name] = (args, dict(kwargs), answer)

    def take(self, name: str, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Any:
        """The planned answer when ``name`` is called with its planned arguments (once)."""
        planned = self.calls.get(name)
        if planned is None or not (
            _same(planned[0], args) and _same(planned[1], dict(kwargs))
        ):
            return _MISSING
        del self.calls[name]
        return planned[2](self)


_MISSING = object()


class _View:
    """A stand-in for an index or a store: prefetched answers first, the real object else."""

    def __init__(self, real: Any, answers: _Answers) -> None:
        self._real = real
        self._answers = answers

    def candidate_vectors(self, facts: Sequence[SemanticFact]) -> Any:
        """The facts' vectors (float64 arrays for facts handed out without one).

        When every fact was handed out without its vector and all have one of the same
        width: one float64 matrix, decoded in one call (each ``vector_send`` value is a
        4-byte header and the float4s, so the joined bytes are a matrix whose first
        column is the headers).
        """
        raw = self._answers.fields_set
        raws: list[bytes] = []
        for f in facts:
            if f.__pydantic_fields_set__ is not raw or f.__dict__["embedding"] is None:
                break
            raws.append(f.__dict__["embedding"])
        else:
            if raws and len({len(r) for r in raws}) == 1:
                width = len(raws[0]) // 4
                matrix = np.frombuffer(b"".join(raws), dtype=">f4").reshape(len(raws), width)
                return matrix[:, 1:].astype(np.float64)
        out: list[Any] = []
        for f in facts:
            value = f.__dict__["embedding"]
            if f.__pydantic_fields_set__ is not raw or value is None:
                out.append(value)  # a completed fact's list, or no vector
            else:
                out.append(np.frombuffer(value, dtype=">f4", offset=4).astype(np.float64))
        return out

    def complete_facts(self, facts: Sequence[SemanticFact]) -> None:
        """Decode the raw fields of every fact of ``facts`` handed out raw (``lean``)."""
        raw = self._answers.fields_set
        for f in facts:
            if f.__pydantic_fields_set__ is raw:
                state = f.__dict__
                state["embedding"] = _vec(state["embedding"])
                state["provenance"] = _provenance(state["provenance"])
                state["source_episode_ids"] = _text_uuids(state["source_episode_ids"])
                state["entity_ids"] = _text_uuids(state["entity_ids"])
                theme = state["theme_id"]
                state["theme_id"] = None if theme is None else _DriverUUID(theme)
                _set(f, "__pydantic_fields_set__", set(_FACT_FIELDS))

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._real, name)
        if not callable(attr) or name.startswith("_"):
            return attr
        answers = self._answers

        async def call(*args: Any, **kwargs: Any) -> Any:
            special = answers.subset.get(name)
            if special is not None:
                found = special(answers, args, kwargs)
                if found is not _MISSING:
                    return found
            found = answers.take(name, args, kwargs)
            if found is not _MISSING:
                return found
            return await attr(*args, **kwargs)

        return call


class SignalPrefetch(PostgresIndexMixin):
    """Mixin of ``PostgresMemoryIndex``: every signal's candidates in one statement."""

    def _plan_knn(
        self,
        planned: tuple[Sequence[float], Mapping[str, Any]],
        dim: int,
        method: str,
        fetch_key: str,
        shape_key: str,
        params: dict[str, Any],
        efs: list[int],
        shape: dict[str, Any],
        checked: tuple[object, list[float]] | None = None,
    ) -> SearchOptions | None:
        """Plan a message or episode kNN branch; ``None`` when it cannot share the statement.

        It shares the statement's query vector, ``min_similarity`` and ``hnsw.ef_search``
        with the other kNN branches; a planned call that differs in any of them (or has no
        ``min_similarity``) is left to the real method. ``checked``: a vector object
        already checked by ``_query_vector`` and its result (reused when the planned call
        passes that same object: a hybrid call plans three kNN branches with the query's
        one vector).
        """
        opts = coerce_options(SearchOptions, None, dict(planned[1]))
        if checked is not None and planned[0] is checked[0]:
            q = checked[1]  # the same vector object, checked for an earlier branch
        else:
            q = self._query_vector(planned[0], dim, method)
        ef = min(1000, max(opts.ef_search or self.ef_search, opts.limit + 1))
        if ("q" in params and params["q"] != q) or (
            "min_similarity" in params and params["min_similarity"] != opts.min_similarity
        ) or opts.min_similarity is None or (efs and efs[0] != ef):
            return None
        efs.append(ef)
        params["q"] = q
        params["min_similarity"] = opts.min_similarity
        params[fetch_key] = opts.limit + 1
        shape[shape_key] = opts.include_invalidated
        return opts

    async def prefetch_signals(
        self,
        store: Any,
        *,
        hierarchical: tuple[Sequence[float], Mapping[str, Any]] | None = None,
        text_facts: tuple[str, Mapping[str, Any]] | None = None,
        entity_names: tuple[str, Mapping[str, Any]] | None = None,
        entity_count_cap: int | None = None,
        entity_facts: Mapping[str, Any] | None = None,
        messages_knn: tuple[Sequence[float], Mapping[str, Any]] | None = None,
        messages_text: tuple[str, Mapping[str, Any]] | None = None,
        episodes_knn: tuple[Sequence[float], Mapping[str, Any]] | None = None,
        episodes_text: tuple[str, Mapping[str, Any]] | None = None,
    ) -> tuple[Any, Any]:
        """Run the planned calls' queries as one statement; views answering them.

        Each argument is a planned call: its first positional argument and its keyword
        arguments, exactly as the caller will make it (``hierarchical_candidates``,
        ``text_search_facts``, ``match_entity_names``, ``entity_fact_counts`` with
        ``cap=entity_count_cap``, the store's ``get_facts_for_entities`` of the matched
        entities with ``entity_facts``, ``search_messages``, ``text_search_messages``,
        ``search_episodes``, ``text_search_episodes``).

        Returns:
            ``(store_view, index_view)``: stand-ins answering the planned calls from the
            rows read (each once) and passing every other call to ``store`` / this index.
            When nothing can be planned (a wide schema, a zero query vector), the real
            objects themselves.
        """
        answers = _Answers()
        dim = self._schema_dim
        if dim is None:
            session: AsyncSession
            async with self._read() as session:
                dim = await self._dim(session)
        vector = next(
            (p[0] for p in (hierarchical, messages_knn, episodes_knn) if p is not None), None
        )
        if dim > MAX_VECTOR_HNSW_DIM:
            return store, self
        if vector is not None and not any(vector):
            return store, self
        same_store = (
            isinstance(store, PostgresBackend)
            and store._tenant == self._tenant
            and store._uow_key == self._uow_key
        )
        params: dict[str, Any] = {"tenant": self._tenant, "exact_below": self.exact_below}
        shape: dict[str, Any] = {
            "themes": False, "themes_invalidated": False, "direct": None, "theme_cut": None,
            "text_facts": None,
            "entities": False, "entities_invalidated": False, "graph": None,
            "messages_knn": None, "messages_text": None,
            "episodes_knn": None, "episodes_text": None,
        }
        efs: list[int] = []
        h_kw: dict[str, Any] = {}
        cut = False
        checked: tuple[object, list[float]] | None = None
        if hierarchical is not None:
            h_kw = dict(hierarchical[1])
            base = {
                "theme_limit", "max_facts_per_theme", "fact_limit", "min_similarity",
                "include_invalidated", "tags", "exclude_tags",
            }
            cut = set(h_kw) == base | {"theme_fact_limit", "valid_at", "changed_since"}
            if set(h_kw) != base and not cut:
                hierarchical = None
        if hierarchical is not None:
            query = self._query_vector(hierarchical[0], dim, "hierarchical_candidates")
            checked = (hierarchical[0], query)
            params["q"] = query
            params["min_similarity"] = h_kw["min_similarity"]
            tags, exclude = h_kw["tags"], h_kw["exclude_tags"]
            efs.append(min(1000, max(self.ef_search, h_kw["fact_limit"] + 1,
                                     h_kw["theme_limit"] + 1)))
            if h_kw["theme_limit"]:
                shape["themes"] = True
                shape["themes_invalidated"] = h_kw["include_invalidated"]
                params["theme_fetch"] = h_kw["theme_limit"] + 1
                params["theme_limit"] = h_kw["theme_limit"]
                per_theme = h_kw["max_facts_per_theme"]
                params["per_theme"] = 2**31 - 1 if per_theme is None else per_theme
            shape["direct"] = (h_kw["include_invalidated"], bool(tags), bool(exclude))
            if cut and h_kw["theme_fact_limit"] is None:
                cut = False
            if cut and h_kw["theme_limit"]:
                shape["theme_cut"] = (h_kw["valid_at"] is not None,
                                      h_kw["changed_since"] is not None,
                                      h_kw["min_similarity"] <= 0)
                params["theme_fact_limit"] = h_kw["theme_fact_limit"]
                params["h_valid_at"] = h_kw["valid_at"]
                params["h_changed_since"] = h_kw["changed_since"]
            params["fact_fetch"] = h_kw["fact_limit"] + 1
            if tags:
                params["any_tags"] = list(tags)
            if exclude:
                params["no_tags"] = list(exclude)
        t_opts: SearchOptions | None = None
        terms: list[str] = []
        if text_facts is not None:
            t_opts = coerce_options(SearchOptions, None, dict(text_facts[1]))
            terms = bm25_terms(text_facts[0])
            if terms:
                shape["text_facts"] = (t_opts.include_invalidated, bool(t_opts.tags),
                                       bool(t_opts.exclude_tags))
                params["bm25_terms"] = terms
                params["text_limit"] = t_opts.limit
                if t_opts.tags:
                    params["t_any_tags"] = list(t_opts.tags)
                if t_opts.exclude_tags:
                    params["t_no_tags"] = list(t_opts.exclude_tags)
        names: list[str] = []
        n_kw: dict[str, Any] = {}
        g_opts: EntityFactsFilter | None = None
        if entity_names is not None:
            n_kw = {"limit": 10, "include_invalidated": False, **entity_names[1]}
            names = name_candidate_keys(entity_names[0])
            if names and set(n_kw) == {"limit", "include_invalidated"}:
                shape["entities"] = True
                shape["entities_invalidated"] = bool(n_kw["include_invalidated"])
                params["names"] = names
                params["match_limit"] = n_kw["limit"]
                params["count_cap"] = entity_count_cap or 0
                if entity_facts is not None and same_store:
                    g_opts = coerce_options(EntityFactsFilter, None, dict(entity_facts))
                    shape["graph"] = (
                        g_opts.include_invalidated, bool(g_opts.tags),
                        bool(g_opts.exclude_tags), g_opts.valid_at is not None,
                        g_opts.changed_since is not None,
                    )
                    params["per_entity"] = g_opts.per_entity_limit
                    params["g_any_tags"] = list(g_opts.tags or ())
                    params["g_no_tags"] = list(g_opts.exclude_tags or ())
                    params["valid_at"] = g_opts.valid_at
                    params["changed_since"] = g_opts.changed_since
            else:
                names = []
        mk_opts: SearchOptions | None = None
        if messages_knn is not None:
            mk_opts = self._plan_knn(messages_knn, dim, "search_messages", "message_fetch",
                                     "messages_knn", params, efs, shape, checked)
        mt_opts: SearchOptions | None = None
        if messages_text is not None:
            mt_opts = coerce_options(SearchOptions, None, dict(messages_text[1]))
            m_terms = bm25_terms(messages_text[0])
            if m_terms and (not terms or m_terms == terms):
                params["bm25_terms"] = m_terms
                params["message_text_limit"] = mt_opts.limit
                shape["messages_text"] = mt_opts.include_invalidated
            else:
                mt_opts = None
        ek_opts: SearchOptions | None = None
        if episodes_knn is not None:
            ek_opts = self._plan_knn(episodes_knn, dim, "search_episodes", "episode_fetch",
                                     "episodes_knn", params, efs, shape, checked)
        et_opts: SearchOptions | None = None
        if episodes_text is not None:
            et_opts = coerce_options(SearchOptions, None, dict(episodes_text[1]))
            e_terms = bm25_terms(episodes_text[0])
            if e_terms and params.get("bm25_terms", e_terms) == e_terms:
                params["bm25_terms"] = e_terms
                params["episode_text_limit"] = et_opts.limit
                shape["episodes_text"] = et_opts.include_invalidated
            else:
                et_opts = None
        # A branch is wanted when its entry is set (``themes`` / ``entities``: True; the
        # message and episode entries hold ``include_invalidated``, so False is wanted too).
        if not (shape["themes"] or shape["entities"] or any(
            shape[k] is not None for k in (
                "direct", "text_facts", "messages_knn", "messages_text", "episodes_knn",
                "episodes_text",
            )
        )):
            return store, self
        # hnsw.ef_search is scaled by the tenant's share of the first kNN's table; the
        # plan (generic or custom, see _search_settings) is chosen by the tenant's size in
        # that table, or in facts without a kNN branch (a text-mode call).
        corpus = knn_corpus(
            FACTS if hierarchical is not None or not efs
            else MESSAGES if shape["messages_knn"] is not None
            else EPISODES
        )
        settings = self._search_settings(
            efs[0] if efs else self.ef_search, corpus, knn=bool(efs)
        )
        async with self._read(settings) as session:
            stmt = signals_statement(dim, **shape, definer=await self._definer(session))
            rows = await driver_sql.fetch_all(session, stmt, params)
        by_kind: dict[int, list[Sequence[Any]]] = {}
        for r in rows:
            by_kind.setdefault(r[0], []).append(r)

        if hierarchical is not None:
            self._answer_hierarchical(answers, hierarchical[0], h_kw, by_kind, cut=cut)
        if text_facts is not None and t_opts is not None:
            hits = sorted(by_kind.get(TEXT_FACT, []), key=_POS)
            answers.put("text_search_facts", (text_facts[0],), text_facts[1], lambda a: [
                trusted(ScoredResult, item=a.lean(r), score=float(r[4])) for r in hits
            ] if terms else [])
        if entity_names is not None:
            self._answer_entities(answers, entity_names, n_kw, entity_count_cap,
                                  entity_facts, g_opts, by_kind)
        if messages_knn is not None and mk_opts is not None:
            kept = _ranked_ok(by_kind.get(MESSAGE_KNN, []), mk_opts.limit, mk_opts.limit + 1)
            if kept is not None:
                answers.put("search_messages", (messages_knn[0],), messages_knn[1], lambda _: [
                    ScoredResult(item=_message(r), score=1.0 - float(r[4])) for r in kept
                ])
        if messages_text is not None and mt_opts is not None:
            m_hits = sorted(by_kind.get(MESSAGE_TEXT, []), key=_POS)
            answers.put("text_search_messages", (messages_text[0],), messages_text[1],
                        lambda _: [ScoredResult(item=_message(r), score=float(r[4]))
                                 for r in m_hits])
        if episodes_knn is not None and ek_opts is not None:
            e_kept = _ranked_ok(by_kind.get(EPISODE_KNN, []), ek_opts.limit, ek_opts.limit + 1)
            if e_kept is not None:
                answers.put("search_episodes", (episodes_knn[0],), episodes_knn[1], lambda _: [
                    ScoredResult(item=_episode(r), score=1.0 - float(r[4])) for r in e_kept
                ])
        if episodes_text is not None and et_opts is not None:
            e_hits = sorted(by_kind.get(EPISODE_TEXT, []), key=_POS)
            answers.put("text_search_episodes", (episodes_text[0],), episodes_text[1],
                        lambda _: [ScoredResult(item=_episode(r), score=float(r[4]))
                                 for r in e_hits])
        return _View(store, answers), _View(self, answers)

    def _answer_hierarchical(
        self, answers: _Answers, vector: Sequence[float], kw: Mapping[str, Any],
        by_kind: Mapping[int, list[Sequence[Any]]], *, cut: bool,
    ) -> None:
        theme_limit, fact_limit = kw["theme_limit"], kw["fact_limit"]
        themes_rows: list[Sequence[Any]] = []
        if theme_limit:
            kept = _ranked_ok(by_kind.get(THEME, []), theme_limit, theme_limit + 1)
            if kept is None:
                return
            themes_rows = kept
        direct_rows = _ranked_ok(by_kind.get(DIRECT, []), fact_limit, fact_limit + 1)
        if direct_rows is None:
            return
        theme_rows = by_kind.get(THEME_FACT, [])
        all_direct = by_kind.get(DIRECT, [])
        per_theme = kw["max_facts_per_theme"]

        def answer(a: _Answers) -> tuple[list[Theme], list[SemanticFact], list[SemanticFact]]:
            lean = a.lean
            themes = [_theme(r) for r in themes_rows]
            wanted = list(dict.fromkeys(chain.from_iterable(
                th.fact_ids[:per_theme] for th in themes
            )))
            direct = [lean(r) for r in direct_rows]
            direct_ids = {d.id for d in direct}
            by_id = {r[3]: r for r in theme_rows}  # ``id``: a uuid column
            if cut:
                # As hierarchical_candidates: direct rows beyond the final direct list
                # are theme facts when a theme lists them.
                for r in all_direct:
                    by_id.setdefault(r[3], r)
            return themes, direct, [
                lean(by_id[i]) for i in wanted if i in by_id and i not in direct_ids
            ]

        answers.put("hierarchical_candidates", (vector,), kw, answer)

    def _answer_entities(
        self, answers: _Answers, entity_names: tuple[str, Mapping[str, Any]],
        n_kw: Mapping[str, Any], cap: int | None, entity_facts: Mapping[str, Any] | None,
        g_opts: EntityFactsFilter | None, by_kind: Mapping[int, list[Sequence[Any]]],
    ) -> None:
        rows = sorted(by_kind.get(ENTITY, []), key=itemgetter(1, 3))  # (pos, id)
        answers.put("match_entity_names", (entity_names[0],), entity_names[1],
                    lambda _: [_entity(r) for r in rows])
        known = {r[3]: r for r in rows}
        if cap is not None:

            def counts(_: _Answers, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Any:
                if len(args) != 1 or kwargs != {"cap": cap}:
                    return _MISSING
                ids = list(dict.fromkeys(args[0]))
                if not ids:
                    return {}, 0
                if not all(i in known for i in ids):
                    return _MISSING
                out = {i: int(known[i][18]["count"]) for i in ids if known[i][18]["count"]}
                return out, int(known[ids[0]][18]["total"])

            answers.subset["entity_fact_counts"] = counts
        if entity_facts is None or g_opts is None:
            return
        facts_of: dict[str, list[Sequence[Any]]] = {}
        for r in by_kind.get(GRAPH_FACT, []):
            facts_of.setdefault(r[2], []).append(r)  # ``eid``: the entity's id as text
        for listed in facts_of.values():
            listed.sort(key=_POS)
        planned = dict(entity_facts)

        def facts(a: _Answers, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Any:
            if len(args) != 1 or kwargs != planned:
                return _MISSING
            ids = list(args[0])
            if not all(isinstance(i, uuid.UUID) and i in known for i in ids):
                return _MISSING
            wanted = list(dict.fromkeys(ids))
            lean = a.lean
            found = {i: facts_of.get(str(i)) for i in wanted}
            return {i: [lean(r) for r in listed] for i, listed in found.items() if listed}

        answers.subset["get_facts_for_entities"] = facts

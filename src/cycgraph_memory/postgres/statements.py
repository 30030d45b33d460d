"""The hot statements of the Postgres backend, built once per process and reused.

Store and index take their SQL from this one module (neither imports the other). Each
statement is constructed once per *shape*: a cache keyed by what changes its structure
(the table, the schema's embedding dimension, which optional filters apply). Values are
never part of a statement; they travel as named bind parameters. A call therefore only
binds values: SQLAlchemy finds the statement's compiled SQL in its compiled cache and
asyncpg reuses the connection's prepared statement for that SQL.

Bind parameters are never named after a column of a table a statement updates (SQLAlchemy
would read such a value as a ``SET`` clause): the tag filters are ``:any_tags`` /
``:no_tags``.

Every statement filters on ``tenant_id = :tenant`` on every table it reads (a Citus
"router" query; the row-level security policies hold the same condition).

Statements and their bind parameters:

* :func:`settings`: the transaction-local settings (tenant, HNSW search settings) in one
  ``SELECT set_config(...), ...``.
* :func:`knn` (per record type): the ``:fetch`` nearest rows (:func:`nearest`: exact for a
  tenant below ``:exact_below`` documents, ``ORDER BY embedding <=> :q`` on the HNSW index
  otherwise), with the record type's liveness filter and, for facts, the tag filters
  (``:any_tags``, ``:no_tags``); ``:min_similarity`` applies outside the kNN.
* :func:`hierarchical_facts`: the direct fact kNN and the matched themes' facts
  (``:wanted``) in one statement (see ``hierarchical.py``).
* :func:`by_ids` per table (``:ids``), :func:`messages_by_ids`.
* :func:`fact_listing`: the tag listing (``find_facts``) with ``:limit`` / ``:offset``.
* :func:`facts_of_entities`: the newest facts of each entity, ``:per_entity`` per entity.
* :func:`relationships_of_entities`: edges touching ``:ids``.
* :func:`entity_name_match`: ``name_key = ANY(:names)``.
* :data:`SUBGRAPH` (the whole BFS in one recursive CTE) and :data:`TOUCH_FACTS`.
* :func:`text_ranked`: BM25 text search (``:bm25_terms``, see ``bm25.py``).
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import Any

from pgvector.sqlalchemy import HALFVEC
from sqlalchemy import (
    BigInteger,
    BindParameter,
    Boolean,
    ColumnElement,
    DateTime,
    Double,
    Integer,
    Select,
    Table,
    Text,
    TextClause,
    TextualSelect,
    Update,
    Uuid,
    and_,
    any_,
    bindparam,
    case,
    cast,
    exists,
    func,
    literal,
    not_,
    null,
    or_,
    select,
    text,
    true,
    union_all,
    update,
)
from sqlalchemy.dialects.postgresql import ARRAY, JSONB, aggregate_order_by, array, distinct_on
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.engine import RowMapping
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.sql import column as sql_column
from sqlalchemy.sql import literal_column, type_coerce
from sqlalchemy.sql import table as sql_table
from sqlalchemy.types import NullType

from cycgraph_memory.postgres import driver_sql
from cycgraph_memory.postgres.bm25 import CORPORA, TEXT_CANDIDATES, bm25_ranked
from cycgraph_memory.postgres.definer_lookups import (
    entity_fact_rows,
    entity_name_rows,
    null_texts,
)
from cycgraph_memory.postgres.schema import (
    MAX_VECTOR_HNSW_DIM,
    EmbeddingVector,
    EntityRow,
    EpisodeRow,
    FactRow,
    MessageRow,
    RelationshipRow,
    ThemeRow,
    WriterKeyRow,
)
from cycgraph_memory.records import MAX_ACCESS_COUNT

__all__ = [
    "ENTITIES",
    "EPISODES",
    "FACTS",
    "MAX_HALFVEC_HNSW_DIM",
    "MESSAGES",
    "RELATIONSHIPS",
    "SUBGRAPH",
    "THEMES",
    "TOUCH_FACTS",
    "UUIDS",
    "WRITER_KEYS",
    "by_ids",
    "distance_expr",
    "entity_name_match",
    "episode_live",
    "episode_messages_column",
    "fact_listing",
    "fact_listing_touched",
    "expansion",
    "facts_of_entities",
    "fetch",
    "hierarchical_facts",
    "any_id",
    "in_ids",
    "knn",
    "knn_corpus",
    "messages_by_ids",
    "nearest",
    "query_distance",
    "relationships_of_entities",
    "row_distance",
    "score_of",
    "settings",
    "temporal_conditions",
    "record_columns",
    "insert_messages",
    "text_ranked",
    "upsert",
]

ENTITIES: Table = EntityRow.__table__  # type: ignore[assignment]
RELATIONSHIPS: Table = RelationshipRow.__table__  # type: ignore[assignment]
EPISODES: Table = EpisodeRow.__table__  # type: ignore[assignment]
MESSAGES: Table = MessageRow.__table__  # type: ignore[assignment]
FACTS: Table = FactRow.__table__  # type: ignore[assignment]
THEMES: Table = ThemeRow.__table__  # type: ignore[assignment]
WRITER_KEYS: Table = WriterKeyRow.__table__  # type: ignore[assignment]

_TABLES: dict[str, Table] = {
    t.name: t for t in (ENTITIES, RELATIONSHIPS, EPISODES, MESSAGES, FACTS, THEMES)
}

UUIDS = ARRAY(Uuid(as_uuid=True))
"""``uuid[]``: the type of every id-list bind parameter."""
_TEXTS = ARRAY(Text())
_TZ = DateTime(timezone=True)

MAX_HALFVEC_HNSW_DIM = 4000
"""Widest ``halfvec`` pgvector can index with HNSW; wider schemas are searched exactly."""



# ----------------------------------------------------------------------------- helpers


_NOT_RECORD = frozenset({"search_terms"})


@lru_cache(maxsize=16)
def record_columns(table: Table) -> tuple[ColumnElement[Any], ...]:
    """The columns a record is built from (not the derived search columns)."""
    return tuple(c for c in table.c if c.name not in _NOT_RECORD)


def cast_any(value: object) -> Any:
    """``value`` typed ``Any``: a bind parameter where a helper's signature names a value."""
    return value


def _p(name: str, type_: Any) -> BindParameter[Any]:
    """A named bind parameter without a value (bound at execution)."""
    return bindparam(name, type_=type_)


def _tenant() -> BindParameter[Any]:
    return _p("tenant", Text())


def in_ids(column: ColumnElement[Any], ids: Sequence[uuid.UUID]) -> ColumnElement[bool]:
    """``column = ANY(:ids)`` with ``ids`` bound as one ``uuid[]`` value (ad-hoc queries)."""
    return column == any_(bindparam(None, list(ids), type_=UUIDS))


def any_id(column: ColumnElement[Any], name: str = "ids") -> ColumnElement[bool]:
    """``column = ANY(:name)``, ``:name`` a ``uuid[]`` bind parameter (built-once statements)."""
    return column == any_(_p(name, UUIDS))


def temporal_conditions(
    table: Table, valid_at: Any, changed_since: Any
) -> list[ColumnElement[bool]]:
    """SQL of ``is_valid_at`` / ``is_changed_since`` on a table with a validity window.

    ``valid_at`` / ``changed_since`` are values, bind parameters or ``None`` (no
    condition).
    """
    conds: list[ColumnElement[bool]] = []
    t = table
    if valid_at is not None:
        conds.append(t.c.valid_from <= valid_at)
        conds.append(or_(t.c.valid_until.is_(None), t.c.valid_until > valid_at))
    if changed_since is not None:
        conds.append(
            or_(
                t.c.valid_from > changed_since,
                and_(t.c.valid_until.is_not(None), t.c.valid_until > changed_since),
            )
        )
    return conds


def _vector_types(dim: int) -> tuple[bool, Any]:
    if MAX_VECTOR_HNSW_DIM < dim <= MAX_HALFVEC_HNSW_DIM:
        return True, HALFVEC(dim)
    return False, EmbeddingVector(dim)


def query_distance(
    table: Table, dim: int, query: ColumnElement[Any] | None = None
) -> ColumnElement[float]:
    """Cosine distance between ``table.embedding`` and the bind parameter ``:q``.

    ``dim <= 2000``: ``embedding <=> :q::vector(dim)`` (plain column index).
    ``2000 < dim <= 4000``: ``embedding::halfvec(dim) <=> :q::halfvec(dim)`` (the
    migration's expression index). Wider: plain vector distance (no index; exact scan).
    ``query``: another vector expression in place of ``:q`` (a column of a ``LATERAL``
    join over vectors already typed, say): compared as it is, not cast again on every
    row (cast to ``halfvec`` for the wide schemas).
    """
    half, type_ = _vector_types(dim)
    column: Any = cast(table.c.embedding, type_) if half else table.c.embedding
    if query is None:
        target: Any = cast(_p("q", type_), type_)
    else:
        target = cast(query, type_) if half else query
    result: ColumnElement[float] = column.cosine_distance(target)
    return result


def distance_expr(table: Table, query: Sequence[float], dim: int) -> ColumnElement[float]:
    """:func:`query_distance` with the query vector bound as a value (ad-hoc queries)."""
    half, type_ = _vector_types(dim)
    column: Any = cast(table.c.embedding, type_) if half else table.c.embedding
    values = [float(x) for x in query]
    result: ColumnElement[float] = column.cosine_distance(cast(literal(values, type_), type_))
    return result


def _similarity(distance: ColumnElement[Any]) -> ColumnElement[float]:
    # pgvector gives NaN for a zero vector, and NaN sorts above every number in SQL: score
    # it 0.0 like the in-memory index (cosine_similarity's rule).
    result: ColumnElement[float] = func.coalesce(
        func.nullif(1 - distance, literal(math.nan)), 0.0
    )
    return result


def row_distance(row: Mapping[Any, Any]) -> float:
    """The row's ``distance`` (infinite when it cannot be scored: NULL or NaN)."""
    d = row["distance"]
    return math.inf if d is None or math.isnan(d) else float(d)


def score_of(distance: float) -> float:
    """Similarity of a distance from :func:`row_distance` (0 when it could not be scored)."""
    return 0.0 if math.isinf(distance) else 1.0 - distance


def episode_messages_column(episodes: Table = EPISODES) -> ColumnElement[Any]:
    """A correlated subquery aggregating an episode's messages (in order) as a jsonb array.

    Lets every episode read (get, batch get, list, kNN) fetch the messages in the same
    round trip as the episode rows.
    """
    m = MESSAGES
    obj = func.jsonb_build_object(
        "id", m.c.id,
        "role", m.c.role,
        "content", m.c.content,
        "timestamp", m.c.timestamp,
        "metadata", m.c.metadata,
    )
    agg = func.coalesce(
        func.jsonb_agg(aggregate_order_by(obj, m.c.position)), literal_column("'[]'::jsonb")
    )
    sub = (
        select(agg)
        .where(m.c.tenant_id == episodes.c.tenant_id, m.c.episode_id == episodes.c.id)
        .scalar_subquery()
    )
    return type_coerce(sub, JSONB).label("messages")


def episode_live() -> ColumnElement[bool]:
    """The message row's episode exists and is not invalidated."""
    e = EPISODES
    return exists(
        select(e.c.id).where(
            e.c.tenant_id == MESSAGES.c.tenant_id,
            e.c.id == MESSAGES.c.episode_id,
            e.c.invalidated_at.is_(None),
        )
    )


def _live(table: Table) -> ColumnElement[bool]:
    if table is FACTS:
        return FACTS.c.invalidated_by.is_(None)
    if table is MESSAGES:
        return episode_live()
    if table is RELATIONSHIPS:
        return RELATIONSHIPS.c.invalidated_by.is_(None)
    return table.c.invalidated_at.is_(None)


def _extra(table: Table) -> tuple[ColumnElement[Any], ...]:
    return (episode_messages_column(),) if table is EPISODES else ()


async def fetch(
    session: AsyncSession, stmt: Any, params: Mapping[str, Any]
) -> Sequence[RowMapping]:
    """Run a statement of this module with its bind values; the rows as mappings.

    Through its compiled text when that reproduces it (:mod:`.driver_sql`).
    """
    return (await driver_sql.execute(session, stmt, params)).mappings().all()


# ----------------------------------------------------------------------------- settings


KNN_CORPUS_SETTING = "cycgraph.knn_corpus"
"""Setting naming the table whose tenant share scales ``hnsw.ef_search`` (see :func:`settings`)."""

EF_SEARCH_MAX = 1000
"""Largest ``hnsw.ef_search`` pgvector accepts."""

EF_GRAPH_ROWS = 50_000
"""Documents from which a tenant's ``hnsw.ef_search`` grows with its size (see :func:`settings`)."""

# hnsw.ef_search: the base times the larger of two factors, at least the base, at most
# 1000: the inverse square root of the tenant's share of the table (documents in
# text_search_corpora over the table's reltuples; 1 with a dedicated index, whose graph
# is the tenant's alone), and the square root of the tenant's documents over
# EF_GRAPH_ROWS. Read after the tenant setting to its left (row-level security on
# text_search_corpora).
_DEDICATED = (
    "EXISTS (SELECT FROM pg_index WHERE indexrelid = to_regclass('ix_' || {table}"
    " || '_hnsw_t_' || left(md5(current_setting('cycgraph.tenant_id', true)), 16))"
    " AND indisvalid)"
)
"""SQL: the tenant of the transaction has a valid dedicated index on the table ``{table}``
(an SQL text expression; see ``tenant_indexes``)."""

_SCALED_EF = (
    "coalesce((SELECT least({max}, greatest(b.v, ceil(b.v * greatest("
    "CASE WHEN " + _DEDICATED.format(table=":v{corpus}") + " THEN 1"
    " ELSE sqrt(greatest(c.reltuples, 1) / greatest(coalesce(s.documents, 0), 1)) END,"
    " sqrt(coalesce(s.documents, 0) / {graph}.0)))))::int::text"
    " FROM (SELECT CAST(:v{ef} AS int) AS v) b"
    " JOIN pg_class c ON c.oid = to_regclass(:v{corpus})"
    " LEFT JOIN text_search_corpora s"
    " ON s.tenant_id = current_setting('cycgraph.tenant_id', true) AND s.corpus = :v{corpus}),"
    " :v{ef})"
)


PLAN_CACHE_MODE = "plan_cache_mode"
"""Postgres's setting choosing between a prepared statement's generic and custom plans."""

AUTO_PLAN_PREFIX = "auto:"
"""A ``plan_cache_mode`` value ``auto:<exact_below>``: chosen per tenant, see :func:`settings`."""

GENERIC_ROWS_PROBE = "cycgraph_generic_rows"
"""Name of the statement :func:`generic_rows_probe` prepares (on the caller's connection)."""


def generic_rows_probe(table: str) -> tuple[str, str, str, str]:
    """Statements giving the rows a generic plan expects ``tenant_id = $1`` to match.

    In order: whether :data:`GENERIC_ROWS_PROBE` is already prepared on the connection
    (left by a transaction that failed half-way; ``DEALLOCATE`` it first), with the
    transaction's plans made generic in the same statement; ``PREPARE`` a minimal
    statement with the condition every kNN statement has; ``EXPLAIN (FORMAT JSON)`` its
    execution (the top node's ``Plan Rows`` is the planner's guess for an unknown tenant:
    the table's rows over its distinct tenants, capped by the most common tenant's share);
    ``DEALLOCATE``. Asking the planner (rather than reading ``pg_stats``) gives every role
    the same number: ``pg_stats`` hides a table's statistics from a role under its
    row-level security, while the planner uses them (the policy's condition on the tenant
    merges with ``tenant_id = $1`` into a one-time filter, so it does not change the
    guess). The texts are constant per table, so the driver's statement cache keeps them.
    ``table`` must be a plain identifier.
    """
    if not table.isidentifier() or not table.isascii():
        raise ValueError(f"not a plain identifier: {table!r}")
    name = GENERIC_ROWS_PROBE
    return (
        f"SELECT EXISTS (SELECT FROM pg_prepared_statements WHERE name = '{name}'),"
        " set_config('plan_cache_mode', 'force_generic_plan', true)",
        f"PREPARE {name}(text) AS SELECT 1 FROM {table} WHERE tenant_id = $1",
        f"EXPLAIN (FORMAT JSON) EXECUTE {name}('')",
        f"DEALLOCATE {name}",
    )


# plan_cache_mode for ``auto:<exact_below>``: a generic plan when the planner's guess for an
# unknown tenant (``:est``, see generic_rows_probe) leads it to the plan this tenant's kNN
# branch needs. The tenant is small (the exact branch of :func:`nearest`): the guess must
# not be so large that the tenant's rows are read by a sequential scan of the table. The
# tenant is big (the HNSW branch): the guess must not be so small that its rows are read
# through the tenant_id B-tree and sorted instead of searched through the HNSW index.
# Otherwise, or without statistics (no reltuples) or estimate: custom plans.
_PLAN_MODE = (
    "CASE WHEN :v{i} LIKE 'auto:%' AND " + _DEDICATED.format(table=":v{corpus}")
    + " THEN 'force_custom_plan'"
    " WHEN :v{i} LIKE 'auto:%' THEN coalesce((SELECT CASE WHEN CASE"
    " WHEN d.docs < split_part(:v{i}, ':', 2)::int"
    " AND (d.docs < {always} OR d.docs * 2 < d.reltuples)"
    " THEN CAST(:est AS float8) <= greatest(4 * d.docs, {always})"
    " ELSE 4 * CAST(:est AS float8) >= d.docs END"
    " THEN 'force_generic_plan' ELSE 'force_custom_plan' END"
    " FROM (SELECT coalesce(s.documents, 0) AS docs, c.reltuples FROM pg_class c"
    " LEFT JOIN text_search_corpora s"
    " ON s.tenant_id = current_setting('cycgraph.tenant_id', true) AND s.corpus = :v{corpus}"
    " WHERE c.oid = to_regclass(:v{corpus}) AND c.reltuples > 0) d),"
    " 'force_custom_plan') ELSE :v{i} END"
)


@lru_cache(maxsize=64)
def settings(names: tuple[str, ...], planned: bool = False) -> TextClause:
    """``SELECT set_config(:s0, :v0, true), ...``: transaction-local settings, one trip.

    The setting names are part of the text (they are constants of this package); their
    values are bound as ``:v0``, ``:v1``, ... With ``hnsw.ef_search`` and
    :data:`KNN_CORPUS_SETTING` (a table name) both present, the value set for
    ``hnsw.ef_search`` is the one bound times the inverse square root of the tenant's
    share of that table (its document count in ``text_search_corpora`` over the table's
    ``reltuples``), capped at 1,000: a filtered HNSW scan of a tenant holding 5% of a
    shared graph gets 4.5 times the candidate list (measured at 1,000,000 facts: a
    tenant of 6.7% needs ~400 for recall 0.99; a linear scaling, 1,500, costs 2-3 times
    the latency for nothing more). A tenant alone in its table keeps the value bound,
    and so does one with a dedicated index on it, up to :data:`EF_GRAPH_ROWS` documents;
    past that the value is at least the one bound times the square root of the
    tenant's documents over :data:`EF_GRAPH_ROWS` (a greedy HNSW walk of a bigger graph
    more often ends in the wrong region: at 100 one query in 60 of a 134,072-fact
    tenant with its own index, and one in 200 of a 100,000-fact tenant alone in its
    table, found none of its true ten neighbours; 164 and 142 find them all).
    Same round trip.

    ``planned`` (with :data:`PLAN_CACHE_MODE` and :data:`KNN_CORPUS_SETTING` among the
    names): a ``plan_cache_mode`` value ``auto:<exact_below>`` becomes
    ``force_generic_plan`` or ``force_custom_plan`` for this tenant (see
    ``PostgresMemoryIndex._search_settings``), from the tenant's document count and the
    rows the planner expects for an unknown tenant, bound as ``:est`` (NULL: unknown,
    custom plans; see :func:`generic_rows_probe`).
    """
    position = {name: i for i, name in enumerate(names)}
    scaled = "hnsw.ef_search" in position and KNN_CORPUS_SETTING in position
    planned = planned and PLAN_CACHE_MODE in position and scaled

    def value(i: int, name: str) -> str:
        if scaled and name == "hnsw.ef_search":
            return _SCALED_EF.format(
                max=EF_SEARCH_MAX, ef=i, corpus=position[KNN_CORPUS_SETTING],
                graph=EF_GRAPH_ROWS,
            )
        if planned and name == PLAN_CACHE_MODE:
            return _PLAN_MODE.format(
                i=i, corpus=position[KNN_CORPUS_SETTING], always=EXACT_KNN_ALWAYS_BELOW
            )
        return f":v{i}"

    calls = ", ".join(
        f"set_config('{name}', {value(i, name)}, true)" for i, name in enumerate(names)
    )
    binds = [bindparam(f"v{i}", type_=Text()) for i in range(len(names))]
    if planned:
        binds.append(bindparam("est", type_=Double()))
    return text(f"SELECT {calls}").bindparams(*binds)


# ----------------------------------------------------------------------------- kNN


EXACT_KNN_BELOW = 50_000
"""Default ``:exact_below``: tenants with fewer documents in a table are searched exactly."""

EXACT_KNN_ALWAYS_BELOW = 5_000
"""Tenants below this many documents are searched exactly whatever their share."""

_CORPUS_OF = {"facts": "facts", "episode_messages": "episode_messages", "episodes": "episodes"}


def knn_corpus(table: Table) -> str:
    """The table whose per-tenant document count sizes a kNN over ``table``.

    ``text_search_corpora`` counts the documents of facts, messages and episodes; themes
    and entities (no text corpus) are sized by the tenant's facts.
    """
    return _CORPUS_OF.get(table.name, "facts")


def _exact_gate(table: Table) -> ColumnElement[bool]:
    """The tenant is small: below ``:exact_below`` documents and half the table.

    Its documents of ``table`` (its corpus) are counted in ``text_search_corpora``, the
    table's rows by ``pg_class.reltuples``. Below :data:`EXACT_KNN_ALWAYS_BELOW`
    documents the share does not matter (and a table never analyzed has no
    ``reltuples``).

    A tenant holding most of the table is searched through the HNSW index whatever its
    size: the graph is mostly its own, and the filter loses nothing. So is a tenant with
    a dedicated index on the table (:func:`dedicated_index`): the graph is all its own.
    """
    corpus = knn_corpus(table)
    documents = func.coalesce(
        select(CORPORA.c.documents)
        .where(CORPORA.c.tenant_id == _tenant(), CORPORA.c.corpus == corpus)
        .scalar_subquery(),
        0,
    )
    rows: ColumnElement[Any] = literal_column(
        f"(SELECT reltuples FROM pg_class WHERE oid = '{corpus}'::regclass)"
    )
    below = bindparam("exact_below", EXACT_KNN_BELOW, type_=Integer())
    return and_(
        documents < below,
        or_(documents < EXACT_KNN_ALWAYS_BELOW, documents * 2 < rows),
        not_(dedicated_index(table.name)),
    )


def dedicated_index(table_name: str) -> ColumnElement[bool]:
    """The tenant ``:tenant`` has a valid dedicated HNSW index on ``table_name``.

    Found by its name (``tenant_indexes.dedicated_index_name``): a catalog lookup, no
    table of ours.
    """
    name = literal_column(f"'ix_{table_name}_hnsw_t_'", Text()).concat(
        func.left(func.md5(_tenant()), 16)
    )
    return exists(
        select(literal_column("1"))
        .select_from(_PG_INDEX)
        .where(_PG_INDEX.c.indexrelid == func.to_regclass(name), _PG_INDEX.c.indisvalid)
    )


_PG_INDEX = sql_table("pg_index", sql_column("indexrelid"), sql_column("indisvalid"))


def nearest(
    table: Table,
    dim: int,
    conditions: Sequence[ColumnElement[bool]],
    fetch: Any,
    name: str,
    query: ColumnElement[Any] | None = None,
) -> Any:
    """The ``fetch`` rows of ``table`` nearest to ``:q`` passing ``conditions``.

    Columns ``id`` and ``distance``, rows in no particular order. The exact plan gives a
    stored zero vector distance 1 (similarity 0); the HNSW plan never returns one.

    Two plans in one ``UNION ALL``, of which exactly one runs (the other's one-time
    filter, an init plan reading the tenant's document count in
    ``text_search_corpora``, is false):

    * a tenant with fewer than ``:exact_below`` documents (default
      :data:`EXACT_KNN_BELOW`) holding less than half of the table: an EXACT kNN, the
      tenant's rows reached through the ``tenant_id`` btree, every distance computed, top
      ``fetch`` sorted. The distances
      are computed in a subquery behind ``OFFSET 0``, so the planner cannot serve the
      ``ORDER BY`` from the HNSW index. A filtered HNSW scan of a graph shared with
      bigger tenants loses recall for tenants of a few thousand rows (their nearest
      neighbours sit among other tenants' rows the scan must step over); reading a few
      thousand rows is cheap and exact.
    * a bigger tenant, or one holding most of the table: ``ORDER BY embedding <=> :q
      LIMIT fetch`` on the HNSW index (its ``hnsw.ef_search`` scaled by the tenant's
      share, see :func:`settings`).

    ``conditions`` must include ``tenant_id = :tenant``. Bind parameters: ``tenant``,
    ``q``, ``exact_below`` (defaults to :data:`EXACT_KNN_BELOW`), ``fetch``'s. A bound
    ``fetch`` is rendered into the statement as a literal when it runs
    (``literal_execute``): a generic plan then knows how many rows each branch returns
    (with a bound ``LIMIT`` it assumed the default and hash-joined a sequential scan).
    ``query``: the query vector as another expression than ``:q`` (see
    :func:`query_distance`).
    """
    if isinstance(fetch, BindParameter):
        fetch = bindparam(fetch.key, type_=fetch.type, literal_execute=True)
    gate = _exact_gate(table)
    distance = query_distance(table, dim, query)
    # pgvector's distance to a stored zero vector is NaN, which sorts after every number:
    # the exact plan scores it 1 (similarity 0, the in-memory rule) so it ranks among the
    # rows of similarity 0, not after the negative ones. (HNSW does not index it.)
    scored_distance = func.coalesce(
        func.nullif(distance, literal_column("'NaN'::float8")), literal_column("1.0::float8")
    )
    scoring = (
        select(table.c.id, scored_distance.label("distance"))
        .where(*conditions, table.c.embedding.is_not(None), gate)
        .offset(0)
    )
    scored: Any
    if query is None:
        scored = scoring.subquery(f"{name}_exact")
    else:  # the outer query vector's table is the enclosing statement's
        scored = scoring.correlate_except(table).lateral(f"{name}_exact")
    exact = select(scored.c.id, scored.c.distance).order_by(scored.c.distance).limit(fetch)
    hnsw = (
        select(table.c.id, distance.label("distance"))
        .where(*conditions, table.c.embedding.is_not(None), not_(gate))
        .order_by(distance)
        .limit(fetch)
    )
    return union_all(exact, hnsw)


@lru_cache(maxsize=256)
def knn(
    table_name: str,
    dim: int,
    *,
    include_invalidated: bool,
    tags: bool = False,
    exclude_tags: bool = False,
    min_similarity: bool = False,
    zero_query: bool = False,
) -> Select[Any]:
    """Nearest rows of one record type to ``:q`` (HNSW order), ``:fetch`` of them.

    ``zero_query``: the query vector is all zeros, so every cosine distance is undefined
    (every row scores 0, ties by id): rows in id order instead of an index scan that cannot
    rank them (whether one was chosen would depend on the table's statistics).

    Bind parameters: ``tenant``, ``q``, ``fetch``, and ``any_tags`` / ``no_tags`` /
    ``min_similarity`` when those filters are on. Rows carry every column and
    ``distance`` (and ``messages`` for episodes).
    """
    table = _TABLES[table_name]
    conds: list[ColumnElement[bool]] = [table.c.tenant_id == _tenant()]
    if not include_invalidated:
        conds.append(_live(table))
    if tags:
        conds.append(table.c.tags.overlap(_p("any_tags", _TEXTS)))
    if exclude_tags:
        conds.append(not_(table.c.tags.overlap(_p("no_tags", _TEXTS))))
    fetch = _p("fetch", Integer())
    if zero_query:
        distance = query_distance(table, dim).label("distance")
        ids: Any = (
            select(table.c.id, distance)
            .where(*conds, table.c.embedding.is_not(None))
            .order_by(table.c.id)
            .limit(fetch)
        )
    else:
        ids = nearest(table, dim, conds, fetch, "knn")
    near = ids.subquery("nearest")
    stmt = select(*record_columns(table), *_extra(table), near.c.distance).select_from(
        near.join(table, and_(table.c.tenant_id == _tenant(), table.c.id == near.c.id))
    )
    if min_similarity:
        stmt = stmt.where(_similarity(near.c.distance) >= _p("min_similarity", Double()))
    return stmt


@lru_cache(maxsize=16)
def themes_near_many(dim: int) -> Select[Any]:
    """The ``:fetch`` live themes nearest to each vector of ``:queries``, in one statement.

    Columns ``ord`` (1-based position of the query in ``:queries``), ``id``,
    ``distance``; rows in no particular order. ``:queries`` is one ``vector(dim)[]``
    parameter (each vector parsed once), unnested ``WITH ORDINALITY``; each query's
    neighbours are a ``LATERAL`` :func:`nearest` over ``themes``: an exact scan of a small
    tenant's themes, an HNSW walk for a tenant past ``:exact_below`` facts (an exact scan
    there grows with the themes the tenant keeps opening: 21 -> 49 ms per ingest call of
    ~40 facts as a 100,000-fact tenant went from 4,000 to 8,245 themes). The gate is an
    init plan evaluated once for the whole statement. Bind parameters: ``queries``,
    ``tenant``, ``fetch``, ``exact_below``. Only for ``dim <= 2000`` (plain ``vector``
    index).
    """
    t = THEMES
    _, type_ = _vector_types(dim)
    queries = (
        func.unnest(_p("queries", ARRAY(type_, dimensions=1)))
        .table_valued(sql_column("v", type_), with_ordinality="ord")
        .render_derived(name="q", with_types=False)
    )
    conds = [t.c.tenant_id == _tenant(), _live(t)]
    near = (
        nearest(t, dim, conds, _p("fetch", Integer()), "themes_many", query=queries.c.v)
        .subquery("n")
        .lateral("n")
    )
    return select(queries.c.ord, near.c.id, near.c.distance).select_from(
        queries.join(near, true())
    )


@lru_cache(maxsize=256)
def hierarchical_facts(
    dim: int,
    *,
    include_invalidated: bool,
    tags: bool,
    exclude_tags: bool,
    themes: str,
    temporal: tuple[bool, bool] = (False, False),
    unscored: bool = False,
) -> Any:
    """The direct fact kNN (``src = 0``) and the matched themes' facts (``src = 1``).

    ``themes``: ``"none"`` (no theme facts), ``"all"`` (every fact of ``:wanted``) or
    ``"cut"`` (only the ``:theme_fact_limit`` nearest theme facts passing the query's
    conditions, ``temporal`` = whether ``:valid_at`` / ``:changed_since`` apply, plus,
    with ``unscored``, those that cannot be scored). Bind parameters: ``tenant``, ``q``,
    ``fact_fetch``, ``min_similarity``, ``wanted``, ``theme_fact_limit``, ``any_tags``,
    ``no_tags``, ``valid_at``, ``changed_since``.
    """
    f = FACTS
    fdist = query_distance(f, dim).label("distance")
    min_sim = _p("min_similarity", Double())
    filters: list[ColumnElement[bool]] = [f.c.tenant_id == _tenant()]
    if not include_invalidated:
        filters.append(f.c.invalidated_by.is_(None))
    if tags:
        filters.append(f.c.tags.overlap(_p("any_tags", _TEXTS)))
    if exclude_tags:
        filters.append(not_(f.c.tags.overlap(_p("no_tags", _TEXTS))))
    direct_q = nearest(f, dim, filters, _p("fact_fetch", Integer()), "direct").cte("direct")
    direct_sel = (
        select(*record_columns(f), direct_q.c.distance, literal(0, Integer()).label("src"))
        .select_from(direct_q.join(f, and_(f.c.tenant_id == _tenant(),
                                           f.c.id == direct_q.c.id)))
        .where(1 - direct_q.c.distance >= min_sim)
    )
    if themes == "none":
        return direct_sel
    theme_base = select(*record_columns(f), fdist, literal(1, Integer()).label("src"))
    if themes == "all":
        return direct_sel.union_all(
            theme_base.where(f.c.tenant_id == _tenant(), any_id(f.c.id, "wanted"))
        )
    served = select(direct_q.c.id).where(1 - direct_q.c.distance >= min_sim)
    scope = [
        *filters,
        *temporal_conditions(
            f,
            _p("valid_at", _TZ) if temporal[0] else None,
            _p("changed_since", _TZ) if temporal[1] else None,
        ),
        any_id(f.c.id, "wanted"),
        f.c.id.not_in(served),  # direct hits are not read twice
    ]
    top = nearest_listed(dim, scope, unscored=unscored)
    theme_nearest = select(
        *record_columns(f), top.c.distance, literal(1, Integer()).label("src")
    ).select_from(top.join(f, and_(f.c.tenant_id == _tenant(), f.c.id == top.c.id)))
    return union_all(direct_sel, theme_nearest)


CUT_TIE_BAND = 1e-4
"""Distance band kept past the cut of :func:`nearest_listed` (``vector`` columns).

The server computes a cosine distance over float4 values with float accumulation, the
library ranks the same vectors in float64: the two may disagree by ~1e-6 (a bound of
~2e-5 at 384 dimensions). Every fact within this band of the last one kept is kept too,
so that a fact among the best ``k`` of the library's ranking is never cut by the
server's; the ``min_similarity`` floor is lowered by it too.
"""

HALF_CUT_TIE_BAND = 1e-2
""":data:`CUT_TIE_BAND` for ``halfvec`` distances (2,001-4,000 dimensions, 11-bit mantissa)."""


def nearest_listed(dim: int, scope: Sequence[ColumnElement[bool]], *, unscored: bool) -> Any:
    """``(id, distance)`` of the ``:theme_fact_limit`` nearest facts passing ``scope``.

    Facts within ``:min_similarity`` (less the same band, for the same rounding: the
    library drops those below it after its own ranking); with ``unscored`` also every
    fact that cannot be scored (no vector, or a NaN distance): it scores 0 and is kept
    when ``min_similarity`` is 0. Past the ``:theme_fact_limit`` nearest, every fact
    within :data:`CUT_TIE_BAND` of the last of them is kept too (near ties the library's
    ranking may order differently). One scan of the listed facts: the distances are
    computed behind ``OFFSET 0`` and ranked outside it (an ``ORDER BY distance LIMIT``
    over ``facts`` could otherwise be served by the HNSW index, an approximate scan that
    drops listed facts the filters reject after it, which the planner picks on some
    statistics).
    """
    f = FACTS
    scored = (
        select(f.c.id, query_distance(f, dim).label("distance"))
        .where(*scope)
        .offset(0)
        .subquery("listed_scored")
    )
    def or_unscorable(condition: ColumnElement[bool], d: Any) -> ColumnElement[bool]:
        return or_(condition, d.is_(None), d == literal(math.nan)) if unscored else condition

    d = scored.c.distance
    band = HALF_CUT_TIE_BAND if _vector_types(dim)[0] else CUT_TIE_BAND
    keep = or_unscorable(1 - d >= _p("min_similarity", Double()) - band, d)
    rank = func.row_number().over(order_by=(d, scored.c.id)).label("rn")
    ranked = select(scored.c.id, d, rank).where(keep).subquery("listed_ranked")
    limit = _p("theme_fact_limit", Integer())
    # The distance of the last fact within the limit, on every row (NULL: fewer facts).
    last = func.max(case((ranked.c.rn <= limit, ranked.c.distance))).over().label("last")
    banded = select(ranked.c.id, ranked.c.distance, ranked.c.rn, last).subquery("listed_band")
    within = or_unscorable(
        or_(banded.c.rn <= limit, banded.c.distance <= banded.c.last + band),
        banded.c.distance,
    )
    return select(banded.c.id, banded.c.distance).where(within).subquery("theme_top")


# ----------------------------------------------------------------------------- writes


_KEY = frozenset({"tenant_id", "id"})


@lru_cache(maxsize=16)
def upsert(table_name: str, *, report_replaced: bool = False) -> Any:
    """Insert rows of ``table_name``, or replace every non-key column of a stored one.

    ``INSERT .. ON CONFLICT (tenant_id, id) DO UPDATE SET col = excluded.col`` for each
    column but the key and the generated ones; with ``report_replaced``, ``RETURNING id,
    replaced`` (a row the upsert updated carries the writing transaction in ``xmax``, as
    the conflict locked it; a freshly inserted row has 0). Built once per table: the
    ``excluded`` alias copies every column, which per call was both work and a few
    hundred objects in reference cycles. Parameters: the row's columns (executemany).
    """
    table = _TABLES[table_name]
    insert = pg_insert(table)
    stmt: Any = insert.on_conflict_do_update(
        index_elements=[table.c.tenant_id, table.c.id],
        set_={
            c.name: insert.excluded[c.name]
            for c in table.c
            if c.name not in _KEY and c.computed is None
        },
    )
    if report_replaced:
        stmt = stmt.returning(table.c.id, literal_column("(xmax::text <> '0')", Boolean))
    return stmt


@lru_cache(maxsize=1)
def insert_messages() -> Any:
    """``INSERT`` of message rows (executemany): built once, like :func:`upsert`."""
    return pg_insert(MESSAGES)


# ----------------------------------------------------------------------------- reads by id


@lru_cache(maxsize=16)
def by_ids(table_name: str) -> Select[Any]:
    """Rows of ``:ids`` (episodes with their messages). Parameters: ``tenant``, ``ids``."""
    table = _TABLES[table_name]
    return select(*record_columns(table), *_extra(table)).where(
        table.c.tenant_id == _tenant(), any_id(table.c.id)
    )


@lru_cache(maxsize=1)
def facts_for_update() -> Select[Any]:
    """Facts of ``:ids``, their rows locked ``FOR UPDATE`` until the transaction ends.

    Parameters: ``tenant``, ``ids``. A pass that re-reads facts with it before writing
    them back cannot overwrite a write another transaction commits in between: that
    writer waits for the pass to commit (and the pass waits for a writer already holding
    a row, then reads its committed version). The rows are locked in id order, the order
    of :data:`TOUCH_FACTS`: a pass and a touch of overlapping facts queue instead of
    deadlocking on rows locked in opposite orders.
    """
    return by_ids("facts").order_by(FACTS.c.id).with_for_update()


@lru_cache(maxsize=2)
def messages_by_ids(*, live: bool = False) -> Select[Any]:
    """Stored messages of ``:ids`` (one row per id). Parameters: ``tenant``, ``ids``.

    ``live``: only messages kept by a live (not invalidated) episode.
    """
    m = MESSAGES
    conditions = [m.c.tenant_id == _tenant(), any_id(m.c.id)]
    if live:
        conditions.append(episode_live())
    return (
        select(*record_columns(m))
        .where(*conditions)
        .order_by(m.c.id, m.c.episode_id)
        .ext(distinct_on(m.c.id))
    )


# ----------------------------------------------------------------------------- listings


@lru_cache(maxsize=64)
def fact_listing(
    *,
    include_invalidated: bool,
    theme: bool,
    entity: bool,
    tags: bool,
    exclude_tags: bool,
) -> Select[Any]:
    """``find_facts``: facts in ``(valid_from, id)`` order, ``LIMIT :limit OFFSET :offset``.

    Parameters: ``tenant``, ``limit`` (``None``: all), ``offset``, and ``theme_id`` /
    ``entity_id`` / ``any_tags`` / ``no_tags`` when those filters are on (GIN indexes).
    """
    t = FACTS
    stmt = select(*record_columns(t)).where(t.c.tenant_id == _tenant())
    if not include_invalidated:
        stmt = stmt.where(t.c.invalidated_by.is_(None))
    if theme:
        stmt = stmt.where(t.c.theme_id == _p("theme_id", Uuid(as_uuid=True)))
    if entity:
        stmt = stmt.where(t.c.entity_ids.contains(array([_p("entity_id", Uuid(as_uuid=True))])))
    if tags:
        stmt = stmt.where(t.c.tags.overlap(_p("any_tags", _TEXTS)))
    if exclude_tags:
        stmt = stmt.where(not_(t.c.tags.overlap(_p("no_tags", _TEXTS))))
    return (
        stmt.order_by(t.c.valid_from, t.c.id)
        .limit(_p("limit", Integer()))
        .offset(_p("offset", BigInteger()))
    )


@lru_cache(maxsize=64)
def facts_of_entities(
    *,
    include_invalidated: bool,
    tags: bool,
    exclude_tags: bool,
    valid_at: bool,
    changed_since: bool,
    definer: bool = False,
) -> Select[Any]:
    """The newest ``:per_entity`` facts of each entity of ``:ids`` (rows carry ``eid``).

    ``unnest(:ids) CROSS JOIN LATERAL (... ORDER BY valid_from DESC, id LIMIT k)`` on the
    ``entity_ids`` GIN index; every filter applies before the per-entity bound.
    Parameters: ``tenant``, ``ids``, ``per_entity`` (``None``: all), and the filters'.
    ``definer``: the ids through ``cycgraph_entity_fact_rows`` (migration 0016; a role
    under row-level security), the rows by primary key.
    """
    t = FACTS
    e = select(func.unnest(_p("ids", UUIDS)).label("eid")).subquery("e")
    if definer:
        rows = entity_fact_rows(
            e.c.eid,
            live=not include_invalidated,
            any_tags=_p("any_tags", _TEXTS) if tags else null_texts(),
            no_tags=_p("no_tags", _TEXTS) if exclude_tags else null_texts(),
            valid_at=_p("valid_at", _TZ) if valid_at else cast(null(), _TZ),
            changed_since=_p("changed_since", _TZ) if changed_since else cast(null(), _TZ),
            limit=_p("per_entity", Integer()),
            name="r",
        )
        newest = (
            select(*record_columns(t))
            .select_from(rows.join(t, and_(t.c.tenant_id == _tenant(), t.c.id == rows.c.id)))
            .order_by(rows.c.valid_from.desc(), rows.c.id)
            .correlate(e)
            .lateral("f")
        )
        return select(e.c.eid, newest).select_from(e.join(newest, true()))
    conds: list[ColumnElement[bool]] = [
        t.c.tenant_id == _tenant(),
        t.c.entity_ids.contains(array([e.c.eid])),
    ]
    if not include_invalidated:
        conds.append(t.c.invalidated_by.is_(None))
    if tags:
        conds.append(t.c.tags.overlap(_p("any_tags", _TEXTS)))
    if exclude_tags:
        conds.append(not_(t.c.tags.overlap(_p("no_tags", _TEXTS))))
    conds.extend(
        temporal_conditions(
            t,
            _p("valid_at", _TZ) if valid_at else None,
            _p("changed_since", _TZ) if changed_since else None,
        )
    )
    # OFFSET 0 keeps the matching rows a separate subquery, found through the
    # ``entity_ids`` GIN index and then sorted: the planner cannot estimate ``@>`` on a
    # lateral reference, and with the ORDER BY ... LIMIT in the same query it walked the
    # (tenant, valid_from) index backwards filtering every fact of the tenant (86,000
    # rows, 48 ms per call at 100,000 facts, instead of ~1 ms).
    matching = select(*record_columns(t)).where(*conds).correlate(e).offset(0).subquery("m")
    inner = (
        select(matching)
        .order_by(matching.c.valid_from.desc(), matching.c.id)
        .limit(_p("per_entity", Integer()))
    )
    lat = inner.lateral("f")
    return select(e.c.eid, lat).select_from(e.join(lat, true()))


@lru_cache(maxsize=64)
def relationships_of_entities(
    *, direction: str, relation_type: bool, include_invalidated: bool
) -> Select[Any]:
    """Edges touching ``:ids`` (each once), ``(valid_from, id)`` order, paged.

    Parameters: ``tenant``, ``ids``, ``limit`` (``None``: all), ``offset`` and
    ``relation_type`` when filtered.
    """
    t = RELATIONSHIPS
    stmt = select(*record_columns(t)).where(t.c.tenant_id == _tenant())
    if direction == "outgoing":
        stmt = stmt.where(any_id(t.c.source_id))
    elif direction == "incoming":
        stmt = stmt.where(any_id(t.c.target_id))
    else:
        stmt = stmt.where(or_(any_id(t.c.source_id), any_id(t.c.target_id)))
    if relation_type:
        stmt = stmt.where(t.c.relation_type == _p("relation_type", Text()))
    if not include_invalidated:
        stmt = stmt.where(t.c.invalidated_by.is_(None))
    return (
        stmt.order_by(t.c.valid_from, t.c.id)
        .limit(_p("limit", Integer()))
        .offset(_p("offset", BigInteger()))
    )


@lru_cache(maxsize=4)
def entity_name_match(*, include_invalidated: bool, definer: bool = False) -> Select[Any]:
    """Entities whose name key is one of ``:names``. Parameters: ``tenant``, ``names``.

    ``names`` are identity keys (``normalize_entity_name``), compared with the stored
    ``name_key`` (migration 0017). ``definer``: the ids through
    ``cycgraph_entity_name_rows`` (migration 0016, comparing the key since 0017; a role
    under row-level security).
    """
    t = ENTITIES
    names = _p("names", _TEXTS)
    stmt = select(*record_columns(t)).where(
        t.c.tenant_id == _tenant(),
        t.c.id.in_(entity_name_rows(names)) if definer else t.c.name_key == any_(names),
    )
    if not include_invalidated:
        stmt = stmt.where(t.c.invalidated_at.is_(None), t.c.superseded_by.is_(None))
    return stmt


# ----------------------------------------------------------------------------- text search


@lru_cache(maxsize=64)
def text_ranked(
    table_name: str, *, live: bool, tags: bool = False, exclude_tags: bool = False,
    definer: bool = False,
) -> Select[Any]:
    """Rows of the best ``:limit`` rows by BM25 for the terms ``:bm25_terms``.

    The BM25 ranking of :func:`cycgraph_memory.postgres.bm25.bm25_ranked` (on ``(id,
    search_terms)`` only), joined to the whole rows of the best ``limit``. Parameters:
    ``tenant``, ``limit``, ``bm25_terms`` and the tag filters'. ``definer``: the GIN
    candidate branches through the functions of migration 0016 (a role under row-level
    security, see :mod:`~cycgraph_memory.postgres.definer_lookups`).
    """
    table = _TABLES[table_name]
    filters: list[ColumnElement[bool]] = []
    if live:
        filters.append(_live(table))
    if tags:
        filters.append(table.c.tags.overlap(_p("any_tags", _TEXTS)))
    if exclude_tags:
        filters.append(not_(table.c.tags.overlap(_p("no_tags", _TEXTS))))
    tag_args = (
        (_p("any_tags", _TEXTS) if tags else null_texts(),
         _p("no_tags", _TEXTS) if exclude_tags else null_texts())
        if table is FACTS else None
    )
    ranked = bm25_ranked(
        table, cast_any(_tenant()), (), filters, cast_any(_p("limit", Integer())),
        candidates=TEXT_CANDIDATES, definer=(live, tag_args) if definer else None,
    ).subquery("ranked")
    return (
        select(*record_columns(table), *_extra(table), ranked.c.text_rank)
        .join(ranked, ranked.c.id == table.c.id)
        .where(table.c.tenant_id == _tenant())
        .order_by(ranked.c.text_rank.desc(), table.c.id)
    )


# ----------------------------------------------------------------------------- graph, touch

# The BFS of retrieval/subgraph.py in one statement. Each iteration of the recursive CTE
# carries the whole state as arrays (frontier, visited, kept edges), because a recursive
# term only sees the previous iteration's rows; the LATERAL step computes one hop:
# candidate edges of the frontier -> unvisited live endpoints admitted in id order up to
# the cap -> edges whose endpoints are both visited. Rows come in the canonical order of
# ``sort_subgraph`` ((hop, id); uuid order is the order of their text form). The visited
# entities are read by key (``= ANY(ARRAY(...))``, an index condition): joined as a set
# the planner guessed ~100 visits and hashed every entity of the tenant.
# ``fwd`` forwards the superseded seeds first (rule 1): its rows are the entities on the
# seeds' ``superseded_by`` chains (``next``: the pointer, ``path``: the ids passed before),
# one pointer per iteration, read by key; a chain stops at a missing entity, a loop or
# :max_forward pointers. A row without ``next`` (step >= 1) is a chain's end: a seed too.
_SUBGRAPH_SQL = """
WITH RECURSIVE
fwd(id, next, live, step, path) AS (
    SELECT e.id, e.superseded_by, false, 0, ARRAY[]::uuid[]
    FROM entities e
    WHERE e.tenant_id = :tenant AND e.id = ANY(:seeds) AND e.superseded_by IS NOT NULL
    UNION ALL
    SELECT e.id, e.superseded_by, e.invalidated_at IS NULL, f.step + 1, f.path || f.id
    FROM fwd f JOIN entities e ON e.tenant_id = :tenant AND e.id = f.next
    WHERE f.next IS NOT NULL AND f.step < :max_forward AND NOT (f.id = ANY(f.path))
),
seeds AS (
    SELECT e.id FROM entities e
    WHERE e.tenant_id = :tenant AND e.id = ANY(:seeds)
      AND (:inc OR (e.invalidated_at IS NULL AND e.superseded_by IS NULL))
    UNION
    SELECT f.id FROM fwd f WHERE f.next IS NULL AND (:inc OR f.live)
    ORDER BY id
    LIMIT :max_entities
),
bfs(hop, frontier, visited, edges) AS (
    SELECT 0, s.ids, s.ids, ARRAY[]::uuid[]
    FROM (SELECT coalesce(array_agg(id ORDER BY id), ARRAY[]::uuid[]) AS ids FROM seeds) s
    UNION ALL
    SELECT b.hop + 1, step.admitted, b.visited || step.admitted, b.edges || step.kept
    FROM bfs b
    CROSS JOIN LATERAL (
        WITH cand AS (
            SELECT r.id, r.source_id, r.target_id FROM relationships r
            WHERE r.tenant_id = :tenant
              AND (r.source_id = ANY(b.frontier) OR r.target_id = ANY(b.frontier))
              AND (:inc OR r.invalidated_by IS NULL)
              AND (CAST(:valid_at AS timestamptz) IS NULL OR (
                    r.valid_from <= :valid_at
                    AND (r.valid_until IS NULL OR :valid_at < r.valid_until)))
              AND (CAST(:types AS text[]) IS NULL OR r.relation_type = ANY(:types))
        ),
        fresh AS (
            SELECT DISTINCT x.id
            FROM cand c CROSS JOIN LATERAL (VALUES (c.source_id), (c.target_id)) AS x(id)
            WHERE NOT (x.id = ANY(b.visited))
        ),
        adm AS (
            SELECT e.id FROM entities e JOIN fresh f ON e.id = f.id
            WHERE e.tenant_id = :tenant
              AND (:inc OR (e.invalidated_at IS NULL AND e.superseded_by IS NULL))
            ORDER BY e.id
            LIMIT greatest(:max_entities - cardinality(b.visited), 0)
        ),
        adm_arr AS (
            SELECT coalesce(array_agg(id ORDER BY id), ARRAY[]::uuid[]) AS ids FROM adm
        )
        SELECT a.ids AS admitted,
               coalesce((
                   SELECT array_agg(c.id) FROM cand c
                   WHERE (c.source_id = ANY(b.visited) OR c.source_id = ANY(a.ids))
                     AND (c.target_id = ANY(b.visited) OR c.target_id = ANY(a.ids))
               ), ARRAY[]::uuid[]) AS kept
        FROM adm_arr a
    ) step
    WHERE b.hop < :max_hops AND cardinality(b.frontier) > 0
),
visits AS (SELECT DISTINCT v.id, b.hop FROM bfs b CROSS JOIN LATERAL unnest(b.frontier) AS v(id)),
edge_docs AS (
    SELECT coalesce(jsonb_agg(to_jsonb(r) ORDER BY r.valid_from, r.id), '[]'::jsonb) AS docs
    FROM relationships r
    WHERE r.tenant_id = :tenant
      AND r.id = ANY(ARRAY(SELECT x.id FROM bfs b CROSS JOIN LATERAL unnest(b.edges) AS x(id)))
)
SELECT e.*, v.hop AS hop,
       CASE WHEN row_number() OVER (ORDER BY v.hop, e.id) = 1
            THEN (SELECT docs FROM edge_docs) END AS edge_docs
FROM visits v JOIN entities e ON e.tenant_id = :tenant AND e.id = v.id
  AND e.id = ANY(ARRAY(SELECT id FROM visits))
ORDER BY v.hop, e.id
"""

SUBGRAPH: TextualSelect = (
    text(_SUBGRAPH_SQL)
    .bindparams(
        bindparam("tenant", type_=Text()),
        bindparam("seeds", type_=UUIDS),
        bindparam("max_forward", type_=Integer()),
        bindparam("inc", type_=Boolean()),
        bindparam("max_entities", type_=Integer()),
        bindparam("max_hops", type_=Integer()),
        bindparam("valid_at", type_=_TZ),
        bindparam("types", type_=_TEXTS),
    )
    .columns(*ENTITIES.c, hop=Integer(), edge_docs=JSONB())
)
"""The whole BFS of ``extract_subgraph``: visited entities (with ``hop``; ``edge_docs``, the
traversed edges as ``to_jsonb`` documents in ``(valid_from, id)`` order, on the first row
only)."""


def _saturating_increment() -> ColumnElement[int]:
    # CASE, not LEAST(count + 1, max): the addition itself would overflow. Constants are
    # SQL literals: a statement keeps no bound values of its own (a DML CTE's anonymous
    # values were lost by the statement cache).
    t = FACTS
    top = literal_column(str(MAX_ACCESS_COUNT), Integer())
    result: ColumnElement[int] = case(
        (t.c.access_count < top, t.c.access_count + literal_column("1", Integer())),
        else_=top,
    )
    return result


def _touch() -> Update:
    t = FACTS
    # Lock the rows in id order first: two overlapping touches then queue instead of
    # deadlocking on rows locked in opposite orders.
    locked = (
        select(t.c.id)
        .where(t.c.tenant_id == _tenant(), any_id(t.c.id))
        .order_by(t.c.id)
        .with_for_update()
    )
    return (
        update(t)
        .where(t.c.tenant_id == _tenant(), t.c.id.in_(locked))
        .values(
            access_count=_saturating_increment(),
            last_accessed_at=_p("at", _TZ),
        )
    )


TOUCH_FACTS: Update = _touch()
"""``touch_facts``: one UPDATE of ``:ids`` (``access_count + 1`` saturating, ``:at``)."""


@lru_cache(maxsize=16)
def fact_listing_touched(*, include_invalidated: bool, exclude_tags: bool) -> Select[Any]:
    """The tag listing and the touch of the listed facts in one statement.

    ``WITH page AS (<fact_listing>), touched AS (UPDATE facts ... WHERE id IN page)
    SELECT * FROM page``: the rows are read before the update (a data-modifying CTE's
    changes are not visible to the rest of its statement), so the facts show the counters
    as read, like a listing followed by ``touch_facts``. Parameters: those of
    :func:`fact_listing` (``any_tags`` always) and ``at``.
    """
    t = FACTS
    page = fact_listing(
        include_invalidated=include_invalidated, theme=False, entity=False, tags=True,
        exclude_tags=exclude_tags,
    ).cte("page")
    locked = (
        select(t.c.id)
        .where(t.c.tenant_id == _tenant(), t.c.id.in_(select(page.c.id)))
        .order_by(t.c.id)
        .with_for_update()
    )
    touched = (
        update(t)
        .where(t.c.tenant_id == _tenant(), t.c.id.in_(locked))
        .values(
            access_count=_saturating_increment(),
            last_accessed_at=_p("at", _TZ),
        )
        .returning(t.c.id)
        .cte("touched")
    )
    return (
        select(page)
        .add_cte(touched)
        .order_by(page.c.valid_from, page.c.id)
    )



_ENTITY_COLUMNS = ", ".join(
    f"e.{c.name}::real[] AS {c.name}" if c.name == "embedding" else f"e.{c.name}"
    for c in ENTITIES.c
)


_EPISODES_JSON = """(
    SELECT coalesce(jsonb_agg(jsonb_build_object(
        'id', ep.id, 'topic', ep.topic, 'started_at', ep.started_at,
        'ended_at', ep.ended_at, 'embedding', ep.embedding::text, 'fact_ids', ep.fact_ids,
        'provenance', ep.provenance, 'invalidated_at', ep.invalidated_at,
        'messages', (
            SELECT coalesce(jsonb_agg(jsonb_build_object(
                'id', m.id, 'role', m.role, 'content', m.content,
                'timestamp', m.timestamp, 'metadata', m.metadata) ORDER BY m.position),
                '[]'::jsonb)
            FROM episode_messages m
            WHERE m.tenant_id = ep.tenant_id AND m.episode_id = ep.id))), '[]'::jsonb)
    FROM episodes ep WHERE ep.tenant_id = :tenant AND ep.id = ANY(:episode_ids)
)"""


_TOUCHED_CTE = f"""touched AS (
    UPDATE facts SET
        access_count = CASE WHEN access_count < {MAX_ACCESS_COUNT}
                            THEN access_count + 1 ELSE {MAX_ACCESS_COUNT} END,
        last_accessed_at = :at
    WHERE tenant_id = :tenant AND id IN (
        SELECT id FROM facts WHERE tenant_id = :tenant AND id = ANY(:served)
        ORDER BY id FOR UPDATE)
    RETURNING id
),
"""
"""The touch of the served facts ``:served`` at ``:at`` (as :data:`TOUCH_FACTS`), a CTE."""


@lru_cache(maxsize=4)
def served_expansion(*, touch: bool, episodes: bool) -> TextualSelect:
    """:func:`expansion` without entities: the served facts' themes and episodes, the touch.

    The entity path of ``retrieve_memory`` has no entity to expand; what it reads after
    ranking is the themes and episodes of the served facts, and it touches them. One row
    per theme of ``:theme_ids`` (the columns of ``get_themes``, the vector as ``real[]``),
    or one row of NULLs when there is none; with ``episodes`` the episodes of
    ``:episode_ids`` as a jsonb array column ``episodes`` on the first row (as in
    :func:`expansion`); with ``touch`` the touch of ``:served`` at ``:at``. Parameters:
    ``tenant``, ``theme_ids``, ``served``, ``at``, ``episode_ids``.
    """
    with_touch = "WITH " + _TOUCHED_CTE.rstrip().rstrip(",") + "\n" if touch else ""
    episode_column = (
        f",\n       CASE WHEN row_number() OVER () = 1 THEN {_EPISODES_JSON} END AS episodes"
        if episodes else ""
    )
    sql = f"""{with_touch}SELECT th.id, th.label, th.description, th.fact_ids,
       th.embedding::real[] AS embedding, th.provenance, th.invalidated_at{episode_column}
FROM (SELECT 1) AS one
LEFT JOIN themes th ON th.tenant_id = :tenant AND th.id = ANY(:theme_ids)"""
    binds: list[BindParameter[Any]] = [
        bindparam("tenant", type_=Text()), bindparam("theme_ids", type_=UUIDS)
    ]
    extra: dict[str, Any] = {}
    if touch:
        binds += [bindparam("served", type_=UUIDS), bindparam("at", type_=_TZ)]
    if episodes:
        binds.append(bindparam("episode_ids", type_=UUIDS))
        extra["episodes"] = JSONB
    # Typed without result processors (the driver's lists as they are): the statement
    # runs as its compiled text (driver_sql).
    return text(sql).bindparams(*binds).columns(
        THEMES.c.id, THEMES.c.label, THEMES.c.description,
        sql_column("fact_ids", NullType()), sql_column("embedding", NullType()),
        THEMES.c.provenance, THEMES.c.invalidated_at, **extra,
    )


@lru_cache(maxsize=32)
def expansion(
    *, touch: bool, include_invalidated: bool, entity_types: bool, episodes: bool = False
) -> TextualSelect:
    """Entities of the served facts, their relationships and (``touch``) the touch, at once.

    ``retrieve_memory``'s expansion in one statement: the entities of ``:ids`` that pass
    the query's entity filters (live unless ``include_invalidated``, of
    ``:entity_types`` when given), the first ``:entity_limit`` of them in the order of
    ``:ids`` (``NULL``: all; rows), the relationships touching any of them (unless
    ``include_invalidated``: live ones whose endpoints are both live entities, as the
    subgraph path serves) in ``(valid_from, id)`` order, at most ``:rel_limit`` (``NULL``:
    all; cut after those filters), as one jsonb array column; and with ``touch`` a
    data-modifying CTE that touches the served facts ``:served`` (``:at``) like
    :data:`TOUCH_FACTS`. The touch runs even when no entity row is returned. With
    ``episodes``, the episodes of ``:episode_ids`` with their messages (as
    ``get_episodes``) as a jsonb array column ``episodes``; then one row always comes
    back (its entity columns NULL when no entity matched). Both arrays are on one row
    only (NULL on the others), so the driver decodes them once. Parameters: ``tenant``,
    ``ids``, ``entity_limit``, ``rel_limit``, ``entity_types``, ``served``, ``at``,
    ``episode_ids``.
    """
    live = "" if include_invalidated else (
        " AND e.invalidated_at IS NULL AND e.superseded_by IS NULL"
    )
    types = " AND e.entity_type = ANY(CAST(:entity_types AS text[]))" if entity_types else ""
    # Live edges between live entities (the entity path's rule: it never visits a dead
    # entity, so never returns an edge to one), checked before the ``:rel_limit`` cut.
    # Both endpoints exist (foreign keys, revision 0002): no endpoint may be invalidated
    # or superseded. A scalar subquery, not NOT EXISTS: the planner turned that into an
    # anti join over a sequential scan of the tenant's entities (it expects almost no dead
    # one), 2 ms at 10,000 entities and growing with them; this is a primary-key probe per
    # edge of the served entities, whatever the tenant's size.
    rel_live = "" if include_invalidated else (
        " AND r.invalidated_by IS NULL"
        "\n          AND (SELECT true FROM entities o"
        " WHERE o.tenant_id = :tenant AND o.id = ANY(ARRAY[r.source_id, r.target_id])"
        " AND (o.invalidated_at IS NOT NULL OR o.superseded_by IS NOT NULL)"
        " LIMIT 1) IS NULL"
    )
    touched = _TOUCHED_CTE if touch else ""
    # The aggregated columns travel on the first row only (NULL on the others): the same
    # jsonb array on every entity row was decoded once per row by the driver.
    first = "CASE WHEN row_number() OVER () = 1 THEN "
    episode_column = f",\n       {first}{_EPISODES_JSON} END AS episodes" if episodes else ""
    # With episodes one row always comes back (it carries them), even without entities.
    # Only the entities served are read whole (a served fact cites a few; the caller keeps
    # the first ``limit`` in citation order): the relationships need the ids of all.
    source = (
        "FROM (SELECT 1) AS one\n"
        "LEFT JOIN entities e ON e.tenant_id = :tenant AND e.id IN (SELECT id FROM shown)"
        if episodes else
        "FROM entities e\nWHERE e.tenant_id = :tenant AND e.id IN (SELECT id FROM shown)"
    )
    # The edges of the kept entities through the (tenant_id, source_id) and (tenant_id,
    # target_id) indexes (``= ANY(ARRAY(...))``: index conditions, one BitmapOr), then
    # sorted; OFFSET 0 keeps the ORDER BY ... LIMIT from walking the (tenant_id,
    # valid_from) index instead and filtering every edge of the tenant on the way (5,000
    # rows, 4-9 ms per call at 100,000 facts, for ~40 edges).
    sql = f"""WITH {touched}kept AS (
    SELECT e.id, array_position(:ids, e.id) AS pos FROM entities e
    WHERE e.tenant_id = :tenant AND e.id = ANY(:ids){live}{types}
),
shown AS (
    SELECT id FROM kept ORDER BY pos LIMIT :entity_limit
),
rels AS (
    SELECT * FROM (
        SELECT r.id, r.source_id, r.target_id, r.relation_type, r.weight, r.attributes,
               r.valid_from, r.valid_until, r.provenance, r.invalidated_by
        FROM relationships r
        WHERE r.tenant_id = :tenant
          AND (r.source_id = ANY(ARRAY(SELECT id FROM kept))
               OR r.target_id = ANY(ARRAY(SELECT id FROM kept))){rel_live}
        OFFSET 0
    ) r
    ORDER BY r.valid_from, r.id
    LIMIT :rel_limit
)
SELECT {_ENTITY_COLUMNS},
       {first}(SELECT coalesce(jsonb_agg(to_jsonb(x) ORDER BY x.valid_from, x.id), '[]'::jsonb)
        FROM rels x) END AS relationships{episode_column}
{source}"""
    binds: list[BindParameter[Any]] = [
        bindparam("tenant", type_=Text()),
        bindparam("ids", type_=UUIDS),
        bindparam("entity_limit", type_=Integer()),
        bindparam("rel_limit", type_=Integer()),
    ]
    if entity_types:
        binds.append(bindparam("entity_types", type_=_TEXTS))
    if touch:
        binds += [bindparam("served", type_=UUIDS), bindparam("at", type_=_TZ)]
    extra: dict[str, Any] = {}
    if episodes:
        binds.append(bindparam("episode_ids", type_=UUIDS))
        extra["episodes"] = JSONB
    # The embedding is selected as real[] (_ENTITY_COLUMNS): asyncpg's list of floats is
    # the value, typed without a result processor so the statement runs as its compiled
    # text (driver_sql).
    entity_columns = [
        sql_column("embedding", NullType()) if c.name == "embedding" else c for c in ENTITIES.c
    ]
    return text(sql).bindparams(*binds).columns(
        *entity_columns, relationships=JSONB, **extra
    )

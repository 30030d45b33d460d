"""BM25 on Postgres: the same ranking as the in-memory index, in one statement.

The in-memory index ranks text with :class:`~cycgraph_memory.textsearch.BM25Index`; this
module builds the statement that computes the same figure on Postgres, so the two backends
return the same order (ties aside):

* tokens: every searchable row stores its :func:`~cycgraph_memory.textsearch.tokenize`
  tokens in ``search_terms text[]`` (written by the store; duplicates kept, so a term's
  count is its frequency and the array's length the document length);
* statistics: ``text_search_corpora`` (documents, summed length) and
  ``text_search_terms`` (document frequency per term), per tenant and table, kept exact by
  triggers (migration 0008); a search reads one corpus row and one row per query term
  (once, in a CTE);
* candidates: the rows holding every query term, and for each query term at most
  ``candidates`` rows holding it (all branches ``LIMIT``-ed). A *rare* term (``df <=
  candidates``, or ``df * df <= RARE_TERM_FACTOR * candidates * N``) brings its rows from
  the GIN index on ``search_terms`` (a bitmap scan reads the whole posting list, so its
  cost is ``df``); a *common* one brings the first ``candidates`` rows of the tenant that
  hold it, from a scan that stops there (cost ``~candidates * N / df`` rows), never its
  posting list (100,000 entries for a word in every document cost ~10 ms). Which branch
  runs is decided inside the statement from ``df`` (one-time filters). A term held by no
  more than ``candidates`` rows brings all of them, and when every query term is such a
  term the result equals ranking every match, as in memory (same scores to the last bit:
  the same arithmetic, summed in query-term order); a more frequent term (IDF near zero)
  brings a sample of them;
* score: ``sum over query terms of idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * len /
  avglen))`` with ``idf = ln(1 + (N - df + 0.5) / (df + 0.5))``, best first, ties by id.

:func:`bm25_ranked` returns a ``SELECT id, text_rank`` the caller joins to whole rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Double,
    Select,
    Table,
    any_,
    bindparam,
    case,
    cast,
    func,
    not_,
    null,
    or_,
    select,
    true,
    union,
    union_all,
)
from sqlalchemy.dialects.postgresql import ARRAY, aggregate_order_by, array
from sqlalchemy.types import Text

from cycgraph_memory.postgres.definer_lookups import term_rows
from cycgraph_memory.postgres.schema import TextSearchCorpusRow, TextSearchTermRow
from cycgraph_memory.textsearch import BM25_B, BM25_K1, query_terms

__all__ = [
    "CORPORA", "RARE_TERM_FACTOR", "TERMS", "TEXT_CANDIDATES", "DefinerFilters", "bm25_ranked",
    "bm25_terms",
]

DefinerFilters = tuple[bool, tuple[ColumnElement[Any], ColumnElement[Any]] | None]
"""``(live, (any_tags, no_tags) or None)``: a candidate lookup's filters as arguments of the
functions of migration 0016 (see :func:`bm25_ranked`)."""

TEXT_CANDIDATES = 200
"""Rows per candidate branch (the all-terms branch and each term's branch)."""

RARE_TERM_FACTOR = 8
"""A term held by ``df`` of ``N`` documents is *rare* when ``df <= candidates`` or
``df * df <= RARE_TERM_FACTOR * candidates * N``: its candidates come from its GIN posting
list (cost ~ ``df``); a common term's from a scan of the tenant's rows that stops at
``candidates`` matches (cost ~ ``candidates * N / df`` rows). The two costs meet near
``df = sqrt(factor * candidates * N)`` (about 12,600 at 100,000 documents)."""

CORPORA: Table = TextSearchCorpusRow.__table__  # type: ignore[assignment]
TERMS: Table = TextSearchTermRow.__table__  # type: ignore[assignment]


def bm25_terms(text: str) -> list[str]:
    """The query terms of ``text`` (:func:`~cycgraph_memory.textsearch.query_terms`)."""
    return query_terms(text)


def bm25_ranked(
    table: Table,
    tenant: str,
    terms: Sequence[str],
    filters: Sequence[ColumnElement[bool]],
    limit: int,
    *,
    candidates: int = TEXT_CANDIDATES,
    k1: float = BM25_K1,
    b: float = BM25_B,
    definer: DefinerFilters | None = None,
) -> Select[Any]:
    """``SELECT id, text_rank`` of the ``limit`` best rows of ``table`` for ``terms``.

    Args:
        table: ``facts``, ``episode_messages`` or ``episodes`` (a ``search_terms`` column
            and trigger-kept statistics under its name).
        tenant: The tenant.
        terms: Distinct query terms (:func:`bm25_terms`); must not be empty.
        filters: Conditions on ``table`` a row must meet (applied to the candidates).
        limit: Most rows.
        candidates: Rows per candidate branch.
        k1: Term-frequency saturation.
        b: Length normalisation.
        definer: For a role under row-level security: ``(live, tags)``, the same
            conditions as ``filters`` (live rows only; ``(any_tags, no_tags)`` ``text[]``
            expressions, NULL where not filtered, or ``None``) for the GIN branches, which
            then go through the lookup functions of migration 0016
            (:mod:`~cycgraph_memory.postgres.definer_lookups`).

    Returns:
        A select of ``(id, text_rank)`` ordered by ``text_rank`` descending, then id.
    """
    words = bindparam("bm25_terms", list(terms), type_=ARRAY(Text()))
    mine = table.c.tenant_id == tenant
    corpus = CORPORA.c

    # The corpus statistics and the query terms' document frequencies, read once (init
    # plans and one index range of ``text_search_terms``). A term no document holds has
    # no row: it brings no candidate and adds nothing to a score, as in memory.
    n = func.coalesce(
        select(cast(corpus.documents, Double))
        .where(corpus.tenant_id == tenant, corpus.corpus == table.name)
        .scalar_subquery(),
        0.0,
    )
    total = func.coalesce(
        select(cast(corpus.total_length, Double))
        .where(corpus.tenant_id == tenant, corpus.corpus == table.name)
        .scalar_subquery(),
        0.0,
    )
    avg_length = case((total > 0, total / n), else_=1.0)
    df = (
        select(
            TERMS.c.term,
            cast(TERMS.c.documents, Double).label("df"),
            func.array_position(words, TERMS.c.term).label("ord"),
        )
        .where(TERMS.c.tenant_id == tenant, TERMS.c.corpus == table.name,
               TERMS.c.term == any_(words))
        .cte(f"{table.name}_df")
    )

    def rare(frequency: ColumnElement[Any]) -> ColumnElement[bool]:
        # A posting list short enough to read whole (see RARE_TERM_FACTOR).
        return or_(
            frequency <= candidates,
            frequency * frequency <= RARE_TERM_FACTOR * candidates * n,
        )

    # Per query term: a rare term's rows from the GIN index (all of them when it has no
    # more than ``candidates``); a common term's first ``candidates`` rows of the tenant,
    # read in index order with a test the GIN index cannot serve (a bitmap scan would read
    # its whole posting list first: 100,000 entries for a word in every document). The
    # two branches' conditions on ``df`` do not read the table: one-time filters, so
    # exactly one branch runs per term.
    if definer is None:
        from_index = (
            select(table.c.id)
            .where(mine, table.c.search_terms.overlap(array([df.c.term])), *filters,
                   rare(df.c.df))
            .limit(candidates)
        )
    else:
        rows = term_rows(table.name, array([df.c.term]), every=False, live=definer[0],
                         tags=definer[1], limit=candidates, name="term_rows")
        from_index = select(rows.c.id).where(rare(df.c.df)).correlate(df)
    from_scan = (
        select(table.c.id)
        .where(mine, df.c.term == any_(table.c.search_terms), *filters, not_(rare(df.c.df)))
        .limit(candidates)
    )
    per_term = union_all(from_index, from_scan).lateral("per_term")

    # Rows holding every query term: through the GIN index when the rarest term is rare
    # (its short posting list drives the intersection), by the same early-stopping scan
    # otherwise; none when a term is held by no document. Gated on one aggregate row of
    # ``df`` through LATERAL (a parameterised subquery: no parallel plan, whose workers
    # would start even for the branch that does not run).
    gate = (
        select(func.count().label("present"), func.min(df.c.df).label("rarest"))
        .select_from(df)
        .subquery("gate")
    )
    complete = gate.c.present == func.cardinality(words)
    if definer is None:
        every_index = (
            select(table.c.id)
            .where(mine, table.c.search_terms.contains(words), *filters,
                   complete, rare(gate.c.rarest))
            .limit(candidates)
        )
    else:
        all_rows = term_rows(table.name, words, every=True, live=definer[0],
                             tags=definer[1], limit=candidates, name="every_rows")
        every_index = select(all_rows.c.id).where(complete, rare(gate.c.rarest)).correlate(gate)
    every_scan = (
        select(table.c.id)
        .where(mine,
               func.array_remove(table.c.search_terms, null(), type_=ARRAY(Text()))
               .contains(words),
               *filters, complete, not_(rare(gate.c.rarest)))
        .limit(candidates)
    )
    every = union_all(every_index, every_scan).lateral("every")
    candidate_ids = union(
        select(every.c.id).select_from(gate).join(every, true()),
        select(per_term.c.id).select_from(df).join(per_term, true()),
    ).subquery("candidates")

    # Each candidate's terms by its key (``LIMIT 1`` keeps the lookup a nested loop on the
    # primary key: joined as a set, the planner hashes the whole table for ~1,000 rows),
    # then each query term's frequency in them (``array_positions``), no unnesting.
    doc = (
        select(table.c.id, table.c.search_terms)
        .where(mine, table.c.id == candidate_ids.c.id)
        .limit(1)
        .lateral("doc")
    )
    tf = cast(func.cardinality(func.array_positions(doc.c.search_terms, df.c.term)), Double)
    length = cast(func.cardinality(doc.c.search_terms), Double)
    frequencies = (
        select(
            doc.c.id.label("id"),
            df.c.df.label("df"),
            df.c.ord.label("ord"),
            tf.label("tf"),
            length.label("length"),
        )
        .select_from(candidate_ids)
        .join(doc, true())
        .join(df, true())
        .subquery("frequencies")
    )
    f = frequencies.c
    idf = func.ln(1.0 + (n - f.df + 0.5) / (f.df + 0.5))
    norm = k1 * (1.0 - b + b * f.length / avg_length)
    # Summed in query-term order, as in memory: the same floating-point result, so exact
    # ties stay ties and fall to the id order on both backends.
    score = func.sum(
        aggregate_order_by(idf * f.tf * (k1 + 1.0) / (f.tf + norm), f.ord)
    ).label("text_rank")
    return (
        select(f.id, score)
        .select_from(frequencies)
        .where(f.tf > 0)
        .group_by(f.id)
        .order_by(score.desc(), f.id)
        .limit(limit)
    )

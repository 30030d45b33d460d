"""BM25 on Postgres: the same ranking as the in-memory index, in one statement.

The in-memory index ranks text with :class:`~cycgraph_memory.textsearch.BM25Index`; this
module builds the statement that computes the same figure on Postgres, so the two backends
return the same order (ties aside):

* tokens: every searchable row stores its :func:`~cycgraph_memory.textsearch.tokenize`
  tokens in ``search_terms text[]`` (written by the store; duplicates kept, so a term's
  count is its frequency and the array's length the document length);
* statistics: ``text_search_corpora`` (documents, summed length) and
  ``text_search_terms`` (document frequency per term), per tenant and table, kept exact by
  triggers (migration 0008); a search reads one corpus row and one row per query term;
* candidates (GIN on ``search_terms``): the rows holding every query term, and for each
  query term at most ``candidates`` rows holding it (all branches ``LIMIT``-ed, so the cost
  does not grow with the number of matching rows). A term held by no more than
  ``candidates`` rows brings all of them, and then the result equals ranking every match,
  as in memory; a term held by more rows (IDF near zero) brings a sample of them;
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
    select,
    true,
    union,
)
from sqlalchemy.dialects.postgresql import ARRAY, array
from sqlalchemy.types import Text

from cycgraph_memory.postgres.schema import TextSearchCorpusRow, TextSearchTermRow
from cycgraph_memory.textsearch import BM25_B, BM25_K1, query_terms

__all__ = ["CORPORA", "TERMS", "TEXT_CANDIDATES", "bm25_ranked", "bm25_terms"]

TEXT_CANDIDATES = 200
"""Rows per candidate branch (the all-terms branch and each term's branch)."""

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

    Returns:
        A select of ``(id, text_rank)`` ordered by ``text_rank`` descending, then id.
    """
    words = bindparam("bm25_terms", list(terms), type_=ARRAY(Text()))
    mine = table.c.tenant_id == tenant

    query = func.unnest(words).table_valued("term").render_derived(name="query_terms")
    per_term = (
        select(table.c.id)
        .where(mine, table.c.search_terms.overlap(array([query.c.term])), *filters)
        .limit(candidates)
        .lateral("per_term")
    )
    every = (
        select(table.c.id)
        .where(mine, table.c.search_terms.contains(words), *filters)
        .limit(candidates)
    )
    candidate_ids = union(
        every, select(per_term.c.id).select_from(query).join(per_term, true())
    ).subquery("candidates")

    # Each candidate's row by its key (``LIMIT 1`` keeps the lookup a nested loop on the
    # primary key: joined as a set, the planner hashes the whole table for ~1,000 rows).
    doc = (
        select(table.c.id, table.c.search_terms)
        .where(mine, table.c.id == candidate_ids.c.id)
        .limit(1)
        .lateral("doc")
    )
    tokens = func.unnest(doc.c.search_terms).table_valued("term").render_derived(name="tok")
    frequencies = (
        select(
            doc.c.id.label("id"),
            tokens.c.term.label("term"),
            cast(func.count(), Double).label("tf"),
            cast(func.max(func.cardinality(doc.c.search_terms)), Double).label("length"),
        )
        .select_from(candidate_ids)
        .join(doc, true())
        .join(tokens, true())
        .where(tokens.c.term == any_(words))
        .group_by(doc.c.id, tokens.c.term)
        .subquery("frequencies")
    )
    corpus = CORPORA.c
    documents = cast(corpus.documents, Double)
    stats = (
        select(
            documents.label("n"),
            case(
                (corpus.total_length > 0, cast(corpus.total_length, Double) / documents),
                else_=1.0,
            ).label("avg_length"),
        )
        .where(corpus.tenant_id == tenant, corpus.corpus == table.name)
        .subquery("corpus")
    )
    df = (
        select(TERMS.c.term, cast(TERMS.c.documents, Double).label("df"))
        .where(TERMS.c.tenant_id == tenant, TERMS.c.corpus == table.name,
               TERMS.c.term == any_(words))
        .subquery("df")
    )
    f = frequencies.c
    idf = func.ln(1.0 + (stats.c.n - df.c.df + 0.5) / (df.c.df + 0.5))
    norm = k1 * (1.0 - b + b * f.length / stats.c.avg_length)
    score = func.sum(idf * f.tf * (k1 + 1.0) / (f.tf + norm)).label("text_rank")
    return (
        select(f.id, score)
        .select_from(frequencies)
        .join(df, df.c.term == f.term)
        .join(stats, true())
        .group_by(f.id)
        .order_by(score.desc(), f.id)
        .limit(limit)
    )

"""The matched themes' nearest facts are an exact top-k in both statements that read them.

An ``ORDER BY distance LIMIT k`` over ``facts`` can be served by the HNSW index, an
approximate scan whose post-filter (the theme's listed ids, tags, validity) drops facts:
the planner picked it on some table statistics, and the native and generic retrievals
then disagreed. Both statements compute the distances behind an ``OFFSET 0`` fence and
sort outside it, as the exact kNN does. The unscorable facts come from the same scan.
"""

from __future__ import annotations

import re

from sqlalchemy.dialects import postgresql

from cycgraph_memory.postgres.signals import signals_statement
from cycgraph_memory.postgres.statements import hierarchical_facts


def _sql(statement: object) -> str:
    return str(statement.compile(dialect=postgresql.dialect()))  # type: ignore[attr-defined]


def _fenced(sql: str) -> bool:
    # The listed_scored subquery ends with OFFSET; the rank and its cut are outside it.
    cut = re.search(r"\((SELECT (?:(?!\) AS).)*?)\) AS listed_scored\b", sql, re.S)
    return cut is not None and "OFFSET" in cut.group(1) and "ORDER BY" not in cut.group(1)


def test_generic_theme_cut_sorts_outside_an_offset_fence() -> None:
    sql = _sql(hierarchical_facts(8, include_invalidated=False, tags=True,
                                  exclude_tags=False, themes="cut"))
    assert _fenced(sql), sql
    assert "AS theme_top" in sql


def test_unscorable_facts_come_from_the_same_scan() -> None:
    sql = _sql(hierarchical_facts(8, include_invalidated=False, tags=False,
                                  exclude_tags=False, themes="cut", unscored=True))
    assert _fenced(sql), sql
    scored_only = _sql(hierarchical_facts(8, include_invalidated=False, tags=False,
                                          exclude_tags=False, themes="cut"))
    assert sql.count("AS listed_scored") == 1
    assert sql.count("UNION ALL") == scored_only.count("UNION ALL")  # no branch of its own
    assert "distance IS NULL" in sql and "distance IS NULL" not in scored_only


def test_native_theme_cut_sorts_outside_an_offset_fence() -> None:
    sql = _sql(signals_statement(
        8, themes=True, themes_invalidated=False, direct=(False, True, False),
        theme_cut=(False, False, False), text_facts=None, entities=False,
        entities_invalidated=False, graph=None, messages_knn=None, messages_text=None,
    ))
    assert _fenced(sql), sql
    assert "AS theme_top" in sql

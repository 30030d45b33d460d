"""GIN lookups through the functions of migration 0016, for a role under row-level security.

Postgres evaluates a row-level security policy's condition before any query condition
whose functions are not ``LEAKPROOF``; the array operators the GIN indexes serve (``&&``,
``@>``) are not, so for such a role a BM25 candidate branch or an entity's facts would
read every row of the tenant. Migration 0016 defines ``SECURITY DEFINER`` functions that
run those lookups as their owner, scoped to the transaction's ``cycgraph.tenant_id`` (the
policy's own condition), and return row ids; the statements read the rows by primary key.

A backend uses them only when they help and are allowed (:data:`PROBE`, read once per
backend object and engine): the policies apply to the connected role, the role may execute
the functions, and their owner is exempt from the policies (a superuser or ``BYPASSRLS``).
Otherwise the statements keep the plain GIN conditions (an owner or superuser connection,
or a database without the migration or the grant: same results, slower under the policies).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    ColumnElement,
    Integer,
    Select,
    TableValuedAlias,
    cast,
    column,
    false,
    func,
    literal_column,
    null,
    select,
    true,
)
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.types import DateTime, Text, Uuid

__all__ = [
    "ENTITY_FACT_COUNT", "ENTITY_FACT_ROWS", "ENTITY_NAME_KEY_ROWS", "ENTITY_NAME_ROWS",
    "PROBE", "TERM_ROWS", "entity_fact_count", "entity_fact_rows", "entity_name_key_rows",
    "entity_name_rows", "null_texts", "term_rows",
]

TERM_ROWS = {
    "facts": "cycgraph_term_rows_facts",
    "episode_messages": "cycgraph_term_rows_episode_messages",
    "episodes": "cycgraph_term_rows_episodes",
}
"""The BM25 candidate lookup function of each searchable table."""

ENTITY_FACT_ROWS = "cycgraph_entity_fact_rows"
"""``(id, valid_from)`` of an entity's newest facts that pass the filters."""

ENTITY_FACT_COUNT = "cycgraph_entity_fact_count"
"""How many facts cite an entity, capped."""

ENTITY_NAME_ROWS = "cycgraph_entity_name_rows"
"""Ids of the entities whose lowercased name is one of the given names."""

ENTITY_NAME_KEY_ROWS = "cycgraph_entity_name_key_rows"
"""Ids of the entities of the given types whose name key is one of the given keys."""

PROBE = """
SELECT coalesce((
    SELECT row_security_active(to_regclass('facts'))
       AND has_function_privilege(p.oid, 'EXECUTE')
       AND (r.rolsuper OR r.rolbypassrls)
    FROM pg_proc p JOIN pg_roles r ON r.oid = p.proowner
    WHERE p.oid = to_regprocedure(
        'cycgraph_term_rows_facts(text[], boolean, boolean, text[], text[], integer)')
), false)
"""
"""Whether this connection should look up through the functions (see the module doc)."""

_TEXTS = ARRAY(Text())


def null_texts() -> ColumnElement[Any]:
    """A typed NULL ``text[]`` (a tag filter that is not set)."""
    return cast(null(), _TEXTS)


def _flag(value: bool) -> ColumnElement[bool]:
    return true() if value else false()


def term_rows(
    table: str,
    terms: ColumnElement[Any],
    *,
    every: bool,
    live: bool,
    tags: tuple[ColumnElement[Any], ColumnElement[Any]] | None,
    limit: int,
    name: str,
) -> TableValuedAlias:
    """``FROM`` the ids of at most ``limit`` of the tenant's rows of ``table`` holding ``terms``.

    Args:
        table: ``facts``, ``episode_messages`` or ``episodes``.
        terms: A ``text[]`` expression.
        every: Rows holding every term (``@>``) rather than any (``&&``).
        live: Live rows only.
        tags: ``(any_tags, no_tags)`` ``text[]`` expressions (NULL: no filter); facts only.
        limit: Most ids (a literal).
        name: The alias.
    """
    args: list[Any] = [terms, _flag(every), _flag(live)]
    if table == "facts":
        any_tags, no_tags = tags if tags is not None else (null_texts(), null_texts())
        args += [any_tags, no_tags]
    elif tags is not None:
        raise ValueError(f"{table} has no tags")
    args.append(literal_column(str(int(limit)), Integer()))
    fn = getattr(func, TERM_ROWS[table])(*args)
    alias: TableValuedAlias = fn.table_valued(column("id", Uuid(as_uuid=True)))
    return alias.render_derived(name=name)


def entity_fact_rows(
    entity: ColumnElement[Any],
    *,
    live: bool,
    any_tags: ColumnElement[Any],
    no_tags: ColumnElement[Any],
    valid_at: ColumnElement[Any],
    changed_since: ColumnElement[Any],
    limit: ColumnElement[Any],
    name: str,
) -> TableValuedAlias:
    """``FROM`` ``(id, valid_from)`` of ``entity``'s newest ``limit`` facts passing the filters.

    Each filter expression may be a typed NULL (no filter); ``limit`` NULL: every fact.
    """
    fn = getattr(func, ENTITY_FACT_ROWS)(
        entity, _flag(live), any_tags, no_tags, valid_at, changed_since, limit
    )
    rows: TableValuedAlias = fn.table_valued(
        column("id", Uuid(as_uuid=True)), column("valid_from", DateTime(timezone=True))
    )
    return rows.render_derived(name=name)


def entity_fact_count(entity: ColumnElement[Any], cap: ColumnElement[Any]) -> Any:
    """How many facts cite ``entity``, at most ``cap`` (a ``bigint`` expression)."""
    return getattr(func, ENTITY_FACT_COUNT)(entity, cap)


def _ids(fn: Any, name: str) -> Select[Any]:
    rows: TableValuedAlias = fn.table_valued(column("id", Uuid(as_uuid=True)))
    alias = rows.render_derived(name=name)
    return select(alias.c.id)


def entity_name_rows(names: ColumnElement[Any]) -> Select[Any]:
    """``SELECT id`` of the tenant's entities whose ``lower(name)`` is in ``names`` (``text[]``)."""
    return _ids(getattr(func, ENTITY_NAME_ROWS)(names), "name_rows")


def entity_name_key_rows(types: ColumnElement[Any], keys: ColumnElement[Any]) -> Select[Any]:
    """``SELECT id`` of the tenant's entities of ``types`` whose name key is in ``keys``."""
    return _ids(getattr(func, ENTITY_NAME_KEY_ROWS)(types, keys), "name_key_rows")

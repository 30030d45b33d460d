"""Index lookups an application role under row-level security can use: seven functions.

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-05

Postgres evaluates a row-level security policy's condition before any condition of the
query whose functions are not ``LEAKPROOF``, and the array operators the GIN indexes serve
(``&&``, ``@>`` on ``search_terms`` and ``entity_ids``) are not, nor is ``lower()`` (the
expression indexes on entity names). So for a role the policy applies to, none of these
indexes can be used: a BM25 candidate branch, the facts of an entity or an entity-name
match read every row of the tenant (100,000 facts: text retrieval 390-470 ms, hybrid
460-520, entity 2-hop 114, against 15 / 35-45 / 10 as the owner).

These functions run those lookups as their owner (``SECURITY DEFINER``; the migration role,
which must be a superuser or have ``BYPASSRLS``, see docs/security.md), scoped to the
tenant of the transaction-local setting ``cycgraph.tenant_id``, the very condition of the
policy, so they return nothing a policy would hide. They return row ids only; the caller
reads the rows themselves by primary key, under its own policies:

* ``cycgraph_term_rows_facts(terms, every, live, any_tags, no_tags, lim)``,
  ``cycgraph_term_rows_episode_messages(terms, every, live, lim)``,
  ``cycgraph_term_rows_episodes(terms, every, live, lim)``: at most ``lim`` ids of the
  tenant's rows holding any of ``terms`` (``every``: all of them), live only when ``live``,
  with the tag filters when not NULL (the BM25 candidates' GIN branches);
* ``cycgraph_entity_fact_rows(entity, live, any_tags, no_tags, valid_at, changed_since,
  lim)``: ``(id, valid_from)`` of the newest ``lim`` (NULL: all) facts citing ``entity``
  that pass the filters, newest first;
* ``cycgraph_entity_fact_count(entity, cap)``: how many facts cite ``entity``, at most
  ``cap``;
* ``cycgraph_entity_name_rows(names)``: ids of the entities whose ``lower(name)`` is one of
  ``names`` (the name match of retrieval, index of revision 0012);
* ``cycgraph_entity_name_key_rows(types, keys)``: ids of the entities of ``types`` whose
  name key is one of ``keys`` (entity resolution at ingest, index of revision 0013).

``EXECUTE`` is revoked from ``PUBLIC`` (a role that cannot read ``facts`` must not learn
which rows hold a word) and granted to every role that holds ``SELECT`` on the table each
function reads when this revision runs. A role created later needs ``GRANT EXECUTE ON ALL
FUNCTIONS IN SCHEMA ...``; without it (or when the owner is subject to the policies) the
backends keep the plain statements, slower under row-level security but equal in result.
The functions' ``search_path`` is the migration's schema, then ``pg_temp``.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0016"
down_revision: str | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_TENANT = "current_setting('cycgraph.tenant_id', true)"

_FACT_TAGS = """
   AND (p_any_tags IS NULL OR r.tags && p_any_tags)
   AND (NOT coalesce(r.tags && p_no_tags, false))"""

_MESSAGE_LIVE = """EXISTS (SELECT 1 FROM episodes e WHERE e.tenant_id = r.tenant_id
                                 AND e.id = r.episode_id AND e.invalidated_at IS NULL)"""


def _term_rows(table: str, live: str, tags: bool) -> tuple[str, str]:
    """``(signature, CREATE FUNCTION ...)`` of the BM25 candidate lookup of ``table``."""
    name = f"cycgraph_term_rows_{table}"
    args = "p_terms text[], p_every boolean, p_live boolean"
    types = "text[], boolean, boolean"
    if tags:
        args += ", p_any_tags text[], p_no_tags text[]"
        types += ", text[], text[]"
    args += ", p_limit integer"
    types += ", integer"
    filters = _FACT_TAGS if tags else ""

    def branch(every: bool, op_: str) -> str:
        gate = "p_every" if every else "NOT p_every"
        return (
            f"(SELECT r.id FROM {table} r\n"
            f" WHERE {gate} AND r.tenant_id = {_TENANT}\n"
            f"   AND r.search_terms {op_} p_terms\n"
            f"   AND (NOT p_live OR {live}){filters}\n"
            f" LIMIT p_limit)"
        )

    body = f"{branch(False, '&&')}\nUNION ALL\n{branch(True, '@>')}"
    return f"{name}({types})", (
        f"CREATE FUNCTION {name}({args}) RETURNS SETOF uuid\n"
        f"LANGUAGE sql STABLE SECURITY DEFINER SET search_path = {{path}}\n"
        f"AS $fn$\n{body}\n$fn$"
    )


_ENTITY_ROWS = f"""
CREATE FUNCTION cycgraph_entity_fact_rows(
    p_entity uuid, p_live boolean, p_any_tags text[], p_no_tags text[],
    p_valid_at timestamptz, p_changed_since timestamptz, p_limit integer
) RETURNS TABLE (id uuid, valid_from timestamptz)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = {{path}}
AS $fn$
SELECT m.id, m.valid_from FROM (
    SELECT r.id, r.valid_from FROM facts r
    WHERE r.tenant_id = {_TENANT} AND r.entity_ids @> ARRAY[p_entity]
      AND (NOT p_live OR r.invalidated_by IS NULL){_FACT_TAGS}
      AND (p_valid_at IS NULL OR (r.valid_from <= p_valid_at
           AND (r.valid_until IS NULL OR r.valid_until > p_valid_at)))
      AND (p_changed_since IS NULL OR r.valid_from > p_changed_since
           OR (r.valid_until IS NOT NULL AND r.valid_until > p_changed_since))
    OFFSET 0
) m
ORDER BY m.valid_from DESC, m.id
LIMIT p_limit
$fn$"""

_ENTITY_COUNT = f"""
CREATE FUNCTION cycgraph_entity_fact_count(p_entity uuid, p_cap integer) RETURNS bigint
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = {{path}}
AS $fn$
SELECT count(*) FROM (
    SELECT 1 FROM facts r
    WHERE r.tenant_id = {_TENANT} AND r.entity_ids @> ARRAY[p_entity]
    LIMIT p_cap
) c
$fn$"""

_NAME_ROWS = f"""
CREATE FUNCTION cycgraph_entity_name_rows(p_names text[]) RETURNS SETOF uuid
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = {{path}} ROWS 5
AS $fn$
SELECT r.id FROM entities r
WHERE r.tenant_id = {_TENANT} AND lower(r.name) = ANY(p_names)
$fn$"""

_NAME_KEY_ROWS = f"""
CREATE FUNCTION cycgraph_entity_name_key_rows(p_types text[], p_keys text[])
RETURNS SETOF uuid
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = {{path}} ROWS 10
AS $fn$
SELECT r.id FROM entities r
WHERE r.tenant_id = {_TENANT} AND r.entity_type = ANY(p_types)
  AND regexp_replace(lower(r.name), '[^[:alnum:]]', '', 'g') = ANY(p_keys)
$fn$"""

FUNCTIONS: tuple[tuple[str, str, str], ...] = (
    # (table read, signature, definition)
    ("facts", *_term_rows("facts", "r.invalidated_by IS NULL", tags=True)),
    ("episode_messages", *_term_rows("episode_messages", _MESSAGE_LIVE, tags=False)),
    ("episodes", *_term_rows("episodes", "r.invalidated_at IS NULL", tags=False)),
    ("facts", "cycgraph_entity_fact_rows(uuid, boolean, text[], text[], timestamptz, "
              "timestamptz, integer)", _ENTITY_ROWS),
    ("facts", "cycgraph_entity_fact_count(uuid, integer)", _ENTITY_COUNT),
    ("entities", "cycgraph_entity_name_rows(text[])", _NAME_ROWS),
    ("entities", "cycgraph_entity_name_key_rows(text[], text[])", _NAME_KEY_ROWS),
)
"""The functions of this revision."""

_READERS = sa.text(
    """
    SELECT DISTINCT CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE r.rolname END
    FROM pg_class c
    CROSS JOIN LATERAL aclexplode(c.relacl) a
    LEFT JOIN pg_roles r ON r.oid = a.grantee
    WHERE c.oid = to_regclass(:table) AND a.privilege_type = 'SELECT'
      AND a.grantee <> c.relowner
    ORDER BY 1
    """
)


def _quote(name: str) -> str:
    return str(op.get_bind().dialect.identifier_preparer.quote(name))


def upgrade() -> None:
    bind = op.get_bind()
    schema = bind.execute(sa.text("SELECT current_schema()")).scalar_one()
    path = f"{_quote(schema)}, pg_temp"
    for table, signature, definition in FUNCTIONS:
        op.execute(definition.replace("{path}", path))
        op.execute(f"REVOKE EXECUTE ON FUNCTION {signature} FROM PUBLIC")
        for role in bind.execute(_READERS, {"table": table}).scalars().all():
            grantee = "PUBLIC" if role == "PUBLIC" else _quote(role)
            op.execute(f"GRANT EXECUTE ON FUNCTION {signature} TO {grantee}")


def downgrade() -> None:
    for _table, signature, _definition in FUNCTIONS:
        op.execute(f"DROP FUNCTION IF EXISTS {signature}")

"""Store each entity's name key, computed by the library, and match names by it.

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-07

Two lookups read entities by name. Ingest-time entity resolution looks stored entities up
by their identity key, :func:`cycgraph_memory.normalize.normalize_entity_name` (NFKC,
Unicode case folding, leading article and punctuation stripped); revision 0013 indexed a
SQL stand-in for it, ``regexp_replace(lower(name), '[^[:alnum:]]', '', 'g')``. But
``lower()`` is not case folding and knows nothing of NFKC: the stored "Straße" (key
``strasse``), "Ⅻ Club" or "a²b" were never found again, so re-ingesting them wrote a
duplicate entity on Postgres (the in-memory backend found them). And retrieval matched
the entities named in a question by ``lower(name)`` (revision 0012) where the in-memory
backend compares the identity keys, so "Acme Corp." was found in memory only.

* ``entities.name_key text NOT NULL``: the key, written by the store with every entity
  (this revision fills the existing rows in pages of 5,000, in Python, with the same
  function, one UPDATE per page: 300,000 entities without vectors in 14 s on a busy
  two-core machine; 20,000 with 384-dimension vectors in 25 s, as each rewritten row is
  also inserted into the HNSW graph: docs/operations.md).
* One B-tree ``ix_entities_tenant_id_name_key (tenant_id, name_key)`` serves both lookups;
  it replaces the expression indexes of 0012 (``lower(name)``) and 0013.
* The row-level-security lookup functions of 0016, ``cycgraph_entity_name_rows(names)``
  and ``cycgraph_entity_name_key_rows(types, keys)``, compare ``name_key``; their grants
  are kept (``CREATE OR REPLACE``).

Changing ``normalize_entity_name`` later needs a revision that recomputes the column. The
fill reads the entities as their owner: when the table forces row-level security it is
lifted for the fill and restored in the same transaction. Code older than this revision
does not write ``name_key``, so its entity writes are refused (NOT NULL) once the schema
is migrated: upgrade the code and the schema together. The downgrade restores 0012's and
0013's indexes and 0016's functions, and drops the column.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql as pg

from cycgraph_memory.normalize import normalize_entity_name

revision: str = "0017"
down_revision: str | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

INDEX = "ix_entities_tenant_id_name_key"
OLD_NAME_INDEX = "ix_entities_tenant_id_lower_name"  # revision 0012
OLD_KEY_INDEX = "ix_entities_tenant_id_entity_type_name_key"  # revision 0013
OLD_KEY = "regexp_replace(lower(name), '[^[:alnum:]]', '', 'g')"
_TENANT = "current_setting('cycgraph.tenant_id', true)"
_PAGE = 5000

_NAME_KEY_ROWS = """
CREATE OR REPLACE FUNCTION cycgraph_entity_name_key_rows(p_types text[], p_keys text[])
RETURNS SETOF uuid
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = {path} ROWS 10
AS $fn$
SELECT r.id FROM entities r
WHERE r.tenant_id = {tenant} AND r.entity_type = ANY(p_types)
  AND {key} = ANY(p_keys)
$fn$"""

_NAME_ROWS = """
CREATE OR REPLACE FUNCTION cycgraph_entity_name_rows(p_names text[]) RETURNS SETOF uuid
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = {path} ROWS 5
AS $fn$
SELECT r.id FROM entities r
WHERE r.tenant_id = {tenant} AND {key} = ANY(p_names)
$fn$"""


def _quote(name: str) -> str:
    return str(op.get_bind().dialect.identifier_preparer.quote(name))


def _function(template: str, key: str) -> str:
    schema = op.get_bind().execute(sa.text("SELECT current_schema()")).scalar_one()
    return template.format(path=f"{_quote(schema)}, pg_temp", tenant=_TENANT, key=key)


def _fill() -> None:
    """Write ``name_key`` of every existing entity, one page of ``(tenant_id, id)`` at a time."""
    bind = op.get_bind()
    forced = bind.execute(
        sa.text("SELECT relforcerowsecurity FROM pg_class WHERE oid = 'entities'::regclass")
    ).scalar_one()
    if forced:  # the owner reads every tenant's rows only without FORCE
        op.execute("ALTER TABLE entities NO FORCE ROW LEVEL SECURITY")
    # One UPDATE per page, joined to the page's keys (not one statement per row).
    update = sa.text(
        "UPDATE entities e SET name_key = v.key "
        "FROM unnest(:tenants, :ids, :keys) AS v(tenant_id, id, key) "
        "WHERE e.tenant_id = v.tenant_id AND e.id = v.id"
    ).bindparams(
        sa.bindparam("tenants", type_=pg.ARRAY(sa.Text())),
        sa.bindparam("ids", type_=pg.ARRAY(pg.UUID(as_uuid=True))),
        sa.bindparam("keys", type_=pg.ARRAY(sa.Text())),
    )
    after: dict[str, object] = {}
    while True:
        page = bind.execute(
            sa.text(
                "SELECT tenant_id, id, name FROM entities "
                + ("WHERE (tenant_id, id) > (:tenant, :id) " if after else "")
                + f"ORDER BY tenant_id, id LIMIT {_PAGE}"
            ),
            after,
        ).all()
        if not page:
            break
        bind.execute(update, {
            "tenants": [t for t, _, _ in page],
            "ids": [i for _, i, _ in page],
            "keys": [normalize_entity_name(n) for _, _, n in page],
        })
        after = {"tenant": page[-1][0], "id": page[-1][1]}
    if forced:
        op.execute("ALTER TABLE entities FORCE ROW LEVEL SECURITY")


def upgrade() -> None:
    op.add_column("entities", sa.Column("name_key", sa.Text(), nullable=True))
    _fill()
    op.alter_column("entities", "name_key", nullable=False)
    op.execute(f"DROP INDEX IF EXISTS {OLD_NAME_INDEX}")
    op.execute(f"DROP INDEX IF EXISTS {OLD_KEY_INDEX}")
    op.execute(f"CREATE INDEX {INDEX} ON entities (tenant_id, name_key)")
    op.execute(_function(_NAME_KEY_ROWS, "r.name_key"))
    op.execute(_function(_NAME_ROWS, "r.name_key"))


def downgrade() -> None:
    op.execute(_function(_NAME_KEY_ROWS, OLD_KEY.replace("(name)", "(r.name)")))
    op.execute(_function(_NAME_ROWS, "lower(r.name)"))
    op.execute(f"DROP INDEX IF EXISTS {INDEX}")
    op.execute(f"CREATE INDEX {OLD_NAME_INDEX} ON entities (tenant_id, lower(name))")
    op.execute(f"CREATE INDEX {OLD_KEY_INDEX} ON entities (tenant_id, entity_type, ({OLD_KEY}))")
    op.drop_column("entities", "name_key")

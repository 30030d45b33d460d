"""Fact access counters in their own table; fact vectors in the row.

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-04

Every retrieval touches the facts it serves (``access_count + 1``, ``last_accessed_at``).
While those counters lived in the fact row, each touch wrote a new version of the whole
row, and the row had to stay small enough for that version to fit on its page (a HOT
update; otherwise every index of ``facts``, the HNSW graph included, gets a new entry).
That is why 0014 left the fact vector ``EXTERNAL``, in the TOAST table: an exact kNN (the
plan for a tenant under 50,000 facts) then read each vector through the TOAST index, a
TOAST index page and a TOAST heap page per fact (137 ms of execution for a tenant of
33,000 facts among 1,000,000).

Now the counters live in ``fact_access`` (``tenant_id, fact_id, access_count,
last_accessed_at``), one small row per fact that was ever touched (or stored with
non-default counters), deleted with its fact (``ON DELETE CASCADE``); a touch is an
``INSERT .. ON CONFLICT DO UPDATE`` of those rows and never writes a fact row. Fact rows
are rewritten only when a fact is, so the fact vector is stored ``MAIN`` (in the row, as
0014 did for the other tables). A fact read joins its counters (a primary-key probe of
``fact_access`` per row read).

The upgrade copies the counters that are not the defaults (``access_count <> 0`` or a
``last_accessed_at``) and drops the two columns of ``facts``; the downgrade adds them back
(``NOT NULL DEFAULT 0``) and copies the counters back before dropping the table. The
storage change is a catalog update: vectors already stored stay in the TOAST table until
their row is rewritten (``VACUUM FULL facts`` or ``pg_repack``, in a maintenance window).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0016"
down_revision: str | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

POLICY = "cycgraph_tenant_isolation"
SETTING = "cycgraph.tenant_id"

FACT_ACCESS_FILLFACTOR = 80
"""Room on each ``fact_access`` page for the HOT update of a touch (rows are ~60 bytes)."""


def _facts_forced() -> bool:
    """Whether row-level security is forced on ``facts`` (0006 forces it)."""
    forced = op.get_bind().execute(sa.text(
        "SELECT relforcerowsecurity FROM pg_class "
        "WHERE oid = (quote_ident(current_schema()) || '.facts')::regclass"
    )).scalar_one()
    return bool(forced)


def upgrade() -> None:
    op.create_table(
        "fact_access",
        sa.Column("tenant_id", sa.Text(), nullable=False),
        sa.Column("fact_id", postgresql.UUID(as_uuid=True), nullable=False),
        sa.Column("access_count", sa.BigInteger(), nullable=False),
        sa.Column("last_accessed_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("tenant_id", "fact_id", name="pk_fact_access"),
        sa.ForeignKeyConstraint(
            ["tenant_id", "fact_id"], ["facts.tenant_id", "facts.id"],
            name="fk_fact_access_tenant_id_fact_id_facts", ondelete="CASCADE",
        ),
        postgresql_with={"fillfactor": FACT_ACCESS_FILLFACTOR},
    )
    # Row-level security (0006) is FORCEd on facts: even its owner sees only the tenant
    # of the session setting. Lifted for the copy, inside this transaction.
    forced = _facts_forced()
    if forced:
        op.execute("ALTER TABLE facts NO FORCE ROW LEVEL SECURITY")
    op.execute(
        "INSERT INTO fact_access (tenant_id, fact_id, access_count, last_accessed_at) "
        "SELECT tenant_id, id, access_count, last_accessed_at FROM facts "
        "WHERE access_count <> 0 OR last_accessed_at IS NOT NULL"
    )
    if forced:
        op.execute("ALTER TABLE facts FORCE ROW LEVEL SECURITY")
    check = f"tenant_id = current_setting('{SETTING}', true)"
    op.execute("ALTER TABLE fact_access ENABLE ROW LEVEL SECURITY")
    op.execute("ALTER TABLE fact_access FORCE ROW LEVEL SECURITY")
    op.execute(
        f"CREATE POLICY {POLICY} ON fact_access USING ({check}) WITH CHECK ({check})"
    )
    op.drop_column("facts", "last_accessed_at")
    op.drop_column("facts", "access_count")
    op.execute("ALTER TABLE facts ALTER COLUMN embedding SET STORAGE MAIN")


def downgrade() -> None:
    op.execute("ALTER TABLE facts ALTER COLUMN embedding SET STORAGE EXTERNAL")
    op.add_column(
        "facts",
        sa.Column("access_count", sa.BigInteger(), nullable=False, server_default="0"),
    )
    op.add_column("facts", sa.Column("last_accessed_at", sa.DateTime(timezone=True)))
    op.alter_column("facts", "access_count", server_default=None)
    forced = _facts_forced()
    if forced:
        op.execute("ALTER TABLE facts NO FORCE ROW LEVEL SECURITY")
        op.execute("ALTER TABLE fact_access NO FORCE ROW LEVEL SECURITY")
    op.execute(
        "UPDATE facts f SET access_count = a.access_count, "
        "last_accessed_at = a.last_accessed_at FROM fact_access a "
        "WHERE a.tenant_id = f.tenant_id AND a.fact_id = f.id"
    )
    if forced:
        op.execute("ALTER TABLE facts FORCE ROW LEVEL SECURITY")
    op.drop_table("fact_access")

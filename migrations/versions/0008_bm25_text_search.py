"""One BM25 text ranking on both backends: stored tokens and trigger-kept statistics.

Revision ID: 0008
Revises: 0006
Create Date: 2026-12-03

* ``search_terms text[]`` on ``facts``, ``episode_messages`` and ``episodes``: the row's
  tokens by :func:`cycgraph_memory.textsearch.tokenize` (the tokenizer the in-memory index
  uses), in order, duplicates kept (their count is the term frequency, the array's length
  the document length). The store writes them; this revision fills existing rows. An
  episode's tokens are its topic's, then every message's. Each column has a GIN index
  (candidate lookup by ``&&`` / ``@>``).
* ``text_search_corpora (tenant_id, corpus, documents, total_length)`` and
  ``text_search_terms (tenant_id, corpus, term, documents)``: per tenant and table
  (``corpus`` is the table name), the number of documents, their summed length and each
  term's document frequency, the figures BM25's IDF and length normalisation need. They are
  kept exact by triggers on the three tables (statement-level with transition tables for
  INSERT and DELETE, row-level for an UPDATE that changes ``search_terms``), in the writing
  transaction, so a text search reads a handful of rows instead of counting the tenant.
  Row-level security as in 0006.

Changing :func:`~cycgraph_memory.textsearch.tokenize` later needs a revision that
re-tokenizes the stored rows (the statistics follow through the triggers).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql as pg

from cycgraph_memory.textsearch import tokenize

revision: str = "0008"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

POLICY = "cycgraph_tenant_isolation"
SETTING = "cycgraph.tenant_id"
TABLES = ("facts", "episode_messages", "episodes")
_PAGE = 1000

_ADD = """
CREATE FUNCTION cycgraph_text_stats_add() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO text_search_terms AS s (tenant_id, corpus, term, documents)
    SELECT r.tenant_id, TG_TABLE_NAME, t.term, count(*)
    FROM cycgraph_changed r,
         LATERAL (SELECT DISTINCT u.term FROM unnest(r.search_terms) AS u(term)) t
    GROUP BY r.tenant_id, t.term
    ORDER BY r.tenant_id, t.term
    ON CONFLICT (tenant_id, corpus, term)
    DO UPDATE SET documents = s.documents + EXCLUDED.documents;
    INSERT INTO text_search_corpora AS s (tenant_id, corpus, documents, total_length)
    SELECT r.tenant_id, TG_TABLE_NAME, count(*), coalesce(sum(cardinality(r.search_terms)), 0)
    FROM cycgraph_changed r
    GROUP BY r.tenant_id
    ORDER BY r.tenant_id
    ON CONFLICT (tenant_id, corpus)
    DO UPDATE SET documents = s.documents + EXCLUDED.documents,
                  total_length = s.total_length + EXCLUDED.total_length;
    RETURN NULL;
END
$$
"""

_REMOVE = """
CREATE FUNCTION cycgraph_text_stats_remove() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE text_search_terms AS s SET documents = s.documents - d.n
    FROM (
        SELECT r.tenant_id, t.term, count(*) AS n
        FROM cycgraph_changed r,
             LATERAL (SELECT DISTINCT u.term FROM unnest(r.search_terms) AS u(term)) t
        GROUP BY r.tenant_id, t.term
    ) d
    WHERE s.tenant_id = d.tenant_id AND s.corpus = TG_TABLE_NAME AND s.term = d.term;
    DELETE FROM text_search_terms AS s
    USING (SELECT DISTINCT r.tenant_id, u.term
           FROM cycgraph_changed r, unnest(r.search_terms) AS u(term)) d
    WHERE s.tenant_id = d.tenant_id AND s.corpus = TG_TABLE_NAME AND s.term = d.term
      AND s.documents <= 0;
    UPDATE text_search_corpora AS s
    SET documents = s.documents - d.n, total_length = s.total_length - d.length
    FROM (
        SELECT r.tenant_id, count(*) AS n,
               coalesce(sum(cardinality(r.search_terms)), 0) AS length
        FROM cycgraph_changed r
        GROUP BY r.tenant_id
    ) d
    WHERE s.tenant_id = d.tenant_id AND s.corpus = TG_TABLE_NAME;
    RETURN NULL;
END
$$
"""

_CHANGE = """
CREATE FUNCTION cycgraph_text_stats_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO text_search_terms AS s (tenant_id, corpus, term, documents)
    SELECT NEW.tenant_id, TG_TABLE_NAME, d.term, sum(d.n)
    FROM (
        (SELECT DISTINCT u.term, 1 AS n FROM unnest(NEW.search_terms) AS u(term))
        UNION ALL
        (SELECT DISTINCT u.term, -1 AS n FROM unnest(OLD.search_terms) AS u(term))
    ) d
    GROUP BY d.term
    HAVING sum(d.n) <> 0
    ORDER BY d.term
    ON CONFLICT (tenant_id, corpus, term)
    DO UPDATE SET documents = s.documents + EXCLUDED.documents;
    DELETE FROM text_search_terms AS s
    WHERE s.tenant_id = NEW.tenant_id AND s.corpus = TG_TABLE_NAME
      AND s.term = ANY(OLD.search_terms) AND s.documents <= 0;
    UPDATE text_search_corpora AS s
    SET total_length = s.total_length + cardinality(NEW.search_terms)
                       - cardinality(OLD.search_terms)
    WHERE s.tenant_id = NEW.tenant_id AND s.corpus = TG_TABLE_NAME;
    RETURN NULL;
END
$$
"""


def _quote(name: str) -> str:
    return str(op.get_bind().dialect.identifier_preparer.quote(name))


def _fill(table: str, key: Sequence[str], select_sql: str) -> None:
    """Write ``search_terms`` of every existing row, one page of keys at a time."""
    bind = op.get_bind()
    where = " AND ".join(f"{k} = :{k}" for k in key)
    update = sa.text(f"UPDATE {table} SET search_terms = :terms WHERE {where}").bindparams(
        sa.bindparam("terms", type_=pg.ARRAY(sa.Text()))
    )
    order = ", ".join(key)
    after = f"({order}) > ({', '.join(f':after{i}' for i in range(len(key)))})"
    params: dict[str, object] = {}
    while True:
        stmt = sa.text(
            f"SELECT * FROM ({select_sql}) page {'WHERE ' + after if params else ''} "
            f"ORDER BY {order} LIMIT {_PAGE}"
        )
        rows = bind.execute(stmt, params).mappings().all()
        if not rows:
            return
        bind.execute(
            update,
            [{**{k: r[k] for k in key}, "terms": tokenize(r["text"])} for r in rows],
        )
        params = {f"after{i}": rows[-1][k] for i, k in enumerate(key)}


def upgrade() -> None:
    bind = op.get_bind()
    for table in TABLES:
        op.add_column(
            table,
            sa.Column(
                "search_terms",
                pg.ARRAY(sa.Text()),
                nullable=False,
                server_default=sa.text("'{}'::text[]"),
            ),
        )
    op.create_table(
        "text_search_corpora",
        sa.Column("tenant_id", sa.Text(), nullable=False),
        sa.Column("corpus", sa.Text(), nullable=False),
        sa.Column("documents", sa.BigInteger(), nullable=False),
        sa.Column("total_length", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("tenant_id", "corpus", name="pk_text_search_corpora"),
    )
    op.create_table(
        "text_search_terms",
        sa.Column("tenant_id", sa.Text(), nullable=False),
        sa.Column("corpus", sa.Text(), nullable=False),
        sa.Column("term", sa.Text(), nullable=False),
        sa.Column("documents", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("tenant_id", "corpus", "term", name="pk_text_search_terms"),
    )

    # Existing rows: tokenized here (the Python tokenizer), with row-level security lifted
    # for the table owner while the revision runs (0006 forces it on the owner too).
    forced = {
        name
        for name in bind.execute(
            sa.text(
                "SELECT relname FROM pg_class WHERE relname = ANY(:t) AND relforcerowsecurity "
                "AND relnamespace = current_schema()::regnamespace"
            ),
            {"t": list(TABLES)},
        ).scalars()
    }
    for table in forced:
        op.execute(f"ALTER TABLE {_quote(table)} NO FORCE ROW LEVEL SECURITY")
    _fill("facts", ("tenant_id", "id"), "SELECT tenant_id, id, content AS text FROM facts")
    _fill(
        "episode_messages",
        ("tenant_id", "episode_id", "id"),
        "SELECT tenant_id, episode_id, id, content AS text FROM episode_messages",
    )
    _fill(
        "episodes",
        ("tenant_id", "id"),
        "SELECT e.tenant_id, e.id, concat_ws(' ', e.topic, "
        "(SELECT string_agg(m.content, ' ' ORDER BY m.position) FROM episode_messages m "
        "WHERE m.tenant_id = e.tenant_id AND m.episode_id = e.id)) AS text "
        "FROM episodes e",
    )
    for table in TABLES:
        op.execute(
            "INSERT INTO text_search_terms (tenant_id, corpus, term, documents) "
            f"SELECT r.tenant_id, '{table}', t.term, count(*) FROM {table} r, "
            "LATERAL (SELECT DISTINCT u.term FROM unnest(r.search_terms) AS u(term)) t "
            "GROUP BY r.tenant_id, t.term"
        )
        op.execute(
            "INSERT INTO text_search_corpora (tenant_id, corpus, documents, total_length) "
            f"SELECT tenant_id, '{table}', count(*), "
            f"coalesce(sum(cardinality(search_terms)), 0) FROM {table} GROUP BY tenant_id"
        )
    for table in forced:
        op.execute(f"ALTER TABLE {_quote(table)} FORCE ROW LEVEL SECURITY")

    op.execute(_ADD)
    op.execute(_REMOVE)
    op.execute(_CHANGE)
    for table in TABLES:
        op.create_index(
            f"ix_{table}_search_terms_gin", table, ["search_terms"], postgresql_using="gin"
        )
        op.execute(
            f"CREATE TRIGGER cycgraph_text_stats_insert AFTER INSERT ON {table} "
            "REFERENCING NEW TABLE AS cycgraph_changed FOR EACH STATEMENT "
            "EXECUTE FUNCTION cycgraph_text_stats_add()"
        )
        op.execute(
            f"CREATE TRIGGER cycgraph_text_stats_delete AFTER DELETE ON {table} "
            "REFERENCING OLD TABLE AS cycgraph_changed FOR EACH STATEMENT "
            "EXECUTE FUNCTION cycgraph_text_stats_remove()"
        )
        op.execute(
            f"CREATE TRIGGER cycgraph_text_stats_update AFTER UPDATE OF search_terms "
            f"ON {table} FOR EACH ROW "
            "WHEN (OLD.search_terms IS DISTINCT FROM NEW.search_terms) "
            "EXECUTE FUNCTION cycgraph_text_stats_change()"
        )

    check = f"tenant_id = current_setting('{SETTING}', true)"
    for table in ("text_search_corpora", "text_search_terms"):
        op.execute(f"ALTER TABLE {table} ENABLE ROW LEVEL SECURITY")
        op.execute(f"ALTER TABLE {table} FORCE ROW LEVEL SECURITY")
        op.execute(f"CREATE POLICY {POLICY} ON {table} USING ({check}) WITH CHECK ({check})")


def downgrade() -> None:
    for table in TABLES:
        for trigger in ("insert", "delete", "update"):
            op.execute(f"DROP TRIGGER cycgraph_text_stats_{trigger} ON {table}")
        op.drop_index(f"ix_{table}_search_terms_gin", table_name=table)
        op.drop_column(table, "search_terms")
    for function in ("add", "remove", "change"):
        op.execute(f"DROP FUNCTION cycgraph_text_stats_{function}()")
    op.drop_table("text_search_terms")
    op.drop_table("text_search_corpora")

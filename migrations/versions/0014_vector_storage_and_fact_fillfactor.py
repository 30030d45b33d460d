"""Theme, entity, episode and message vectors in the row; room on fact pages for touches.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-03

pgvector's ``vector`` type is stored ``EXTERNAL`` by default: a row longer than the
TOAST threshold (~2 kB) moves its largest value out of line, and a 384-float vector is
1,540 bytes. A theme row (its vector and its list of fact ids) is well over the threshold,
so every theme vector lived in the TOAST table and each distance computed outside the
HNSW index (the exact theme kNN every vector and hybrid retrieval runs) read a TOAST index
page and a TOAST heap page per row: at 100,000 reference facts the theme kNN read 3,098
buffers in 9.2 ms, 264 in 1.5 ms with the vectors in the row.

``MAIN`` keeps a vector in the row unless the row cannot fit a page even after the other
values (content, arrays, JSON: ``EXTENDED``) have been compressed or moved out of line;
so a wide schema (e.g. 3,072 dimensions, 12 kB) still stores its vectors out of line.

``facts`` keeps ``EXTERNAL`` on purpose. Measured at 100,000 reference facts: with the
vector inline a fact row is ~2.1 kB, three to a page, and the touch every retrieval does
(``access_count``, ``last_accessed_at`` of the served facts) no longer finds room for the
new row version on its page: the update stops being HOT and inserts into every index of
the table, the HNSW graph included (10 touched facts: 3,955 buffer reads, ~10 ms, against
~120 with the vector out of line). The exact fact kNN of small tenants reads the TOAST
table instead; moving the counters out of the fact row would lift that trade-off.

``facts`` gets ``fillfactor = 90``: a bulk load filled every page, so the first touch of a
served fact could not put the new row version on its page either, and each touch inserted
into every index of the table (10 touched facts after a fresh load: 890 pages read, ~100
ms). With a tenth of each page left free (one ~600-byte row version) the touch is a HOT
update: no index changes at all.

The changes are catalog updates (no table rewrite, no long lock): rows written from now on
keep their vector inline. Rows already stored keep theirs in the TOAST table until they
are rewritten, and pages already full stay full; ``VACUUM FULL themes`` / ``VACUUM FULL
facts`` (or ``pg_repack``) rewrites them, during a maintenance window (it locks the
table). The downgrade restores ``EXTERNAL`` and revision 0004's fill factor (80).
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TABLES = ("themes", "entities", "episodes", "episode_messages")
"""Every table with an ``embedding`` column but ``facts`` (see above)."""


FACTS_FILLFACTOR = 90
"""Percent of a ``facts`` page filled by inserts (the rest is room for HOT touches)."""


def upgrade() -> None:
    for table in TABLES:
        op.execute(f"ALTER TABLE {table} ALTER COLUMN embedding SET STORAGE MAIN")
    op.execute(f"ALTER TABLE facts SET (fillfactor = {FACTS_FILLFACTOR})")


def downgrade() -> None:
    # Back to what 0004 set (not the server default): the downgrade restores 0013 exactly.
    op.execute("ALTER TABLE facts SET (fillfactor = 80)")
    for table in TABLES:
        op.execute(f"ALTER TABLE {table} ALTER COLUMN embedding SET STORAGE EXTERNAL")

"""Keep embedding vectors inside the row (``SET STORAGE MAIN``), not in the TOAST table.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-03

pgvector's ``vector`` type is stored ``EXTERNAL`` by default: a row longer than the
TOAST threshold (~2 kB) moves its largest value out of line, and a 384-float vector is
1,540 bytes. A fact row with its vector, tokens, provenance and arrays is just over the
threshold (2,066 bytes on average at 100,000 reference facts, a theme with its fact list
well over), so every vector lived in the TOAST table: each distance computed outside the
HNSW index (an exact kNN, the theme facts' scores, ``vector_send`` of a served row) read a
TOAST index page and a TOAST heap page per row (~3-4 more buffer reads per row: 1,000
theme distances cost ~9 ms instead of ~1 ms).

``MAIN`` keeps a vector in the row unless the row cannot fit a page even after the other
values (content, arrays, JSON: ``EXTENDED``) have been compressed or moved out of line;
so a wide schema (e.g. 3,072 dimensions, 12 kB) still stores its vectors out of line.

The change is a catalog update (no table rewrite, no long lock): rows written from now on
keep their vector inline. Rows already stored keep theirs in the TOAST table until they
are rewritten; ``VACUUM FULL <table>`` (or ``pg_repack``) moves them inline, during a
maintenance window (it locks the table). The downgrade restores ``EXTERNAL``.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TABLES = ("facts", "themes", "entities", "episodes", "episode_messages")
"""Every table with an ``embedding`` column."""


def upgrade() -> None:
    for table in TABLES:
        op.execute(f"ALTER TABLE {table} ALTER COLUMN embedding SET STORAGE MAIN")


def downgrade() -> None:
    for table in TABLES:
        op.execute(f"ALTER TABLE {table} ALTER COLUMN embedding SET STORAGE EXTERNAL")

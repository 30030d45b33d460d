"""Run the Alembic migrations programmatically (also from an installed wheel).

The migrations live in the repository's top-level ``migrations/`` folder and are shipped in
the wheel as ``cycgraph_memory/_alembic/migrations`` next to a copy of ``alembic.ini``
(see ``pyproject.toml``), so ``alembic -c <site-packages>/cycgraph_memory/_alembic/alembic.ini``
works from an installed package too. :func:`migrations_dir`
finds whichever exists. :func:`upgrade` / :func:`downgrade` hand a connection to ``env.py``
through ``config.attributes["connection"]`` so programmatic runs, tests and the alembic CLI
share one code path.

Concurrent deploys are safe: every migration run (``upgrade()``, ``downgrade()`` and
``alembic upgrade head`` through ``env.py``) first takes the transaction-scoped advisory
lock :data:`MIGRATION_LOCK_KEY` (:func:`lock_for_migrations`), so N replicas starting
together run the migrations one after another; the later ones find the schema at head and
do nothing. Within one process, :func:`upgrade` / :func:`downgrade` calls are also
serialised per event loop (Alembic's ``context`` proxy is process-global).
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import weakref
from collections.abc import Iterator
from importlib import resources
from pathlib import Path
from typing import Any

from sqlalchemy import text
from sqlalchemy.engine import URL, Connection
from sqlalchemy.ext.asyncio import AsyncEngine

from cycgraph_memory.errors import (
    EmbeddingDimensionMismatchError,
    InvalidInputError,
    SchemaNotReadyError,
)
from cycgraph_memory.observability import SpanHandle, span
from cycgraph_memory.postgres._errors import translate_errors
from cycgraph_memory.postgres.engine import create_engine_from_dsn

__all__ = [
    "DEFAULT_EMBEDDING_DIM",
    "MIGRATION_LOCK_KEY",
    "alembic_config",
    "check_embedding_dim",
    "current_revision",
    "downgrade",
    "head_revision",
    "is_known_revision",
    "lock_for_migrations",
    "migrations_dir",
    "recorded_embedding_dim",
    "recorded_revision",
    "schema_status",
    "upgrade",
]

DEFAULT_EMBEDDING_DIM = 384
"""Embedding dimension used when none is given (all-MiniLM-L6-v2 and friends)."""


MIGRATION_LOCK_KEY = 0x6379_6367_6D69_6772  # "cycgmigr"
"""``pg_advisory_xact_lock`` key held by every migration run (one per database)."""

_PROCESS_LOCKS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = (
    weakref.WeakKeyDictionary()
)


def lock_for_migrations(connection: Connection) -> None:
    """Take the migration advisory lock in ``connection``'s transaction (waits for it).

    Called by ``env.py`` before Alembic reads the current revision, so a replica that waited
    sees the revision the previous one committed. Released when the transaction ends.
    """
    connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK_KEY})


def _process_lock() -> asyncio.Lock:
    loop = asyncio.get_running_loop()
    lock = _PROCESS_LOCKS.get(loop)
    if lock is None:
        lock = _PROCESS_LOCKS[loop] = asyncio.Lock()
    return lock


def migrations_dir() -> Path:
    """Return the directory holding ``env.py`` and ``versions/``.

    Prefers the copy packaged in the wheel (``cycgraph_memory/_alembic/migrations``), then the
    repository's ``migrations/`` (editable installs and source checkouts).

    Raises:
        SchemaNotReadyError: Neither location exists.
    """
    packaged = Path(str(resources.files("cycgraph_memory"))) / "_alembic" / "migrations"
    repo = Path(__file__).resolve().parents[3] / "migrations"
    for candidate in (packaged, repo):
        if (candidate / "env.py").is_file():
            return candidate
    raise SchemaNotReadyError(f"alembic migrations not found (looked in {packaged} and {repo})")


def recorded_embedding_dim(conn: Connection) -> int | None:
    """Return the embedding dimension recorded in the database (``None`` before migrating)."""
    if conn.execute(text("SELECT to_regclass('schema_metadata')")).scalar() is None:
        return None
    value = conn.execute(
        text("SELECT value FROM schema_metadata WHERE key = 'embedding_dim'")
    ).scalar()
    return None if value is None else int(value)


MAX_EMBEDDING_DIM = 16_000
"""Widest embedding a schema can be created with (pgvector's ``vector`` type)."""


def check_embedding_dim(conn: Connection, requested: object) -> None:
    """Refuse an upgrade asking for another embedding dimension than the database has.

    Called by the migrations' ``env.py`` before any revision runs (CLI and
    :func:`upgrade` alike). ``requested`` is ``None`` when no dimension was asked for.

    Raises:
        EmbeddingDimensionMismatchError: The database records another dimension; the
            message says how to change it.
        InvalidInputError: ``requested`` is not an integer in 1..:data:`MAX_EMBEDDING_DIM`.
    """
    if requested is None:
        return
    try:
        wanted = int(str(requested))
    except ValueError:
        raise InvalidInputError(
            f"embedding_dim must be an integer, got {requested!r}"
        ) from None
    if not 1 <= wanted <= MAX_EMBEDDING_DIM:
        raise InvalidInputError(
            f"embedding_dim must be in 1..{MAX_EMBEDDING_DIM} (pgvector's vector type), "
            f"got {wanted}"
        )
    recorded = recorded_embedding_dim(conn)
    if recorded is None or recorded == wanted:
        return
    raise EmbeddingDimensionMismatchError(
        recorded,
        wanted,
        f"embedding_dim={wanted} requested, but this database was created with {recorded}",
        hint=(
            "An upgrade never changes the width of existing vector columns. Keep "
            f"{recorded} (upgrade without -x embedding_dim, or with {recorded}), or "
            "recreate the schema "
            "with the new width, which deletes every stored record: "
            f"`alembic downgrade base` then `alembic -x embedding_dim={wanted} upgrade "
            "head` (re-embed your data afterwards), or migrate into a new database"
        ),
    )


def alembic_config(embedding_dim: int | None = None, **attributes: Any) -> Any:
    """Return an ``alembic.config.Config`` pointing at :func:`migrations_dir`.

    Args:
        embedding_dim: Stored in ``config.attributes["embedding_dim"]`` for the first
            revision.
        **attributes: Extra ``config.attributes`` (e.g. ``connection``).
    """
    from alembic.config import Config

    # Alembic binds its default ``stdout`` when ``alembic.config`` is first imported: a
    # first import under a redirected stdout (a test's capture, a closed pipe) would keep
    # writing there for the life of the process. The current stream each time instead.
    cfg = Config(stdout=sys.stdout)
    cfg.set_main_option("script_location", str(migrations_dir()))
    if embedding_dim is not None:
        cfg.attributes["embedding_dim"] = embedding_dim
    cfg.attributes.update(attributes)
    return cfg


async def _run(engine_or_dsn: AsyncEngine | str | URL, fn: Any, *args: Any) -> Any:
    if isinstance(engine_or_dsn, AsyncEngine):
        engine, owned = engine_or_dsn, False
    else:
        engine, owned = create_engine_from_dsn(engine_or_dsn), True
    try:
        async with _process_lock():
            with translate_errors():
                async with engine.begin() as conn:
                    return await conn.run_sync(fn, *args)
    finally:
        if owned:
            await engine.dispose()


_BASE = "base"
"""The revision span attributes name for an unmigrated database (Alembic's word)."""


def recorded_revision(conn: Connection) -> str:
    """The database's current revision, ``"base"`` when unmigrated (for span attributes)."""
    return _current_sync(conn) or _BASE


def _migrate_sync(
    conn: Connection, handle: SpanHandle, command_name: str, revision: str, config: Any
) -> str:
    """Run Alembic's ``upgrade`` / ``downgrade`` to ``revision``; return the revision reached.

    The migration lock is taken first (``env.py`` takes it again: it stacks), so the
    revision read for the span's ``cycgraph.revision_from`` is the one the run starts
    from, not one a replica migrating meanwhile is about to replace.
    """
    from alembic import command

    lock_for_migrations(conn)
    handle.set(revision_from=recorded_revision(conn))
    with _revision_errors(revision):
        getattr(command, command_name)(config, revision)
    return recorded_revision(conn)


def _upgrade_sync(
    conn: Connection,
    handle: SpanHandle,
    embedding_dim: int | None,
    revision: str,
    attributes: dict[str, Any],
) -> str:
    config = alembic_config(embedding_dim, connection=conn, **attributes)
    return _migrate_sync(conn, handle, "upgrade", revision, config)


def _downgrade_sync(conn: Connection, handle: SpanHandle, revision: str) -> str:
    return _migrate_sync(conn, handle, "downgrade", revision, alembic_config(connection=conn))


@contextlib.contextmanager
def _revision_errors(revision: str) -> Iterator[None]:
    """Alembic's refusal of a revision (unknown, ambiguous, wrong direction) as our error."""
    from alembic.util import CommandError

    try:
        yield
    except CommandError as exc:
        raise InvalidInputError(f"revision {revision!r}: {exc}") from None


def _current_sync(conn: Connection) -> str | None:
    from alembic.runtime.migration import MigrationContext

    return MigrationContext.configure(conn).get_current_revision()


async def upgrade(
    engine_or_dsn: AsyncEngine | str | URL,
    embedding_dim: int | None = None,
    revision: str = "head",
    *,
    hnsw_m: int | None = None,
    hnsw_ef_construction: int | None = None,
) -> None:
    """Upgrade the schema to ``revision`` (one transaction).

    Args:
        engine_or_dsn: An ``AsyncEngine`` (left open) or a DSN (engine created and disposed).
        embedding_dim: Vector dimension fixed when the tables are first created
            (``None``: :data:`DEFAULT_EMBEDDING_DIM` for a new schema, the recorded one
            for an existing schema). A value that differs from the dimension an existing
            database was created with raises ``EmbeddingDimensionMismatchError`` and
            changes nothing.
        revision: Target revision (default ``"head"``).
        hnsw_m: HNSW graph degree of the embedding indexes (default 16, pgvector's);
            like ``alembic -x hnsw_m=N``. Only read when the indexes are created.
        hnsw_ef_construction: HNSW build candidate list (default 64, pgvector's; at least
            ``2 * hnsw_m``); like ``alembic -x hnsw_ef_construction=N``. Lower values insert
            faster and recall less.

    Opens the span ``cycgraph.migrate.upgrade`` (OpenTelemetry, when configured):
    ``cycgraph.revision_target`` the ``revision`` asked for, ``cycgraph.revision_from``
    the revision the run started from and ``cycgraph.revision_to`` the one committed
    (``"base"``: unmigrated); no DSN. A refused or failed run ends it with an error
    status and leaves ``cycgraph.revision_to`` unset.
    """
    with span("cycgraph.migrate.upgrade", revision_target=str(revision)) as handle:
        m = 16 if hnsw_m is None else hnsw_m
        ef = 64 if hnsw_ef_construction is None else hnsw_ef_construction
        if not (2 <= m <= 100 and 4 <= ef <= 1000 and ef >= 2 * m):
            raise InvalidInputError(
                f"HNSW parameters need 2 <= hnsw_m <= 100 and 2 * hnsw_m <= "
                f"hnsw_ef_construction <= 1000, got m={m}, ef_construction={ef}"
            )
        attributes: dict[str, Any] = {}
        if hnsw_m is not None:
            attributes["hnsw_m"] = hnsw_m
        if hnsw_ef_construction is not None:
            attributes["hnsw_ef_construction"] = hnsw_ef_construction
        reached = await _run(
            engine_or_dsn, _upgrade_sync, handle, embedding_dim, revision, attributes
        )
        handle.set(revision_to=reached)  # committed


async def downgrade(engine_or_dsn: AsyncEngine | str | URL, revision: str = "base") -> None:
    """Downgrade the schema to ``revision`` (default ``"base"``: drop everything).

    Opens the span ``cycgraph.migrate.downgrade``, like :func:`upgrade`.
    """
    with span("cycgraph.migrate.downgrade", revision_target=str(revision)) as handle:
        reached = await _run(engine_or_dsn, _downgrade_sync, handle, revision)
        handle.set(revision_to=reached)  # committed


async def current_revision(engine_or_dsn: AsyncEngine | str | URL) -> str | None:
    """Return the database's current Alembic revision (``None`` when unmigrated)."""
    result: str | None = await _run(engine_or_dsn, _current_sync)
    return result


def head_revision() -> str:
    """Return the newest revision of the shipped migrations (what ``upgrade`` goes to)."""
    from alembic.script import ScriptDirectory

    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    if head is None:  # pragma: no cover - the package always ships revisions
        raise SchemaNotReadyError("the shipped migrations have no head revision")
    return str(head)


def is_known_revision(revision: str) -> bool:
    """Whether ``revision`` is one of the shipped migrations (``False``: a newer library's)."""
    from alembic.script import ScriptDirectory
    from alembic.util import CommandError

    try:
        return ScriptDirectory.from_config(alembic_config()).get_revision(revision) is not None
    except CommandError:
        return False


def _status_sync(conn: Connection) -> tuple[str | None, int | None]:
    return _current_sync(conn), recorded_embedding_dim(conn)


async def schema_status(
    engine_or_dsn: AsyncEngine | str | URL,
) -> tuple[str | None, str, int | None]:
    """Return ``(current revision, head revision, recorded embedding dimension)``.

    Reads only; nothing is migrated. ``current`` and the dimension are ``None`` on an
    unmigrated database; the schema is up to date when ``current == head``.
    """
    current, dim = await _run(engine_or_dsn, _status_sync)
    return current, head_revision(), dim

"""Alembic environment for cycgraph-memory (async; cookbook "connection sharing" pattern).

Connection sources, in order:

1. ``config.attributes["connection"]``: a synchronous connection handed in by
   :func:`cycgraph_memory.postgres.migrate.upgrade` (via ``AsyncConnection.run_sync``) or
   by tests, so programmatic and CLI migrations share one code path;
2. ``-x dsn=postgresql://...`` on the alembic command line;
3. the ``CYCGRAPH_MEMORY_DSN`` environment variable (read here, never at library import).

The embedding dimension comes from ``-x embedding_dim=N`` or
``config.attributes["embedding_dim"]`` (default 384) and is read by the first revision. Once
a database records a dimension, asking for another one is refused before any revision runs
(the vector columns keep their width; the message says how to change it).

Offline mode (``alembic upgrade head --sql``) is refused: the revisions query the database
they migrate, so no complete script can be rendered without it.

Run from the ``alembic`` command line, the ``[loggers]`` sections of ``alembic.ini``
configure logging, so every revision applied is printed. Programmatic runs leave logging to
the application.
"""

from __future__ import annotations

import asyncio
import os
from logging.config import fileConfig
from typing import Any

from alembic import context
from alembic.util import CommandError
from pgvector.sqlalchemy import VECTOR
from sqlalchemy.engine import Connection

from cycgraph_memory.errors import EmbeddingDimensionMismatchError, InvalidInputError
from cycgraph_memory.observability import SpanHandle, span
from cycgraph_memory.postgres.engine import create_engine_from_dsn
from cycgraph_memory.postgres.migrate import (
    check_embedding_dim,
    lock_for_migrations,
    recorded_revision,
)
from cycgraph_memory.postgres.schema import Base

config = context.config
target_metadata = Base.metadata
_PROGRAMMATIC = config.attributes.get("connection") is not None

if config.config_file_name is not None and not _PROGRAMMATIC:
    fileConfig(config.config_file_name, disable_existing_loggers=False)

# Objects the models cannot express; ``alembic check`` must not report them.
_UNMODELLED_INDEX_SUFFIX = "_embedding_hnsw_halfvec"


def include_object(
    obj: Any, name: str | None, type_: str, reflected: bool, compare_to: Any
) -> bool:
    if type_ == "index" and name is not None and name.endswith(_UNMODELLED_INDEX_SUFFIX):
        return False
    return not (type_ == "table" and name == "alembic_version")


def compare_type(
    ctx: Any, inspected_column: Any, metadata_column: Any, inspected_type: Any, metadata_type: Any
) -> bool | None:
    # The models declare a dimension-less ``vector``; the deployment fixes the dimension.
    if isinstance(metadata_type, VECTOR) and isinstance(inspected_type, VECTOR):
        return False
    return None


def _dsn() -> str:
    x_args = context.get_x_argument(as_dictionary=True)
    dsn = x_args.get("dsn") or os.environ.get("CYCGRAPH_MEMORY_DSN", "")
    if not dsn:
        raise RuntimeError(
            "no database: pass -x dsn=postgresql://... or set CYCGRAPH_MEMORY_DSN"
        )
    return dsn


def _configure(connection: Connection | None = None, **kwargs: Any) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        include_object=include_object,
        compare_type=compare_type,
        **kwargs,
    )


def _requested_dim() -> object:
    raw = context.get_x_argument(as_dictionary=True).get("embedding_dim")
    return config.attributes.get("embedding_dim") if raw is None else raw


def do_run_migrations(connection: Connection, handle: SpanHandle | None = None) -> str | None:
    """Run the revisions; with the CLI's span ``handle``, the revision reached (else None)."""
    lock_for_migrations(connection)  # concurrent deploys migrate one at a time
    if handle is not None:
        handle.set(revision_from=recorded_revision(connection))
    try:
        check_embedding_dim(connection, _requested_dim())
    except (EmbeddingDimensionMismatchError, InvalidInputError) as exc:
        if _PROGRAMMATIC:
            raise
        raise CommandError(str(exc)) from exc  # printed as one "FAILED: ..." line
    _configure(connection)
    with context.begin_transaction():
        context.run_migrations()
    return None if handle is None else recorded_revision(connection)


async def run_async_migrations(handle: SpanHandle | None = None) -> None:
    engine = create_engine_from_dsn(_dsn())
    try:
        async with engine.connect() as connection:
            reached = await connection.run_sync(do_run_migrations, handle)
            await connection.commit()
            if handle is not None:
                handle.set(revision_to=reached)  # committed
    finally:
        await engine.dispose()


def _cli_command() -> str | None:
    """``"upgrade"`` / ``"downgrade"`` when the alembic command line runs one, else None."""
    cmd = getattr(config.cmd_opts, "cmd", None)
    name = getattr(cmd[0], "__name__", None) if cmd else None
    return name if name in ("upgrade", "downgrade") else None


def run_migrations_offline() -> None:
    # The revisions read the database they migrate (the recorded embedding width, the
    # tables that have a tenant_id, which extensions existed before), so they cannot be
    # rendered as a SQL script without one. Refuse before printing anything: a partial
    # script (Alembic stops at the first revision that queries) must never be applied.
    raise CommandError(
        "offline mode (--sql) is not supported: the cycgraph-memory migrations read the "
        "database they migrate; run `alembic upgrade head` against the database"
    )


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is None:
        command = _cli_command()
        if command is None:
            asyncio.run(run_async_migrations())
            return
        # The span upgrade() / downgrade() open, for `alembic upgrade` / `downgrade` run
        # under a tracer provider (e.g. opentelemetry-instrument); no DSN on it.
        asked = getattr(config.cmd_opts, "revision", None)  # as typed ("head", "-1", ...)
        with span(f"cycgraph.migrate.{command}", revision_target=asked) as handle:
            asyncio.run(run_async_migrations(handle))
    else:
        do_run_migrations(connection)


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()

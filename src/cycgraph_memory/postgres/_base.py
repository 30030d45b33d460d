"""Shared plumbing of the Postgres store and index: tenant, sessions, schema dimension."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from contextvars import ContextVar
from itertools import count

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from cycgraph_memory._ids import parse_id, parse_ids
from cycgraph_memory.errors import (
    EmbeddingDimensionMismatchError,
    InvalidInputError,
    InvalidTenantError,
    SchemaNotReadyError,
)
from cycgraph_memory.postgres._errors import translate_errors
from cycgraph_memory.postgres.schema import SchemaMetadataRow

__all__ = ["DEFAULT_TENANT", "Bind", "PostgresBackend", "parse_id", "parse_ids", "validate_tenant"]

DEFAULT_TENANT = "default"
"""Tenant used when none is given."""

_TENANT_RE = re.compile(r"[A-Za-z0-9_.:\-]{1,64}")
_counter = count()

Bind = AsyncEngine | async_sessionmaker[AsyncSession]
"""What stores and indexes are built from: an engine or an injected sessionmaker."""


def validate_tenant(tenant_id: object) -> str:
    """Return ``tenant_id`` when it is 1-64 characters of ``[A-Za-z0-9_.:-]``.

    Raises:
        InvalidTenantError: Anything else.
    """
    if not isinstance(tenant_id, str) or _TENANT_RE.fullmatch(tenant_id) is None:
        raise InvalidTenantError(
            f"tenant id must be 1-64 characters of [A-Za-z0-9_.:-], got {tenant_id!r}"
        )
    return tenant_id


class PostgresBackend:
    """Common base: tenant validation, session scoping and the schema's embedding dim."""

    def __init__(
        self,
        bind: Bind,
        *,
        tenant_id: str = DEFAULT_TENANT,
        embedding_dim: int | None = None,
    ) -> None:
        self._tenant = validate_tenant(tenant_id)
        if isinstance(bind, AsyncEngine):
            self._sessionmaker: async_sessionmaker[AsyncSession] = async_sessionmaker(
                bind, expire_on_commit=False
            )
        elif isinstance(bind, async_sessionmaker):
            self._sessionmaker = bind
        else:
            raise TypeError(
                f"expected an AsyncEngine or an async_sessionmaker, got {type(bind).__name__}"
            )
        if embedding_dim is not None and (
            not isinstance(embedding_dim, int) or embedding_dim < 1
        ):
            raise InvalidInputError(f"embedding_dim must be a positive int, got {embedding_dim!r}")
        self._configured_dim = embedding_dim
        self._schema_dim: int | None = None
        self._active: ContextVar[AsyncSession | None] = ContextVar(
            f"cycgraph_memory_pg_session_{next(_counter)}", default=None
        )

    @property
    def tenant_id(self) -> str:
        """The tenant whose rows this object reads and writes."""
        return self._tenant

    @property
    def sessionmaker(self) -> async_sessionmaker[AsyncSession]:
        """The session factory every operation uses."""
        return self._sessionmaker

    @asynccontextmanager
    async def _session(self) -> AsyncIterator[AsyncSession]:
        """Yield the active unit-of-work session, or a fresh session in its own transaction."""
        active = self._active.get()
        if active is not None:
            with translate_errors():
                yield active
            return
        with translate_errors():
            async with self._sessionmaker() as session, session.begin():
                yield session

    async def _dim(self, session: AsyncSession) -> int:
        """Return the schema's embedding dimension (read once, then cached)."""
        if self._schema_dim is None:
            result = await session.execute(
                select(SchemaMetadataRow.value).where(SchemaMetadataRow.key == "embedding_dim")
            )
            value = result.scalar_one_or_none()
            if value is None:
                raise SchemaNotReadyError(
                    "schema_metadata has no embedding_dim: run alembic upgrade head"
                )
            stored = int(value)
            if self._configured_dim is not None and self._configured_dim != stored:
                raise EmbeddingDimensionMismatchError(
                    stored, self._configured_dim, "configured embedding_dim vs database schema"
                )
            self._schema_dim = stored
        return self._schema_dim

    def _known_dim(self) -> int | None:
        return self._schema_dim if self._schema_dim is not None else self._configured_dim

    def _check_vector(self, vector: Sequence[float] | None, dim: int | None, context: str) -> None:
        if vector is not None and dim is not None and len(vector) != dim:
            raise EmbeddingDimensionMismatchError(dim, len(vector), context)

"""Error hierarchy for cycgraph-memory.

Every error the library raises on purpose derives from one base class, so callers can
catch the whole family with a single ``except``::

    CycgraphMemoryError
    ├── EmbeddingDimensionMismatchError   (also a ValueError)
    ├── InvalidInputError                 (also a ValueError)
    │   ├── InvalidTenantError
    │   └── InvalidTypeError              (also a TypeError: e.g. an id that is None or an int)
    ├── RecordNotFoundError               (also a KeyError)
    ├── StorageError
    │   ├── DuplicateRecordError          (SQLSTATE 23505)
    │   ├── IntegrityViolationError       (other 23xxx)
    │   │   └── DanglingReferenceError    (23503: e.g. an edge to an entity that does not exist)
    │   ├── ConcurrencyError              (40001 / 40P01: safe to retry)
    │   ├── ConnectionLostError           (08xxx, socket errors: safe to retry)
    │   ├── StatementTimeoutError         (57014: statement_timeout / lock_timeout hit)
    │   ├── SchemaNotReadyError           (tables missing: run the migrations)
    │   ├── AppendOnlyViolationError      (UPDATE/DELETE on the gate audit log)
    │   └── TransactionError              (misuse of a unit of work)
    ├── ProviderError                     (an LLM or embedding provider failed)
    │   └── ProviderTimeoutError
    ├── ErasureNotAvailableError          (also a NotImplementedError: erase by selector instead)
    ├── MemoryClosedError                 (also a RuntimeError: a Memory used after close())
    └── MissingExtraError                 (also an ImportError: install an extra)

Pydantic's own ``ValidationError`` is raised by record construction and by the option
models; it is the wall bad input hits before anything reaches a store.
"""

from __future__ import annotations

__all__ = [
    "AppendOnlyViolationError",
    "ConcurrencyError",
    "ConnectionLostError",
    "CycgraphMemoryError",
    "DanglingReferenceError",
    "DuplicateRecordError",
    "EmbeddingDimensionMismatchError",
    "ErasureNotAvailableError",
    "IntegrityViolationError",
    "InvalidInputError",
    "InvalidTenantError",
    "InvalidTypeError",
    "MemoryClosedError",
    "MissingExtraError",
    "ProviderError",
    "ProviderTimeoutError",
    "RecordNotFoundError",
    "SchemaNotReadyError",
    "StatementTimeoutError",
    "StorageError",
    "TransactionError",
]


class CycgraphMemoryError(Exception):
    """Base class of every error raised on purpose by cycgraph-memory."""


class EmbeddingDimensionMismatchError(CycgraphMemoryError, ValueError):
    """An embedding's length differs from the dimension the index or schema expects.

    Attributes:
        expected: The dimension the index or database was configured with.
        actual: The length of the offending vector.
        context: Where the vector came from (e.g. ``"search_facts query"`` or
            ``"fact 1b4e..."``).
    """

    def __init__(self, expected: int, actual: int, context: str = "", *, hint: str = "") -> None:
        self.expected = expected
        self.actual = actual
        self.context = context
        where = f" ({context})" if context else ""
        tail = f". {hint}" if hint else ""
        super().__init__(
            f"embedding dimension mismatch{where}: expected {expected}, got {actual}{tail}"
        )


class InvalidInputError(CycgraphMemoryError, ValueError):
    """Input that passed type checks but cannot be accepted (e.g. an unknown option)."""


class InvalidTenantError(InvalidInputError):
    """A tenant id that is empty, too long or contains characters outside the allowed set."""


class InvalidTypeError(InvalidInputError, TypeError):
    """An argument of the wrong Python type.

    For example an id that is ``None``, an int or bytes, a text where a query vector is
    expected, or a non-record passed to ``put_*``. It is also a ``TypeError``, so code
    written against the built-in error keeps working.
    """


class RecordNotFoundError(CycgraphMemoryError, KeyError):
    """A record that an operation requires does not exist.

    Attributes:
        kind: Record type (``"fact"``, ``"entity"``, ...).
        record_id: The id that was looked up.
    """

    def __init__(self, kind: str, record_id: object) -> None:
        self.kind = kind
        self.record_id = record_id
        super().__init__(f"{kind} {record_id} not found")

    def __str__(self) -> str:
        """Return the message without KeyError's quoting."""
        return str(self.args[0])


class StorageError(CycgraphMemoryError):
    """A storage backend failed; the operation did not take effect.

    Attributes:
        sqlstate: The SQLSTATE code reported by the database, when there is one.
        attempts: How many times the operation ran before this error surfaced (more
            than 1 when a retry policy retried it).
    """

    def __init__(self, message: str, *, sqlstate: str | None = None) -> None:
        self.sqlstate = sqlstate
        self.attempts = 1
        super().__init__(message)


class DuplicateRecordError(StorageError):
    """A write collided with a unique constraint (SQLSTATE 23505)."""


class IntegrityViolationError(StorageError):
    """A write broke a database constraint other than uniqueness (SQLSTATE class 23)."""


class DanglingReferenceError(IntegrityViolationError):
    """A record refers to another one that does not exist in the tenant (SQLSTATE 23503).

    Raised, for example, when a relationship's ``source_id`` or ``target_id`` is not an
    entity of the store's tenant. Both backends check this before writing.

    Attributes:
        missing_ids: The referenced ids that do not exist (empty when the database reported
            the violation without naming them).
    """

    def __init__(
        self,
        message: str,
        *,
        missing_ids: list[object] | None = None,
        sqlstate: str | None = "23503",
    ) -> None:
        self.missing_ids = list(missing_ids or [])
        super().__init__(message, sqlstate=sqlstate)


class ConcurrencyError(StorageError):
    """A serialization failure or deadlock (SQLSTATE 40001 / 40P01); retrying is safe."""


class ConnectionLostError(StorageError):
    """The database connection failed or dropped (SQLSTATE class 08, socket errors).

    Nothing of the interrupted transaction was committed; retrying is safe.
    """


class StatementTimeoutError(StorageError):
    """A statement ran past ``statement_timeout`` or waited past ``lock_timeout`` (57014/55P03).

    The transaction was rolled back.
    """


class SchemaNotReadyError(StorageError):
    """The database schema is missing or outdated: run ``alembic upgrade head``."""


class AppendOnlyViolationError(StorageError):
    """An attempt to change or remove rows of an append-only table (the gate audit log).

    Raised on Postgres when the table's trigger refuses an UPDATE, DELETE or TRUNCATE
    (SQLSTATE ``CG001``).
    """


class TransactionError(StorageError):
    """A unit of work was used incorrectly (e.g. nested across stores)."""


class ProviderError(CycgraphMemoryError):
    """An injected LLM or embedding provider failed or returned an unusable reply."""


class ProviderTimeoutError(ProviderError):
    """An injected provider did not answer within its timeout."""


class ErasureNotAvailableError(CycgraphMemoryError, NotImplementedError):
    """``Memory.forget(fact_ids, erase=True)``: facts are not erased one by one.

    Nothing was changed. Hard erasure goes by what was said (``Memory.erase`` /
    ``purge`` with entity ids, message ids or a provenance); soft deletion
    (``erase=False``) is available.
    """


class MemoryClosedError(CycgraphMemoryError, RuntimeError):
    """A ``Memory`` was used after :meth:`~cycgraph_memory.memory.Memory.close`.

    Raised by every facade operation (``add``, ``search``, ``remember``, ``forget``,
    ``erase``, ``stats``) once the memory is closed, also after its ``async with`` block
    ended, and by entering a closed memory again. Nothing was read or written; open a new
    ``Memory``.
    """


class MissingExtraError(CycgraphMemoryError, ImportError):
    """An optional dependency is not installed.

    Attributes:
        extra: The name of the ``cycgraph-memory`` extra that provides it.
    """

    def __init__(self, extra: str, module: str) -> None:
        self.extra = extra
        super().__init__(
            f"{module} is not installed; install it with "
            f"pip install 'cycgraph-memory[{extra}]'"
        )

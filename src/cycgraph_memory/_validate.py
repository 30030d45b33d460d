"""Private: the one validation both backends apply, at the record level and at the store edge.

Records validate their fields when they are built (pydantic), with the checks below. A record
can still reach a store unchecked: ``model_copy(update=...)`` skips validation, and so does
writing to ``__dict__``. Every store and the in-memory index therefore re-validate what they
are given with :func:`validate_record`, so the in-memory backend refuses exactly what
Postgres would refuse, with the same error, and nothing is written.

Limits (all documented in the README's "Records" section):

* text: no NUL character and no lone surrogate (Postgres stores UTF-8 text without NUL), and
  at most :data:`MAX_TEXT_LENGTH` characters (every text field, JSON strings and keys, query
  texts): a record the limit accepts is one the Postgres text-search column can index,
  whatever its characters, so the text index never refuses a record;
* JSON values (``attributes``, ``metadata``): only ``dict`` with ``str`` keys, ``list``,
  ``str``, ``int`` within 64 bits, finite ``float``, ``bool`` and ``None``; strings and keys
  obey the text rule; nesting at most :data:`MAX_JSON_DEPTH` containers deep;
* embeddings and query vectors: non-empty sequences of finite real numbers whose Euclidean
  norm is at most :data:`MAX_EMBEDDING_NORM` (1e19: pgvector compares vectors in single
  precision); a query must not be a string.
"""

from __future__ import annotations

import inspect
import logging
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, TypeVar

import numpy as np
from numpy.typing import NDArray
from pydantic import BaseModel

from cycgraph_memory.errors import InvalidInputError, InvalidTypeError
from cycgraph_memory.observability import tenant_of

__all__ = [
    "MAX_EMBEDDING_NORM",
    "MAX_EMBEDDING_VALUE",
    "MAX_JSON_DEPTH",
    "MAX_JSON_INT",
    "MAX_TEXT_LENGTH",
    "MIN_JSON_INT",
    "check_bool",
    "check_callable",
    "check_dimensions",
    "check_method",
    "check_number",
    "check_json_object",
    "check_lock_name",
    "check_logger",
    "check_query_text",
    "check_page",
    "check_same_tenant",
    "check_query_vector",
    "check_text",
    "embedding_in_range",
    "keyword_options",
    "option_bundle",
    "normalize_ts",
    "norms_in_range",
    "query_vector_array",
    "query_vectors_array",
    "string_list",
    "utc_in_range",
    "validate_record",
]

MAX_JSON_DEPTH = 32
"""Deepest accepted nesting of dicts and lists inside ``attributes`` / ``metadata``."""

MAX_EMBEDDING_NORM = 1e19
"""Largest Euclidean norm of an embedding or query vector.

pgvector stores single-precision floats and sums the squares of a vector's values in
single precision to compare two vectors: past a norm of about 1.8e19 (the square root of
the largest single-precision float) that sum overflows and every distance becomes NaN,
so a search would rank such a vector arbitrarily. 1e19 keeps the sum and the dot product
of any two accepted vectors finite."""

MAX_EMBEDDING_VALUE = MAX_EMBEDDING_NORM
"""Largest magnitude of one embedding value (implied by :data:`MAX_EMBEDDING_NORM`)."""

MAX_JSON_INT = 2**63 - 1
"""Largest integer accepted inside a JSON value (64-bit, like most JSON consumers)."""

MIN_JSON_INT = -(2**63)
"""Smallest integer accepted inside a JSON value."""

MAX_TEXT_LENGTH = 100_000
"""Longest accepted text, in characters (message and fact content, descriptions, JSON strings).

Postgres refuses a ``tsvector`` whose lexemes add up to more than 1 MiB. The worst text
found per character is hyphenated compounds of four-byte UTF-8 letters (the parser keeps the
compound and each part): about 4.5 bytes of lexemes per character, so 100,000 characters
stay under 450 KB (42% of the limit) whatever the text."""

M = TypeVar("M", bound=BaseModel)
T = TypeVar("T")


def check_text(value: str, what: str = "text") -> str:
    """Return ``value`` when it has no NUL, no lone surrogate and fits :data:`MAX_TEXT_LENGTH`.

    Raises:
        ValueError: It breaks one of the rules (pydantic reports it as a
            ``ValidationError``).
    """
    if len(value) > MAX_TEXT_LENGTH:
        raise ValueError(
            f"{what} is {len(value):,} characters long; the limit is {MAX_TEXT_LENGTH:,} "
            "(cycgraph_memory.MAX_TEXT_LENGTH): split it into several records"
        )
    if "\x00" in value:
        raise ValueError(f"{what} must not contain NUL characters")
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError(
                f"{what} must be valid Unicode (it contains a lone surrogate)"
            ) from None
    return value


def _check_scalar(value: object, path: str) -> None:
    if value is None or isinstance(value, bool):
        return
    if isinstance(value, str):
        check_text(value, f"JSON string at {path}")
    elif isinstance(value, int):
        if not MIN_JSON_INT <= value <= MAX_JSON_INT:
            raise ValueError(f"JSON integer at {path} does not fit in 64 bits")
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"JSON number at {path} must be finite (no NaN or infinity)")
    else:
        raise ValueError(
            f"value at {path} is a {type(value).__name__}, not JSON "
            "(use dict, list, str, int, float, bool or None)"
        )


def check_json_object(value: dict[str, Any], what: str = "attributes") -> dict[str, Any]:
    """Return a deep copy of ``value`` after checking it is a JSON object within the limits.

    The copy means a record never shares a nested dict or list with its caller. Nesting is
    checked before descending, so a deeply nested (or self-containing) value is reported as
    too deep instead of raising ``RecursionError``.

    Raises:
        ValueError: The first violation found (pydantic reports a ``ValidationError``).
    """
    copied = _json_copy(value, what, 1, what)
    assert isinstance(copied, dict)
    return copied


def _json_copy(node: object, path: str, depth: int, what: str) -> object:
    if isinstance(node, dict):
        if depth > MAX_JSON_DEPTH:
            raise ValueError(f"{what} nested deeper than {MAX_JSON_DEPTH} levels")
        out: dict[str, object] = {}
        for key, item in node.items():
            if not isinstance(key, str):
                raise ValueError(f"JSON object keys must be str, got {type(key).__name__}")
            check_text(key, f"JSON key at {path}")
            out[key] = _json_copy(item, f"{path}.{key}", depth + 1, what)
        return out
    if isinstance(node, list):
        if depth > MAX_JSON_DEPTH:
            raise ValueError(f"{what} nested deeper than {MAX_JSON_DEPTH} levels")
        return [_json_copy(item, f"{path}[{i}]", depth + 1, what) for i, item in enumerate(node)]
    _check_scalar(node, path)
    return node


def _plain(record: BaseModel) -> dict[str, Any]:
    """A record's field values with nested records turned into dicts (to validate again)."""
    fields = dict(record.__dict__)
    for name, value in fields.items():
        if isinstance(value, BaseModel):
            fields[name] = _plain(value)
        elif isinstance(value, list) and name != "embedding":
            fields[name] = [_plain(v) if isinstance(v, BaseModel) else v for v in value]
    return fields


def validate_record(model: type[M], value: object) -> M:
    """Return a freshly validated copy of ``value`` as a ``model`` (the store-edge check).

    Instances are validated again from their field values, which also catches records
    changed with ``model_copy(update=...)`` or built with ``model_construct``; mappings are
    validated. The
    result shares no mutable state with ``value``.

    Raises:
        pydantic.ValidationError: The record or mapping is invalid.
        InvalidTypeError: ``value`` is neither a ``model`` nor a mapping.
    """
    if isinstance(value, model):
        # Validating the field values again builds fresh containers (lists, and JSON
        # objects via check_json_object), so the result shares nothing with ``value``.
        return model.model_validate(_plain(value))
    if isinstance(value, Mapping):
        return model.model_validate(value)
    raise InvalidTypeError(f"expected {model.__name__} or a mapping, got {type(value).__name__}")


_NUMERIC_KINDS = frozenset("biuf")  # bool, signed / unsigned integer, floating point


def _checked_block(values: NDArray[Any]) -> NDArray[np.float64] | None:
    """``values`` as float64 when it is a non-empty numeric block within the rules, else None.

    The fast path of the query checks: one numpy pass instead of a Python loop per number.
    ``None`` sends the caller to the element-by-element check, which names the problem.
    """
    if values.size == 0 or values.dtype.kind not in _NUMERIC_KINDS:
        return None
    block = values.astype(np.float64, copy=False)
    if not norms_in_range(block):  # NaN, infinity or a norm past MAX_EMBEDDING_NORM
        return None
    return block


def norms_in_range(block: NDArray[Any]) -> bool:
    """True when every row of ``block`` (or the vector) is finite with a norm in range."""
    with np.errstate(invalid="ignore", over="ignore"):
        peak = float(np.max(np.linalg.norm(block, axis=-1)))  # NaN / inf: out of range
    return peak <= MAX_EMBEDDING_NORM


def _as_block(embedding: object, ndim: int) -> NDArray[Any] | None:
    """``embedding`` as an ``ndim``-dimensional numpy array when it is one cheaply, else None."""
    if not isinstance(embedding, np.ndarray | list | tuple):
        return None
    try:
        values = np.asarray(embedding)
    except (ValueError, TypeError, OverflowError):  # ragged or unconvertible: the slow path
        return None
    return values if values.ndim == ndim else None


def query_vector_array(embedding: object, what: str = "query") -> NDArray[np.float64]:
    """Return a query embedding as a float64 array, with the checks of :func:`check_query_vector`.

    A list, tuple or numpy array of real numbers is checked in one numpy pass; anything
    else (or a vector that breaks a rule) goes through :func:`check_query_vector`, which
    raises the same errors as always.

    Raises:
        InvalidTypeError: See :func:`check_query_vector`.
        InvalidInputError: See :func:`check_query_vector`.
    """
    values = _as_block(embedding, 1)
    block = None if values is None else _checked_block(values)
    if block is not None:
        return block
    return np.asarray(_check_query_vector_slow(embedding, what), dtype=np.float64)


def query_vectors_array(
    embeddings: Sequence[object], what: str = "query"
) -> NDArray[np.float64] | None:
    """Many query embeddings of one length as a ``(n, d)`` float64 array, checked at once.

    Returns ``None`` when they are not a clean block (empty, ragged, not numeric, NaN or
    out of range): the caller then checks each with :func:`query_vector_array`, so errors
    are the same, and raised for the same vector, as one query at a time.
    """
    values = _as_block(embeddings, 2)
    return None if values is None else _checked_block(values)


def check_query_vector(embedding: object, what: str = "query") -> list[float]:
    """Return a query embedding as a list of floats.

    Raises:
        InvalidTypeError: A string, bytes, a non-sequence, or elements that are not real
            numbers (e.g. a text query passed where a vector is expected).
        InvalidInputError: An empty vector or one with NaN / infinity.
    """
    values = _as_block(embedding, 1)
    block = None if values is None else _checked_block(values)
    if block is not None:
        out: list[float] = block.tolist()
        return out
    return _check_query_vector_slow(embedding, what)


def _check_query_vector_slow(embedding: object, what: str) -> list[float]:
    """Element-by-element :func:`check_query_vector` (it names the first broken rule)."""
    if hasattr(embedding, "tolist") and not isinstance(embedding, Sequence):
        embedding = embedding.tolist()  # a numpy array
    if isinstance(embedding, str | bytes | bytearray) or not isinstance(embedding, Sequence):
        raise InvalidTypeError(
            f"{what} embedding must be a sequence of floats, got {type(embedding).__name__}"
        )
    values: list[float] = []
    for x in embedding:
        if isinstance(x, str | bytes) or not hasattr(x, "__float__"):
            raise InvalidTypeError(
                f"{what} embedding must contain real numbers, got {type(x).__name__}"
            )
        values.append(float(x))
    if not values:
        raise InvalidInputError(f"{what} embedding must not be empty")
    if not all(math.isfinite(v) for v in values):
        raise InvalidInputError(f"{what} embedding contains NaN or infinity")
    if not embedding_in_range(values):
        raise InvalidInputError(
            f"{what} embedding has a Euclidean norm above {MAX_EMBEDDING_NORM:.0e} "
            "(cycgraph_memory.MAX_EMBEDDING_NORM: pgvector compares vectors in single "
            "precision); scale it down"
        )
    return values


def embedding_in_range(values: Sequence[float]) -> bool:
    """True when the (finite) values' Euclidean norm is at most :data:`MAX_EMBEDDING_NORM`."""
    return math.hypot(*values) <= MAX_EMBEDDING_NORM


def normalize_ts(value: object) -> datetime:
    """Return ``value`` as an aware UTC datetime (naive input is assumed to be UTC).

    Raises:
        InvalidTypeError: ``value`` is not a datetime.
        InvalidInputError: It cannot be represented in UTC.
    """
    if not isinstance(value, datetime):
        raise InvalidTypeError(f"expected a datetime, got {type(value).__name__}")
    try:
        return utc_in_range(value)
    except ValueError as exc:
        raise InvalidInputError(str(exc)) from None


_FIRST_UTC = datetime.min.replace(tzinfo=UTC)
_LAST_UTC = datetime.max.replace(tzinfo=UTC)


def utc_in_range(value: datetime) -> datetime:
    """``value`` as an aware UTC datetime (naive: UTC), strictly inside Python's range.

    The first and last instants Python can represent (``datetime.min`` / ``datetime.max``
    in UTC) are what the Postgres driver writes as ``-infinity`` / ``infinity``, and reads
    back as naive datetimes: a record holding one would not read back as written, so
    neither is accepted anywhere (every other instant of years 1-9999 is).

    Raises:
        ValueError: The value is one of those two instants, or cannot be converted to UTC
            (pydantic reports it as a ``ValidationError``).
    """
    if value.tzinfo is None or value.tzinfo.utcoffset(value) is None:
        utc = value.replace(tzinfo=UTC)
    else:
        try:
            utc = value.astimezone(UTC)
        except OverflowError:
            raise ValueError(f"{value!r} is out of range once converted to UTC") from None
    if utc in (_FIRST_UTC, _LAST_UTC):
        raise ValueError(
            f"{value!r} is the first or last instant a datetime can hold (stored as "
            "-infinity / infinity by Postgres); use a time strictly inside years 1-9999"
        )
    return utc


def string_list(values: Any, name: str) -> list[Any]:
    """``values`` (a sequence of strings such as tags) as a list; a lone string refused.

    A ``str`` is itself a sequence of strings, so ``tags="lesson"`` would otherwise become
    ``["l", "e", "s", "s", "o", "n"]`` without a word. The items are checked where they are
    used (the record or the options model that receives the list).

    Raises:
        InvalidTypeError: ``values`` is a ``str``, ``bytes`` or not iterable.
    """
    if isinstance(values, str | bytes | bytearray):
        raise InvalidTypeError(
            f"{name} must be a list of strings, not a single {type(values).__name__} "
            f"(write [{values!r}])"
        )
    try:
        return list(values)
    except TypeError:
        raise InvalidTypeError(
            f"{name} must be a list of strings, got {type(values).__name__}"
        ) from None


def check_query_text(value: object, what: str = "text") -> str:
    """``value`` when it is a ``str`` (the query of a text search).

    Without the check an ``int``, ``None`` or ``bytes`` query raised ``AttributeError``
    on Postgres and, in memory, matched nothing when the index was empty (and raised once
    it held a document).

    Raises:
        InvalidTypeError: ``value`` is not a ``str``.
    """
    if not isinstance(value, str):
        raise InvalidTypeError(f"{what} must be a str, got {type(value).__name__}")
    return value


def check_lock_name(value: object) -> str:
    """``value`` when it can name an ``exclusive()`` lock on every backend.

    The Postgres lock is keyed by the name's text: a NUL or a lone surrogate cannot be
    sent, so the in-memory store refuses it too.

    Raises:
        InvalidTypeError: ``value`` is not a ``str``.
        InvalidInputError: It holds a NUL or a lone surrogate, or is over
            :data:`MAX_TEXT_LENGTH` characters.
    """
    if not isinstance(value, str):
        raise InvalidTypeError(f"a lock name must be a str, got {type(value).__name__}")
    try:
        return check_text(value, "a lock name")
    except ValueError as exc:
        raise InvalidInputError(str(exc)) from None


def instance_of(value: object, model: type[M], name: str) -> M:
    """``value`` itself when it is a ``model``; a mapping validated into one.

    For the component entry points (``extract(episode)``, ``resolve_conflict(conflict)``)
    that work on the caller's object in place: an instance is returned as is.

    Raises:
        InvalidTypeError: ``value`` is neither a ``model`` nor a mapping.
        pydantic.ValidationError: The mapping is not a valid ``model``.
    """
    if isinstance(value, model):
        return value
    if isinstance(value, Mapping):
        return model.model_validate(value)
    raise InvalidTypeError(f"{name} must be a {model.__name__}, got {type(value).__name__}")


def instances_of(values: object, model: type[M], name: str) -> list[M]:
    """``values`` (an iterable of ``model``) as a list, each item as :func:`instance_of`.

    Raises:
        InvalidTypeError: ``values`` is not an iterable of records (``None``, a string, a
            single record, a mapping), or an item is neither a ``model`` nor a mapping.
        pydantic.ValidationError: A mapping item is not a valid ``model``.
    """
    if isinstance(values, str | bytes | bytearray | Mapping | BaseModel) or not isinstance(
        values, Iterable
    ):
        raise InvalidTypeError(
            f"{name} must be a list of {model.__name__}, got {type(values).__name__}"
        )
    return [instance_of(v, model, f"each of {name}") for v in values]


def check_bool(value: object, name: str) -> bool:
    """``value`` when it is a real ``bool``.

    ``bool("no")`` is ``True``, so a flag given as a string (or a number) would silently
    mean the opposite of what the caller wrote; it is refused instead.

    Raises:
        InvalidTypeError: ``value`` is not ``True`` or ``False``.
    """
    if not isinstance(value, bool):
        raise InvalidTypeError(f"{name} must be True or False, got {value!r}")
    return value


def check_number(value: object, name: str) -> float:
    """``value`` as a ``float`` when it is a real number (an ``int`` or a ``float``).

    ``True`` is an ``int`` to Python and ``float("0.5")`` parses, so a flag or a text
    passed where a threshold belongs would silently become a number; both are refused.
    numpy numbers are fine (``numpy.float64`` is a ``float``).

    Raises:
        InvalidTypeError: ``value`` is a bool (also ``numpy.bool_``), a string or not a
            real number.
    """
    if isinstance(value, bool | np.bool_) or not isinstance(value, int | float | np.number):
        raise InvalidTypeError(f"{name} must be a number, got {value!r}")
    if isinstance(value, np.complexfloating):
        raise InvalidTypeError(f"{name} must be a real number, got {value!r}")
    return float(value)


def check_callable(value: T, name: str) -> T:
    """``value`` when it is callable (an injected clock, id factory, ...).

    Such a hook is called only later, often on a rare path (a circuit breaker opening
    while the provider is down), where a plain ``TypeError`` would break the operation.

    Raises:
        InvalidTypeError: ``value`` is not callable.
    """
    if not callable(value):
        raise InvalidTypeError(f"{name} must be callable, got {type(value).__name__}")
    return value


def check_method(value: T, method: str, name: str, contract: str) -> T:
    """``value`` when it has a callable ``method`` (a plug-in of ``contract``).

    Raises:
        InvalidTypeError: ``value`` has no callable ``method``.
    """
    if not callable(getattr(value, method, None)):
        raise InvalidTypeError(
            f"{name} must implement {contract} (a callable {method}()), "
            f"got {type(value).__name__}"
        )
    return value


def check_same_tenant(store: object, **others: object) -> None:
    """Refuse backend objects of different tenants given to one operation.

    Postgres backends carry their tenant as ``tenant_id``; an operation reading a store
    through another tenant's index, or judging it with another tenant's ledger, would
    serve, count or write that other tenant's rows. Objects without ``tenant_id`` (the
    in-memory ones, one object per tenant) and ``None`` are not checked. The attribute is
    looked up statically (:func:`~cycgraph_memory.observability.tenant_of`), so a proxy's
    or a test double's ``__getattr__`` is never called: the check does no I/O.

    Raises:
        InvalidInputError: One of ``others`` names a tenant other than the store's
            (nothing is read or written).
    """
    store_tenant = tenant_of(store)
    for name, other in others.items():
        tenant = tenant_of(other)
        if other is None or tenant is None or store_tenant is None:
            continue
        if tenant != store_tenant:
            raise InvalidInputError(
                f"the {name}'s tenant {tenant!r} is not the store's {store_tenant!r}"
            )


_LOGGER_METHODS = ("debug", "info", "warning")


class _PartialLogger:
    """A logger made of the levels a caller's object has; the other levels are dropped.

    The spec's loggers are ``{ debug?, warn? }`` objects whose methods take one message
    (``{ warn: console.warn }``); Python spells the latter ``warning`` or ``warn``. Each
    call formats the ``%``-style message first, so a plain ``print`` works as a level.
    """

    def __init__(self, target: object) -> None:
        def level(*names: str) -> Any:
            for name in names:
                fn = getattr(target, name, None)
                if callable(fn):
                    return fn
            return None

        self._debug = level("debug")
        self._info = level("info")
        self._warning = level("warning", "warn")

    @staticmethod
    def _emit(fn: Any, msg: object, args: tuple[object, ...]) -> None:
        if fn is not None:
            fn(str(msg) % args if args else str(msg))

    def debug(self, msg: object, *args: object) -> None:
        """Log at debug level when the target has ``debug``."""
        self._emit(self._debug, msg, args)

    def info(self, msg: object, *args: object) -> None:
        """Log at info level when the target has ``info``."""
        self._emit(self._info, msg, args)

    def warning(self, msg: object, *args: object) -> None:
        """Log a warning when the target has ``warning`` (or the spec's ``warn``)."""
        self._emit(self._warning, msg, args)


def check_logger(value: object, default: Any, name: str = "logger") -> Any:
    """``value`` (or ``default`` when it is ``None``) once it can be logged to.

    A ``logging.Logger`` or ``logging.LoggerAdapter`` is used as it is. Any other object
    (the spec's ``{ debug?, warn? }``, whose methods take one message; ``warn`` stands for
    ``warning``) is wrapped: each call gets one formatted string, and the levels it lacks
    are dropped rather than raising after the store changed. That holds for an object
    with all three levels too: handing it ``logging``'s ``(msg, *args)`` would raise a
    ``TypeError`` from a one-argument method after the pass had committed. Components
    log after their writes commit, so an object with none of these methods is refused up
    front.

    Raises:
        InvalidTypeError: ``value`` has none of callable ``debug``, ``info``,
            ``warning`` or ``warn``.
    """
    if value is None:
        return default
    has = [m for m in (*_LOGGER_METHODS, "warn") if callable(getattr(value, m, None))]
    if not has:
        raise InvalidTypeError(
            f"{name} must be a logging.Logger or have at least one callable of "
            f"{', '.join(_LOGGER_METHODS)}, warn; {type(value).__name__} has none"
        )
    if isinstance(value, logging.Logger | logging.LoggerAdapter):
        return value
    return _PartialLogger(value)


def check_page(limit: object, offset: object) -> None:
    """Check a listing's ``limit`` (``None`` or a positive int) and ``offset``.

    Raises:
        InvalidInputError: ``limit`` is not ``None`` or an int >= 1, or ``offset`` is not
            an int in ``[0, 2**63 - 1]`` (a 64-bit SQL OFFSET).
    """
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise InvalidInputError(f"limit must be a positive int, got {limit!r}")
    if isinstance(offset, bool) or not isinstance(offset, int) or not 0 <= offset <= 2**63 - 1:
        raise InvalidInputError(f"offset must be an int in [0, 2**63 - 1], got {offset!r}")


def check_dimensions(value: object, name: str = "expected_dimensions") -> int | None:
    """``value`` when it is ``None`` or an ``int`` >= 1 (a ``bool`` is not a dimension count).

    Raises:
        InvalidInputError: Anything else (``0``, ``-3``, ``True``, ``"384"``, ``3.0``).
    """
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidInputError(f"{name} must be a positive integer or None, got {value!r}")
    return value


def changed_from_defaults(*arguments: tuple[str, object, object]) -> dict[str, object]:
    """The ``(name, value, default)`` arguments a caller changed from their defaults.

    What :func:`option_bundle` needs as ``explicit``: a keyword argument left at its
    default (the same object, or an equal value) is not counted as given.
    """
    return {
        name: value
        for name, value, default in arguments
        if value is not default and value != default
    }


def option_bundle(
    model: type[M], options: object, explicit: Mapping[str, object], what: str
) -> dict[str, Any]:
    """The fields of ``options`` (a ``model`` or a mapping) as keyword arguments.

    The spec passes some options as one object (``retrieveGatedLessons(store, options)``,
    ``requiredTrials(input)``); the Python functions take the same options as keyword
    arguments too. ``explicit`` holds the keyword arguments the caller changed from their
    defaults: giving both forms at once is refused rather than one silently winning.

    Raises:
        InvalidTypeError: ``options`` is neither a ``model`` nor a mapping.
        InvalidInputError: ``options`` and changed keyword arguments were both given.
        pydantic.ValidationError: The mapping does not validate as ``model``.
    """
    if isinstance(options, model):
        bundle = options
    elif isinstance(options, Mapping):
        bundle = model.model_validate(dict(options))
    else:
        raise InvalidTypeError(
            f"{what} options must be a {model.__name__} or a mapping, "
            f"got {type(options).__name__}"
        )
    if explicit:
        raise InvalidInputError(
            f"{what}: give the options either as one {model.__name__} (or mapping) or as "
            f"keyword arguments, not both (also given: {', '.join(sorted(explicit))})"
        )
    return {name: getattr(bundle, name) for name in type(bundle).model_fields}


def keyword_options(
    fn: Callable[..., object],
    options: object,
    values: Mapping[str, object],
    what: str,
    *,
    slot: str | None = None,
    is_options: Callable[[object], bool] | None = None,
) -> dict[str, Any]:
    """``fn``'s options with ``options`` (a mapping) applied over ``values``.

    For constructors that the spec calls with one options object
    (``new MemoryConsolidator(store, index, { maxFacts })``) and that take keyword
    arguments in Python: ``values`` are the arguments as received (``locals()``). The
    options are ``fn``'s keyword-only arguments; with ``slot``, the options object came in
    the place of the positional argument ``slot`` (``new SimpleThemeClusterer(opts)``,
    whose first Python argument is ``similarity_threshold``), and the options are ``slot``
    and every argument after it. A required argument among them (no default) must be in
    ``options``. Giving an option both ways, or an unknown option, is refused, and so is
    a ``slot`` value that would itself be read as an options object (``is_options``,
    default: any mapping).

    Raises:
        InvalidTypeError: ``options`` is not a mapping, names an unknown option, lacks a
            required one, or nests an options object in ``slot``.
        InvalidInputError: ``options`` together with arguments changed from their
            defaults.
    """
    if not isinstance(options, Mapping):
        raise InvalidTypeError(f"{what} options must be a mapping, got {type(options).__name__}")
    parameters = inspect.signature(fn).parameters
    if slot is None:
        params = {
            name: p.default
            for name, p in parameters.items()
            if p.kind is inspect.Parameter.KEYWORD_ONLY
        }
        received = dict(values)
    else:
        names = list(parameters)
        params = {
            name: parameters[name].default
            for name in names[names.index(slot) :]
            if parameters[name].kind
            in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
        }
        received = {**values, slot: params[slot]}
    unknown = sorted(str(k) for k in options if k not in params)
    if unknown:
        raise InvalidTypeError(f"unknown {what} options: {unknown}; expected {sorted(params)}")
    changed = sorted(
        name
        for name, default in params.items()
        if received[name] is not default and received[name] != default
    )
    if changed:
        raise InvalidInputError(
            f"{what}: give the options either as one mapping or as separate arguments, "
            f"not both (also given: {', '.join(changed)})"
        )
    if slot is not None and slot in options:
        nested = is_options(options[slot]) if is_options else isinstance(options[slot], Mapping)
        if nested:
            raise InvalidTypeError(f"{what} option {slot} cannot be an options mapping")
    merged = {**{name: received[name] for name in params}, **options}
    missing = sorted(
        name for name, value in merged.items() if value is inspect.Parameter.empty
    )
    if missing:
        raise InvalidTypeError(f"{what} options lack the required {', '.join(missing)}")
    return merged

"""Optional OpenTelemetry spans (the ``otel`` extra); a no-op when it is not installed.

Ingest, retrieval, the maintenance passes and the :class:`~cycgraph_memory.memory.Memory`
calls open a span through :func:`span`. With ``opentelemetry-api`` installed (``pip install
'cycgraph-memory[otel]'``) and a tracer provider configured by the application, the spans
are exported with attributes an operator filters on:

=============================  ==============================================
``cycgraph.tenant``            the tenant the call ran for
``cycgraph.mode``              retrieval mode (``vector`` / ``text`` / ``hybrid``)
``cycgraph.rows``              records read or written by the call
``cycgraph.messages``          messages ingested
``cycgraph.conflicts``         conflicts found (``cycgraph.detect_conflicts``)
``cycgraph.dry_run``           ``Memory.erase`` ran as a dry run
``cycgraph.erased_fact_ids``   erased fact ids ``record_outcome`` did not link
``cycgraph.revision_*``        a migration's ``target`` (as asked), ``from`` and
                               ``to`` (committed) revisions
``cycgraph.statement_count``   SQL statements the call sent (Postgres engines
                               instrumented with :func:`count_statement`)
=============================  ==============================================

No attribute carries record text (message or fact content, a query's text); a failed
call's span has an error status and an ``exception`` event naming the exception's type,
without its message.

Without the package, :func:`span` yields a handle whose methods do nothing and costs one
context-manager entry. The library never configures a provider or an exporter itself;
that is the application's choice. Logging is separate: every module logs to
``logging.getLogger(__name__)``.
"""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from contextlib import AbstractContextManager, contextmanager
from contextvars import ContextVar
from typing import Any, ParamSpec, TypeVar

__all__ = [
    "ATTRIBUTE_PREFIX",
    "SpanHandle",
    "count_statement",
    "otel_available",
    "span",
    "tenant_of",
    "traced",
]

_log = logging.getLogger(__name__)

ATTRIBUTE_PREFIX = "cycgraph."
"""Prefix of every attribute name the library sets on its spans."""

P = ParamSpec("P")
R = TypeVar("R")

_STATEMENTS: ContextVar[tuple[list[int], ...]] = ContextVar(
    "cycgraph_span_statements", default=()
)
_UNSET: Any = object()
_tracer: Any = _UNSET
_trace_api: Any = None


def _get_tracer() -> Any:
    """The library's tracer, or ``None`` when opentelemetry is not installed (cached)."""
    global _tracer, _trace_api
    if _tracer is _UNSET:
        try:
            import opentelemetry.trace as trace
        except ImportError:
            _tracer = None
        else:
            from cycgraph_memory import __version__

            _trace_api = trace
            _tracer = trace.get_tracer("cycgraph_memory", __version__)
    return _tracer


def _provider_configured() -> bool:
    # Until the application sets a tracer provider, the API hands out a proxy whose spans
    # record nothing; skip the work (the provider may be set later, so check each time).
    provider = _trace_api.get_tracer_provider() if _trace_api is not None else None
    return provider is not None and not isinstance(provider, _trace_api.ProxyTracerProvider)


def otel_available() -> bool:
    """True when ``opentelemetry-api`` is importable (spans are then really opened)."""
    return _get_tracer() is not None


def _clean(value: Any) -> Any:
    if isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, list | tuple):
        return [str(v) for v in value]
    return str(value)


class SpanHandle:
    """What :func:`span` yields: add attributes to the running span (or do nothing)."""

    __slots__ = ("_span",)

    def __init__(self, otel_span: Any = None) -> None:
        self._span = otel_span

    @property
    def recording(self) -> bool:
        """True when a real span is being recorded."""
        return self._span is not None and bool(self._span.is_recording())

    def set(self, **attributes: Any) -> None:
        """Set ``cycgraph.<name>`` attributes (``None`` values are skipped)."""
        if self._span is None:
            return
        for key, value in attributes.items():
            if value is not None:
                self._span.set_attribute(ATTRIBUTE_PREFIX + key, _clean(value))


def tenant_of(backend: object) -> str | None:
    """The ``tenant_id`` of a backend object, or ``None`` (in-memory objects have none)."""
    # Static lookup: a backend's __getattr__ (proxies, test doubles) is never triggered.
    tenant = inspect.getattr_static(backend, "tenant_id", None)
    if isinstance(tenant, property) and tenant.fget is not None:
        tenant = tenant.fget(backend)
    return tenant if isinstance(tenant, str) else None


def count_statement() -> None:
    """Count one SQL statement against the innermost open span (if any).

    The Postgres backend calls it from an engine ``before_cursor_execute`` listener
    (see :func:`cycgraph_memory.postgres.instrument_engine`).
    """
    for counter in _STATEMENTS.get():  # every open span counts its nested spans' statements
        counter[0] += 1


class _NoSpan:
    """The context manager :func:`span` returns without opentelemetry (stateless, shared)."""

    __slots__ = ()

    def __enter__(self) -> SpanHandle:
        return _NO_HANDLE

    def __exit__(self, *exc_info: object) -> None:
        return None


_NO_HANDLE = SpanHandle()
_NO_SPAN = _NoSpan()


def span(name: str, **attributes: Any) -> AbstractContextManager[SpanHandle]:
    """Open a span named ``name`` with ``cycgraph.*`` attributes (no-op without otel).

    Exceptions propagate; the span gets an error status (described by the exception's
    class name) and an ``exception`` event with ``exception.type`` only: no message and
    no traceback, which could quote tenant data (a refused message's text). The number of
    SQL statements counted inside the block (:func:`count_statement`) is set as
    ``cycgraph.statement_count`` when the block ends.
    """
    tracer = _get_tracer()
    if tracer is None or not _provider_configured():
        return _NO_SPAN
    return _otel_span(tracer, name, attributes)


@contextmanager
def _otel_span(tracer: Any, name: str, attributes: dict[str, Any]) -> Iterator[SpanHandle]:
    counter = [0]
    token = _STATEMENTS.set((*_STATEMENTS.get(), counter))
    try:
        # Not OpenTelemetry's own exception recording: its event carries the message and
        # the traceback, and messages quote the input (a validation error shows the text
        # of the message it refused). The span gets the exception's type only.
        with tracer.start_as_current_span(
            name, record_exception=False, set_status_on_exception=False
        ) as otel_span:
            handle = SpanHandle(otel_span)
            handle.set(**attributes)
            try:
                yield handle
            except BaseException as exc:
                _record_error(otel_span, exc)
                raise
            finally:
                if counter[0]:
                    handle.set(statement_count=counter[0])
    finally:
        _STATEMENTS.reset(token)


def _record_error(otel_span: Any, exc: BaseException) -> None:
    """Mark the span failed with the exception's type, never its message."""
    if isinstance(exc, GeneratorExit) or not otel_span.is_recording():
        return
    kind = type(exc)
    qualified = kind.__name__ if kind.__module__ == "builtins" else (
        f"{kind.__module__}.{kind.__qualname__}"
    )
    otel_span.add_event("exception", {"exception.type": qualified})
    otel_span.set_status(_trace_api.Status(_trace_api.StatusCode.ERROR, kind.__name__))


def traced(
    name: str, attributes: Callable[[Any], dict[str, Any]]
) -> Callable[[Callable[P, Awaitable[R]]], Callable[P, Coroutine[Any, Any, R]]]:
    """Run a coroutine function inside :func:`span` ``name`` (a maintenance entry point).

    The span carries ``cycgraph.tenant`` of the first argument (the store) and, when the
    call returns, the attributes ``attributes(result)`` gives (counts, never content). A
    call that raises, argument checks included, ends the span with an error status.
    """

    def wrap(function: Callable[P, Awaitable[R]]) -> Callable[P, Coroutine[Any, Any, R]]:
        @functools.wraps(function)
        async def run(*args: P.args, **kwargs: P.kwargs) -> R:
            with span(name, tenant=tenant_of(args[0]) if args else None) as handle:
                result = await function(*args, **kwargs)
                if handle.recording:
                    handle.set(**attributes(result))
            return result

        return run

    return wrap

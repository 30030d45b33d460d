"""Run a cached statement as its compiled SQL text: no per-call parameter processing.

``session.execute(stmt, params)`` finds the statement's compiled form in SQLAlchemy's
cache, but on every call it still builds the parameters of every bind of the statement
(``construct_params``) and runs the ORM session's execution layer. For the retrieval
statement of a hybrid call (178 binds, one row per candidate) that was ~2 ms of client
CPU per call. The statements of this package are built once per shape and kept
(``functools.lru_cache``), so the work can be done once per statement instead:

* compile it once per dialect: its SQL text, the positional order of its binds, each
  bind's processor (what SQLAlchemy would apply, e.g. a pgvector value to its text
  form), the values of binds that carry one;
* the statement's constants (anonymous binds such as ``literal(0)`` or the keys of a
  ``jsonb_build_object``, rendered with a cast) written into that text as literals under
  their cast, so that only the call's own values travel as parameters;
* per call, only the positional values, sent with ``Connection.exec_driver_sql`` on the
  session's connection (same transaction, same prepared-statement cache, and the
  engine's ``before_cursor_execute`` / ``after_cursor_execute`` events fire as for any
  statement, so tracing and statement counting see it).

A bind rendered as a literal (``literal_execute``: the kNN ``LIMIT`` s, so that the
planner sees them) is rendered into the text per distinct value. A statement this
cannot reproduce exactly runs through ``session.execute`` as before: one with an
expanding or escaped bind, a literal bind whose value is not an integer, or a selected
column whose type has a result processor for the dialect (the driver's values would
reach the caller unprocessed) unless the type declares that processor a pass-through of
asyncpg's value (:data:`DRIVER_VALUE_FINAL`). So do a call missing a required value
(SQLAlchemy raises its usual error) and a session whose dialect is not
``numeric_dollar`` (asyncpg). A plain ``text()`` statement (no typed columns, nothing
processed either way) runs as its text like a select.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.engine import Result
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.sql.elements import TextClause, _anonymous_label
from sqlalchemy.sql.selectable import TextualSelect

__all__ = ["DRIVER_VALUE_FINAL", "DriverStatement", "compile_for_driver", "execute"]

DRIVER_VALUE_FINAL = "driver_value_final"
"""Attribute of a column type whose result processor returns asyncpg's value unchanged.

Such a type selects itself in a form asyncpg decodes to the final value (the embedding
column: ``real[]`` through its ``column_expression``, a list of floats that its processor
passes through), so a statement built with SQLAlchemy's expression language selecting it
can still run as compiled text. Not a ``text().columns(...)`` statement: its hand-written
SQL has no ``column_expression`` in it.
"""

_LITERAL_VARIANTS = 64
"""Literal-value variants of one statement's text kept (beyond: rendered per call)."""


@dataclass(frozen=True)
class DriverStatement:
    """A statement compiled once: its text and how to order and process its values."""

    text: str
    """The SQL, literal binds as ``__[POSTCOMPILE_name]`` placeholders."""
    names: tuple[str, ...]
    """Bind names in positional (``$n``) order, literal binds excluded."""
    processors: tuple[Callable[[Any], Any] | None, ...]
    """Each positional bind's processor for the dialect (``None``: the value as is)."""
    defaults: Mapping[str, Any]
    """Values of the binds that carry one (used when the call does not give one)."""
    literals: tuple[str, ...]
    """Names of the binds rendered as literals into the text."""
    variants: dict[tuple[int, ...], str] = field(default_factory=dict)
    """The text per tuple of literal values seen (at most ``_LITERAL_VARIANTS``)."""

    def sql(self, params: Mapping[str, Any]) -> str | None:
        """The text with the literal binds of ``params`` rendered; ``None`` if not ints."""
        if not self.literals:
            return self.text
        values = tuple(params.get(k, self.defaults.get(k)) for k in self.literals)
        if not all(type(v) is int for v in values):
            return None
        found = self.variants.get(values)
        if found is None:
            found = self.text
            for name, value in zip(self.literals, values, strict=True):
                found = found.replace(f"__[POSTCOMPILE_{name}]", str(value))
            if len(self.variants) < _LITERAL_VARIANTS:
                self.variants[values] = found
        return found

    def values(self, params: Mapping[str, Any]) -> tuple[Any, ...] | None:
        """The positional values of ``params``; ``None`` when a required one is missing."""
        out = []
        for name, process in zip(self.names, self.processors, strict=True):
            if name in params:
                value = params[name]
            elif name in self.defaults:
                value = self.defaults[name]
            else:
                return None
            out.append(value if process is None else process(value))
        return tuple(out)


_compiled: dict[tuple[int, int], tuple[Any, Any, DriverStatement | None]] = {}
_lock = threading.Lock()


def compile_for_driver(stmt: Any, dialect: Any) -> DriverStatement | None:
    """``stmt`` compiled for ``dialect`` once (cached); ``None`` when it cannot be reproduced."""
    key = (id(stmt), id(dialect))
    hit = _compiled.get(key)
    if hit is not None and hit[0] is stmt and hit[1] is dialect:
        return hit[2]
    built = _build(stmt, dialect)
    with _lock:
        if len(_compiled) > 4096:  # statements are cached per shape: this is a bound
            _compiled.clear()
        _compiled[key] = (stmt, dialect, built)
    return built


def _build(stmt: Any, dialect: Any) -> DriverStatement | None:
    if getattr(dialect, "paramstyle", None) != "numeric_dollar":
        return None
    # A plain text() statement has no typed result columns: session.execute hands back
    # the driver's values as they are, so there is no result processing to reproduce.
    columns = () if type(stmt) is TextClause else getattr(stmt, "exported_columns", None)
    if columns is None:
        return None
    # A textual select's SQL is written by hand: no column_expression is rendered in it.
    rendered = not isinstance(stmt, TextualSelect)
    for column in columns:
        if rendered and getattr(column.type, DRIVER_VALUE_FINAL, False):
            continue
        try:
            processor = column.type.dialect_impl(dialect).result_processor(dialect, None)
        except Exception:  # a processor chosen by the driver's column type (numerics)
            return None
        if processor is not None:
            return None
    compiled = stmt.compile(dialect=dialect)
    if compiled.escaped_bind_names or compiled.positiontup is None:
        return None
    binds = compiled.binds
    if any(b.expanding for b in binds.values()):
        return None
    literals = tuple(name for name, b in binds.items() if b.literal_execute)
    names = tuple(n for n in compiled.positiontup if n not in literals)
    numbered = {int(n) for n in re.findall(r"\$(\d+)", compiled.string)}
    if numbered != set(range(1, len(names) + 1)):
        return None  # not one $n per positional bind: leave it to SQLAlchemy
    processors = tuple(
        binds[n].type.dialect_impl(dialect).bind_processor(dialect) for n in names
    )
    defaults = {
        name: b.effective_value for name, b in binds.items() if not b.required
    }
    sql, names, processors = _inline_constants(compiled.string, names, processors, binds)
    return DriverStatement(sql, names, processors, defaults, literals)


_CASTS: dict[type, tuple[str, ...]] = {
    int: ("INTEGER", "BIGINT", "SMALLINT", "FLOAT", "DOUBLE PRECISION", "REAL"),
    float: ("FLOAT", "DOUBLE PRECISION", "REAL"),
    str: ("VARCHAR", "TEXT"),
}
"""Casts after ``$n`` under which a constant of each type is inlined (as a quoted literal)."""

_FLOAT_TEXT = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}


def _constant(value: Any) -> str | None:
    """``value`` as the text of a SQL string literal, or ``None`` when it is not inlined."""
    kind = type(value)
    if kind is int:  # not bool (a Boolean bind has a processor: it stays a parameter)
        text = str(value)
    elif kind is float:
        text = repr(value)
        text = _FLOAT_TEXT.get(text, text)
    elif isinstance(value, str):
        text = str.__str__(value)  # a plain str (quoted_name: the name as given)
        # NUL cannot be in SQL text; a backslash would be an escape were
        # standard_conforming_strings off; "__[" is the literal-bind placeholder's prefix.
        if "\x00" in text or "\\" in text or "__[" in text:
            return None
    else:
        return None
    return "'" + text.replace("'", "''") + "'"


def _inline_constants(
    sql: str,
    names: tuple[str, ...],
    processors: tuple[Callable[[Any], Any] | None, ...],
    binds: Mapping[str, Any],
) -> tuple[str, tuple[str, ...], tuple[Callable[[Any], Any] | None, ...]]:
    """The constants of ``sql`` written into its text; the other binds renumbered.

    An anonymous bind (a constant of the expression: ``literal(0)``, the keys of a
    ``jsonb_build_object``, the constants of the BM25 formula) has no name a caller can
    give: its value is the same on every call. Sent as a parameter it costs client CPU on
    every call (ordered here, encoded by the driver; the hybrid statement had 179
    parameters, 170 of them constants), so each one that SQLAlchemy renders with an
    explicit cast (``$7::VARCHAR``) is written as a string literal under that cast
    (``'facts'::VARCHAR``): the type's input function gives the value the parameter had
    (a float's ``repr`` reads back as the same double). Binds with a processor, without a
    cast or with a value of another type stay parameters.
    """
    inline: dict[int, str] = {}
    for position, (name, process) in enumerate(zip(names, processors, strict=True), 1):
        b = binds[name]
        if process is not None or not isinstance(b.key, _anonymous_label) or b.required:
            continue
        if b.callable is not None:
            continue
        literal = _constant(b.value)
        if literal is None:
            continue
        casts = _CASTS[type(b.value) if type(b.value) in (int, float) else str]
        uses = [m.end() for m in re.finditer(rf"\${position}(?!\d)", sql)]
        if uses and all(
            any(re.match(rf"::{c}(?![\w(\[])", sql[end:]) for c in casts) for end in uses
        ):
            inline[position] = literal
    if not inline:
        return sql, names, processors
    kept = [p for p in range(1, len(names) + 1) if p not in inline]
    renumbered = {old: new for new, old in enumerate(kept, 1)}

    def replace(match: re.Match[str]) -> str:
        position = int(match.group(1))
        found = inline.get(position)
        return found if found is not None else f"${renumbered[position]}"

    return (
        re.sub(r"\$(\d+)", replace, sql),
        tuple(names[p - 1] for p in kept),
        tuple(processors[p - 1] for p in kept),
    )


async def execute(session: AsyncSession, stmt: Any, params: Mapping[str, Any]) -> Result[Any]:
    """``session.execute(stmt, params)``, through the statement's compiled text when it can.

    The same result (rows, column names, values) whichever way it ran; the compiled text
    is used when :func:`compile_for_driver` can reproduce the statement.
    """
    conn = await session.connection()
    compiled = compile_for_driver(stmt, conn.dialect)
    if compiled is not None:
        sql = compiled.sql(params)
        values = compiled.values(params) if sql is not None else None
        if sql is not None and values is not None:
            result: Result[Any] = await conn.exec_driver_sql(sql, values)
            return result
    fallback: Result[Any] = await session.execute(stmt, params)
    return fallback


async def fetch_all(session: AsyncSession, stmt: Any, params: Mapping[str, Any]) -> list[Any]:
    """The rows of :func:`execute` as the driver returns them, not as ``Row`` objects.

    Through the compiled text the result has no result processors, and each
    ``Row`` would only copy its driver row (an asyncpg ``Record``, indexed the same) into a
    tuple: two objects per row the garbage collector tracks (~300 for the ~150 candidate
    rows of a hybrid retrieval). The statement runs exactly as :func:`execute` runs it
    (the same events, the same cursor), and the result is closed here. A statement
    :func:`compile_for_driver` cannot reproduce gives its ``Row`` objects.
    """
    result = await execute(session, stmt, params)
    cursor = getattr(result, "cursor", None) if getattr(result, "_is_cursor", False) else None
    meta: Any = getattr(result, "_metadata", None)
    if (
        cursor is None
        or getattr(meta, "_tuplefilter", None) is not None
        or any(p is not None for p in getattr(meta, "_processors", None) or (0,))
    ):
        return list(result.all())  # Row objects: the values as SQLAlchemy processes them
    rows = list(cursor.fetchall())
    result.close()
    return rows

"""Count SQL statements per span (see :mod:`cycgraph_memory.observability`)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncEngine

from cycgraph_memory.observability import count_statement

__all__ = ["instrument_engine"]



def _on_execute(*_: Any, **__: Any) -> None:
    count_statement()


def instrument_engine(engine: AsyncEngine) -> AsyncEngine:
    """Make ``engine`` count its statements into the open ``cycgraph.*`` spans.

    Each span then carries ``cycgraph.statement_count``. Idempotent; returns ``engine``.
    Costs one function call per statement (nothing is counted without an open span).
    """
    sync_engine = engine.sync_engine
    if not event.contains(
        sync_engine, "before_cursor_execute", _on_execute
    ):
        event.listen(sync_engine, "before_cursor_execute", _on_execute)
    return engine

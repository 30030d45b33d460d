"""``primary_reads``: reads that decide a write skip a lagging read engine."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager

__all__ = ["primary_reads"]


@contextmanager
def primary_reads(*backends: object) -> Iterator[None]:
    """Send the reads of the block to the primary database.

    Postgres objects built with ``read_engine=`` (a streaming replica) serve reads made
    outside a unit of work from it, possibly lagging. Code that reads outside a unit of
    work and then writes from what it read (re-embedding, an import's final check, the
    ingest's look-up of stored messages) wraps those reads in this block: on objects with
    ``reads_on_primary()`` (the Postgres backends) it is entered; others (in memory) have
    no read engine and are left as they are.
    """
    with ExitStack() as stack:
        for backend in backends:
            enter = getattr(backend, "reads_on_primary", None)
            if callable(enter):
                stack.enter_context(enter())
        yield

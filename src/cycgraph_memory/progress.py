"""Progress reporting for long operations: one small event type and one callback shape.

Every long operation (ingest, entity resolution, consolidation, conflict detection, the
gate simulator) takes an optional ``progress=`` keyword: a callable receiving
:class:`ProgressEvent` values. The library never draws anything; the ``cycgraph-memory``
command turns the events into a progress bar on a terminal (and stays silent when its
output is piped)::

    def show(event: ProgressEvent) -> None:
        print(f"{event.operation}: {event.done}/{event.total}")

    await memory.add(messages, progress=show)

A callback that raises stops the operation (the error propagates like any other), so keep
callbacks small.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from cycgraph_memory.errors import InvalidTypeError

__all__ = ["ProgressCallback", "ProgressEvent", "check_progress", "report_progress"]


@dataclass(frozen=True, slots=True)
class ProgressEvent:
    """How far one long operation has got.

    Attributes:
        operation: What runs: ``"ingest"``, ``"resolve-entities"``, ``"consolidate"``,
            ``"detect-conflicts"``, ``"simulate"``, ...
        done: Units finished so far (episodes, pages, runs, ...).
        total: Units expected in all, or ``None`` when unknown.
        stage: The step within the operation (``"extract"``, ``"write"``, ...), or ``""``.
    """

    operation: str
    done: int
    total: int | None = None
    stage: str = ""

    @property
    def fraction(self) -> float | None:
        """``done / total`` clamped to [0, 1] (1 when there was nothing to do), or ``None``.

        ``None`` when the total is unknown.
        """
        if self.total is None:
            return None
        if self.total == 0:
            return 1.0
        return min(1.0, max(0.0, self.done / self.total))


ProgressCallback = Callable[[ProgressEvent], None]
"""What ``progress=`` takes: called with each :class:`ProgressEvent`, in order."""


def report_progress(
    callback: ProgressCallback | None,
    operation: str,
    done: int,
    total: int | None = None,
    stage: str = "",
) -> None:
    """Send one event to ``callback`` (nothing happens when it is ``None``).

    Raises:
        InvalidTypeError: ``callback`` is neither ``None`` nor callable.
    """
    if callback is not None:
        check_progress(callback)(ProgressEvent(operation, done, total, stage))


def check_progress(callback: object) -> ProgressCallback:
    """``callback`` when it is callable, else :class:`InvalidTypeError`.

    Operations that write check ``progress=`` with it before their first write (a value
    that is not callable would otherwise fail at the first event, possibly after a commit).
    """
    if not callable(callback):
        raise InvalidTypeError(f"progress must be a callable, got {type(callback).__name__}")
    return callback

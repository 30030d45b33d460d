"""Private: spaCy's matrix products on numpy's BLAS, one thread while a parse runs.

thinc computes the layers of the small English pipelines with the ``blis`` package. On the
machines measured (x86-64, numpy's bundled OpenBLAS) numpy's single-threaded ``sgemm`` did
the same products in about half the CPU time, and the parse of an ingest batch spent
most of its time in them (``bench/ingest.py --tiers``). Same float32 products, same
annotations: the tests compare every token's tag, head and dependency label with the
``blis`` run.

OpenBLAS starts one thread per core for a product of that size; beside the rules thread
and other processes that cost more CPU and more time than it saved (about three times
both, measured). :func:`single_thread_blas` keeps numpy's BLAS at one thread while a
parse runs (the limit is process-wide, counted
across concurrent parses, and the previous setting is restored when the last one ends).

:func:`use_numpy_gemm` switches a pipeline only when that limit is available (numpy's
OpenBLAS with ``openblas_set_num_threads_local``, found through ``threadpoolctl``);
otherwise the pipeline keeps ``blis`` and nothing changes.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import threading
from collections.abc import Iterator
from typing import Any

__all__ = ["single_thread_blas", "use_numpy_gemm"]

logger = logging.getLogger(__name__)

_LOCK = threading.Lock()
_ACTIVE = 0
_PREVIOUS = 0
_SETTER: Any = None
_READY = False
LIBRARY_PATH: str | None = None
"""The BLAS library whose thread count :func:`single_thread_blas` limits (once looked up)."""


def _thread_setter() -> Any:
    """OpenBLAS's ``openblas_set_num_threads_local`` for numpy's BLAS (``None``: not found).

    The plain ``openblas_set_num_threads`` ignores an increase made from a thread other
    than the one that set the count before (measured with OpenBLAS 0.3.31), so a limit
    set and lifted from parse threads would stay. ``openblas_set_num_threads_local(n)``
    returns the previous setting and ``0`` lifts it, from any thread.
    """
    global _SETTER, _READY, LIBRARY_PATH
    with _LOCK:
        if _READY:
            return _SETTER
        _READY = True
        try:
            import numpy  # noqa: F401  (loads the BLAS library looked up below)
            from threadpoolctl import threadpool_info
        except ImportError:
            return None
        try:
            paths = [
                lib["filepath"]
                for lib in threadpool_info()
                if lib.get("internal_api") == "openblas"
            ]
            if len(paths) > 1:  # scipy's copy beside numpy's: numpy's runs the products
                paths = [p for p in paths if "numpy" in p]
            if len(paths) != 1:
                return None
            setter = ctypes.CDLL(paths[0]).openblas_set_num_threads_local
        except (OSError, AttributeError, KeyError):  # another BLAS, an older OpenBLAS
            logger.debug("no per-call BLAS thread control: spaCy keeps blis", exc_info=True)
            return None
        setter.argtypes = [ctypes.c_int]
        setter.restype = ctypes.c_int
        _SETTER = setter
        LIBRARY_PATH = paths[0]
        return setter


def use_numpy_gemm(nlp: Any) -> bool:
    """Compute ``nlp``'s layers with numpy's matrix product instead of ``blis`` (in place).

    Returns:
        True when switched (numpy's OpenBLAS offers the thread control that
        :func:`single_thread_blas` needs), else False (``nlp`` unchanged).
    """
    if _thread_setter() is None:
        return False
    try:
        from thinc.api import NumpyOps
    except ImportError:  # pragma: no cover - spaCy always installs thinc
        return False
    ops = NumpyOps(use_blis=False)
    switched = False
    for _, component in getattr(nlp, "pipeline", ()):
        model = getattr(component, "model", None)
        walk = getattr(model, "walk", None)
        if walk is None:
            continue
        for node in walk():
            if type(node.ops).__name__ == "NumpyOps":
                node.ops = ops
                switched = True
    return switched


@contextlib.contextmanager
def single_thread_blas() -> Iterator[None]:
    """Keep numpy's BLAS at one thread inside the block (process-wide, reentrant).

    Concurrent blocks share one limit: the first one sets it, the last one to leave
    lifts it (back to the setting found by the first). Without the thread control the
    block changes nothing.
    """
    global _ACTIVE, _PREVIOUS
    setter = _thread_setter()
    if setter is None:
        yield
        return
    with _LOCK:
        if _ACTIVE == 0:
            _PREVIOUS = setter(1)
        _ACTIVE += 1
    try:
        yield
    finally:
        with _LOCK:
            _ACTIVE -= 1
            if _ACTIVE == 0:
                setter(_PREVIOUS)

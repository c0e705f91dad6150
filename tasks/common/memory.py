"""Memory a long-lived process gives back: glibc malloc arenas and trimming.

A long ingest runs many batches through a few threads (the flow's process) or through the
same worker processes (loading, splitting), and glibc's malloc keeps what they freed as
free space in its arenas. :func:`limit_malloc_arenas` caps how many arenas the flow's
threads spread over; :func:`release_memory` returns the free space after each batch or
file, so a process's resident size tracks what it holds, not its past peaks.
:func:`heap_frozen` keeps the garbage collector's full collections off the objects that
were there before a run (the imports' hundreds of thousands), so that they walk the run's own.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import gc
import os
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

#: glibc malloc arenas the flow process may create (``MALLOC_ARENA_MAX``, when set, wins).
MALLOC_ARENAS = 2
_M_ARENA_MAX = -8  # mallopt parameter (malloc.h)


@functools.cache
def _glibc() -> ctypes.CDLL | None:
    """Return the C library when it is glibc (Linux), else None."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.gnu_get_libc_version  # noqa: B018 - present in glibc only
    except (OSError, AttributeError):
        return None
    return libc


def limit_malloc_arenas(arenas: int = MALLOC_ARENAS) -> bool:
    """Cap the malloc arenas glibc creates from now on in this process; True if capped.

    glibc gives each thread that allocates its own arena (up to 8 per core) and never
    gives an arena's free space back while a live block sits above it, so every arena
    keeps the high-water mark of whatever its threads did: the task threads, Chroma's
    threads and the store each ratchet their own, and a long run holds the sum. A few
    shared arenas hold far less. ``MALLOC_ARENA_MAX`` in the environment (read by glibc
    at start) is left to rule.
    """
    libc = _glibc()
    if libc is None or os.environ.get("MALLOC_ARENA_MAX"):
        return False
    return bool(libc.mallopt(_M_ARENA_MAX, arenas))


def release_memory() -> bool:
    """Give the free memory malloc holds back to the system (glibc ``malloc_trim``).

    Called between batches: what a batch allocated and freed (its rows, chunks, the
    store's conversion buffers) is returned, not kept as free space in the arenas, so
    the process's resident size tracks what it holds, not its past peaks.
    """
    libc = _glibc()
    return bool(libc is not None and libc.malloc_trim(0))


_frozen_runs = 0
_frozen_lock = threading.Lock()


@contextmanager
def heap_frozen() -> Iterator[None]:
    """Keep the cyclic garbage collector off the objects that exist now, until the block ends.

    CPython's full collections walk every tracked object of the process, and a run's
    process holds about 300,000 from its imports alone (Prefect, pydantic, Chroma,
    pyarrow): the two full collections of a ceiling run took 0.71 s of the GIL on this
    project's 2-core machine, time in which nothing else of the process ran (0.10 s
    frozen; docs/performance.md, "Less of the flow's own work beside Chroma").
    ``gc.freeze`` moves the objects there now out of the collector's sight (a list splice,
    no walk); the run's own objects are collected as before. At the end the objects go
    back (``gc.unfreeze``), so a long-lived process (``docflow serve``, a worker) still
    collects any cyclic garbage that was among them. Runs that overlap in one process
    share the freeze: the last to end unfreezes.
    """
    global _frozen_runs
    with _frozen_lock:
        if _frozen_runs == 0:
            gc.freeze()
        _frozen_runs += 1
    try:
        yield
    finally:
        with _frozen_lock:
            _frozen_runs -= 1
            if _frozen_runs == 0:
                gc.unfreeze()

"""Memory a long-lived process gives back: glibc malloc arenas and trimming.

A long ingest runs many batches through a few threads (the flow's process) or through the
same worker processes (loading, splitting), and glibc's malloc keeps what they freed as
free space in its arenas. :func:`limit_malloc_arenas` caps how many arenas the flow's
threads spread over; :func:`release_memory` returns the free space after each batch or
file, so a process's resident size tracks what it holds, not its past peaks.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
import sys

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

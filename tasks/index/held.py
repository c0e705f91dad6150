"""The store's files held open through a run: one index and one manifest for all its batches.

Each store task (one per batch) used to open the collection's lexical index and the
manifest and close them after its batch. A writable open turns SQLite's WAL journal on and
the last close turns it off again, which checkpoints what the batch wrote and syncs it
(tasks/common/sqlite.py); with the Chroma client's checks that was about 50 ms a batch on
the store's chain (docs/performance.md, "The store's files held open through a run"). Within
:func:`holding`, the first store task of a collection opens them and later ones reuse
them; the block's end closes them, so a run leaves the data dir as it always did.

Every write is still its own transaction, committed where it was: holding a connection
changes when files are opened, not what a crash leaves. A task whose block raises closes
what it used, so its retry (or the next batch) opens afresh, as every task did before.
Python's SQLite connections belong to the thread that opened them: what is held is the
calling thread's (the flow calls its store tasks in its own thread), and other threads
open their own.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tasks.index.collection import Index
from tasks.index.manifest import Manifest

Key = tuple[str, str, str | None, int]

_local = threading.local()


def _held() -> dict[Key, tuple[Index, Manifest]] | None:
    """Return this thread's held files, or None outside :func:`holding`."""
    held: dict[Key, tuple[Index, Manifest]] | None = getattr(_local, "held", None)
    return held


@contextmanager
def holding() -> Iterator[None]:
    """Hold the store files that :func:`store_files` opens in this thread until the block ends.

    Nested blocks share the outermost one's files.
    """
    if _held() is not None:
        yield
        return
    _local.held = {}
    try:
        yield
    finally:
        held, _local.held = _local.held, None
        for files in held.values():
            _close(files)


@contextmanager
def store_files(
    data_dir: Path, physical: str, host: str | None = None, port: int = 8000
) -> Iterator[tuple[Index, Manifest]]:
    """Yield the index of ``physical`` and the data dir's manifest, open.

    Within :func:`holding` they stay open for the next call; outside it they are opened for
    this block only. If the block raises they are closed either way.
    """
    held = _held()
    if held is None:
        files = _open(data_dir, physical, host, port)
        try:
            yield files
        finally:
            _close(files)
        return
    key = (str(data_dir), physical, host, port)
    if key not in held:
        held[key] = _open(data_dir, physical, host, port)
    try:
        yield held[key]
    except BaseException:
        _close(held.pop(key))
        raise


def _open(data_dir: Path, physical: str, host: str | None, port: int) -> tuple[Index, Manifest]:
    """Open the index and the manifest (the index closed again if the manifest fails)."""
    index = Index.open(data_dir, physical, host, port)
    try:
        return index, Manifest.open(data_dir)
    except BaseException:
        index.close()
        raise


def _close(files: tuple[Index, Manifest]) -> None:
    """Close the manifest, then the index (each close leaves its file without a WAL)."""
    index, manifest = files
    try:
        manifest.close()
    finally:
        index.close()

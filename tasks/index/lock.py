"""One writer per collection: an advisory file lock that works with or without a server.

``flock`` locks belong to an open file, so the kernel releases them when the process dies,
even on ``kill -9``: a crashed run never leaves a stale lock behind. (Across machines, use
the Prefect concurrency limit named after the collection instead.)
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tasks.common.errors import DocflowError
from tasks.common.names import file_name

log = logging.getLogger(__name__)


class LockTimeout(DocflowError):
    """Another run holds the collection's lock for longer than we may wait."""


def lock_path(data_dir: Path, collection: str) -> Path:
    """Return the lock file of a collection (a long name's is shortened, see ``file_name``)."""
    return data_dir / "locks" / file_name(collection, ".lock")


@contextmanager
def collection_lock(
    data_dir: Path, collection: str, timeout: float, poll: float = 0.5
) -> Iterator[None]:
    """Hold the collection's lock for the ``with`` block, waiting up to ``timeout`` seconds.

    Raises:
        LockTimeout: With who holds it, if it is not free in time.
    """
    path = lock_path(data_dir, collection)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        deadline = time.monotonic() + timeout
        warned = False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                holder = _read_holder(path)
                if time.monotonic() >= deadline:
                    raise LockTimeout(
                        f"collection {collection!r} is being written by another run ({holder}); "
                        f"gave up after {timeout:g} s"
                    ) from None
                if not warned:
                    log.warning("collection %r is locked by %s; waiting", collection, holder)
                    warned = True
                time.sleep(poll)
        os.ftruncate(fd, 0)
        os.write(fd, json.dumps({"pid": os.getpid(), "since": time.time()}).encode())
        yield
    finally:
        os.close(fd)  # releases the lock


def _read_holder(path: Path) -> str:
    try:
        info = json.loads(path.read_text() or "{}")
    except (OSError, ValueError):
        return "unknown holder"
    if not info:
        return "unknown holder"
    since = time.strftime("%H:%M:%S", time.localtime(info.get("since", 0)))
    return f"pid {info.get('pid')}, since {since}"

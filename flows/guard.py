"""One writer per collection: the file lock, plus a Prefect concurrency slot for a shared store.

The file lock (``tasks/index/lock.py``) lives in the data dir and serialises the runs of one
machine; the kernel releases it when a run dies, even on ``kill -9``. That covers the
embedded store, which only processes of one machine can write. A Chroma server can be
written from several machines (several workers), so when a run writes one and a Prefect
server is configured, it also holds the global concurrency limit
``docflow-write-<collection>`` (limit 1, created on first use): that is what keeps runs on
different workers from interleaving. A run killed while holding the slot keeps it until
its lease expires (``LEASE_SECONDS``); a live run renews its lease in the background.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

from prefect.client.orchestration import get_client
from prefect.client.schemas.actions import GlobalConcurrencyLimitCreate
from prefect.concurrency.sync import concurrency
from prefect.exceptions import ObjectAlreadyExists, ObjectNotFound
from prefect.settings import PREFECT_API_URL

from tasks.index.lock import LockTimeout, collection_lock

#: The least time to wait for the server's slot (one round trip even when it is free).
MIN_SLOT_WAIT = 5.0
#: How long a slot outlives a run that died without releasing it.
LEASE_SECONDS = 60.0


def limit_name(collection: str) -> str:
    """Return the name of the global concurrency limit guarding writes to ``collection``."""
    return f"docflow-write-{collection}"


def server_configured() -> bool:
    """Return whether a Prefect server is configured (not a per-process temporary one)."""
    return bool(PREFECT_API_URL.value())


def ensure_limit(name: str) -> None:
    """Create the global concurrency limit ``name`` with one slot, unless it exists."""
    with get_client(sync_client=True) as client:
        try:
            client.read_global_concurrency_limit_by_name(name)
        except ObjectNotFound:
            try:
                client.create_global_concurrency_limit(
                    GlobalConcurrencyLimitCreate(name=name, limit=1)
                )
            except ObjectAlreadyExists:
                pass  # another run created it first


@contextmanager
def collection_guard(
    data_dir: Path, collection: str, timeout: float, chroma_host: str | None = None
) -> Iterator[None]:
    """Hold the collection's lock file, and its concurrency slot if the store is a server.

    Raises:
        LockTimeout: If another run keeps the slot or the lock longer than ``timeout``.
    """
    with ExitStack() as stack:
        if chroma_host and server_configured():
            name = limit_name(collection)
            ensure_limit(name)
            try:
                stack.enter_context(
                    concurrency(
                        name,
                        timeout_seconds=max(timeout, MIN_SLOT_WAIT),
                        lease_duration=LEASE_SECONDS,
                        strict=True,
                    )
                )
            except TimeoutError as exc:
                raise LockTimeout(
                    f"collection {collection!r} is being written by another run (slot {name}); "
                    f"gave up after {timeout:g} s"
                ) from exc
        stack.enter_context(collection_lock(data_dir, collection, timeout))
        yield

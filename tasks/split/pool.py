"""Split batches in worker processes, so splitting runs on every core, beside the store.

Splitting is pure Python and CPU-bound (tokenising for the length unit, then the splitter's
own loops): in the flow's process it would hold the interpreter lock that embedding
bookkeeping and store writes need. So a batch is split in one of ``workers`` processes: the
worker reads the batch's ``documents`` part, splits it and writes its ``chunks`` part; only
paths and counts cross the process boundary.

The splitter is built once in the flow's process (so settings errors surface there, and
encoders registered in this process measure in their own tokens) and sent pickled; each
worker keeps the last few it unpickled, keyed by their bytes' hash. Splitters that cannot be
pickled (an LLM client, a loaded model) split in the calling process, as does everything
when ``workers`` is 0 or the process may not have children (a Dask worker). The chunks are
the same either way (a test splits the shared corpora both ways).

A run that stops (Ctrl-C, SIGTERM, a failure: tasks/common/lifetime.py) does not wait for
a batch a worker is splitting (one large file is minutes of it): the waiting task kills the
pool's workers and gives up. A pool's workers go together (a worker's death breaks its
pool), so another run of the process whose split was in the pool splits its batch again,
once, in a new pool.
"""

from __future__ import annotations

import atexit
import hashlib
import logging
import multiprocessing as mp
import os
import pickle
import threading
import time
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from pathlib import Path

from tasks.common.kept import Kept
from tasks.common.lifetime import STOP_POLL_S, check_stopping, exit_with, stopping
from tasks.common.memory import release_memory
from tasks.common.priority import lower_priority
from tasks.common.tables import chunks_table, read_documents, write_atomic
from tasks.split.base import SpanSplitter
from tasks.split.factory import split_rows

log = logging.getLogger(__name__)

#: Splitters a worker keeps unpickled (a run uses one; a process may serve a few).
_KEEP = 2

#: A worker's unpickled splitters, by their pickle's hash.
_splitters: Kept[str, SpanSplitter] = Kept(_KEEP)
#: The flow's side: the pickles made, by the caller's key (``split_batch``'s ``reuse``).
_blobs: Kept[str, tuple[bytes, str] | None] = Kept(_KEEP)
_pool: ProcessPoolExecutor | None = None
_pool_size = 0
_pool_lock = threading.Lock()


@dataclass(frozen=True, slots=True)
class SplitResult:
    """What splitting one batch produced: its chunk count and busy seconds."""

    chunks: int
    seconds: float  # splitting
    table_seconds: float  # reading the documents part, writing the chunks part


def split_part(documents: Path, chunks: Path, splitter: SpanSplitter) -> SplitResult:
    """Split a ``documents`` part into a ``chunks`` part (in whatever process calls it)."""
    started = time.perf_counter()
    rows = read_documents(documents)
    read = time.perf_counter()
    out = split_rows(rows, splitter)
    split = time.perf_counter()
    write_atomic(chunks_table(out), chunks)
    return SplitResult(len(out), split - read, (read - started) + (time.perf_counter() - split))


def _split_in_worker(documents: str, chunks: str, blob: bytes, key: str) -> SplitResult:
    """Worker side: the splitter from its cache (or the blob), then :func:`split_part`."""
    splitter = _splitters.get(key, lambda: pickle.loads(blob))  # noqa: S301 - our own bytes
    try:
        return split_part(Path(documents), Path(chunks), splitter)
    finally:
        release_memory()  # a long-lived worker: keep no batch's peak


def _start_worker(parent: int) -> None:
    """Set up a split worker: it ends with ``parent`` and yields the CPU to it."""
    exit_with(parent)
    lower_priority()


def _executor(workers: int) -> ProcessPoolExecutor:
    """Return this process's pool of ``workers`` split processes (started on first use)."""
    global _pool, _pool_size
    from tasks.load.worker import _mp_context

    with _pool_lock:
        if _pool is None or _pool_size != workers:
            if _pool is not None:
                _pool.shutdown(wait=False, cancel_futures=True)
            _pool = ProcessPoolExecutor(
                max_workers=workers,
                mp_context=_mp_context(),
                initializer=_start_worker,
                initargs=(os.getpid(),),
            )
            _pool_size = workers
        return _pool


def prestart(workers: int) -> None:
    """Start the pool's ``workers`` processes now, for the batches to come (see the loaders').

    The pool starts a process per task it is handed while none is idle, so ``workers``
    trivial tasks start them all; their results are not waited for.
    """
    if workers == 0 or mp.current_process().daemon:
        return
    pool = _executor(workers)
    for _ in range(workers):
        pool.submit(os.getpid)


@atexit.register
def shutdown() -> None:
    """Stop the worker processes (at exit, or to free them)."""
    global _pool
    with _pool_lock:
        if _pool is not None:
            _pool.shutdown(wait=True, cancel_futures=True)
            _pool = None


def _pickled(splitter: SpanSplitter) -> tuple[bytes, str] | None:
    """Return the splitter's pickle and its hash, or None if it cannot be pickled."""
    try:
        blob = pickle.dumps(splitter, protocol=pickle.HIGHEST_PROTOCOL)
    except (pickle.PicklingError, TypeError, AttributeError) as exc:
        log.debug("splitting in process: %s cannot be pickled (%s)", type(splitter).__name__, exc)
        return None
    return blob, hashlib.sha256(blob).hexdigest()


def split_batch(
    documents: Path,
    chunks: Path,
    splitter: SpanSplitter,
    workers: int,
    reuse: str | None = None,
) -> SplitResult:
    """Split one batch's ``documents`` part into its ``chunks`` part, in a worker if it can.

    Args:
        documents: The batch's documents part.
        chunks: Where its chunks part goes.
        splitter: The run's splitter.
        workers: Processes to split in (0: in this process).
        reuse: A key that is the same for every batch of a run and differs between runs
            (the split task's: the run id): the splitter is pickled once per key, not once
            per batch (25-35 ms of the GIL each for the default one, whose tokenizer
            serialises itself: about 0.9 MB).

    """
    in_process = (
        workers == 0
        or mp.current_process().daemon
        or str(documents).startswith("memory:")  # another process cannot see this filesystem
    )
    if in_process:
        pickled = None
    elif reuse is None:
        pickled = _pickled(splitter)
    else:
        pickled = _blobs.get(reuse, lambda: _pickled(splitter))
    if pickled is None:
        return split_part(documents, chunks, splitter)
    blob, key = pickled
    try:
        return _split_in_pool(workers, documents, chunks, blob, key)
    except BrokenProcessPool:
        check_stopping()
        log.warning("the split workers were stopped (another run stopping?): splitting again")
    return _split_in_pool(workers, documents, chunks, blob, key)


def _split_in_pool(
    workers: int, documents: Path, chunks: Path, blob: bytes, key: str
) -> SplitResult:
    """Split one batch in this process's pool; forget the pool if it turns out broken."""
    pool = _executor(workers)
    try:
        future = pool.submit(_split_in_worker, str(documents), str(chunks), blob, key)
        return _wait(future, pool)
    except BrokenProcessPool:
        _discard(pool)
        raise


def _wait(future: Future[SplitResult], pool: ProcessPoolExecutor) -> SplitResult:
    """Return the split's result, or give up on it if the run stops (Stopping).

    Giving up kills ``pool``'s workers: the one splitting would go on to the batch's end.
    """
    while True:
        try:
            return future.result(timeout=STOP_POLL_S)
        except FutureTimeout:
            if stopping():
                _discard(pool, kill=True)
                check_stopping()


def _discard(pool: ProcessPoolExecutor, kill: bool = False) -> None:
    """Forget ``pool`` (the next split starts a new one); ``kill``: end its work now."""
    global _pool
    with _pool_lock:
        if _pool is pool:
            _pool = None
    if kill:
        # Python 3.14 has kill_workers(); before it, the pool's own table of its processes
        kill_workers = getattr(pool, "kill_workers", None)
        if kill_workers is not None:
            kill_workers()
        else:
            for process in list((getattr(pool, "_processes", None) or {}).values()):
                process.kill()
    pool.shutdown(wait=False, cancel_futures=True)

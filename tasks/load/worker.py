"""Load files in worker processes, each file under a deadline and a memory limit.

A thread cannot be interrupted, and a parser working on hostile input (a PDF whose
content streams take minutes, a decompression bomb) must not hang or exhaust the run. So
files load in child processes: the parent sends one file at a time to each worker and waits
at most ``timeout_s``; a worker that misses its deadline is killed (the file fails with
"timed out after N s") and replaced. Each worker caps its own address space at its size
on start plus ``memory_limit_mb`` (POSIX ``RLIMIT_AS``), so a runaway allocation is a
``MemoryError`` in the worker (the file fails with "out of memory") or, at worst, the
worker's death ("loader process died"), never the run's. A run that stops
(tasks/common/lifetime.py) does not wait for the files at hand either: their workers are
killed.

Workers come from a fork server with ``tasks.load`` preloaded (cheap to start, safe to
start from threads); where there is none, from spawn. The parent resolves each file's
loader and sends it along, so loaders registered at run time work too; a loader that
cannot be pickled loads in the parent instead, without the time guard.

Workers outlive the batch that started them: idle, they wait for the next batch of this
process (at most ``workers`` in all; they end with it). A new worker is not free: it runs
the parent's main module again before it serves, and where that imports Prefect (``python
-m prefect.engine`` of deployed runs, a script) that is about a second of CPU, which two
workers per batch cost every batch. A first batch waited 0.95 s for the fork server and a
worker (the next batch 0.005 s): a first ingest starts them as it plans (:func:`prestart`).
"""

from __future__ import annotations

import atexit
import logging
import multiprocessing as mp
import os
import pickle
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from typing import Any

from tasks.common.config import LoaderOptions
from tasks.common.documents import FileRef
from tasks.common.errors import LoadError
from tasks.common.lifetime import STOP_POLL_S, check_stopping, leave_interrupts_to_parent
from tasks.common.memory import release_memory
from tasks.common.priority import lower_priority
from tasks.common.tables import DocumentRow
from tasks.load.base import Loader, configured, loader_for
from tasks.load.batch import failed_row, load_with

log = logging.getLogger(__name__)

UNPICKLABLE = "unpicklable request"
"""A worker's answer to a request it cannot unpickle: the parent loads that file itself."""

LOOKAHEAD_BYTES = 32 * 2**20
"""Files may load ahead of the one being yielded while their sizes add up to at most this
(at least two per worker): a slow file does not idle the other workers, and memory stays
bounded."""

STOP_GRACE_S = 5.0
"""Seconds an idle worker gets to exit after being asked to, before it is killed."""

PRELOAD = ("tasks.load", "pypdf", "lxml.html", "charset_normalizer", "yaml")
"""Modules the fork server imports once, so that each worker starts warm."""

_context: Any = None


def _mp_context() -> Any:
    """Return the multiprocessing context for workers (fork server when available)."""
    global _context
    if _context is None:
        if "forkserver" in mp.get_all_start_methods():
            _context = mp.get_context("forkserver")
            _context.set_forkserver_preload(list(PRELOAD))
        else:
            _context = mp.get_context("spawn")
    return _context


def _limit_memory(limit_mb: int | None) -> None:
    """Cap this process's address space at its current size plus ``limit_mb`` MB."""
    if limit_mb is None:
        return
    try:
        import resource

        with open("/proc/self/statm", encoding="ascii") as fh:
            current = int(fh.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (ImportError, OSError, ValueError):
        return  # not Linux: no cap
    soft = current + limit_mb * 2**20
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    if hard != resource.RLIM_INFINITY:
        soft = min(soft, hard)
    resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def serve(conn: Connection, memory_limit_mb: int | None) -> None:
    """Worker main loop: receive (loader, file, options), send back the file's rows.

    It ends when its parent closes the pipe or dies (kill -9 included): the parent holds
    the only other end, so the wait for the next file ends in ``EOFError``. Ctrl-C is the
    parent's to handle (:mod:`tasks.common.lifetime`).
    """
    leave_interrupts_to_parent()
    lower_priority()
    _limit_memory(memory_limit_mb)
    while True:
        try:
            request = conn.recv()
        except EOFError:
            return
        except Exception:  # noqa: BLE001 - any unpickling failure: the parent loads it
            conn.send(UNPICKLABLE)
            continue
        if request is None:
            return
        loader, file, options = request
        rows = load_with(loader, file, options)
        if rows[0].error == "out of memory" and memory_limit_mb is not None:
            rows = [failed_row(file, loader.name, f"out of memory (limit {memory_limit_mb} MB)")]
        try:
            payload = pickle.dumps(rows)
        except (pickle.PicklingError, AttributeError, TypeError) as exc:
            reason = f"loader error: its documents cannot be pickled: {exc}"
            payload = pickle.dumps([failed_row(file, loader.name, reason)])
        del rows
        conn.send_bytes(payload)
        del payload
        release_memory()  # a long-lived worker: keep no file's peak


@dataclass(slots=True)
class _Job:
    index: int
    file: FileRef
    loader: Loader
    deadline: float


_slots_lock = threading.Lock()
_slots: dict[int, threading.Semaphore] = {}
_idle: list[_Worker] = []
"""Workers between batches (each holds its slot), for the next batch of this process."""

SLOT_POLL_S = 0.05
"""How often a batch waiting for its first worker looks for one another batch set free."""


def _slots_for(count: int) -> threading.Semaphore:
    """Return the process-wide budget of ``count`` load workers.

    Several batches load at once (the flow's threads); together they start at most
    ``workers`` processes, not that many each.
    """
    with _slots_lock:
        return _slots.setdefault(count, threading.Semaphore(count))


class _Worker:
    """One worker process and the file it is loading."""

    def __init__(self, options: LoaderOptions, slot: threading.Semaphore) -> None:
        self.slot = slot
        self.memory_limit_mb = options.memory_limit_mb
        ctx = _mp_context()
        self.conn, child = ctx.Pipe()
        self.process = ctx.Process(
            target=serve, args=(child, options.memory_limit_mb), daemon=True, name="docflow-load"
        )
        self.process.start()
        child.close()
        self.job: _Job | None = None

    def submit(self, job: _Job, options: LoaderOptions) -> bool:
        """Send a file to the worker; False if the request cannot be pickled."""
        try:
            payload = pickle.dumps((job.loader, job.file, options))
        except (pickle.PicklingError, AttributeError, TypeError):
            return False
        self.job = job
        try:
            self.conn.send_bytes(payload)
        except OSError:  # it died while idle: the wait for its answer reports how
            pass
        return True

    def fits(self, options: LoaderOptions, slot: threading.Semaphore) -> bool:
        """Return whether this idle worker can serve a batch with ``options``."""
        return (
            self.slot is slot
            and self.memory_limit_mb == options.memory_limit_mb
            and self.process.is_alive()
        )

    def died(self) -> str:
        """Return the reason for a worker that is gone, after reaping it."""
        self.process.join(timeout=1.0)
        code = self.process.exitcode
        self.kill()
        how = f"signal {-code}" if code is not None and code < 0 else f"exit code {code}"
        return f"loader process died ({how})"

    def kill(self) -> None:
        """End the worker now (and give its slot back)."""
        if self.process.is_alive():
            self.process.kill()
        self.process.join()
        if not self.conn.closed:
            self.conn.close()
            self.slot.release()

    def stop(self) -> None:
        """Ask an idle worker to exit; kill a busy or unresponsive one."""
        if self.job is None:
            try:
                self.conn.send(None)
            except OSError:
                pass
            self.process.join(timeout=STOP_GRACE_S)
        self.kill()


def _start(options: LoaderOptions, have: int) -> _Worker | None:
    """Return an idle worker, or start one within the budget; None if it cannot (or need not).

    A caller with no worker yet waits for a slot of the budget or an idle worker; one that
    has some goes on with those when the budget is spent (None). A daemonic process may not
    have children: Dask's worker processes are daemonic unless started with
    ``DASK_DISTRIBUTED__WORKER__DAEMON=False``. There files load in process, under the size
    guard but without the time and memory guards.
    """
    if mp.current_process().daemon:
        _warn_once("this process is daemonic (a Dask worker?)")
        return None
    slot = _slots_for(max(1, options.process_count()))
    while True:
        idle = _take_idle(options, slot)
        if idle is not None:
            return idle
        if slot.acquire(blocking=False) if have else slot.acquire(timeout=SLOT_POLL_S):
            break
        if have:
            return None
    try:
        return _Worker(options, slot)
    except OSError as exc:
        slot.release()
        _warn_once(str(exc))
        return None


def _take_idle(options: LoaderOptions, slot: threading.Semaphore) -> _Worker | None:
    """Return an idle worker that fits ``options``; stop those that do not (their slots free)."""
    unfit: list[_Worker] = []
    found = None
    with _slots_lock:
        while _idle and found is None:
            worker = _idle.pop()
            if worker.fits(options, slot):
                found = worker
            else:
                unfit.append(worker)
    for worker in unfit:
        worker.stop()
    return found


def _give_back(worker: _Worker) -> None:
    """Keep an idle worker for the next batch; stop one still busy (an abandoned batch)."""
    if worker.job is None and not worker.conn.closed and worker.process.is_alive():
        with _slots_lock:
            _idle.append(worker)
    else:
        worker.stop()


def prestart(options: LoaderOptions) -> threading.Thread | None:
    """Start the load workers now, in the background, to wait idle for the batches.

    See the module's docstring; None where none would start (``workers`` 0, a daemon).
    """
    count = options.process_count()
    if count == 0 or mp.current_process().daemon:
        return None
    slot = _slots_for(count)

    def start() -> None:
        while slot.acquire(blocking=False):
            try:
                _give_back(_Worker(options, slot))  # idle, as between two batches
            except OSError as exc:
                slot.release()
                return _warn_once(str(exc))

    thread = threading.Thread(target=start, name="docflow-load-workers-start", daemon=True)
    thread.start()
    return thread


@atexit.register
def shutdown() -> None:
    """Stop the idle workers (at exit, or to free their processes and slots now)."""
    with _slots_lock:
        idle = list(_idle)
        _idle.clear()
    for worker in idle:
        worker.kill()


_warned = False


def _warn_once(why: str) -> None:
    """Log once per process that files load without the time and memory guards."""
    global _warned
    if not _warned:
        _warned = True
        log.warning("cannot start a load worker (%s): loading in process, without guards", why)


def _resolve(file: FileRef, options: LoaderOptions) -> Loader | list[DocumentRow]:
    """Return the file's configured loader, or its failed row (no loader, unreadable)."""
    try:
        loader = configured(loader_for(file), options)
    except LoadError as exc:
        return [failed_row(file, "", str(exc))]
    if file.error is not None:  # discovery could not read it: no need for a worker
        return load_with(loader, file, options)
    return loader


def iter_load_in_workers(files: Sequence[FileRef], options: LoaderOptions) -> Iterator[DocumentRow]:
    """Yield the rows of ``files`` in order, loading them in ``options.process_count()`` processes.

    Files load ahead of the one being yielded up to ``LOOKAHEAD_BYTES`` (at least two per
    worker), so one slow file does not idle the others and memory stays bounded.
    """
    count = max(1, options.process_count())
    workers: list[_Worker] = []
    done: dict[int, list[DocumentRow]] = {}
    next_out = next_in = 0
    try:
        while next_out < len(files):
            while next_in < len(files) and (
                next_in < next_out + 2 * count
                or sum(f.size for f in files[next_out : next_in + 1]) <= LOOKAHEAD_BYTES
            ):
                idle = [w for w in workers if w.job is None]
                if not idle and len(workers) >= count:
                    break
                file = files[next_in]
                loader = _resolve(file, options)
                if isinstance(loader, list):
                    done[next_in] = loader
                else:
                    worker = idle[0] if idle else _start(options, len(workers))
                    if worker is None and workers:
                        break  # the budget is spent: wait for one of ours to be free
                    if worker is not None and worker not in workers:
                        workers.append(worker)
                    job = _Job(next_in, file, loader, time.monotonic() + options.timeout_s)
                    if worker is None or not worker.submit(job, options):
                        done[next_in] = load_with(loader, file, options)
                next_in += 1
            while next_out in done:
                yield from done.pop(next_out)
                next_out += 1
            busy = [w for w in workers if w.job is not None]
            if busy and next_out not in done:
                _collect(busy, workers, done, options)
                check_stopping()  # a stopping run: the finally below kills the busy workers
    finally:
        for worker in workers:
            _give_back(worker)


def _collect(
    busy: list[_Worker],
    workers: list[_Worker],
    done: dict[int, list[DocumentRow]],
    options: LoaderOptions,
) -> None:
    """Wait for the first answer or deadline among busy workers and record the outcome."""
    deadline = min(w.job.deadline for w in busy if w.job is not None)
    # at most STOP_POLL_S: the caller looks whether the run stopped between two waits
    wait_s = min(STOP_POLL_S, max(0.0, deadline - time.monotonic()))
    ready = wait([w.conn for w in busy], timeout=wait_s)
    now = time.monotonic()
    for worker in busy:
        job = worker.job
        assert job is not None
        if worker.conn in ready:
            try:
                answer = worker.conn.recv()
            except (EOFError, OSError):
                answer = [failed_row(job.file, job.loader.name, worker.died())]
                workers.remove(worker)
            if answer == UNPICKLABLE:
                answer = load_with(job.loader, job.file, options)
            done[job.index] = answer
            worker.job = None
        elif now >= job.deadline:
            log.debug("%s timed out after %s s", job.file.source, options.timeout_s)
            worker.kill()
            workers.remove(worker)
            reason = f"timed out after {options.timeout_s:g} s"
            done[job.index] = [failed_row(job.file, job.loader.name, reason)]

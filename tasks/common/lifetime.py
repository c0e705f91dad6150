"""A child process that ends with its parent, even after the parent's ``kill -9``, and only then.

A worker that waits for work on a pipe or queue whose ends it holds itself is never woken
by its parent's death: it would live on, holding the terminal's pipes and its memory (a
model on a GPU). The split pool's workers, the embedding child and Prefect's temporary
server (flows/temporary_server.py) watch their parent.

A terminal's Ctrl-C goes to every process of its foreground group, children included. A
worker that took it would die mid-file and print a traceback of its own while its parent
winds the run down (and stops its workers): children leave it to the parent
(:func:`leave_interrupts_to_parent`).

A run that stops (Ctrl-C, SIGTERM, a failure) waits for the tasks already running in its
threads before it ends: a batch's embedding is a minute on a CPU. Such loops check
:func:`check_stopping` between steps and give up (:func:`stoppable`).
"""

from __future__ import annotations

import os
import select
import signal
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from tasks.common.errors import DocflowError


class Stopping(DocflowError):
    """The run is stopping (Ctrl-C, SIGTERM, a failure): work still in flight gives up."""


#: The stop events of the runs this code works for, outermost first (a backfill's, then
#: its partition's).
_run_stops: ContextVar[tuple[threading.Event, ...]] = ContextVar("docflow_run_stop", default=())


@contextmanager
def stoppable() -> Iterator[threading.Event]:
    """Let the tasks submitted inside see that the run is stopping (an exception left it).

    Prefect's thread pool copies the submitting context into each task's thread, so the
    event reaches the tasks of this run only, not another flow's in the same process; a
    run started inside another's block (a backfill's partition) stops with it too.
    """
    event = threading.Event()
    token = _run_stops.set((*_run_stops.get(), event))
    try:
        yield event
    except BaseException:
        event.set()
        raise
    finally:
        _run_stops.reset(token)


def stop_event() -> threading.Event | None:
    """Return the event of the run this code works for (``None`` outside a run)."""
    events = _run_stops.get()
    return events[-1] if events else None


#: Seconds between two looks at whether the run stopped, for work waited on in a worker.
STOP_POLL_S = 0.2


def stopping() -> bool:
    """Return whether the run this code works for, or one around it, is stopping."""
    return any(event.is_set() for event in _run_stops.get())


def check_stopping() -> None:
    """Raise :class:`Stopping` if the run this code works for, or one around it, is stopping.

    Raises:
        Stopping: A run that submitted this task left its :func:`stoppable` block.

    """
    *outer, own = _run_stops.get() or (None,)
    if own is not None and own.is_set():
        raise Stopping("the run stopped: work in flight gave up")
    if any(event.is_set() for event in outer):
        raise Stopping("the run that started this one stopped (a backfill's Ctrl-C or SIGTERM)")


def outcome(future: Future[Any]) -> BaseException | None:
    """Wait for ``future``; return its exception, or None if it succeeded.

    In waits of :data:`STOP_POLL_S`, not one: Python runs a signal's handler in the main
    thread only, when that thread runs Python again, and the kernel may hand a process's
    Ctrl-C or SIGTERM to any of its threads. Taken by another thread, it reached a single
    wait only when the future ended: a backfill's whole partition run, after which the
    next day had started (seen once in the suite).
    """
    while True:
        try:
            return future.exception(timeout=STOP_POLL_S)
        except TimeoutError:
            continue


def settle(future: Any) -> None:
    """Wait until a Prefect task future is done, in waits of :data:`STOP_POLL_S`.

    As :func:`outcome`, for the same reason: its ``wait`` with a timeout, its wrapped
    future's ``done`` (a thread's or a Dask future alike).
    """
    while not future.wrapped_future.done():
        future.wait(STOP_POLL_S)


def leave_interrupts_to_parent() -> None:
    """Ignore SIGINT in this (child) process: the parent handles Ctrl-C and stops it."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def exit_with(parent: int) -> None:
    """End this process when process ``parent`` ends (a thread watches it); ignore Ctrl-C.

    A Linux pidfd wakes the thread when the parent exits; elsewhere it polls once a second.
    """
    leave_interrupts_to_parent()

    def watch() -> None:
        try:
            fd = os.pidfd_open(parent)
        except (AttributeError, OSError):
            fd = -1
        if fd >= 0:
            select.select([fd], [], [])
        else:
            while alive(parent):
                time.sleep(1.0)
        os._exit(0)

    threading.Thread(target=watch, name="docflow-parent-watch", daemon=True).start()


def alive(pid: int) -> bool:
    """Return whether process ``pid`` exists."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True

"""Failpoints: named places where a test can make the process die or fail on purpose.

Set ``DOCFLOW_FAILPOINT=<name>[=<action>][@<n>]`` (e.g. ``store:after-upsert@2``); when the
code reaches ``failpoint(name)`` for the n-th time (default 1st; ``@n+``: the n-th and every
later time; ``@*``: every time), it acts: ``kill`` (default: SIGKILL to itself, a real
``kill -9``), ``term`` (SIGTERM to itself: a stop from outside, as ``docker stop`` sends),
``interrupt`` (SIGINT to its whole process group, as a terminal's Ctrl-C), ``raise`` (a
FailpointError) or ``enospc`` (the OSError of a full disk). Unset, a failpoint costs one
environment lookup.
The crash-safety tests use them to stop a real ingest at exact points.

A test in the same process can also hang a callback on a point (:func:`on`): the
deterministic way to make something happen exactly there, such as rewriting a file between
the plan that hashed it and the loader that reads it.
"""

from __future__ import annotations

import errno
import os
import signal
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager

ENV = "DOCFLOW_FAILPOINT"

_hits: Counter[str] = Counter()
_lock = threading.Lock()
_hooks: dict[str, Callable[[], None]] = {}


class FailpointError(RuntimeError):
    """Raised by a failpoint with the ``raise`` action."""


@contextmanager
def on(name: str, callback: Callable[[], None]) -> Iterator[None]:
    """Call ``callback`` each time this process reaches failpoint ``name``, in the block."""
    _hooks[name] = callback
    try:
        yield
    finally:
        _hooks.pop(name, None)


def failpoint(name: str) -> None:
    """Kill or fail the process here if ``DOCFLOW_FAILPOINT`` names this point."""
    hook = _hooks.get(name)
    if hook is not None:
        hook()
    spec = os.environ.get(ENV)
    if not spec:
        return
    target, _, nth = spec.partition("@")
    point, _, action = target.partition("=")
    if point != name:
        return
    with _lock:
        _hits[name] += 1
        if not _fires(nth, _hits[name]):
            return
    if action == "raise":
        raise FailpointError(f"failpoint {name} reached")
    if action == "enospc":
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    if action == "interrupt":
        os.killpg(os.getpgrp(), signal.SIGINT)
        return
    os.kill(os.getpid(), signal.SIGTERM if action == "term" else signal.SIGKILL)


def _fires(nth: str, hit: int) -> bool:
    """Return whether the ``hit``-th arrival fires for the spec ``nth`` ("", "3", "3+", "*")."""
    if nth == "*":
        return True
    if nth.endswith("+"):
        return hit >= int(nth[:-1])
    return hit == int(nth or 1)

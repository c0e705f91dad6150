"""Failpoints: named places where a test can make the process die or fail on purpose.

Set ``DOCFLOW_FAILPOINT=<name>[=<action>][@<n>]`` (e.g. ``store:after-upsert@2``); when the
code reaches ``failpoint(name)`` for the n-th time (default 1st), it acts: ``kill``
(default: SIGKILL to itself, a real ``kill -9``) or ``raise`` (a FailpointError). Unset,
a failpoint costs one environment lookup. The crash-safety tests use them to stop a real
ingest at exact points.
"""

from __future__ import annotations

import os
import signal
import threading
from collections import Counter

ENV = "DOCFLOW_FAILPOINT"

_hits: Counter[str] = Counter()
_lock = threading.Lock()


class FailpointError(RuntimeError):
    """Raised by a failpoint with the ``raise`` action."""


def failpoint(name: str) -> None:
    """Kill or fail the process here if ``DOCFLOW_FAILPOINT`` names this point."""
    spec = os.environ.get(ENV)
    if not spec:
        return
    target, _, nth = spec.partition("@")
    point, _, action = target.partition("=")
    if point != name:
        return
    with _lock:
        _hits[name] += 1
        if _hits[name] != int(nth or 1):
            return
    if action == "raise":
        raise FailpointError(f"failpoint {name} reached")
    os.kill(os.getpid(), signal.SIGKILL)

"""A tiny hook so a flow can report batch progress to whoever shows it (the CLI's bar).

Flows call :func:`report`; the CLI installs a listener with :func:`listen`. With no
listener, reporting does nothing, so flows run the same under a worker or in tests.
Listeners live in a context variable: a flow running in another thread (the partitions of
a backfill) sees its parent's listeners and its own, never a sibling's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

Listener = Callable[[int, int], None]  # (batches done, batches total)

_listeners: ContextVar[tuple[Listener, ...]] = ContextVar("docflow_progress", default=())


@contextmanager
def listen(listener: Listener) -> Iterator[None]:
    """Call ``listener`` for every progress report made inside the ``with`` block."""
    token = _listeners.set((*_listeners.get(), listener))
    try:
        yield
    finally:
        _listeners.reset(token)


def report(done: int, total: int) -> None:
    """Tell the listeners that ``done`` of ``total`` batches are finished."""
    for listener in _listeners.get():
        listener(done, total)

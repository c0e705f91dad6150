"""A tiny hook so a flow can report batch progress to whoever shows it (the CLI's bar).

Flows call :func:`report`; the CLI installs a listener with :func:`listen`. With no
listener, reporting does nothing, so flows run the same under a worker or in tests.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

Listener = Callable[[int, int], None]  # (batches done, batches total)

_listeners: list[Listener] = []


@contextmanager
def listen(listener: Listener) -> Iterator[None]:
    """Call ``listener`` for every progress report made inside the ``with`` block."""
    _listeners.append(listener)
    try:
        yield
    finally:
        _listeners.remove(listener)


def report(done: int, total: int) -> None:
    """Tell the listeners that ``done`` of ``total`` batches are finished."""
    for listener in list(_listeners):
        listener(done, total)

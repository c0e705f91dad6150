"""A few values kept by key, the least recently used dropped: loaded tokenizers, splitters.

Making one is tens of milliseconds or more (a tokenizer read from its files, a splitter
pickled or unpickled), and a process uses only a few at a time, so each is made once and
kept while it is among the last ``limit`` used.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

_K = TypeVar("_K", bound=Hashable)
_V = TypeVar("_V")


class Kept(Generic[_K, _V]):
    """At most ``limit`` values by key; safe to share between threads."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._values: OrderedDict[_K, _V] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: _K, make: Callable[[], _V]) -> _V:
        """Return the value of ``key``, made by ``make()`` the first time (outside the lock)."""
        with self._lock:
            if key in self._values:
                self._values.move_to_end(key)
                return self._values[key]
        value = make()
        with self._lock:
            self._values[key] = value
            while len(self._values) > self.limit:
                self._values.popitem(last=False)
        return value

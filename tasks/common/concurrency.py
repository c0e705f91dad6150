"""Work on a thread of its own while the caller does something that lets go of the GIL.

The store writes a batch's vectors and its words at once: an embedded Chroma holds the GIL
for the whole of its upsert, SQLite's statements need none of it while they run
(tasks/index/lexical.py), so the two overlap where a core is free. The order matters: the
caller must be inside its statement before the other thread takes the GIL, or it cannot
even start the statement until Chroma is done (each statement takes the GIL back when it
ends), so the work starts when the caller says, right before its long statement.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager


@contextmanager
def running_beside(work: Callable[[], object] | None) -> Iterator[Callable[[], None]]:
    """Run ``work`` on a thread of its own once the block calls the function it is given.

    At the latest the work starts when the block ends; it is waited for at the end. Its
    error is raised first (the block's, if any, is its context). None: nothing runs.
    """
    go = threading.Event()
    if work is None:
        yield go.set
        return

    def when_started() -> object:
        go.wait()
        return work()

    with ThreadPoolExecutor(1, thread_name_prefix="docflow-beside") as pool:
        done = pool.submit(when_started)
        try:
            yield go.set
        finally:
            go.set()
            done.result()

"""Work on a thread of its own while the caller does something that lets go of the GIL.

The store writes a batch's vectors and its words at once: an embedded Chroma holds the GIL
for the whole of its upsert, SQLite's statements need none of it while they run
(tasks/index/lexical.py), so the two overlap where a core is free.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager


@contextmanager
def running_beside(work: Callable[[], object] | None) -> Iterator[None]:
    """Run ``work`` on a thread of its own during the block; wait for it at the end.

    Its error is raised first (the block's, if any, is its context). None: nothing runs.
    """
    if work is None:
        yield
        return
    with ThreadPoolExecutor(1, thread_name_prefix="docflow-beside") as pool:
        done = pool.submit(work)
        try:
            yield
        finally:
            done.result()

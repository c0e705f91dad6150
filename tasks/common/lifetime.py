"""A child process that ends with its parent, even after the parent's ``kill -9``.

A worker that waits for work on a pipe or queue whose ends it holds itself is never woken
by its parent's death: it would live on, holding the terminal's pipes and its memory (a
model on a GPU). The split pool's workers and the embedding child watch their parent.
"""

from __future__ import annotations

import os
import select
import threading
import time


def exit_with(parent: int) -> None:
    """End this process when process ``parent`` ends (a thread watches it).

    A Linux pidfd wakes the thread when the parent exits; elsewhere it polls once a second.
    """

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

"""A helper interpreter of the flow's process, spoken to over a pipe: its work off our GIL.

The embedding child on a GPU (tasks/embed/process.py) and the embedded store's process
(tasks/index/store_process.py) are the same kind of child: a new interpreter, not a fork
(the parent may hold a CUDA context or Chroma's threads) and not ``multiprocessing``'s
spawn, which would run the parent's main script again in it (a script that ingests at its
module level, outside ``if __name__ == "__main__":``, would do so again there). It runs
one line of code (:attr:`Child.CODE`) with the parent's import path (:data:`BOOT`) and talks over a
:func:`multiprocessing.Pipe` whose end it inherits as a file descriptor (its first
argument). A child that dies is reported in one line, with how it died, by
:meth:`Child.receive`; it ends with its parent, ``kill -9`` included
(:mod:`tasks.common.lifetime`, which the child's code calls).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import subprocess
import sys
import threading
from collections.abc import Mapping
from typing import Any

from tasks.common.errors import DocflowError

#: This process's import path, for the child (:data:`BOOT`).
PATH_ENV = "DOCFLOW_CHILD_PATH"
#: What the child runs first: this process's import path after its own, so that it finds
#: docflow where this process did, while the standard library stays first (a flow run
#: started as a script puts its folder first, and flows/inspect.py would hide ``inspect``).
BOOT = (
    "import os, sys; sys.path.extend(p for p in "
    f"os.environ.pop({PATH_ENV!r}, '').split(os.pathsep) if p not in sys.path); "
)


def switch(name: str) -> bool | None:
    """Return the choice environment variable ``name`` forces (``1``/``0``), or None.

    False in a daemonic process (a Dask worker's), which may start no child of its own.
    """
    forced = os.environ.get(name, "").strip().lower()
    if forced in ("0", "false", "no", "off") or mp.current_process().daemon:
        return False
    if forced in ("1", "true", "yes", "on"):
        return True
    return None


class Child:
    """A child interpreter that runs :attr:`CODE` and answers requests on a pipe."""

    #: What the child runs: Python source that reads its pipe's descriptor from ``sys.argv[1]``.
    CODE = ""
    #: What a dead child is called in the error (``"the embedding process"``).
    WHAT = "the child process"
    #: The error a dead child raises.
    ERROR: type[DocflowError] = DocflowError

    def __init__(self, *args: str, env: Mapping[str, str] | None = None) -> None:
        """Start the child with ``args`` after its pipe's descriptor, ``env`` added."""
        self.conn, child = mp.Pipe()
        path = os.pathsep.join(p or os.getcwd() for p in sys.path)
        fd = child.fileno()
        self.process = subprocess.Popen(
            [sys.executable, "-c", BOOT + self.CODE, str(fd), *args],
            pass_fds=(fd,),
            env={**os.environ, PATH_ENV: path, **(env or {})},
        )
        child.close()
        #: One request at a time on the pipe: hold it from sending to receiving.
        self.lock = threading.Lock()

    def send(self, request: Any) -> None:
        """Send ``request``; a dead child's error comes from the :meth:`receive` after."""
        try:
            self.conn.send(request)
        except OSError:
            pass  # a dead child: receiving says how it died

    def receive(self) -> Any:
        """Return the child's next answer.

        Raises:
            DocflowError: :attr:`ERROR`, if the child died first (with its signal or code).
        """
        try:
            return self.conn.recv()
        except (EOFError, OSError):
            try:
                code: int | None = self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                code = None
            how = f"signal {-code}" if code is not None and code < 0 else f"exit code {code}"
            raise self.ERROR(f"{self.WHAT} died ({how})") from None

    def alive(self) -> bool:
        """Return whether the child is running."""
        return self.process.poll() is None

    def stop(self) -> None:
        """Ask the child to exit (it reads None); kill it if it does not within a few seconds."""
        self.send(None)
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.conn.close()

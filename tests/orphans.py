"""Does a child process end with its parent after ``kill -9``? (no atexit, no cleanup there)"""

from __future__ import annotations

import subprocess
import sys
import time

import psutil

from tests.conftest import REPO


def survivor_of_killed_parent(script: str, timeout: float = 20.0) -> int | None:
    """Run ``script``, which prints a child's pid and then waits; kill -9 it.

    Return the child's pid if it is still running ``timeout`` seconds later, else None.
    """
    parent = subprocess.Popen(
        [sys.executable, "-c", script], cwd=REPO, stdout=subprocess.PIPE, text=True
    )
    try:
        assert parent.stdout is not None
        child = psutil.Process(int(parent.stdout.readline()))
        assert child.is_running()
    finally:
        parent.kill()  # SIGKILL: no atexit, no cleanup in the parent
        parent.wait()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if child.status() == psutil.STATUS_ZOMBIE:
                return None  # exited, not yet reaped
        except psutil.NoSuchProcess:
            return None
        time.sleep(0.2)
    return child.pid

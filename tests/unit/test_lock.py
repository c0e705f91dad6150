"""Unit tests for tasks/index/lock.py: one writer per collection, released even on kill -9."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from tasks.index.lock import LockTimeout, collection_lock, lock_path
from tests.conftest import REPO

COL = "docflow"


def test_second_acquisition_times_out_naming_collection_and_holder(data_dir: Path) -> None:
    with collection_lock(data_dir, COL, timeout=0):
        with pytest.raises(LockTimeout) as info, collection_lock(data_dir, COL, timeout=0):
            pytest.fail("the lock was acquired twice")
    message = str(info.value)
    assert repr(COL) in message
    assert f"pid {os.getpid()}" in message
    assert lock_path(data_dir, COL).is_file()


def test_lock_is_free_again_after_the_block_even_on_error(data_dir: Path) -> None:
    with pytest.raises(RuntimeError), collection_lock(data_dir, COL, timeout=0):
        raise RuntimeError("inside")
    with collection_lock(data_dir, COL, timeout=0):
        pass


def test_other_collections_are_independent(data_dir: Path) -> None:
    with collection_lock(data_dir, COL, timeout=0), collection_lock(data_dir, "other", timeout=0):
        assert lock_path(data_dir, "other") != lock_path(data_dir, COL)


def test_waits_and_succeeds_when_the_holder_releases_in_time(data_dir: Path) -> None:
    held, release_after = threading.Event(), 0.3

    def holder() -> None:
        with collection_lock(data_dir, COL, timeout=0):
            held.set()
            time.sleep(release_after)

    thread = threading.Thread(target=holder)
    thread.start()
    try:
        assert held.wait(5)
        start = time.monotonic()
        with collection_lock(data_dir, COL, timeout=5, poll=0.02):
            waited = time.monotonic() - start
    finally:
        thread.join()
    assert 0.1 < waited < 3


HOLD = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from tasks.index.lock import collection_lock
    with collection_lock(Path(sys.argv[1]), sys.argv[2], timeout=0):
        print("locked", flush=True)
        time.sleep(60)
    """
)


def test_lock_is_released_when_the_holding_process_is_killed(data_dir: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(data_dir), COL],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "locked"
        with pytest.raises(LockTimeout, match=f"pid {proc.pid}"):
            with collection_lock(data_dir, COL, timeout=0):
                pass
        os.kill(proc.pid, signal.SIGKILL)
        assert proc.wait(10) == -signal.SIGKILL
        start = time.monotonic()
        with collection_lock(data_dir, COL, timeout=5, poll=0.05):
            assert time.monotonic() - start < 1  # free at once, not after a wait
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()

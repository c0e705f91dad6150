"""Work beside the caller's statement (tasks/common/concurrency.py)."""

from __future__ import annotations

import threading

import pytest

from tasks.common.concurrency import running_beside


def test_the_work_waits_for_the_callers_start() -> None:
    """The caller enters its long statement first: a thread that took the GIL earlier
    could hold it through a call that never lets go (an embedded Chroma's upsert)."""
    began = threading.Event()
    with running_beside(began.set) as start:
        assert not began.wait(0.3)
        start()
        assert began.wait(10)


def test_work_never_started_runs_when_the_block_ends_and_is_waited_for() -> None:
    ran: list[str] = []
    with running_beside(lambda: ran.append(threading.current_thread().name)):
        pass
    assert len(ran) == 1 and ran[0] != threading.current_thread().name


def test_the_works_error_comes_first() -> None:
    def work() -> None:
        raise ConnectionError("the vector store went away")

    with pytest.raises(ConnectionError, match="went away"), running_beside(work) as start:
        start()


def test_no_work_is_a_start_that_does_nothing() -> None:
    with running_beside(None) as start:
        start()

"""Unit tests for tasks/common/lifetime.py: a run's stop reaches its own tasks' threads only."""

from __future__ import annotations

import contextvars
import subprocess
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor

import pytest

from tasks.common.lifetime import Stopping, check_stopping, outcome, stop_event, stoppable
from tests.conftest import REPO


def test_outside_a_run_nothing_is_stopping() -> None:
    assert stop_event() is None
    check_stopping()  # no run: nothing to stop


def test_an_exception_leaving_the_block_stops_the_tasks_it_submitted() -> None:
    """As Prefect's thread pool does, a task's thread runs in a copy of the submitting context."""
    with ThreadPoolExecutor(2) as pool:
        with pytest.raises(KeyboardInterrupt), stoppable() as stop:
            task_context = contextvars.copy_context()
            pool.submit(task_context.run, check_stopping).result()  # running: goes on
            raise KeyboardInterrupt
        assert stop.is_set()
        with pytest.raises(Stopping):
            pool.submit(task_context.run, check_stopping).result()
    assert stop_event() is None  # the block is left: this thread is in no run


def test_a_run_that_ends_normally_stops_nothing_and_other_runs_are_left_alone() -> None:
    with stoppable() as first:
        first_context = contextvars.copy_context()
    assert not first.is_set()
    with pytest.raises(ValueError), stoppable() as second:
        second_context = contextvars.copy_context()
        raise ValueError
    assert second.is_set()
    first_context.run(check_stopping)  # the other run's tasks go on
    with pytest.raises(Stopping):
        second_context.run(check_stopping)


def test_a_run_started_inside_another_stops_with_it_and_not_the_other_way() -> None:
    """A backfill's partitions are runs of their own inside the backfill's block."""
    with pytest.raises(KeyboardInterrupt), stoppable():  # the backfill
        with stoppable():  # a partition's run, started from the backfill
            partition = contextvars.copy_context()
        raise KeyboardInterrupt
    with pytest.raises(Stopping, match="the run that started this one stopped"):
        partition.run(check_stopping)
    with stoppable() as backfill:
        with pytest.raises(ValueError), stoppable():  # one partition fails
            raise ValueError
        check_stopping()  # the others go on
    assert not backfill.is_set()


def test_outcome_returns_the_error_or_none() -> None:
    with ThreadPoolExecutor(1) as pool:
        assert outcome(pool.submit(int, "7")) is None
        assert isinstance(outcome(pool.submit(int, "seven")), ValueError)


#: A Ctrl-C that the kernel hands to a thread other than the one waiting on the future
#: (``pthread_kill`` aims it at one): the waiter must see it before the future ends. WAIT
#: is how it waits: ``outcome`` on the future, or ``settle`` on a real Prefect task future
#: around it (what the ingest flow's batch loop waits on).
SIGNAL_TO_ANOTHER_THREAD = textwrap.dedent(
    """
    import signal, sys, threading, time, uuid
    from concurrent.futures import ThreadPoolExecutor
    from tasks.common.lifetime import outcome, settle

    # a shell's background job starts with SIGINT ignored, and Python keeps that: the
    # Ctrl-C is then never raised at all, whatever the wait does
    signal.signal(signal.SIGINT, signal.default_int_handler)

    if sys.argv[1] == "settle":  # imported before the Ctrl-C, which would stop the import
        from prefect.futures import PrefectConcurrentFuture

    def wait(future):
        if sys.argv[1] == "outcome":
            return outcome(future)
        return settle(PrefectConcurrentFuture(task_run_id=uuid.uuid4(), wrapped_future=future))

    release = threading.Event()
    with ThreadPoolExecutor(1) as pool:
        future = pool.submit(release.wait, 20)  # ends when released, at the latest in 20 s
        def ctrl_c_to_this_thread():
            time.sleep(0.2)
            signal.pthread_kill(threading.get_ident(), signal.SIGINT)
        threading.Thread(target=ctrl_c_to_this_thread).start()
        try:
            wait(future)
        except KeyboardInterrupt:
            print("interrupted; the future done:", future.done())
        release.set()
    """
)


@pytest.mark.parametrize("wait", ["outcome", "settle"])
def test_a_ctrl_c_taken_by_another_thread_reaches_the_wait_before_the_future_ends(
    wait: str,
) -> None:
    done = subprocess.run(
        [sys.executable, "-c", SIGNAL_TO_ANOTHER_THREAD, wait],
        capture_output=True, text=True, cwd=REPO, timeout=120, check=False,
    )  # fmt: skip
    assert done.stdout.strip() == "interrupted; the future done: False", done.stderr[-2000:]

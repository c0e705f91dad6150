"""Unit tests for tasks/common/lifetime.py: a run's stop reaches its own tasks' threads only."""

from __future__ import annotations

import contextvars
from concurrent.futures import ThreadPoolExecutor

import pytest

from tasks.common.lifetime import Stopping, check_stopping, stop_event, stoppable


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

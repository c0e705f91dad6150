"""The one line a run records for its error (the runs table, the summary artifact), and how a
stop by SIGTERM ends the command."""

from __future__ import annotations

import pytest

from tasks.common.errors import StoreError, describe


def test_describe_names_the_error_in_one_line() -> None:
    assert describe(StoreError("collection 'x' does not exist")) == "collection 'x' does not exist"
    assert describe(RuntimeError("disk\n  busy")) == "RuntimeError: disk busy"
    assert describe(KeyError()) == "KeyError"  # not "KeyError: "
    assert describe(KeyboardInterrupt()) == "interrupted (Ctrl-C)"  # was "KeyboardInterrupt: "


def test_a_sigterm_is_named_not_its_exception_class() -> None:
    """``docker stop`` or a pod's eviction recorded the run's error as ``TerminationSignal``."""
    from prefect.exceptions import TerminationSignal

    assert describe(TerminationSignal(15)) == "terminated (SIGTERM: stopped from outside)"


def _raised_while_handling(stop: BaseException) -> ValueError:
    """Return the error Prefect's task engine raised while it handled ``stop``."""
    try:
        try:
            raise stop
        except BaseException:  # noqa: BLE001 - the stop, whichever it is
            raise ValueError("Task run is not set")  # noqa: B904 - as Prefect's engine does
    except ValueError as exc:
        return exc
    raise AssertionError("unreachable")


def test_an_error_set_off_by_a_stop_is_recorded_as_the_stop() -> None:
    """A SIGTERM landing while a task run is set up failed Prefect's handling in turn: the
    run recorded ``ValueError: Task run is not set`` and the command exited 1."""
    from click.exceptions import Exit
    from prefect.exceptions import TerminationSignal

    from flows.commands.common import EXIT_TERMINATED, errors_to_exit_codes, take_failure

    error = _raised_while_handling(TerminationSignal(15))
    assert describe(error) == "terminated (SIGTERM: stopped from outside)"
    assert describe(_raised_while_handling(KeyboardInterrupt())) == "interrupted (Ctrl-C)"
    assert describe(ValueError("Task run is not set")) == "ValueError: Task run is not set"
    with pytest.raises(Exit) as stopped, errors_to_exit_codes():
        raise error
    assert stopped.value.exit_code == EXIT_TERMINATED == 143
    assert take_failure() == "terminated (SIGTERM: stopped from outside)"


def test_a_sigterm_to_the_command_ends_it_as_an_exception_then_by_the_signal() -> None:
    """The command's first SIGTERM is an exception (a normal exit follows); a second one
    ends the process at once; the handler before the command is back after it."""
    import os
    import signal

    from flows.cli import Terminated, stopped_by_sigterm

    before = signal.getsignal(signal.SIGTERM)
    with stopped_by_sigterm():
        with pytest.raises(Terminated):
            os.kill(os.getpid(), signal.SIGTERM)
            signal.pthread_kill(signal.pthread_self(), 0)  # lets the handler run here
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # a second one ends it
    assert signal.getsignal(signal.SIGTERM) is before

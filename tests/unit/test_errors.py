"""The one line a run records for its error (the runs table, the summary artifact)."""

from __future__ import annotations

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

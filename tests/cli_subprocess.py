"""Run the real ``docflow`` command line in a subprocess, as a user does, and read its errors.

Against the integration harness's Prefect server when one is running (no temporary server
per call), from the repository root unless told otherwise. A command still running after
``STALL_S`` seconds writes every thread's stack to its stderr (``faulthandler``) and goes
on; the test run then reports those stacks as a warning, whether the test passes or not:
pytest's own ``faulthandler_timeout`` only shows the test's process, which is waiting
for this one.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from tests.conftest import REPO

#: Seconds after which a command's threads are dumped (the longest command takes about 15).
STALL_S = 45

#: The line ``faulthandler.dump_traceback_later`` writes before the stacks.
_DUMP_HEADER = re.compile(r"^Timeout \(\d+:\d\d:\d\d(\.\d+)?\)!$", re.M)


#: Seconds the command sleeps before it starts (0: none). The tests of the dump itself set
#: it past their tiny ``STALL_S``: faulthandler reads the threads' frames without the GIL,
#: which can crash a thread that runs Python meanwhile (about one run in four when the dump
#: fell amid the imports); a thread that waits, as a stalled command's do, is safe.
PAUSE_S = 0.0


def _watched(seconds: float) -> str:
    """Return the ``-c`` code of ``python -m flows`` with the stall dump armed first."""
    return (
        "import faulthandler, runpy, time\n"
        f"faulthandler.dump_traceback_later({seconds})\n"
        f"time.sleep({PAUSE_S})\n"
        "runpy.run_module('flows', run_name='__main__', alter_sys=True)\n"
    )


class StallWarning(UserWarning):
    """A command ran past ``STALL_S`` seconds: its threads' stacks at that moment."""


def stall_report(stderr: str) -> str | None:
    """Return the thread stacks ``faulthandler`` wrote into ``stderr`` on a timeout, or None."""
    found = _DUMP_HEADER.search(stderr)
    if found is None:
        return None
    lines = stderr[found.start() :].splitlines()
    kept = [lines[0]]
    for line in lines[1:]:  # the dump: thread headers, indented frames, blank lines
        if line and not (line.startswith(("Thread 0x", "Current thread 0x", "  "))):
            break
        kept.append(line)
    return "\n".join(kept).rstrip()


def docflow(
    *args: str, env: dict[str, str] | None = None, cwd: Path = REPO
) -> subprocess.CompletedProcess[str]:
    """Run ``python -m flows ARGS`` and return the finished process (text output).

    A command that runs past ``STALL_S`` seconds also raises a :class:`StallWarning`
    with its threads' stacks at that moment (shown in the test run's warnings summary).
    """
    full = {**os.environ, **(env or {})}
    try:
        from prefect.settings import PREFECT_API_URL

        if PREFECT_API_URL.value():
            full.setdefault("PREFECT_API_URL", str(PREFECT_API_URL.value()))
    except ImportError:
        pass
    proc = subprocess.run(
        [sys.executable, "-c", _watched(STALL_S), *args],
        capture_output=True,
        text=True,
        env=full,
        cwd=cwd,
        timeout=600,
        check=False,
    )
    stacks = stall_report(proc.stderr)
    if stacks:
        message = f"docflow {' '.join(args)} ran past {STALL_S} s:\n{stacks}"
        warnings.warn(message, StallWarning, stacklevel=2)  # names the test that ran it
    return proc


def one_error_line(proc: subprocess.CompletedProcess[str], *needles: str) -> str:
    """Return the one ``docflow: error:`` line of ``proc``, checking it names ``needles``.

    Also checks what a user must never see: a traceback, or Prefect's failure reports.
    """
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert " | ERROR " not in proc.stderr, proc.stderr[-3000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("docflow: error:")]
    assert len(errors) == 1, proc.stderr[-3000:]
    for needle in needles:
        assert needle in errors[0], errors[0]
    return errors[0]


def in_process(
    capsys: pytest.CaptureFixture[str],
    *args: str,
    env: dict[str, str] | None = None,
    monkeypatch: pytest.MonkeyPatch | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run ``docflow ARGS`` in this process; return it as :func:`docflow` does.

    For errors a command reports before any flow starts: the same exit code and the same
    lines on stdout and stderr as a new process, without paying for one.
    """
    from flows.cli import main

    for key, value in (env or {}).items():
        assert monkeypatch is not None, "env needs monkeypatch"
        monkeypatch.setenv(key, value)
    capsys.readouterr()
    code = main(list(args))
    out, err = capsys.readouterr()
    return subprocess.CompletedProcess(["docflow", *args], code, out, err)

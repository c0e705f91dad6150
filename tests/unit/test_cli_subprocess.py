"""The test helper that runs the command line in a subprocess reports where a stall waits."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests import cli_subprocess
from tests.cli_subprocess import StallWarning, docflow, stall_report

SLEEPER = (
    "import faulthandler, sys, time\n"
    "def waiting_here():\n"
    "    time.sleep(2)\n"
    "faulthandler.dump_traceback_later(0.2)\n"
    "waiting_here()\n"
    "print('after the dump', file=sys.stderr)\n"
)


def test_the_stall_report_is_the_dump_and_only_the_dump() -> None:
    err = subprocess.run(
        [sys.executable, "-c", SLEEPER], capture_output=True, text=True, check=True
    ).stderr
    report = stall_report(err)
    assert report is not None
    assert report.startswith("Timeout (0:00:00.200000)!")
    assert "in waiting_here" in report and "after the dump" not in report
    assert stall_report("usage: docflow ...\ndocflow: error: nothing\n") is None
    assert stall_report("docflow: error: Timeout (30 s) reading the server\n") is None


def test_a_command_past_the_limit_warns_with_its_stacks_and_still_runs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(cli_subprocess, "STALL_S", 0.01)  # dumped while it waits to start
    monkeypatch.setattr(cli_subprocess, "PAUSE_S", 0.5)
    with pytest.warns(StallWarning, match=r"docflow --help ran past 0.01 s:\nTimeout") as seen:
        proc = docflow("--help")
    assert proc.returncode == 0 and proc.stdout.startswith("Usage: docflow ")
    assert "File " in str(seen[0].message)  # frames, not just the header

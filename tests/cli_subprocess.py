"""Run the real ``docflow`` command line in a subprocess, as a user does, and read its errors.

Against the integration harness's Prefect server when one is running (no temporary server
per call), from the repository root unless told otherwise.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO


def docflow(
    *args: str, env: dict[str, str] | None = None, cwd: Path = REPO
) -> subprocess.CompletedProcess[str]:
    """Run ``python -m flows ARGS`` and return the finished process (text output)."""
    full = {**os.environ, **(env or {})}
    try:
        from prefect.settings import PREFECT_API_URL

        if PREFECT_API_URL.value():
            full.setdefault("PREFECT_API_URL", str(PREFECT_API_URL.value()))
    except ImportError:
        pass
    return subprocess.run(
        [sys.executable, "-m", "flows", *args],
        capture_output=True,
        text=True,
        env=full,
        cwd=cwd,
        timeout=600,
        check=False,
    )


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

"""The code stays lint- and type-clean (ruff with docstring rules, mypy --strict)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO

BIN = Path(sys.executable).parent


def run(*cmd: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, check=False, timeout=600)


def test_ruff_is_clean() -> None:
    proc = run(str(BIN / "ruff"), "check", "docflow", "tasks", "flows", "deployments", "tests")
    assert proc.returncode == 0, proc.stdout[-3000:]


def test_mypy_strict_is_clean() -> None:
    proc = run(str(BIN / "mypy"))
    assert proc.returncode == 0, proc.stdout[-3000:]

"""The docflow command exits through flows.cli.run: main's exit code, the collector frozen.

A process that ends with its objects frozen skips the interpreter's last collections over
them (about a second of every command, bench_commands); the exit handlers still run.
"""

from __future__ import annotations

import re
import subprocess
import sys
from importlib.metadata import entry_points

import pytest

from tests.conftest import REPO

#: Reports, from the exit handler that runs last, how many objects the collector froze.
PROBE = (
    "import atexit, gc, sys\n"
    "atexit.register(lambda: print('frozen', gc.get_freeze_count(), file=sys.stderr))\n"
)
BY_RUN = PROBE + "sys.argv = ['docflow', *sys.argv[1:]]\nfrom flows.cli import run\nrun()\n"
BY_MODULE = (
    PROBE + "import runpy\nsys.argv = ['flows', *sys.argv[1:]]\n"
    "runpy.run_module('flows', run_name='__main__', alter_sys=True)\n"
)


def frozen_at_exit(code: str, *argv: str) -> tuple[int, int]:
    """Run ``code`` with ``argv`` in a new process; return its exit code and frozen objects."""
    proc = subprocess.run(
        [sys.executable, "-c", code, *argv], capture_output=True, text=True, cwd=REPO
    )
    found = re.search(r"^frozen (\d+)$", proc.stderr, re.MULTILINE)
    assert found, proc.stderr[-2000:]
    return proc.returncode, int(found.group(1))


@pytest.mark.parametrize(("argv", "code"), [(["--help"], 0), (["no-such-command"], 2)])
def test_the_command_exits_with_mains_code_and_its_objects_frozen(
    argv: list[str], code: int
) -> None:
    returned, frozen = frozen_at_exit(BY_RUN, *argv)
    assert returned == code
    assert frozen > 10_000  # the imports' objects: out of the last collections' sight


def test_both_ways_of_starting_the_command_go_through_run() -> None:
    (script,) = [e for e in entry_points(group="console_scripts") if e.name == "docflow"]
    assert script.value == "flows.cli:run"
    returned, frozen = frozen_at_exit(BY_MODULE, "--help")  # python -m flows
    assert returned == 0 and frozen > 10_000


def test_main_itself_leaves_the_collector_alone() -> None:
    """Tests and scripts call main() and go on: their garbage must still be collected."""
    code = PROBE + "from flows.cli import main\nassert main(['--help']) == 0\n"
    assert frozen_at_exit(code) == (0, 0)

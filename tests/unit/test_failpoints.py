"""Unit tests for tasks/common/failpoints.py: named points that raise or kill -9 on the n-th hit."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from collections import Counter

import pytest

from tasks.common import failpoints
from tasks.common.failpoints import ENV, FailpointError, failpoint
from tests.conftest import REPO

POINT = "store:after-upsert"


@pytest.fixture(autouse=True)
def fresh_hits(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(failpoints, "_hits", Counter())
    monkeypatch.delenv(ENV, raising=False)


def test_unset_is_a_no_op() -> None:
    for _ in range(3):
        failpoint(POINT)
    assert failpoints._hits == Counter()


@pytest.mark.parametrize("spec", [f"{POINT}=raise", f"{POINT}=raise@1"])
def test_raise_action_raises_on_the_first_hit(monkeypatch: pytest.MonkeyPatch, spec: str) -> None:
    monkeypatch.setenv(ENV, spec)
    with pytest.raises(FailpointError, match=POINT):
        failpoint(POINT)


def test_raise_at_n_raises_only_on_the_nth_hit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV, f"{POINT}=raise@3")
    failpoint(POINT)
    failpoint(POINT)
    with pytest.raises(FailpointError):
        failpoint(POINT)
    failpoint(POINT)  # the 4th hit passes again
    assert failpoints._hits[POINT] == 4


@pytest.mark.parametrize(
    "spec", ["manifest:before-commit=raise", "store:after=raise", "store=raise", ""]
)
def test_another_name_is_a_no_op(monkeypatch: pytest.MonkeyPatch, spec: str) -> None:
    monkeypatch.setenv(ENV, spec)
    failpoint(POINT)
    failpoint(POINT)
    assert failpoints._hits[POINT] == 0


SCRIPT = textwrap.dedent(
    """
    from tasks.common.failpoints import failpoint
    for i in range(3):
        failpoint("store:after-upsert")
        print("passed", i + 1, flush=True)
    """
)


@pytest.mark.parametrize(
    ("spec", "returncode", "printed"),
    [
        pytest.param(POINT, -signal.SIGKILL, [], id="default-is-kill"),
        pytest.param(f"{POINT}=kill", -signal.SIGKILL, [], id="kill"),
        pytest.param(f"{POINT}=kill@2", -signal.SIGKILL, ["passed 1"], id="kill-at-2"),
        pytest.param(f"{POINT}@3", -signal.SIGKILL, ["passed 1", "passed 2"], id="default-at-3"),
        pytest.param(
            "other=kill", 0, ["passed 1", "passed 2", "passed 3"], id="other-name-survives"
        ),
    ],
)
def test_kill_action_sends_sigkill_to_the_process(
    spec: str, returncode: int, printed: list[str]
) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO), ENV: spec}
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == returncode, proc.stderr
    assert proc.stdout.splitlines() == printed


def test_a_hook_runs_at_its_point_only_inside_its_block() -> None:
    calls: list[str] = []
    with failpoints.on(POINT, lambda: calls.append("here")):
        failpoint(POINT)
        failpoint("somewhere:else")
    failpoint(POINT)
    assert calls == ["here"]


def test_enospc_raises_the_error_of_a_full_disk(monkeypatch: pytest.MonkeyPatch) -> None:
    import errno

    monkeypatch.setenv(ENV, f"{POINT}=enospc")
    with pytest.raises(OSError) as info:
        failpoint(POINT)
    assert info.value.errno == errno.ENOSPC


@pytest.mark.parametrize(
    ("nth", "fires"),
    [("", [1]), ("2", [2]), ("2+", [2, 3, 4]), ("*", [1, 2, 3, 4])],
    ids=["first", "second", "from-second", "every"],
)
def test_which_hits_fire(nth: str, fires: list[int], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV, f"{POINT}=raise" + (f"@{nth}" if nth else ""))
    fired = []
    for hit in range(1, 5):
        try:
            failpoint(POINT)
        except FailpointError:
            fired.append(hit)
    assert fired == fires

"""The temporary Prefect server a command starts early (flows/temporary_server.py)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from flows import temporary_server
from flows.cli import main


def test_a_usage_error_stops_the_server_its_command_started(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The error ends the command before its flow: its server must not outlive it in a
    process that goes on (``main`` called from Python), serving nobody until that exits."""
    from prefect.server.api.server import SubprocessASGIServer
    from prefect.settings import PREFECT_API_URL, temporary_settings

    monkeypatch.setattr(SubprocessASGIServer(), "running", False)  # none from an earlier test
    spawned: list[temporary_server.EarlyServer | None] = []

    def spawn() -> temporary_server.EarlyServer | None:
        spawned.append(temporary_server_spawn())
        return spawned[-1]

    temporary_server_spawn = temporary_server.spawn  # the real one, recorded
    monkeypatch.setattr(temporary_server, "spawn", spawn)
    data = str(tmp_path / "data")
    with temporary_settings(restore_defaults={PREFECT_API_URL}):
        assert main(["evaluate", "--dataset", str(tmp_path / "absent")]) == 2
        assert main(["ingest", "--data-dir", data, "--splitter", "nope"]) == 2
        assert main(["reingest", "--data-dir", data, "--splitter", "nope"]) == 2
        assert main(["backfill", "--start", "2024-01-01", "--end", "2024-01-02"]) == 2
    assert "--source-template" in capsys.readouterr().err  # the last one's reason
    assert len(spawned) == 4
    for early in spawned:
        assert early is not None and early.process.poll() is not None  # started, then stopped


def test_no_second_server_while_prefect_holds_an_earlier_commands(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """After a command's flow, Prefect keeps the server it adopted until the process exits:
    the next command in that process uses it instead of starting one to stop at once."""
    from prefect.server.api.server import SubprocessASGIServer
    from prefect.settings import PREFECT_API_URL, temporary_settings

    with temporary_settings(restore_defaults={PREFECT_API_URL}):
        monkeypatch.setattr(SubprocessASGIServer(), "running", False)
        assert not temporary_server.server_configured()
        monkeypatch.setattr(SubprocessASGIServer(), "running", True)  # as adopt() leaves it
        assert temporary_server.server_configured() and temporary_server.spawn() is None


@pytest.mark.skipif(not hasattr(os, "getpriority"), reason="no CPU priorities on this OS")
def test_the_server_runs_below_the_command(monkeypatch: pytest.MonkeyPatch) -> None:
    """The server takes the run's logs and events, which the run never waits for: it runs
    SERVER_NICE steps down, so that on a busy machine the run's own work goes first."""
    from prefect.server.api.server import SubprocessASGIServer
    from prefect.settings import PREFECT_API_URL, temporary_settings

    from tasks.common.priority import SERVER_NICE

    mine = os.getpriority(os.PRIO_PROCESS, 0)
    with temporary_settings(restore_defaults={PREFECT_API_URL}):
        monkeypatch.setattr(SubprocessASGIServer(), "running", False)  # none from an earlier test
        with temporary_server.started() as early:
            assert early is not None
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:  # it steps down once its interpreter is up
                nice = os.getpriority(os.PRIO_PROCESS, early.process.pid)
                if nice != mine or early.process.poll() is not None:
                    break
                time.sleep(0.05)
            assert nice == min(19, mine + SERVER_NICE)
    assert early.process.poll() is not None  # not adopted: stopped with the block

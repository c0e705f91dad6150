"""The temporary Prefect server a command starts early (flows/temporary_server.py)."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from flows import temporary_server
from flows.cli import main
from tests.conftest import REPO


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
def test_the_server_runs_below_the_command(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The server takes the run's logs and events, which the run never waits for: it runs
    SERVER_NICE steps down, so that on a busy machine the run's own work goes first. And
    its PREFECT_HOME is made with its parents (Prefect makes the last folder only)."""
    monkeypatch.setenv("PREFECT_HOME", str(tmp_path / "new" / "home"))
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
            assert (tmp_path / "new" / "home").is_dir()
    assert early.process.poll() is not None  # not adopted: stopped with the block


def test_the_server_gets_the_sqlite_batch_sizes_and_a_users_value_wins(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A command's temporary server runs with the recorder and persister batch sizes that
    keep SQLite from answering 503 after a busy run (flows/env.py), as every command sets
    them; a size the user exported is the one the server uses (the server's own answer)."""
    import httpx
    from prefect.server.api.server import SubprocessASGIServer
    from prefect.settings import PREFECT_API_URL, temporary_settings

    from flows.env import SQLITE_SERVER_BATCHES, apply_defaults

    for name in SQLITE_SERVER_BATCHES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PREFECT_SERVER_SERVICES_EVENT_PERSISTER_BATCH_SIZE", "50")
    apply_defaults()  # what main() does first
    with temporary_settings(restore_defaults={PREFECT_API_URL}):
        monkeypatch.setattr(SubprocessASGIServer(), "running", False)  # none from an earlier test
        with temporary_server.started() as early:
            assert early is not None
            api = f"http://127.0.0.1:{early.port}/api"
            assert temporary_server._answers(f"{api}/health", early, 90)
            services = httpx.get(f"{api}/admin/settings", timeout=30).json()["server"]["services"]
    recorder, persister = services["task_run_recorder"], services["event_persister"]
    assert (recorder["batch_size"], recorder["read_batch_size"]) == (200, 200)
    assert (persister["batch_size"], persister["read_batch_size"]) == (50, 100)


def _install_step() -> str:
    """Return the Python code of ``make install``'s database step, read from the Makefile."""
    makefile = (REPO / "Makefile").read_text(encoding="utf-8")
    install = makefile.split("\n$(STAMP):", 1)[1].split("\n\n", 1)[0]  # the install's recipe
    assert '$(BIN)/python -c "$(MAKE_DATABASE)"' in install, "the install has no database step"
    for line in makefile.splitlines():
        if line.startswith("MAKE_DATABASE :="):
            return line.split(":=", 1)[1].strip()
    raise AssertionError("the Makefile defines no MAKE_DATABASE")


def _run_install_step(home: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """Run the install's database step in a new process on ``home``, Prefect unset but ``env``."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    clean.update(env, PREFECT_HOME=str(home))
    return subprocess.run(
        [sys.executable, "-c", _install_step()],
        env=clean, cwd=REPO, capture_output=True, text=True, check=False,
    )  # fmt: skip


def _sqlite_heads() -> set[str]:
    """Return the head revisions of Prefect's SQLite migrations (what a server migrates to)."""
    import prefect.server.database
    from alembic.script import ScriptDirectory

    folder = Path(prefect.server.database.__file__).parent / "_migrations"
    script = ScriptDirectory(str(folder), version_locations=[str(folder / "versions" / "sqlite")])
    return set(script.get_heads())


@pytest.mark.slow
def test_the_install_leaves_the_temporary_servers_database_migrated(tmp_path: Path) -> None:
    """``make install``'s step, as the Makefile runs it: a new ``PREFECT_HOME`` gets Prefect's
    database at the head of its migrations, so a first command's server has none left to run."""
    done = _run_install_step(tmp_path / "new" / "home")  # its parent is made too
    assert done.returncode == 0, done.stderr[-2000:]
    with sqlite3.connect(tmp_path / "new" / "home" / "prefect.db") as db:
        versions = {row[0] for row in db.execute("SELECT version_num FROM alembic_version")}
        tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master")}
    assert versions == _sqlite_heads()
    assert {"flow_run", "task_run", "artifact"} <= tables


def test_the_install_step_leaves_a_configured_servers_database_alone(tmp_path: Path) -> None:
    done = _run_install_step(tmp_path / "home", PREFECT_API_URL="http://127.0.0.1:9/api")
    assert done.returncode == 0, done.stderr[-2000:]
    assert not (tmp_path / "home").exists()


def test_a_home_that_cannot_hold_the_database_is_one_line_not_a_failed_install(
    tmp_path: Path,
) -> None:
    (tmp_path / "a-file").write_text("not a folder\n")
    done = _run_install_step(tmp_path / "a-file" / "home")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    lines = [line for line in done.stderr.splitlines() if line.startswith("docflow: ")]
    assert len(lines) == 1 and "unable to open database file" in lines[0], done.stderr
    assert lines[0].startswith("docflow: Prefect's database was not made: OperationalError")

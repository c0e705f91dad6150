"""Start and stop the real servers the orchestration tests and benchmark need, on loopback.

A Prefect server (SQLite, with the batch settings that avoid 503s), a process worker and a
Chroma server, each a child process in its own session so that stopping it also stops what
it started (a worker's flow-run subprocesses). Ports are free loopback ports; every
``PREFECT_HOME`` is a temporary folder.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from tempfile import mkdtemp
from unittest import mock

from flows.env import SQLITE_SERVER_BATCHES
from tests.conftest import REPO, copy_sqlite

BIN = Path(sys.executable).parent

#: Server settings: keep SQLite from answering 503 (flows/env.py), no analytics, no UI.
SERVER_ENV = {
    **SQLITE_SERVER_BATCHES,
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "PREFECT_UI_ENABLED": "false",
}


def free_port() -> int:
    """Return a TCP port on 127.0.0.1 that is free right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Proc:
    """A child process started by a test, with its log file."""

    name: str
    popen: subprocess.Popen[bytes]
    log: Path

    def tail(self, n: int = 40) -> str:
        """Return the last ``n`` lines of the process's log."""
        lines = self.log.read_text(errors="replace").splitlines()
        return "\n".join(lines[-n:])

    def stop(self, timeout: float = 15.0) -> None:
        """SIGTERM the process's group, then SIGKILL it if it is still there after ``timeout``."""
        if self.popen.poll() is not None:
            return
        pgid = os.getpgid(self.popen.pid)
        os.killpg(pgid, signal.SIGTERM)
        try:
            self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(pgid, signal.SIGKILL)
            self.popen.wait(10)


def spawn(name: str, cmd: list[str], env: Mapping[str, str], log: Path, cwd: Path = REPO) -> Proc:
    """Start ``cmd`` in a new session with its output in ``log``."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("wb") as out:
        popen = subprocess.Popen(
            cmd,
            cwd=cwd,
            env=dict(env),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    return Proc(name, popen, log)


def wait_http(proc: Proc, url: str, timeout: float) -> float:
    """Wait until ``url`` answers 200; return the seconds it took.

    Raises:
        RuntimeError: If the process exits or ``timeout`` passes first (with its log tail).
    """
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < timeout:
        if proc.popen.poll() is not None:
            raise RuntimeError(f"{proc.name} exited ({proc.popen.returncode}):\n{proc.tail()}")
        try:
            with urllib.request.urlopen(url, timeout=2) as resp:
                if resp.status == 200:
                    return time.perf_counter() - t0
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(0.3)
    proc.stop()
    raise RuntimeError(f"{proc.name} not ready after {timeout:.0f} s:\n{proc.tail()}")


def base_env(home: Path, api_url: str | None = None) -> dict[str, str]:
    """Return this process's environment with a private PREFECT_HOME (and the server URL)."""
    env = {**os.environ, "PREFECT_HOME": str(home)}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    if api_url:
        env["PREFECT_API_URL"] = api_url
    else:
        env.pop("PREFECT_API_URL", None)
    return env


#: A copy of the test harness's database right after it started: migrated, and empty.
MIGRATED: list[Path] = []

#: The empty, migrated database ``make test`` makes before pytest starts (Makefile).
PRISTINE = Path(sys.prefix) / "prefect-pristine" / "prefect.db"


@contextmanager
def harness_on_pristine_database() -> Iterator[None]:
    """Have Prefect's test harness start its server on a copy of :data:`PRISTINE`.

    The harness makes a new database in ``mkdtemp()/prefect-test.db``; its 114 migrations
    took ~17 s per pytest worker on 2 cores, a copied one ~6 s. Without the file (pytest run
    straight after an install that predates the Makefile target) the harness migrates as
    before.
    """
    if not PRISTINE.is_file():
        yield
        return

    def seeded_mkdtemp() -> str:
        folder = mkdtemp()
        copy_sqlite(PRISTINE, Path(folder) / "prefect-test.db")
        return folder

    with mock.patch("prefect.testing.utilities.mkdtemp", seeded_mkdtemp):
        yield


def keep_migrated_database(dest: Path) -> None:
    """Copy the running harness's fresh database to ``dest`` for :func:`migrated_database`.

    Call once, as soon as the harness answers: later copies would carry the suite's runs.
    """
    from prefect.settings import PREFECT_SERVER_DATABASE_CONNECTION_URL

    url = str(PREFECT_SERVER_DATABASE_CONNECTION_URL.value() or "")
    source = Path(url.split(":///", 1)[1]) if url.startswith("sqlite") else None
    if source is None or not source.is_file():
        return
    copy_sqlite(source, dest)
    MIGRATED[:] = [dest]


def migrated_database(dest: Path) -> str | None:
    """Copy the harness's fresh database to ``dest`` and return its URL, else None.

    Its schema is already migrated: a server started on the copy answers in about 6 s
    instead of 10 (the migrations of a new database), which the suite pays once per server.
    None where the session has no harness (a server configured with PREFECT_API_URL): the
    caller's server then makes its own database.
    """
    if not MIGRATED:
        return None
    copy_sqlite(MIGRATED[0], dest)
    return f"sqlite+aiosqlite:///{dest}"


def start_prefect_server(
    home: Path, port: int, logs: Path, database: str | None = None
) -> tuple[Proc, str, float]:
    """Start ``prefect server start`` on 127.0.0.1:``port``; return it, its API URL, start s.

    ``database``: the server's database URL (:func:`migrated_database`); else a new one in
    ``home``.
    """
    env = {**base_env(home), **SERVER_ENV}
    if database:
        env["PREFECT_SERVER_DATABASE_CONNECTION_URL"] = database
    proc = spawn(
        "prefect server",
        [str(BIN / "prefect"), "server", "start", "--host", "127.0.0.1", "--port", str(port)],
        env,
        logs / "prefect-server.log",
    )
    api = f"http://127.0.0.1:{port}/api"
    return proc, api, wait_http(proc, f"{api}/health", 180)


def start_worker(home: Path, api_url: str, pool: str, logs: Path) -> Proc:
    """Start a process worker on ``pool`` polling every 2 s (SIGTERM stops it cleanly)."""
    env = {**base_env(home, api_url), "PREFECT_WORKER_QUERY_SECONDS": "2"}
    return spawn(
        "prefect worker",
        [
            "env",
            "--default-signal=INT",
            str(BIN / "prefect"),
            "worker",
            "start",
            "--pool",
            pool,
            "--name",
            "docflow-test-worker",
        ],
        env,
        logs / "prefect-worker.log",
    )


def start_chroma(path: Path, port: int, logs: Path) -> tuple[Proc, float]:
    """Start ``chroma run`` on 127.0.0.1:``port`` storing in ``path``; return it and start s."""
    env = {**os.environ, "ANONYMIZED_TELEMETRY": "False"}
    proc = spawn(
        "chroma",
        [
            str(BIN / "chroma"),
            "run",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--path",
            str(path),
        ],
        env,
        logs / "chroma.log",
    )
    return proc, wait_http(proc, f"http://127.0.0.1:{port}/api/v2/heartbeat", 60)


def flow_run_events(run_id: object, name: str) -> int:
    """Return how many events called ``name`` the server holds for flow run ``run_id``.

    The server's first 50 at most: enough for the heartbeats and states of one run.
    """
    from prefect.client.orchestration import get_client
    from prefect.events.filters import EventFilter, EventNameFilter, EventResourceFilter

    found = EventFilter(
        event=EventNameFilter(name=[name]),
        resource=EventResourceFilter(id=[f"prefect.flow-run.{run_id}"]),
    )
    with get_client(sync_client=True) as client:
        return len(client.read_events(filter=found, limit=50).events)

"""Start Prefect's temporary server first, so that it comes up while the command imports.

With no ``PREFECT_API_URL``, Prefect starts a temporary server (a uvicorn process) on a
flow's first API call and waits for it to answer. That process spends 4-5 s importing
Prefect's server and, on a new ``PREFECT_HOME``, 5-7 s more migrating its database
(``make install`` migrates it beforehand: :func:`make_database`); the command has by then
spent about as long importing Prefect, the flow and the model. Measured
on a 16-core H100 machine: 4.9 s of imports, then 11.9 s of server start, before the flow
began. Started before anything heavy is imported, the two proceed side by side.

The process serves Prefect's own server app (as ``SubprocessASGIServer`` runs it, same
environment, same options), handed to Prefect's process-wide server object before the flow
starts (:func:`adopt`): Prefect then uses it, logs it and stops it at exit exactly as if it
had started it. Where anything differs from that plan (a server is configured after all,
the port was taken, the process died), ours is stopped and Prefect starts its own as
before. Every command that runs a flow starts it so, for two more reasons than time: it
has a session of its own (a terminal's Ctrl-C reaches the command alone, and the server is
still there to record the interrupted run) and it ends with the command, ``kill -9``
included; Prefect's own is in the terminal's process group and outlives a killed command.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib.util
import logging
import os
import random
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

#: Prefect's range for a temporary server's port (``SubprocessASGIServer._port_range``).
PORTS = range(8000, 9000)


@dataclass
class EarlyServer:
    """A temporary server process started before Prefect was imported."""

    process: subprocess.Popen[bytes]
    port: int

    @property
    def adopted(self) -> bool:
        """Whether Prefect holds this process as its temporary server (then Prefect stops it)."""
        own = _prefects_own()
        return own is not None and own.server_process is self.process

    def stop(self) -> None:
        """Stop the process (Prefect's way: terminate, then kill after 5 s)."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def _prefects_own() -> Any:
    """Return Prefect's process-wide temporary server object, or None.

    None before Prefect's server module is imported: until then it holds no server.
    """
    module = sys.modules.get("prefect.server.api.server")
    return module.SubprocessASGIServer() if module else None


def server_configured() -> bool:
    """Return whether a Prefect server is (or may be) configured: then start nothing.

    Once Prefect is imported its settings say; before, the environment and the profiles
    file are read as text (importing Prefect to ask would cost the time this module saves).
    A profile that merely mentions ``PREFECT_API_URL`` counts: starting nothing early is
    always safe.
    """
    if "prefect" in sys.modules:
        from prefect.settings import PREFECT_API_URL

        own = _prefects_own()  # an earlier command's, adopted
        return bool(PREFECT_API_URL.value()) or bool(own and own.running)
    if os.environ.get("PREFECT_API_URL"):
        return True
    profiles = Path(os.environ.get("PREFECT_PROFILES_PATH") or prefect_home() / "profiles.toml")
    try:
        return "PREFECT_API_URL" in profiles.read_text(encoding="utf-8")
    except OSError:
        return False


def prefect_home() -> Path:
    """Return ``PREFECT_HOME`` as Prefect reads it (default ``~/.prefect``), unimported."""
    return Path(os.environ.get("PREFECT_HOME") or Path.home() / ".prefect").expanduser()


def _make_home() -> None:
    """Create ``PREFECT_HOME`` and its missing parents, before Prefect looks for it.

    Prefect creates the folder only: with its parent missing, the server found no database
    and the command ended on "Timed out while attempting to connect to ephemeral Prefect API
    server". A home that cannot be made is left to Prefect's own warning and error.
    """
    with contextlib.suppress(OSError):
        prefect_home().mkdir(parents=True, exist_ok=True)


def make_database() -> bool:
    """Create or upgrade the database a temporary server will use, now; return whether it did.

    ``make install`` calls it, as it makes the model's ONNX export: a new ``PREFECT_HOME``'s
    114 migrations (10-24 s on 2 cores, docs/performance.md) are then paid by the install,
    not by the first ``docflow ingest`` (about 23 s, 14 s on a migrated database:
    ``bench_first_run``). Rerun after an upgrade of Prefect (the install's pins), it
    migrates what the new version adds. Nothing where a server is configured: that server
    keeps its own database. A failure (a home that cannot be written) is one line on
    stderr, not the install's: the first run then tries again and says why in its own error.
    """
    if server_configured():
        return False
    _make_home()
    import asyncio

    from flows.env import apply_defaults
    from tasks.common.errors import describe

    apply_defaults()  # no telemetry, as every command runs
    from prefect.server.database import provide_database_interface

    try:
        asyncio.run(provide_database_interface().create_db())
    except Exception as exc:  # noqa: BLE001 - reported; the first run migrates it instead
        print(f"docflow: Prefect's database was not made: {describe(exc)}", file=sys.stderr)
        return False
    return True


def _free_port() -> int | None:
    """Return a free port of Prefect's range, as Prefect picks one; None after 10 tries."""
    for _ in range(10):
        port = random.choice(PORTS)
        with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    return None


#: The server's command line: uvicorn, once a thread watches the command's process (argv[1])
#: and the process has stepped down in CPU priority (tasks/common/priority.py).
_SERVE = (
    "import runpy, sys\n"
    "from tasks.common.lifetime import exit_with\n"
    "from tasks.common.priority import SERVER_NICE, lower_priority\n"
    "exit_with(int(sys.argv.pop(1)))\n"
    "lower_priority(SERVER_NICE)\n"
    "runpy.run_module('uvicorn', run_name='__main__', alter_sys=True)\n"
)


def spawn() -> EarlyServer | None:
    """Start Prefect's temporary server process now; None where none should be started.

    The server and its environment are those of ``SubprocessASGIServer._run_uvicorn_command``
    (Prefect 3.8): uvicorn serving ``prefect.server.api.server:create_app``, no UI, marked
    ephemeral. The process is stopped at exit (at the end of :func:`started`'s block, the
    way commands start it) unless Prefect adopts it (then Prefect stops it, after its own
    log and event workers have flushed). Unlike Prefect's, it runs in a
    session of its own, so that a terminal's Ctrl-C reaches this command alone, which then
    records the interrupted run on a live server and stops it (in the terminal's process
    group the server died first, and the command spent minutes retrying it); and it ends
    when this process does, ``kill -9`` included (:mod:`tasks.common.lifetime`). It runs
    :data:`~tasks.common.priority.SERVER_NICE` steps below the command: the run never waits
    for the logs and events it takes, so on a busy machine it yields the CPU to the run.
    """
    if server_configured():
        return None
    _make_home()
    spec = importlib.util.find_spec("prefect")  # finds the package without running it
    port = _free_port()
    if spec is None or spec.origin is None or port is None:
        return None
    site = str(Path(spec.origin).parent.parent)  # Prefect's --app-dir: its site-packages
    argv = [sys.executable, "-c", _SERVE, str(os.getpid()), "--app-dir", site, "--factory"]
    argv += ["prefect.server.api.server:create_app", "--host", "127.0.0.1", "--port", str(port)]
    argv += ["--log-level", "error", "--lifespan", "on"]
    env = {**os.environ, "PREFECT_UI_ENABLED": "0"}
    env.update({"PREFECT__SERVER_EPHEMERAL": "1", "PREFECT__SERVER_FINAL": "1"})
    early = EarlyServer(subprocess.Popen(argv, env=env, start_new_session=True), port)
    atexit.register(early.stop)
    return early


@contextlib.contextmanager
def started(wanted: bool = True) -> Iterator[EarlyServer | None]:
    """:func:`spawn` (where ``wanted``) for the block; stop the server at its end unless adopted.

    A command that ends before its flow (a usage error) stops its server at once: run in a
    process that goes on (``flows.cli.main`` called from Python, the tests), an unadopted
    server would otherwise serve nobody until that process exits.
    """
    early = spawn() if wanted else None
    try:
        yield early
    finally:
        if early is not None and not early.adopted:
            early.stop()


def adopt(early: EarlyServer | None) -> threading.Thread | None:
    """Hand ``early`` to Prefect and wait for it to answer, on a thread the caller joins.

    Call once Prefect is imported and before the flow starts; join the returned thread
    right before the flow (its wait overlaps whatever the caller imports meanwhile).
    Prefect's ``SubprocessASGIServer()`` (the object its clients ask for the temporary
    server) gets our process, port and ``running`` flag, as its ``start()`` would set them.
    Where a server is configured, Prefect already holds one, or ours does not answer,
    ours is stopped and the object reset: the flow's first API call starts one as usual.
    """
    if early is None:
        return None
    from prefect.server.api.server import SubprocessASGIServer, subprocess_server_logger
    from prefect.settings import (
        PREFECT_API_URL,
        PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS,
    )

    server = SubprocessASGIServer()
    if PREFECT_API_URL.value() or server.running:
        early.stop()
        return None
    server.port, server.server_process, server.running = early.port, early.process, True
    atexit.register(server.stop)  # runs before early.stop (registered later): Prefect's order
    subprocess_server_logger.info(
        "Starting temporary server on %s (before the flow's imports)", server.address
    )

    timeout = PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS.value()

    def wait() -> None:
        if _answers(f"{server.api_url}/health", early, timeout):
            return
        log.debug("the early temporary server did not answer: Prefect starts its own")
        early.stop()
        server.running, server.server_process, server.port = False, None, None

    thread = threading.Thread(target=wait, name="docflow-server-start", daemon=True)
    thread.start()
    return thread


def _answers(url: str, early: EarlyServer, timeout: float) -> bool:
    """Poll ``url`` until it answers 200 (True), the process ends or ``timeout`` passes."""
    import httpx

    deadline = time.monotonic() + timeout
    with httpx.Client() as client:
        while time.monotonic() < deadline and early.process.poll() is None:
            try:
                if client.get(url).status_code == 200:
                    return True
            except httpx.TransportError:
                pass
            time.sleep(0.1)
    return False

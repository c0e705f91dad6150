"""A ``chroma run`` server for a benchmark: started on a free local port, stopped after.

The benchmarks' own code, not the tests' (tests/servers.py needs pytest, which the GPU
check's pack leaves out), so the GPU check and ``bench_store`` run on a device machine too.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def chroma_server(path: Path, log: Path) -> Iterator[tuple[int, float]]:
    """Run ``chroma run`` on a free local port, storing in ``path``; yield (port, start s).

    ``chroma`` is the one beside this Python, else the one on the PATH (the GPU check's
    machine installs the packages into a folder of their own, its scripts in its ``bin``).
    """
    beside_python = Path(sys.executable).with_name("chroma")
    chroma = str(beside_python) if beside_python.exists() else shutil.which("chroma")
    if chroma is None:
        raise RuntimeError("no chroma command beside this Python nor on the PATH")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = int(probe.getsockname()[1])
    started = time.perf_counter()
    argv = [chroma, "run", "--host", "127.0.0.1", "--port", str(port), "--path", str(path)]
    env = {**os.environ, "ANONYMIZED_TELEMETRY": "False"}
    with log.open("wb") as sink:
        server = subprocess.Popen(argv, stdout=sink, stderr=subprocess.STDOUT, env=env)
    try:
        url = f"http://127.0.0.1:{port}/api/v2/heartbeat"
        while True:
            try:
                urllib.request.urlopen(url, timeout=1).close()
                break
            except OSError:
                if server.poll() is not None or time.perf_counter() - started > 60:
                    raise RuntimeError(f"chroma run did not start: see {log}") from None
                time.sleep(0.2)
        yield port, round(time.perf_counter() - started, 2)
    finally:
        server.terminate()
        try:
            server.wait(15)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()

"""Prefect's temporary server: time to its first answer on a new and on an existing database.

A command's flow cannot begin until the server answers, and on a new ``PREFECT_HOME`` the
server first creates Prefect's database (114 Alembic migrations). The server is started
exactly as a command starts it (:func:`flows.temporary_server.spawn`) and timed to its first
``/api/health`` answer, rounds alternating: a new home each time against one home made in
the first round. The existing database is the peer: what every later run pays.
"""

from __future__ import annotations

import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from flows.temporary_server import _answers, spawn

ROUNDS = int(os.environ.get("DOCFLOW_BENCH_ROUNDS", "3"))


def time_to_answer(home: Path) -> float:
    """Start the temporary server on ``home`` and return the seconds to its first answer."""
    os.environ["PREFECT_HOME"] = str(home)
    start = time.perf_counter()
    early = spawn()
    if early is None:
        raise RuntimeError("a Prefect server is configured: nothing to time")
    try:
        if not _answers(f"http://127.0.0.1:{early.port}/api/health", early, 120):
            raise RuntimeError("the temporary server did not answer within 120 s")
        return time.perf_counter() - start
    finally:
        early.stop()


def main() -> dict[str, Any]:
    """Time ``ROUNDS`` new and existing databases, alternating; print the medians."""
    before = os.environ.get("PREFECT_HOME")
    root = Path(tempfile.mkdtemp(prefix="docflow-server-start-"))
    existing = root / "existing"
    try:
        time_to_answer(existing)  # makes the existing database
        new, kept = [], []
        for i in range(ROUNDS):
            new.append(time_to_answer(root / f"new-{i}"))
            kept.append(time_to_answer(existing))
    finally:
        shutil.rmtree(root, ignore_errors=True)
        if before is None:
            os.environ.pop("PREFECT_HOME", None)
        else:
            os.environ["PREFECT_HOME"] = before
    result = {
        "new_database_s": [round(s, 2) for s in new],
        "existing_database_s": [round(s, 2) for s in kept],
        "ratio": round(statistics.median(new) / statistics.median(kept), 2),
    }
    print(
        f"server's first answer, median of {ROUNDS}: new database "
        f"{statistics.median(new):.2f} s, existing {statistics.median(kept):.2f} s "
        f"({result['ratio']}x)"
    )
    return result


if __name__ == "__main__":
    main()

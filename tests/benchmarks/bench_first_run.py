"""The README's first run: ``docflow ingest`` of ``data/raw``, on a new and a migrated home.

``make install`` migrates the database of Prefect's temporary server
(:func:`flows.temporary_server.make_database`), so that a first ``make ingest`` does not wait
for it. Each round runs the command as a user does (a new process, no Prefect server
configured, an empty data dir) on a new ``PREFECT_HOME`` and on one the install's step
migrated (untimed), alternating. The new home is the peer: a first run without the step.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from tests.conftest import REPO, SAMPLE

ROUNDS = int(os.environ.get("DOCFLOW_BENCH_ROUNDS", "2"))


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    env["PREFECT_HOME"] = str(home)
    return env


def first_run(root: Path, migrated: bool) -> float:
    """Time one first ``docflow ingest`` of the sample corpus under ``root``."""
    home = root / "home"
    if migrated:
        step = "from flows.temporary_server import make_database; assert make_database()"
        subprocess.run([sys.executable, "-c", step], env=_env(home), cwd=REPO, check=True)
    argv = [sys.executable, "-m", "flows", "ingest", "--source", str(SAMPLE)]
    start = time.perf_counter()
    subprocess.run(
        [*argv, "--data-dir", str(root / "data")],
        env=_env(home), cwd=REPO, check=True, capture_output=True,
    )  # fmt: skip
    return time.perf_counter() - start


def main() -> dict[str, Any]:
    """Time ``ROUNDS`` first runs on each kind of home, alternating; print the medians."""
    root = Path(tempfile.mkdtemp(prefix="docflow-first-run-"))
    new, migrated = [], []
    try:
        for i in range(ROUNDS):
            new.append(first_run(root / f"new-{i}", migrated=False))
            migrated.append(first_run(root / f"migrated-{i}", migrated=True))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    result = {
        "new_home_s": [round(s, 2) for s in new],
        "migrated_home_s": [round(s, 2) for s in migrated],
        "ratio": round(statistics.median(migrated) / statistics.median(new), 2),
    }
    print(
        f"first `docflow ingest` of data/raw, median of {ROUNDS}: new PREFECT_HOME "
        f"{statistics.median(new):.2f} s, migrated by the install {statistics.median(migrated):.2f}"
        f" s ({result['ratio']}x)"
    )
    return result


if __name__ == "__main__":
    main()

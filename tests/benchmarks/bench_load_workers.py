"""What starting load workers per batch cost a deployed run, and what reusing them saves.

Before a new load worker serves, multiprocessing runs the parent's main module again in it;
the main of a deployed run (``python -m prefect.engine``) imports Prefect. This runs the
same batches of the sample corpus (``data/raw``, two files a batch, 2 workers) in a process
whose main module imports ``prefect.engine``, twice, each in a fresh process: as docflow
loads them (a batch's workers serve the next batch), and with the idle workers stopped
after every batch (a fresh pair per batch, as before they were kept). It prints the wall
seconds per batch and the CPU seconds of the process's descendants while it loads (the
fork server and its workers, sampled every 20 ms by psutil: the last 20 ms of each
worker go unseen).

Run: ``python -m tests.benchmarks bench_load_workers``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path
from typing import Any

from tests.conftest import REPO, SAMPLE

FILES_PER_BATCH = 2
WORKERS = 2

#: The run's main module: imports what a deployed run's main imports, then loads batches.
MAIN = textwrap.dedent(
    """
    import prefect.engine  # noqa: F401 - the main module of a deployed run imports this
    import json, sys, threading, time
    from pathlib import Path
    import psutil
    from tasks.common.config import LoaderOptions
    from tasks.discover.files import discover
    from tasks.load import worker
    from tasks.load.batch import load_batch

    seen = {}  # pid -> CPU seconds when last seen

    def watch():
        me = psutil.Process()
        while True:
            for child in me.children(recursive=True):
                try:
                    times = child.cpu_times()
                except psutil.Error:
                    continue
                seen[child.pid] = times.user + times.system
            time.sleep(0.02)

    if __name__ == "__main__":
        root, per, workers, fresh = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
        threading.Thread(target=watch, daemon=True).start()
        files = discover(Path(root), ["*"])
        batches = [files[i : i + per] for i in range(0, len(files), per)]
        options = LoaderOptions(workers=workers)
        started = time.perf_counter()
        for batch in batches:
            load_batch(batch, options)
            if fresh == "1":
                worker.shutdown()  # no idle worker for the next batch: it starts its own
        seconds = time.perf_counter() - started
        time.sleep(0.1)  # a last look at the workers still alive
        cpu = sum(seen.values())
        print(json.dumps({"batches": len(batches), "seconds": seconds, "cpu_s": cpu}))
    """
)


def run(fresh: bool, script: Path) -> dict[str, Any]:
    """Run the batches in a new process; return its batches, seconds and workers' CPU seconds."""
    proc = subprocess.run(
        [sys.executable, str(script), str(SAMPLE), str(FILES_PER_BATCH), str(WORKERS)]
        + ["1" if fresh else "0"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    )
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    result["cpu_s"] = round(result["cpu_s"], 2)
    result["seconds_per_batch"] = round(result["seconds"] / result["batches"], 3)
    return result


def main() -> dict[str, Any]:
    """Run both ways (reused first, then a fresh pair per batch); print and return."""
    with tempfile.TemporaryDirectory(prefix="bench-load-workers-") as tmp:
        script = Path(tmp) / "deployed_main.py"
        script.write_text(MAIN, encoding="utf-8")
        result = {"reused": run(False, script), "fresh_per_batch": run(True, script)}
    reused, fresh = result["reused"], result["fresh_per_batch"]
    print(
        f"\n{reused['batches']} batches of {FILES_PER_BATCH} sample files, {WORKERS} load "
        "workers, main module importing prefect.engine (each way in a new process)"
    )
    for name, r in (("workers reused", reused), ("a fresh pair per batch", fresh)):
        print(
            f"  {name:<24} {r['seconds_per_batch']:.3f} s a batch, "
            f"fork server and workers {r['cpu_s']:.1f} CPU-s"
        )
    print(
        f"  reuse saves {fresh['seconds_per_batch'] - reused['seconds_per_batch']:.3f} s a "
        f"batch and {fresh['cpu_s'] - reused['cpu_s']:.1f} CPU-s over the run"
    )
    return result


if __name__ == "__main__":
    main()

"""Load throughput over ../shared/corpora: serial, guarded workers, both cores.

Every file of the shared corpora (all formats, defective ones included) is loaded into
``documents`` rows, as the load stage does. Modes:

- ``serial, in process``: ``workers=0``, no time guard;
- ``1 worker (guarded)``: the default: one worker process with the time and memory guards;
- ``2 workers, 1 batch``: one ``load_batch`` call spread over two worker processes;
- ``2-process pool, batches``: the run's batches (64 files / 8 MB) spread over a
  two-process pool, each loading its batch in process (as two concurrent load tasks would).

Each mode runs once to warm up (fork server, imports, page cache), then ``REPEATS`` times;
the best time is reported (the least disturbed by other work on the machine), with the
median beside it.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import Any

from tasks.common.config import LoaderOptions
from tasks.common.documents import FileRef
from tasks.discover.batches import BatchLimits, plan_batches
from tasks.discover.files import discover
from tasks.load import load_batch
from tests.conftest import CORPORA

REPEATS = 5


def _count_batch(files: Sequence[FileRef]) -> tuple[int, int]:
    rows = load_batch(files, LoaderOptions(workers=0))
    return len(rows), sum(r.status == "failed" for r in rows)


def _pool(files: Sequence[FileRef]) -> tuple[int, int]:
    batches = plan_batches(files, BatchLimits())
    with ProcessPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(_count_batch, batches))
    return sum(r for r, _ in results), sum(f for _, f in results)


def _batch(workers: int) -> Callable[[Sequence[FileRef]], tuple[int, int]]:
    def run(files: Sequence[FileRef]) -> tuple[int, int]:
        rows = load_batch(files, LoaderOptions(workers=workers))
        return len(rows), sum(r.status == "failed" for r in rows)

    return run


MODES: dict[str, Callable[[Sequence[FileRef]], tuple[int, int]]] = {
    "serial, in process": _batch(0),
    "1 worker (guarded)": _batch(1),
    "2 workers, 1 batch": _batch(2),
    "2-process pool, batches": _pool,
}


def main() -> dict[str, Any]:
    """Run every mode over the corpora, print a table and return the numbers."""
    files = discover(CORPORA, ["**/*"])
    total_bytes = sum(f.size for f in files)
    print(
        f"{len(files)} files, {total_bytes / 1e6:.2f} MB under {CORPORA} "
        f"({os.cpu_count()} CPUs), best and median of {REPEATS}",
        flush=True,
    )
    results: dict[str, Any] = {"files": len(files), "bytes": total_bytes, "modes": {}}
    header = (
        f"{'mode':<26}{'best s':>8}{'median s':>10}{'MB/s':>8}{'files/s':>9}"
        f"{'docs':>7}{'failed':>8}"
    )
    print(header)
    print("-" * len(header))
    for name, run in MODES.items():
        run(files)  # warm-up
        times = []
        for _ in range(REPEATS):
            started = time.perf_counter()
            rows, failed = run(files)
            times.append(time.perf_counter() - started)
        seconds = min(times)
        row = {
            "seconds": round(seconds, 3),
            "median_seconds": round(statistics.median(times), 3),
            "mb_per_s": round(total_bytes / 1e6 / seconds, 2),
            "files_per_s": round(len(files) / seconds, 1),
            "rows": rows,
            "failed": failed,
        }
        results["modes"][name] = row
        print(
            f"{name:<26}{seconds:>8.2f}{row['median_seconds']:>10.2f}{row['mb_per_s']:>8.2f}"
            f"{row['files_per_s']:>9.1f}"
            f"{rows - failed:>7}{failed:>8}",
            flush=True,
        )
    return results

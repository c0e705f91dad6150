"""Prefect edge of the load stage: load one batch, write its ``documents`` part."""

from __future__ import annotations

import time
from pathlib import Path

from prefect import get_run_logger, task

from tasks.common.config import LoaderOptions
from tasks.common.documents import FileRef
from tasks.common.tables import PartRef, documents_table, part_path, write_atomic
from tasks.load.batch import load_batch


@task(name="load")
def load_task(
    files: list[FileRef],
    data_dir: str,
    run_id: str,
    batch: int,
    options: LoaderOptions | None = None,
) -> PartRef:
    """Load a batch of files; failures are rows with a reason, never an exception."""
    started = time.perf_counter()
    rows = load_batch(files, options)
    loaded = time.perf_counter()
    path = write_atomic(
        documents_table(rows), part_path(Path(data_dir), "documents", run_id, batch)
    )
    written = time.perf_counter()
    failures = tuple((r.source, r.error or "") for r in rows if r.status == "failed")
    planned = {f.source: f.sha256 for f in files}
    changed = tuple(
        sorted({r.source for r in rows if r.status == "loaded" and r.sha256 != planned[r.source]})
    )
    get_run_logger().info(
        "batch %d: %d files -> %d documents, %d failed",
        batch,
        len(files),
        len(rows) - len(failures),
        len(failures),
    )
    return PartRef(
        "documents",
        str(path),
        len(rows) - len(failures),
        failures,
        changed=changed,
        seconds=loaded - started,
        table_seconds=written - loaded,
    )

"""Prefect edge of the split stage: split one batch, write its ``chunks`` part."""

from __future__ import annotations

from pathlib import Path

from prefect import get_run_logger, task

from tasks.common.config import IngestParams
from tasks.common.tables import PartRef, part_path
from tasks.split.factory import build_splitter
from tasks.split.pool import split_batch


@task(name="split")
def split_task(documents: PartRef, params: IngestParams, run_id: str, batch: int) -> PartRef:
    """Split the documents of a batch into chunks (in a worker process: tasks/split/pool.py)."""
    path = part_path(params.data_path, "chunks", run_id, batch)
    result = split_batch(
        Path(documents.path),
        path,
        build_splitter(params),
        params.loaders.process_count(),
        reuse=run_id,  # the run's splitter is pickled once
    )
    get_run_logger().info(
        "batch %d: %d documents -> %d chunks", batch, documents.rows, result.chunks
    )
    return PartRef(
        "chunks",
        str(path),
        result.chunks,
        seconds=result.seconds,
        table_seconds=result.table_seconds,
    )

"""Prefect edge of the split stage: split one batch, write its ``chunks`` part."""

from __future__ import annotations

import time
from pathlib import Path

from prefect import get_run_logger, task

from tasks.config import IngestParams
from tasks.split.factory import build_splitter, split_rows
from tasks.tables import PartRef, chunks_table, part_path, read_documents, write_atomic


@task(name="split")
def split_task(documents: PartRef, params: IngestParams, run_id: str, batch: int) -> PartRef:
    """Split the documents of a batch into chunks."""
    started = time.perf_counter()
    rows = read_documents(Path(documents.path))
    read = time.perf_counter()
    chunks = split_rows(rows, build_splitter(params))
    split = time.perf_counter()
    path = write_atomic(chunks_table(chunks), part_path(params.data_path, "chunks", run_id, batch))
    written = time.perf_counter()
    get_run_logger().info("batch %d: %d documents -> %d chunks", batch, documents.rows, len(chunks))
    return PartRef(
        "chunks",
        str(path),
        len(chunks),
        seconds=split - read,
        table_seconds=(read - started) + (written - split),
    )

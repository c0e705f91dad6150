"""The ingest flow: discover → load → split → embed → store, one task per stage per batch.

Tasks hand each other table-part references, not rows, so the same flow runs on a
distributed task runner. Loading and splitting of later batches run while an earlier
batch embeds; embedding and storing keep batch order (each waits for the previous batch).
"""

from __future__ import annotations

import time
from typing import Any

from prefect import flow
from prefect.futures import PrefectFuture
from prefect.task_runners import ThreadPoolTaskRunner

from flows import progress
from tasks.config import IngestParams
from tasks.discover import discover_task
from tasks.embed import embed_task, model_dimension_task
from tasks.load import default_includes
from tasks.load.task import load_task
from tasks.split.task import split_task
from tasks.store import open_store_task, store_task
from tasks.summary import RunSummary, new_run_id
from tasks.tables import PartRef, write_run


# Prefect's stubs type futures-as-arguments and the thread runner loosely: hence the ignores.
@flow(name="ingest", task_runner=ThreadPoolTaskRunner(max_workers=4), log_prints=False)  # type: ignore[arg-type]
def ingest(params: IngestParams | None = None) -> dict[str, Any]:
    """Ingest the documents under ``params.source`` into the Chroma collection."""
    params = params or IngestParams()
    started = time.perf_counter()
    summary = RunSummary(run_id=new_run_id(), collection=params.collection)
    data_dir = str(params.data_path)

    dimension = model_dimension_task(params.model)
    open_store_task(data_dir, params.collection, params.model, dimension)
    batches = discover_task(
        params.source,
        params.include or default_includes(),
        params.exclude,
        params.include_hidden,
        params.batch_files,
        params.batch_bytes,
    )

    stages: list[tuple[PrefectFuture[PartRef], PrefectFuture[PartRef], PrefectFuture[int]]] = []
    previous: list[PrefectFuture[Any]] = []
    for batch, files in enumerate(batches):
        loaded = load_task.submit(files, data_dir, summary.run_id, batch)
        chunks = split_task.submit(  # type: ignore[call-overload]
            loaded, params, summary.run_id, batch
        )
        vectors = embed_task.submit(  # type: ignore[call-overload]
            chunks,
            params.model,
            params.embed_batch_size,
            data_dir,
            summary.run_id,
            batch,
            wait_for=previous[:1],
        )
        stored = store_task.submit(  # type: ignore[call-overload]
            chunks, vectors, data_dir, params.collection, params.model, wait_for=previous[1:]
        )
        previous = [vectors, stored]
        stages.append((loaded, vectors, stored))

    summary.files_seen = sum(len(files) for files in batches)
    for done, (loaded, vectors, stored) in enumerate(stages, start=1):
        docs = loaded.result()
        summary.add_failures(docs.failures)
        summary.documents += docs.rows
        summary.chunks_embedded += vectors.result().rows
        summary.chunks_written += stored.result()
        progress.report(done, len(stages))
    summary.files_new = summary.files_seen - summary.files_failed
    summary.seconds = round(time.perf_counter() - started, 3)
    write_run(params.data_path, summary.run_id, summary.to_dict())
    return summary.to_dict()

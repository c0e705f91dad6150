"""Flows that act on a whole collection: reingest (zero downtime), restore, clear.

Each holds the collection's lock (and its Prefect concurrency slot when the store is a
Chroma server), like ingest, so it never interleaves with another run.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger

from flows import artifacts, narrative, runtime
from flows.guard import collection_guard
from flows.ingest import make_context, new_summary, run_ingest
from tasks.common.config import ClearParams, CollectionParams, IngestParams
from tasks.common.errors import ConfigError
from tasks.common.failpoints import failpoint
from tasks.common.names import version_name
from tasks.common.runs import new_run_id
from tasks.common.tables import use_tables_url
from tasks.discover.partitions import partition_params
from tasks.discover.plan import source_problem
from tasks.index.admin import (
    clear_task,
    drop_versions_task,
    restore_task,
    switch_task,
)
from tasks.index.manifest import Manifest
from tasks.index.store import use_chroma_server


@flow(name="reingest", task_runner=runtime.task_runner())
def reingest(params: IngestParams | None = None) -> dict[str, Any]:
    """Rebuild the collection from scratch into a new version, then switch to it.

    Queries keep answering from the current version until the new one is complete. If the
    build fails, the current version keeps serving and the next reingest starts clean; a
    missing or empty source folder (a share not mounted) is refused before anything starts.
    With a ``source_template``, every partition is rebuilt.
    """
    params = use_chroma_server(params or IngestParams())
    runtime.refuse_unguarded_main(params.loaders.process_count())
    params = partition_params(params, None) if params.source_template else params
    problem = source_problem(Path(params.source))
    if problem:  # an empty new version would replace the serving one
        raise ConfigError(f"cannot reingest: {problem}")
    host, port = params.chroma_host, params.chroma_port
    with collection_guard(params.data_path, params.collection, params.lock_timeout, host):
        use_tables_url(params.data_path, params.tables_url)
        with Manifest.open(params.data_path) as manifest:
            serving = manifest.physical(params.collection)
        drop_versions_task(str(params.data_path), params.collection, serving, host, port)
        run_id = new_run_id()
        physical = version_name(params.collection, run_id)
        ctx = make_context(params, run_id, physical)
        summary = new_summary(params, ctx, "reingest")
        with artifacts.published(summary, ctx.data_dir):  # failed runs publish too
            with artifacts.track_progress(params.collection):
                run_ingest(params, ctx, summary, full_refresh=True)
            failpoint("reingest:before-switch")
            switch_task(ctx.data_dir, params.collection, physical, run_id)
            drop_versions_task(ctx.data_dir, params.collection, physical, host, port)
    narrative.finished(get_run_logger(), summary)
    return summary.to_dict()


@flow(name="restore")
def restore_flow(params: CollectionParams | None = None) -> dict[str, Any]:
    """Rebuild the collection from the Parquet tables alone (no loading, no embedding)."""
    p = use_chroma_server(params or CollectionParams())
    with collection_guard(p.data_path, p.collection, p.lock_timeout, p.chroma_host):
        use_tables_url(p.data_path, p.tables_url)
        result = restore_task(p.data_dir, p.collection, new_run_id(), p.chroma_host, p.chroma_port)
    return dataclasses.asdict(result)


@flow(name="clear")
def clear_flow(params: ClearParams | None = None) -> dict[str, Any]:
    """Drop the collection, its tables and manifest rows (and the cache if asked)."""
    p = use_chroma_server(params or ClearParams())
    with collection_guard(p.data_path, p.collection, p.lock_timeout, p.chroma_host):
        use_tables_url(p.data_path, p.tables_url)
        result = clear_task(p.data_dir, p.collection, p.drop_cache, p.chroma_host, p.chroma_port)
    return dataclasses.asdict(result)

"""The ingest flow: plan → (load → split → embed → store) per batch → delete removed files.

Tasks hand each other table-part references, not rows, so the same flow runs on a
distributed task runner. Loading and splitting of later batches run while an earlier
batch embeds; embedding and storing keep batch order (each waits for the previous batch).
Store writes run in the flow's own process, whatever the runner: an embedded Chroma store
must have a single writing process (another process's writes go missing from its index).
Only one run writes a collection at a time (a lock on the data dir, and a Prefect
concurrency slot when it writes a Chroma server; see flows/guard.py). Every run publishes
artifacts.
"""

from __future__ import annotations

import datetime as dt
import time
from contextlib import suppress
from typing import Any

from prefect import flow, get_run_logger
from prefect.futures import PrefectFuture

from flows import artifacts, narrative, progress, runtime
from flows.guard import collection_guard
from tasks.common import lifetime, memory
from tasks.common.config import IngestParams
from tasks.common.errors import StateError, describe
from tasks.common.runs import RunContext, RunSummary, new_run_id
from tasks.common.tables import PartRef, mark_interrupted, use_tables_url, write_run
from tasks.discover.files import root_id
from tasks.discover.plan import plan_task
from tasks.embed.task import embed_task
from tasks.index import held
from tasks.index.consistency import open_index_task
from tasks.index.manifest import Manifest
from tasks.index.store import use_chroma_server
from tasks.index.sync import delete_task, move_root_task, record_fingerprint_task, store_task
from tasks.load.task import load_task
from tasks.split.task import split_task

Stage = tuple[PrefectFuture[PartRef], PrefectFuture[PartRef], PrefectFuture[PartRef]]


def make_context(params: IngestParams, run_id: str, physical: str) -> RunContext:
    """Return the context every task of this run receives."""
    return RunContext(
        run_id=run_id,
        data_dir=str(params.data_path),
        collection=params.collection,
        physical=physical,
        root=root_id(params.source),
        fingerprint=params.content_fingerprint(),
        model=params.model,
        chroma_host=params.chroma_host,
        chroma_port=params.chroma_port,
        embed_backend=params.embed_backend,
    )


def new_summary(params: IngestParams, ctx: RunContext, mode: str) -> RunSummary:
    """Return the summary of a run that starts now (call with the collection's lock held)."""
    return RunSummary(
        run_id=ctx.run_id,
        collection=params.collection,
        mode=mode,
        physical=ctx.physical,
        started_at=dt.datetime.now(dt.UTC).isoformat(),
    )


def run_ingest(
    params: IngestParams, ctx: RunContext, summary: RunSummary, full_refresh: bool
) -> RunSummary:
    """Run the stages of one ingest into ``ctx.physical`` (call inside a flow, lock held).

    ``summary`` is filled in as the run goes (also when it fails, for the artifacts).
    """
    started = time.perf_counter()
    memory.limit_malloc_arenas()  # the run's threads share a few arenas (see there)
    # Beyond the summary, the runs row records what a restore needs to rebuild the
    # manifest from the tables alone: the source root, the content fingerprint and the
    # sources the run deleted (see tasks/index/admin.py).
    extra: dict[str, Any] = {
        "root": ctx.root,
        "content_fingerprint": ctx.fingerprint,
        "deleted_sources": [],
    }
    summary.warnings.extend(mark_interrupted(params.data_path, params.collection, ctx.run_id))
    write_run(params.data_path, ctx.run_id, summary.to_dict() | extra)
    try:
        # a Ctrl-C or failure: the work in flight gives up; the store tasks share their
        # open index and manifest (tasks/index/held.py), closed before the run is recorded;
        # the collector leaves the objects from before the run alone (tasks/common/memory.py);
        # the embedded store's calls run in a process of its own (tasks/index/store_process.py)
        with (
            lifetime.stoppable(),
            runtime.store_in_its_process(params),
            held.holding(),
            memory.heap_frozen(),
        ):
            extra["deleted_sources"] = _stages(params, ctx, summary, full_refresh)
    except BaseException as exc:
        summary.status = "failed"
        summary.seconds = round(time.perf_counter() - started, 3)
        extra["error"] = describe(exc)
        narrative.stopped(get_run_logger(), summary, extra["error"])
        # the run's own error is the one to report; if even its record cannot be written
        # (a full disk), the next run of the collection marks it interrupted
        with suppress(StateError):
            write_run(params.data_path, ctx.run_id, summary.to_dict() | extra)
        raise
    summary.status = "completed"
    summary.seconds = round(time.perf_counter() - started, 3)
    write_run(params.data_path, ctx.run_id, summary.to_dict() | extra)
    return summary


def _stages(
    params: IngestParams, ctx: RunContext, summary: RunSummary, full_refresh: bool
) -> list[str]:
    """Run the batches and deletions; return the sources deleted from the collection."""
    log = get_run_logger()
    runtime.start_workers_for_a_first_ingest(params, ctx.physical)
    summary.warnings.extend(runtime.runner_warnings())  # Dask workers' load guards
    summary.warnings.extend(open_index_task(ctx).warnings)
    planning = time.perf_counter()
    plan = plan_task(params, ctx.physical, full_refresh)
    summary.add_stage("plan", time.perf_counter() - planning)
    summary.files_seen, summary.files_new = plan.files_seen, plan.new
    summary.files_changed, summary.files_unchanged = plan.changed, plan.unchanged
    summary.files_retried, summary.files_deleted = plan.retried, len(plan.deleted)
    summary.warnings.extend(plan.warnings)
    narrative.planned(log, plan)

    stages: list[Stage] = []
    previous: list[PrefectFuture[Any]] = []
    for batch, files in enumerate(plan.batches):
        loaded = load_task.submit(files, ctx.data_dir, ctx.run_id, batch, params.loaders)
        chunks = split_task.submit(loaded, params, ctx.run_id, batch)  # type: ignore[call-overload]
        vectors = embed_task.submit(  # type: ignore[call-overload]
            ctx, chunks, params.embed_batch_size, batch, wait_for=previous
        )
        previous = [vectors]
        stages.append((loaded, chunks, vectors))

    for done, (loaded, chunks, vectors) in enumerate(stages, start=1):
        lifetime.check_stopping()  # a backfill that stops stops its partitions' runs
        # results first: a future that has given its result holds its final state; handed
        # one that has not, Prefect asks its server for the state (~25 ms a future, on the
        # store's chain) to link the store to the run that made the part. Each waited for
        # in steps, so that a Ctrl-C taken by another thread reaches this one meanwhile.
        for future in (loaded, chunks, vectors):
            lifetime.settle(future)
        docs, split, embedded = loaded.result(), chunks.result(), vectors.result()
        synced = store_task(ctx, loaded, chunks, vectors)  # type: ignore[call-overload]
        summary.add_batch(docs, split, embedded, synced)
        narrative.stored(log, done, len(stages), docs, embedded, synced)
        memory.release_memory()  # what the batch freed goes back, not into arenas
        progress.report(done, len(stages))
    if plan.deleted:
        summary.chunks_deleted += delete_task(ctx, plan.deleted).deleted
    if plan.rerooted:
        move_root_task(ctx, list(plan.rerooted))
    record_fingerprint_task(
        ctx.data_dir, ctx.physical, ctx.fingerprint, ctx.chroma_host, ctx.chroma_port
    )
    narrative.noticed(log, summary.warnings)
    return list(plan.deleted)


# Prefect's stubs type futures-as-arguments and task runners loosely: hence the ignores.
@flow(name="ingest", task_runner=runtime.task_runner(), log_prints=False)
def ingest(params: IngestParams | None = None) -> dict[str, Any]:
    """Bring the collection up to date with the documents under ``params.source``.

    Incremental: unchanged files are skipped, changed files re-split and their stale chunks
    deleted, deleted files removed. ``full_refresh`` reprocesses every file. With a
    ``source_template``, the run ingests one date partition (see tasks/discover/partitions.py).
    """
    params = use_chroma_server(runtime.for_this_run(params or IngestParams()))
    runtime.refuse_unguarded_main(params.loaders.process_count())
    runtime.warm_up_model(params.model, params.embed_backend)  # on a GPU: import while we plan
    guard = collection_guard(
        params.data_path, params.collection, params.lock_timeout, params.chroma_host
    )
    with guard:
        use_tables_url(params.data_path, params.tables_url)
        with Manifest.open(params.data_path) as manifest:
            physical = manifest.physical(params.collection)
        ctx = make_context(params, new_run_id(), physical)
        mode = "full-refresh" if params.full_refresh else "incremental"
        summary = new_summary(params, ctx, mode)
        with artifacts.published(summary, ctx.data_dir):  # failed runs publish too
            with artifacts.track_progress(params.collection):
                run_ingest(params, ctx, summary, params.full_refresh)
    narrative.finished(get_run_logger(), summary)
    return summary.to_dict()

"""The backfill flow: ingest every date partition of a range, one subflow run per day.

Each partition is an ordinary ingest subflow scoped to its folder (tasks/discover/partitions.py),
so re-running a range is idempotent: partitions already in the index are unchanged. At most
``max_parallel`` partition runs are in flight at once; runs into one collection still take
its lock in turn.
"""

from __future__ import annotations

import contextvars
import datetime as dt
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from prefect import flow

from flows import artifacts, runtime
from flows.ingest import ingest
from tasks.common import lifetime
from tasks.common.config import BackfillParams, IngestParams
from tasks.common.errors import DocflowError
from tasks.discover.partitions import partition_dates


class BackfillError(DocflowError):
    """One or more partitions of a backfill failed (the others are in the index)."""


def _ingest_partition(params: IngestParams, day: dt.date) -> dict[str, Any]:
    """Run the ingest subflow of one partition; its run is named after the day.

    Without Prefect's heartbeats unless a setting asks for them, as on the command line
    (``runtime.heartbeats_when_asked``): a deployed backfill's worker process keeps
    Prefect's default, and each partition would end up to 1 s late joining the thread.
    """
    run = ingest.with_options(
        flow_run_name=f"ingest-{day.isoformat()}", task_runner=runtime.task_runner()
    )
    with runtime.heartbeats_when_asked():
        summary: dict[str, Any] = run(params.model_copy(update={"partition_date": day}))
    return summary


def _row(day: dt.date, future: Future[dict[str, Any]]) -> dict[str, Any]:
    error = lifetime.outcome(future)  # a Ctrl-C reaches this thread while it waits
    if error is not None:
        return {"date": day.isoformat(), "status": "failed", "error": f"{error}"[:300]}
    s = future.result()
    return {
        "date": day.isoformat(),
        "status": s["status"],
        "run_id": s["run_id"],
        "files_seen": s["files_seen"],
        "files_new": s["files_new"],
        "files_changed": s["files_changed"],
        "files_failed": s["files_failed"],
        "chunks_written": s["chunks_written"],
        "chunks_deleted": s["chunks_deleted"],
        "warnings": s["warnings"],
    }


@flow(name="backfill")
def backfill(params: BackfillParams | None = None) -> dict[str, Any]:
    """Ingest the partitions from ``start`` to ``end`` of ``ingest.source_template``.

    With no dates, the partition of the run's scheduled date. Fails (after running every
    partition) if any partition failed; re-running retries only what is not yet done.
    """
    p = params or BackfillParams()
    runtime.refuse_unguarded_main(p.ingest.loaders.process_count())
    start = p.start or runtime.scheduled_date()
    days = partition_dates(start, p.end or start)
    with ThreadPoolExecutor(p.max_parallel, thread_name_prefix="partition") as pool:
        # a Ctrl-C or SIGTERM reaches this thread only: the partitions not started are
        # cancelled and the running ones stop with this block, else the pool's exit would
        # wait for every remaining day
        with lifetime.stoppable():
            # each subflow runs in a copy of this context, so Prefect records it as our child
            futures = [
                (day, pool.submit(contextvars.copy_context().run, _ingest_partition, p.ingest, day))
                for day in days
            ]
            try:
                rows = [_row(day, future) for day, future in futures]
            except BaseException:
                for _, future in futures:
                    future.cancel()
                raise
    artifacts.publish_backfill(p.ingest.collection, rows)
    failed = [r["date"] for r in rows if r["status"] != "completed"]
    if failed:
        raise BackfillError(f"{len(failed)} of {len(rows)} partitions failed: {', '.join(failed)}")
    return {"collection": p.ingest.collection, "partitions": rows}

"""Artifacts every ingest run publishes: a summary, its failures, chunk sizes, progress.

A run that fails publishes them too (status "failed", with the error in the summary),
so the Prefect UI shows how far it got and which files failed before it stopped.

Keys are ``ingest-<kind>-<collection slug>`` (lowercase letters, digits and dashes), so
the Prefect UI keeps one history per collection; each artifact is also linked to its flow
run. The data comes from the run summary and the run's chunk table (``tasks/common/stats.py``).
"""

from __future__ import annotations

import contextvars
import logging
import re
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from uuid import UUID

from prefect.artifacts import (
    create_markdown_artifact,
    create_progress_artifact,
    create_table_artifact,
    update_progress_artifact,
)

from flows import progress
from tasks.common.errors import describe
from tasks.common.runs import RunSummary
from tasks.common.stats import Histogram, chunk_sizes_task, run_histogram

log = logging.getLogger(__name__)

#: Width in characters of the longest bar of the chunk-size histogram.
BAR_WIDTH = 30


def artifact_key(kind: str, collection: str) -> str:
    """Return the artifact key of ``kind`` for ``collection`` (lowercase, digits, dashes)."""
    slug = re.sub(r"[^a-z0-9]+", "-", collection.lower()).strip("-") or "collection"
    return f"{kind}-{slug}"


class ProgressArtifact:
    """A progress artifact that follows the batches of one run (a progress listener).

    Each update is an HTTP call to Prefect's API, made by a thread of its own: called from
    the flow, between one batch's store and the next, it held the store chain (about 30
    ms a batch on a local server, a round trip to a remote one). The thread sends the
    latest value only, and an update that fails is logged, not the run's failure.
    """

    def __init__(self, key: str, description: str):
        """Create the artifact at 0 % and start the thread that updates it."""
        created = create_progress_artifact(0.0, key=key, description=description)
        self.id: UUID = created  # type: ignore[assignment]  # sync call: a UUID, not a coroutine
        self._latest: float | None = None
        self._closed = False
        self._wake = threading.Condition()
        # in this context: the thread must reach the same Prefect API (settings are contextvars)
        run = contextvars.copy_context().run
        self._thread = threading.Thread(target=run, args=(self._send,), daemon=True)
        self._thread.start()

    def __call__(self, done: int, total: int) -> None:
        """Set the progress to ``done`` of ``total`` batches."""
        self.set(round(100.0 * done / max(total, 1), 1))

    def set(self, percent: float) -> None:
        """Have the thread send ``percent`` (replacing a value not sent yet)."""
        with self._wake:
            self._latest = percent
            self._wake.notify()

    def close(self) -> None:
        """Send what is left and stop the thread."""
        with self._wake:
            self._closed = True
            self._wake.notify()
        self._thread.join()

    def _send(self) -> None:
        while True:
            with self._wake:
                while self._latest is None and not self._closed:
                    self._wake.wait()
                percent, self._latest = self._latest, None
            if percent is None:  # closed, nothing left to send
                return
            try:
                update_progress_artifact(self.id, progress=percent)
            except Exception as exc:  # noqa: BLE001 - a progress bar never fails a run
                log.warning("could not update the progress artifact: %s", describe(exc))


@contextmanager
def track_progress(collection: str) -> Iterator[ProgressArtifact]:
    """Publish the batch progress of the run inside the block; 100 % when it completes."""
    bar = ProgressArtifact(
        artifact_key("ingest-progress", collection), f"Batches stored into {collection}"
    )
    completed = False
    try:
        with progress.listen(bar):
            yield bar
        completed = True
    finally:
        if completed:
            bar.set(100.0)
        bar.close()


def summary_rows(summary: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Return the run summary as (field, value) rows, failures left out."""
    return [{"field": k, "value": v} for k, v in summary.items() if k != "failures"]


def histogram_markdown(hist: Histogram, run_id: str) -> str:
    """Render a chunk-size histogram as a Markdown table with bars."""
    head = f"### Chunk sizes (characters), run `{run_id}`\n\n"
    if hist.total == 0:
        return head + "No chunks were written by this run.\n"
    top = max(hist.counts) or 1
    lines = [
        head,
        f"{hist.total} chunks: min {hist.minimum}, median {hist.median:g}, "
        f"mean {hist.mean:g}, max {hist.maximum}\n\n",
        "| characters | chunks | |\n|---:|---:|:---|\n",
    ]
    for lo, hi, count in zip(hist.edges, hist.edges[1:], hist.counts, strict=False):
        bar = "█" * round(BAR_WIDTH * count / top)
        lines.append(f"| {lo}–{hi - 1} | {count} | {bar} |\n")
    return "".join(lines)


def publish_run(summary: Mapping[str, Any], hist: Histogram, error: str | None = None) -> None:
    """Publish the summary table, the failures table and the chunk-size histogram.

    ``error``: why the run failed (a row of the summary table).
    """
    collection, run_id = str(summary["collection"]), str(summary["run_id"])
    failures: Sequence[Mapping[str, str]] = summary.get("failures", [])
    rows = summary_rows(summary) + ([{"field": "error", "value": error}] if error else [])
    create_table_artifact(
        rows,
        key=artifact_key("ingest-summary", collection),
        description=f"Run {run_id} into {collection}: {summary.get('status', '')}",
    )
    create_table_artifact(
        [{"source": f["source"], "error": f["error"]} for f in failures],
        key=artifact_key("ingest-failures", collection),
        description=f"{len(failures)} files failed to load in run {run_id}",
    )
    create_markdown_artifact(
        histogram_markdown(hist, run_id),
        key=artifact_key("ingest-chunk-sizes", collection),
        description=f"Chunk-size histogram of run {run_id}",
    )


@contextmanager
def published(summary: RunSummary, data_dir: str) -> Iterator[None]:
    """Publish the run's artifacts when the block ends, whether it completes or fails.

    A failure is re-raised after publishing (status "failed", the error in the summary);
    a failure to publish then is logged, never raised over the run's own error.
    """
    try:
        yield
    except BaseException as exc:
        summary.status = "failed"
        try:
            hist = run_histogram(Path(data_dir), summary.run_id)
            publish_run(summary.to_dict(), hist, describe(exc))
        except Exception:
            log.exception("could not publish the artifacts of failed run %s", summary.run_id)
        raise
    publish_run(summary.to_dict(), chunk_sizes_task(data_dir, summary.run_id))


def publish_backfill(collection: str, rows: Sequence[Mapping[str, Any]]) -> None:
    """Publish one row per partition of a backfill: date, state and counts."""
    create_table_artifact(
        [dict(r) for r in rows],
        key=artifact_key("backfill-summary", collection),
        description=f"Backfill of {len(rows)} partitions into {collection}",
    )

"""What a run says in its Prefect log: the plan, each stored batch, each failure, the end.

The run's log (the UI's Logs tab, ``prefect flow-run logs``) should read like the CLI: these
lines go through the flow run's logger, so the Prefect API keeps them with the run. Failed
files and anything the run noticed are warnings.
"""

from __future__ import annotations

import logging
from typing import Any

from tasks.common.runs import RunSummary, SyncResult
from tasks.common.tables import PartRef
from tasks.discover.plan import Plan

Logger = logging.Logger | logging.LoggerAdapter[Any]


def planned(log: Logger, plan: Plan) -> None:
    """Log what the plan found and what the run will do."""
    log.info("%s", plan.describe())


def stored(
    log: Logger, done: int, total: int, docs: PartRef, embedded: PartRef, synced: SyncResult
) -> None:
    """Log one stored batch, then each of its files that failed, with its reason."""
    log.info(
        "batch %d/%d stored: %d documents, %d chunks written (%d embedded, %d from the cache), "
        "%d stale chunks deleted, %d files failed",
        done,
        total,
        docs.rows,
        synced.written,
        embedded.rows - embedded.cached,
        embedded.cached,
        synced.deleted,
        len(docs.failures),
    )
    for source, error in docs.failures:
        log.warning("failed: %s: %s", source, error)


def noticed(log: Logger, warnings: list[str]) -> None:
    """Log what the run noticed (repairs, patterns that matched nothing...) as warnings."""
    for line in warnings:
        log.warning("%s", line)


def stopped(log: Logger, summary: RunSummary, error: str) -> None:
    """Log why the run stopped and what stays of it.

    A warning: the CLI keeps Prefect's errors off the terminal, and a SIGTERM ends the
    process before the CLI prints anything.
    """
    if summary.mode == "reingest":
        stays = "the serving version still answers, and the next reingest starts clean"
    else:
        stays = (
            f"{summary.chunks_written} chunks written before it stay, and the next run goes "
            "on from there"
        )
    log.warning("stopped: %s; %s", error, stays)


def finished(log: Logger, summary: RunSummary) -> None:
    """Log the run's summary in one line."""
    s = summary
    log.info(
        "%s in %.1f s: %d files seen (%d new, %d changed, %d retried, %d unchanged, %d deleted, "
        "%d failed), %d chunks written (%d embedded, %d from the cache), %d deleted; %d warnings",
        s.status,
        s.seconds,
        s.files_seen,
        s.files_new,
        s.files_changed,
        s.files_retried,
        s.files_unchanged,
        s.files_deleted,
        s.files_failed,
        s.chunks_written,
        s.chunks_embedded,
        s.chunks_from_cache,
        s.chunks_deleted,
        len(s.warnings),
    )

"""Runs: the id and context every task of a run shares, and the summary it reports.

The summary is what the CLI prints, the ``runs`` table stores and artifacts show.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import os
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tasks.common.tables import PartRef


#: What :func:`new_run_id` returns: UTC time to the second and six hex digits.
RUN_ID_PATTERN = r"\d{8}T\d{6}-[0-9a-f]{6}"


def new_run_id(now: dt.datetime | None = None) -> str:
    """Return a sortable run id: UTC time plus a short random suffix (runs are events)."""
    now = now or dt.datetime.now(dt.UTC)
    return f"{now:%Y%m%dT%H%M%S}-{hashlib.sha256(os.urandom(8)).hexdigest()[:6]}"


@dataclass(frozen=True, slots=True)
class SyncResult:
    """Chunks written (upserted) and deleted by one batch or deletion pass."""

    written: int
    deleted: int
    seconds: float = 0.0  # writing the store and committing the manifest
    table_seconds: float = 0.0  # reading the batch's Parquet parts


@dataclass(frozen=True, slots=True)
class RunContext:
    """What every task of one run needs to know, passed by value (small)."""

    run_id: str
    data_dir: str
    collection: str  # the logical name users query
    physical: str  # the Chroma collection this run writes (differs during a reingest)
    root: str  # absolute source folder
    fingerprint: str  # IngestParams.content_fingerprint()
    model: str
    chroma_host: str | None = None  # a Chroma server; None: the embedded store in data_dir
    chroma_port: int = 8000
    embed_backend: str = "auto"  # how the model runs (tasks/embed/backends.py)


@dataclass(slots=True)
class RunSummary:
    """Counts of one ingest run (the keys of ``docflow ingest --json``)."""

    run_id: str
    collection: str
    mode: str = "incremental"
    status: str = "running"
    started_at: str = ""  # ISO time the run got the collection's lock (microseconds)
    files_seen: int = 0
    files_new: int = 0
    files_changed: int = 0
    files_unchanged: int = 0
    #: Unchanged files processed again because their last attempt failed or was cut short.
    files_retried: int = 0
    files_deleted: int = 0
    files_failed: int = 0
    #: Files read as other bytes than planning hashed (rewritten during the run): indexed as
    #: read, and changed for the next run, which reads them again.
    files_changed_during_run: int = 0
    documents: int = 0
    chunks_written: int = 0
    chunks_embedded: int = 0
    chunks_from_cache: int = 0
    chunks_deleted: int = 0
    seconds: float = 0.0
    #: Busy seconds per stage, summed over batches (load, split, embed, store, tables).
    #: Batches overlap, so the sum can exceed ``seconds``; see flows/ingest.py.
    stage_seconds: dict[str, float] = field(default_factory=dict)
    physical: str = ""
    failures: list[dict[str, str]] = field(default_factory=list)
    #: What the run noticed and an operator should know (one line each).
    warnings: list[str] = field(default_factory=list)

    def add_failures(self, failures: tuple[tuple[str, str], ...]) -> None:
        """Record files that failed to load."""
        self.failures.extend({"source": s, "error": e} for s, e in failures)
        self.files_failed = len(self.failures)

    def add_stage(self, stage: str, seconds: float) -> None:
        """Add ``seconds`` of work to ``stage``'s busy time."""
        self.stage_seconds[stage] = round(self.stage_seconds.get(stage, 0.0) + seconds, 3)

    def add_batch(
        self, docs: PartRef, split: PartRef, embedded: PartRef, synced: SyncResult
    ) -> None:
        """Add one stored batch: its counts, failures, files read mid-rewrite, busy seconds.

        Parquet reads and writes of every stage count as the "tables" stage.
        """
        for stage, seconds in (
            ("load", docs.seconds),
            ("split", split.seconds),
            ("embed", embedded.seconds),
            ("store", synced.seconds),
        ):
            self.add_stage(stage, seconds)
        self.add_stage("tables", sum(p.table_seconds for p in (docs, split, embedded, synced)))
        self.add_failures(docs.failures)
        self.files_changed_during_run += len(docs.changed)
        self.warnings.extend(
            f"{source}: changed while the run read it; indexed as read, the next run reads it again"
            for source in docs.changed
        )
        self.documents += docs.rows
        self.chunks_embedded += embedded.rows - embedded.cached
        self.chunks_from_cache += embedded.cached
        self.chunks_written += synced.written
        self.chunks_deleted += synced.deleted

    def to_dict(self) -> dict[str, Any]:
        """Return the summary as a JSON-ready dict."""
        return asdict(self)

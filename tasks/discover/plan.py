"""A run's plan: the files it processes, in which batches, and the sources it deletes.

Planning is the first step of every ingest (:func:`plan_task`) and all that ``docflow
ingest --dry-run`` does (:func:`preview`): discover the files (tasks/discover/files.py),
compare them with the manifest (``classify``) and cut the work into batches
(tasks/discover/batches.py). The core, :func:`plan_files`, reads the manifest through the
function it is given and writes nothing, so a preview is the plan the run would make.
"""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from tasks.common.documents import FileRef
from tasks.discover.batches import BatchLimits, plan_batches
from tasks.discover.files import classify, discover, in_scope, root_id, unmatched
from tasks.discover.partitions import partition_folder, partition_params
from tasks.index.manifest import FileState, Manifest

if TYPE_CHECKING:
    from tasks.common.config import IngestParams


@dataclass(frozen=True, slots=True)
class Plan:
    """The work of a run: batches of files to process and sources to delete."""

    batches: list[list[FileRef]]
    files_seen: int
    new: int
    changed: int
    unchanged: int
    deleted: list[str]
    retried: int = 0
    warnings: tuple[str, ...] = ()
    rerooted: tuple[str, ...] = ()  # unchanged files found under this root, recorded elsewhere
    why: dict[str, str] = field(default_factory=dict)  # to process: new, changed, retried, refresh

    def describe(self) -> str:
        """Return the line that says what the plan found and what the run will do."""
        return (
            f"planned {self.files_seen} files: {self.new} new, {self.changed} changed, "
            f"{self.retried} retried, {self.unchanged} unchanged, {len(self.deleted)} deleted; "
            f"{sum(len(b) for b in self.batches)} to process in {len(self.batches)} batches"
        )


def source_problem(folder: Path) -> str | None:
    """Return why a run reads nothing from ``folder`` (missing, or empty), else None.

    Either way the run ingests nothing and deletes nothing. An empty folder is most often a
    share that is not mounted (its mount point is there, empty): read as "every file was
    deleted", one such run would empty the collection. ``docflow clear`` does that on purpose.
    """
    if not folder.is_dir():
        state = "is a file, not a folder" if folder.exists() else "does not exist"
        return f"source folder {folder} {state}: nothing to ingest, nothing deleted"
    with os.scandir(folder) as entries:
        if next(entries, None) is None:
            return (
                f"source folder {folder} is empty (a share not mounted?): nothing to ingest, "
                "nothing deleted; docflow clear empties a collection"
            )
    return None


def partition_of(params: IngestParams) -> str | None:
    """Return the partition folder of a partitioned run (relative to its source), else None."""
    if params.source_template and params.partition_date:
        return partition_folder(params.source_template, params.partition_date)
    return None


def limits_of(params: IngestParams) -> BatchLimits:
    """Return the batch limits of a run with these settings."""
    return BatchLimits.for_chunks(
        params.batch_files,
        params.batch_bytes,
        params.batch_chunks,
        params.chunk_size,
        params.chunk_overlap,
        params.length_unit,
    )


def plan_files(
    params: IngestParams, known: Callable[[], Mapping[str, FileState]], full_refresh: bool
) -> Plan:
    """Discover the run's files, compare them with the manifest rows ``known()``, batch them.

    ``params`` are the run's settings, scoped to its partition if it has one. ``include``
    empty means every type docflow loads; a pattern the user gave that selects no file is
    a warning (a typo), and so is a link the walk does not follow (out of the source
    folder, or broken: tasks/discover/files.py). A missing or empty source folder, or a
    missing or empty partition folder under it (a day that has not landed, a share not
    mounted), is a warning too, and the run then plans nothing and deletes nothing. A
    sample run (``sample_size``) deletes nothing: the files it did not look at are not gone.
    """
    from tasks.load import default_includes

    root = Path(params.source)
    include, exclude, hidden = params.include, params.exclude, params.include_hidden
    partition = partition_of(params)
    problem = source_problem(root / partition if partition else root)
    if problem:
        return Plan([], 0, 0, 0, 0, [], warnings=(problem,))
    defaults = default_includes()
    patterns = include or defaults
    # a data dir inside the source folder is docflow's own state, never a document: read,
    # its files would fail (or be indexed) and change on every run
    unfollowed: list[str] = []
    files = discover(
        root,
        patterns,
        exclude,
        hidden,
        params.sample_size,
        [params.data_path],
        unfollowed,
        params.loaders.max_file_size,
    )
    given = [p for p in include if not any(p == d or p.endswith("/" + d) for d in defaults)]
    warnings = [
        f"--include {p!r} matched no file under {root}"
        + (f" (a folder: write '{p.rstrip('/')}/**')" if (root / p).is_dir() else "")
        for p in unmatched(files, given)
    ]
    if unfollowed:
        more = f" and {len(unfollowed) - 3} more" if len(unfollowed) > 3 else ""
        warnings.append(
            f"{len(unfollowed)} symbolic link(s) under {root} not followed: "
            f"{', '.join(unfollowed[:3])}{more}; --exclude them to silence this"
        )
    sampled = params.sample_size is not None
    changes = classify(
        files,
        known(),
        root_id(root),
        params.content_fingerprint(),
        lambda s: not sampled and in_scope(s, patterns, exclude, hidden),
        full_refresh,
    )
    warnings += [
        f"source folder {old} is gone and its files are under {root_id(root)} now: the "
        "ones not here are deleted"
        for old in changes.moved_from
    ]
    return Plan(
        plan_batches(changes.todo, limits_of(params)),
        len(files),
        changes.new,
        changes.changed,
        changes.unchanged,
        changes.deleted,
        changes.retried,
        tuple(warnings),
        changes.rerooted,
        changes.why,
    )


def preview(params: IngestParams) -> tuple[str, Plan]:
    """Return the collection version an ingest would write and the plan it would make now.

    Read-only: the manifest is opened for reading if there is one (none: every file is
    new), nothing is created, locked or written. A partitioned source previews the
    partition of ``partition_date``, else of today (UTC), as a run started now would.
    """
    if params.source_template:
        day = params.partition_date or dt.datetime.now(dt.UTC).date()
        params = partition_params(params, day)
    path = params.data_path / "state.db"
    physical, rows = params.collection, {}
    if path.is_file():
        with Manifest(path, readonly=True) as manifest:
            physical = manifest.physical(params.collection)
            rows = manifest.files(physical, ids=False)
    return physical, plan_files(params, lambda: rows, params.full_refresh)


# --- Prefect edge ---
from prefect import task  # noqa: E402


@task(name="plan")
def plan_task(params: IngestParams, physical: str, full_refresh: bool) -> Plan:
    """Plan the run (:func:`plan_files`) against the manifest rows of ``physical``."""

    def known() -> dict[str, FileState]:
        with Manifest.open(params.data_path) as manifest:
            return manifest.files(physical, ids=False)  # the plan needs no chunk ids

    return plan_files(params, known, full_refresh)

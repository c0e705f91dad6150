"""Apply a batch to the store and commit it to the manifest; remove deleted files.

The order is what makes runs crash-safe (see tasks/index/manifest.py): record pending ids →
upsert the new chunks (vectors, then the lexical index: tasks/index/collection.py) →
delete the ids no longer produced (from both) → commit the manifest. A file
that failed to load keeps its last committed chunks (nothing already stored is lost; chunks
of an interrupted attempt are removed) and is retried next run.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from tasks.common.documents import Chunk
from tasks.common.failpoints import failpoint
from tasks.common.runs import RunContext, SyncResult
from tasks.common.tables import DocumentRow
from tasks.index.collection import Index
from tasks.index.manifest import FileUpdate, Manifest

log = logging.getLogger(__name__)


def commit_batch(
    ctx: RunContext,
    index: Index,
    manifest: Manifest,
    rows: Sequence[DocumentRow],
    chunks: Sequence[Chunk],
    vectors: np.ndarray,
) -> SyncResult:
    """Upsert a batch's chunks, delete its files' stale chunks, then commit the manifest.

    Only the batch's own manifest rows are read: the work and memory of a batch do not grow
    with the collection.
    """
    known = manifest.files(ctx.physical, sources={r.source for r in rows})
    new_ids: dict[str, set[str]] = defaultdict(set)
    for c in chunks:
        new_ids[c.source].add(c.chunk_id)
    loaded: dict[str, str] = {}
    failed: dict[str, tuple[str, str]] = {}  # source -> (error, sha256 of the failed bytes)
    for r in rows:
        if r.status == "loaded":
            loaded[r.source] = r.sha256
        else:
            failed[r.source] = (r.error or "failed", r.sha256)
    done = [
        FileUpdate(s, ctx.root, sha, ctx.fingerprint, "done", tuple(sorted(new_ids[s])))
        for s, sha in loaded.items()
    ]
    manifest.begin(ctx.physical, ctx.run_id, done)
    failpoint("store:before-upsert")
    written = index.upsert(chunks, vectors) if chunks else 0
    failpoint("store:after-upsert")
    stale = set().union(*(known[s].stored_ids - new_ids[s] for s in loaded if s in known))
    # a file that fails now keeps its last committed chunks; ids of an interrupted attempt go
    for s in failed:
        if s in known:
            stale |= set(known[s].pending_ids) - set(known[s].chunk_ids)
    deleted = index.delete(stale)
    failpoint("manifest:before-commit")
    manifest.commit(
        ctx.physical,
        ctx.run_id,
        done,
        failed=[(s, ctx.root, error, sha) for s, (error, sha) in failed.items()],
    )
    failpoint("manifest:after-commit")
    return SyncResult(written, deleted)


def remove_sources(
    ctx: RunContext, index: Index, manifest: Manifest, sources: Sequence[str]
) -> SyncResult:
    """Delete every chunk of deleted files, then forget them in the manifest."""
    if not sources:
        return SyncResult(0, 0)
    known = manifest.files(ctx.physical, sources=sources)
    ids = set().union(*(known[s].stored_ids for s in sources if s in known))
    deleted = index.delete(ids)
    failpoint("delete:before-forget")
    manifest.forget(ctx.physical, sources)
    return SyncResult(0, deleted)


# --- Prefect edge ---
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

from prefect import Task, get_run_logger, task  # noqa: E402
from prefect.client.schemas.objects import State, TaskRun  # noqa: E402
from prefect.tasks import exponential_backoff  # noqa: E402

from tasks.common.errors import DocflowError  # noqa: E402
from tasks.common.failpoints import FailpointError  # noqa: E402
from tasks.common.tables import PartRef, read_chunks, read_documents, read_vectors  # noqa: E402
from tasks.index.held import store_files  # noqa: E402
from tasks.index.store import ChromaStore  # noqa: E402

#: Retry settings of tasks that write the store: a Chroma server may blink, a disk may be busy.
STORE_RETRIES: dict[str, Any] = {
    "retries": 3,
    "retry_delay_seconds": exponential_backoff(backoff_factor=1),  # 1, 2, 4 s
    "retry_jitter_factor": 0.5,
}


def _where(ctx: RunContext) -> tuple[Path, str, str | None, int]:
    """Return where a run's store files are: data dir, collection, Chroma host and port."""
    return Path(ctx.data_dir), ctx.physical, ctx.chroma_host, ctx.chroma_port


def retry_transient(task: Task[Any, Any], task_run: TaskRun, state: State[Any]) -> bool:
    """Retry a failed store task unless its error is one a retry cannot fix.

    docflow's own errors (a model mismatch, a bad option) and failpoints are final;
    anything else (a refused connection, a timeout, a locked file) is worth another try.
    """
    try:
        state.result()
    except (DocflowError, FailpointError):
        return False
    except Exception:  # noqa: BLE001 - the point is to let any other error be retried
        return True
    return True


@task(name="store", retry_condition_fn=retry_transient, **STORE_RETRIES)
def store_task(
    ctx: RunContext, documents: PartRef, chunks: PartRef, embeddings: PartRef
) -> SyncResult:
    """Write a batch into the collection and commit it to the manifest."""
    started = time.perf_counter()
    rows = read_documents(Path(documents.path), texts=False)  # each file's outcome
    batch = read_chunks(Path(chunks.path))
    ids, vectors = (
        ([], np.zeros((0, 0))) if not embeddings.path else read_vectors(Path(embeddings.path))
    )
    if ids != [c.chunk_id for c in batch]:
        raise RuntimeError(f"embeddings part {embeddings.path} does not match {chunks.path}")
    read = time.perf_counter()
    with store_files(*_where(ctx)) as (index, manifest):  # held open through a run: held.py
        result = commit_batch(ctx, index, manifest, rows, batch, vectors)
    get_run_logger().info("stored %d chunks, deleted %d stale", result.written, result.deleted)
    return replace(result, seconds=time.perf_counter() - read, table_seconds=read - started)


@task(name="delete", retry_condition_fn=retry_transient, **STORE_RETRIES)
def delete_task(ctx: RunContext, sources: list[str]) -> SyncResult:
    """Remove deleted files from the collection and the manifest."""
    with store_files(*_where(ctx)) as (index, manifest):
        result = remove_sources(ctx, index, manifest, sources)
    get_run_logger().info("%d files deleted: %d chunks removed", len(sources), result.deleted)
    return result


@task(name="move-root")
def move_root_task(ctx: RunContext, sources: list[str]) -> None:
    """Record unchanged files as found under this run's source folder (their folder moved).

    No store write: their chunks are as they were (``file_path`` keeps the path they were
    read from). The next run then deletes them from here when they go.
    """
    with Manifest.open(Path(ctx.data_dir)) as manifest:
        manifest.move_root(ctx.physical, sources, ctx.root)
    get_run_logger().info("%d unchanged files recorded under %s", len(sources), ctx.root)


@task(name="record-fingerprint", retry_condition_fn=retry_transient, **STORE_RETRIES)
def record_fingerprint_task(
    data_dir: str, physical: str, fingerprint: str, host: str | None = None, port: int = 8000
) -> None:
    """Record on the collection the content fingerprint its chunks were made with."""
    store = ChromaStore.open(Path(data_dir), physical, host, port)
    store.update_metadata(content_fingerprint=fingerprint)

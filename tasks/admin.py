"""Whole-collection operations: versions for zero-downtime rebuilds, clear, restore.

A logical collection (what users name and query) is served by one physical Chroma
collection, recorded in the manifest's pointer table. A reingest or restore builds a new
physical version ``<name>--v<run_id>`` next to the serving one, switches the pointer when
the build is complete, then drops the old version: queries never see an empty or
half-built index, and a build that fails leaves the old version serving (the next rebuild
drops the leftover first).
"""

from __future__ import annotations

import logging
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from tasks.errors import StoreError
from tasks.manifest import Manifest
from tasks.store import ChromaStore, collection_names, make_client
from tasks.tables import CHUNKS_SCHEMA, read_chunks_table, read_table, table_dir

log = logging.getLogger(__name__)


def version_name(name: str, run_id: str) -> str:
    """Return the physical collection name of a rebuild of ``name`` by run ``run_id``."""
    return f"{name}--v{run_id}"


def versions(data_dir: Path, name: str, host: str | None = None, port: int = 8000) -> list[str]:
    """Return every physical collection of logical ``name`` in the store (serving or not)."""
    pattern = re.compile(rf"^{re.escape(name)}--v\d{{8}}T\d{{6}}-[0-9a-f]{{6}}$")
    client = make_client(path=data_dir / "chroma", host=host, port=port)
    return sorted(n for n in collection_names(client) if n == name or pattern.match(n))


def drop_versions(
    data_dir: Path, name: str, keep: str | None, host: str | None = None, port: int = 8000
) -> list[str]:
    """Drop every physical version of ``name`` except ``keep``, and their manifest rows."""
    dropped = [v for v in versions(data_dir, name, host, port) if v != keep]
    with Manifest.open(data_dir) as manifest:
        for physical in dropped:
            ChromaStore.open(data_dir, physical, host, port).drop()
            manifest.drop_collection(physical)
    return dropped


@dataclass(frozen=True, slots=True)
class ClearResult:
    """What ``clear`` removed."""

    collections: list[str]
    runs: int
    cache_dropped: bool


def clear(
    data_dir: Path, name: str, drop_cache: bool = False, host: str | None = None, port: int = 8000
) -> ClearResult:
    """Drop the collection (all versions), its manifest rows and pointer, and its tables.

    Table parts are removed for every run that wrote this collection; the embedding cache
    stays unless ``drop_cache``.
    """
    dropped = drop_versions(data_dir, name, None, host, port)
    with Manifest.open(data_dir) as manifest:
        manifest.drop_pointer(name)
    runs = read_table(data_dir, "runs", ["run_id", "collection"])
    mine = (
        [r["run_id"] for r in runs.to_pylist() if r["collection"] == name] if runs.num_rows else []
    )
    for run_id in mine:
        for table in ("documents", "chunks", "embeddings"):
            shutil.rmtree(table_dir(data_dir, table) / f"run_id={run_id}", ignore_errors=True)
        (table_dir(data_dir, "runs") / f"{run_id}.parquet").unlink(missing_ok=True)
    if drop_cache:
        shutil.rmtree(data_dir / "cache", ignore_errors=True)
    return ClearResult(dropped, len(mine), drop_cache)


@dataclass(frozen=True, slots=True)
class RestoreResult:
    """What ``restore`` rebuilt."""

    physical: str
    chunks: int
    missing: int  # live chunk ids found in no table part (should be 0)


def restore(
    data_dir: Path, name: str, run_id: str, host: str | None = None, port: int = 8000
) -> RestoreResult:
    """Rebuild the serving collection from the Parquet tables, with no embedding.

    The manifest says which chunk ids are live; their rows and vectors come from whatever
    run's parts hold them. The copy is built under a new name and switched in atomically.

    Raises:
        StoreError: If there is nothing to restore or the vectors are missing.
    """
    with Manifest.open(data_dir) as manifest:
        active = manifest.physical(name)
        live = manifest.live_chunk_ids(active)
    if not live:
        raise StoreError(f"nothing to restore: the manifest has no chunks for {name!r}")
    old = ChromaStore.open(data_dir, active, host, port)
    meta = old.metadata() if old.exists() else {}
    model = str(meta.get("embedding_model") or _newest_model(data_dir))
    vectors_by_id = {
        r["chunk_id"]: r["vector"] for r in _newest_rows(data_dir, "embeddings", live, model)
    }
    chunks = [
        c
        for c in read_chunks_table(
            pa.Table.from_pylist(_newest_rows(data_dir, "chunks", live), CHUNKS_SCHEMA)
        )
        if c.chunk_id in vectors_by_id
    ]
    if not chunks:
        raise StoreError(f"no stored vectors of model {model!r} for {name!r}: run docflow reingest")
    vectors = np.asarray([vectors_by_id[c.chunk_id] for c in chunks], dtype=np.float32)

    physical = version_name(name, run_id)
    new = ChromaStore.open(data_dir, physical, host, port)
    new.collection(model, int(vectors.shape[1]))
    new.upsert(chunks, vectors)
    if "content_fingerprint" in meta:
        new.update_metadata(content_fingerprint=meta["content_fingerprint"])
    with Manifest.open(data_dir) as manifest:
        manifest.switch(name, physical, run_id, move_from=active)
    old.drop()
    return RestoreResult(physical, len(chunks), len(live) - len(chunks))


def _parts_newest_first(data_dir: Path, table: str) -> list[Path]:
    """Return a table's parts, newest run first (run ids sort by time)."""
    folder = table_dir(data_dir, table)
    return sorted(folder.rglob("part-*.parquet"), reverse=True) if folder.exists() else []


def _newest_model(data_dir: Path) -> str:
    """Return the model of the newest embeddings part, or "" if there is none."""
    for part in _parts_newest_first(data_dir, "embeddings"):
        models = pq.read_table(part, columns=["model"]).column("model")
        if len(models):
            return str(models[0].as_py())
    return ""


def _newest_rows(
    data_dir: Path, table: str, live: set[str], model: str | None = None
) -> list[dict[str, Any]]:
    """Return the newest row of every live chunk id found in a table's parts.

    Parts are read one by one (vectors of different models or dimensions may sit in
    different runs' parts, which a single dataset read cannot combine).
    """
    wanted = pa.array(sorted(live))
    found: dict[str, dict[str, Any]] = {}
    for part in _parts_newest_first(data_dir, table):
        rows = pq.read_table(part)
        rows = rows.filter(pc.is_in(rows.column("chunk_id"), value_set=wanted))
        if model is not None:
            rows = rows.filter(pc.equal(rows.column("model"), model))
        for row in rows.to_pylist():
            found.setdefault(row["chunk_id"], row)
    return list(found.values())


# --- Prefect edge ---
from prefect import get_run_logger, task  # noqa: E402

from tasks.store import STORE_RETRIES, retry_transient  # noqa: E402


@task(name="drop-old-versions", retry_condition_fn=retry_transient, **STORE_RETRIES)
def drop_versions_task(
    data_dir: str, name: str, keep: str | None, host: str | None = None, port: int = 8000
) -> list[str]:
    """Drop physical versions of ``name`` other than ``keep`` (leftovers of failed builds)."""
    dropped = drop_versions(Path(data_dir), name, keep, host, port)
    if dropped:
        get_run_logger().info("dropped collection versions %s", dropped)
    return dropped


@task(name="switch-pointer")
def switch_task(data_dir: str, name: str, physical: str, run_id: str) -> None:
    """Point ``name`` at the freshly built ``physical`` collection."""
    with Manifest.open(Path(data_dir)) as manifest:
        manifest.switch(name, physical, run_id)
    get_run_logger().info("%s now served by %s", name, physical)


@task(name="clear")
def clear_task(
    data_dir: str, name: str, drop_cache: bool, host: str | None = None, port: int = 8000
) -> ClearResult:
    """Drop the collection, its manifest rows and its tables."""
    return clear(Path(data_dir), name, drop_cache, host, port)


@task(name="restore")
def restore_task(
    data_dir: str, name: str, run_id: str, host: str | None = None, port: int = 8000
) -> RestoreResult:
    """Rebuild the collection from the tables."""
    result = restore(Path(data_dir), name, run_id, host, port)
    get_run_logger().info("restored %d chunks into %s", result.chunks, result.physical)
    return result

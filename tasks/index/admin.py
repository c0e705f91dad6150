"""Whole-collection operations: versions for zero-downtime rebuilds, clear, restore.

A logical collection (what users name and query) is served by one physical collection
(its vectors in Chroma, its words in a lexical index: tasks/index/collection.py), recorded in the
manifest's pointer table. A reingest or restore builds a new
physical version ``<name>--v<run_id>`` next to the serving one, switches the pointer when
the build is complete, then drops the old version: queries never see an empty or
half-built index, and a build that fails leaves the old version serving (the next rebuild
drops the leftover first).
"""

from __future__ import annotations

import json
import logging
import shutil
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tasks.common.errors import StoreError
from tasks.common.names import is_version_of, logical_name, version_name
from tasks.common.tables import (
    CHUNKS_SCHEMA,
    list_parts,
    read_chunks_table,
    read_part,
    read_table,
    remove_run,
)
from tasks.index import lexical
from tasks.index.collection import Index
from tasks.index.manifest import FileUpdate, Manifest
from tasks.index.store import ChromaStore, collection_names, make_client

if TYPE_CHECKING:
    from chromadb.api import ClientAPI

log = logging.getLogger(__name__)


def _client(data_dir: Path, host: str | None, port: int, create: bool) -> ClientAPI | None:
    """Return the store's client; None for a reader's embedded store that does not exist."""
    try:
        return make_client(data_dir / "chroma", host, port, create)
    except StoreError:
        if create or host:
            raise
        return None


def versions(
    data_dir: Path, name: str, host: str | None = None, port: int = 8000, create: bool = True
) -> list[str]:
    """Return every physical collection of logical ``name`` in the store (serving or not).

    ``create`` False (readers): an embedded store that does not exist has none, and is
    not created.
    """
    client = _client(data_dir, host, port, create)
    names = collection_names(client) if client is not None else []
    return sorted(n for n in names if is_version_of(name, n))


def logical_names(
    data_dir: Path, host: str | None = None, port: int = 8000, create: bool = True
) -> list[str]:
    """Return the collection names users know (versions folded into their name), sorted."""
    client = _client(data_dir, host, port, create)
    names = collection_names(client) if client is not None else []
    return sorted({logical_name(n) for n in names})


def drop_versions(
    data_dir: Path, name: str, keep: str | None, host: str | None = None, port: int = 8000
) -> list[str]:
    """Drop every physical version of ``name`` except ``keep``: vectors, words, manifest rows.

    Manifest rows and lexical indexes go even for versions the store no longer lists (a
    lost or wiped Chroma directory): left behind, the rows would make the next ingest skip
    every file as unchanged.
    """
    in_store = [v for v in versions(data_dir, name, host, port) if v != keep]
    in_words = [v for v in lexical.physical_names(data_dir) if v != keep and is_version_of(name, v)]
    with Manifest.open(data_dir) as manifest:
        in_manifest = [c for c in manifest.collections() if c != keep and is_version_of(name, c)]
        for physical in in_store:
            ChromaStore.open(data_dir, physical, host, port).drop()
            manifest.drop_collection(physical)
        for physical in in_manifest:
            manifest.drop_collection(physical)
    for physical in {*in_store, *in_manifest, *in_words}:
        lexical.drop(data_dir, physical)
    return sorted(set(in_store) | set(in_manifest))


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
        remove_run(data_dir, run_id)
    if drop_cache:
        shutil.rmtree(data_dir / "cache", ignore_errors=True)
    return ClearResult(dropped, len(mine), drop_cache)


@dataclass(frozen=True, slots=True)
class RestoreResult:
    """What ``restore`` rebuilt."""

    physical: str
    chunks: int
    missing: int  # live chunk ids found in no table part (should be 0)
    set_aside: str | None = None  # where a damaged manifest was moved, if it was


def restore(
    data_dir: Path, name: str, run_id: str, host: str | None = None, port: int = 8000
) -> RestoreResult:
    """Rebuild the serving collection from the Parquet tables, with no embedding.

    The manifest says which chunk ids are live; their rows and vectors come from whatever
    run's parts hold them. Without manifest rows (``state.db`` lost or emptied), the live
    chunks and the manifest rows themselves are derived from the tables (see
    :func:`state_from_tables`). The copy is built under a new name and switched in
    atomically, with the content fingerprint recorded on it; its lexical index is built
    from the same chunks beside it, and the old version's goes with the old vectors.

    A damaged manifest is first moved aside (``state.db.corrupt-<time>``); the pointer it
    held is then unknown, so every other version of ``name`` is dropped once the rebuilt
    one serves.

    Raises:
        StoreError: If there is nothing to restore or the vectors are missing.
    """
    manifest, moved = Manifest.open_or_set_aside(data_dir / "state.db", check=True)
    if moved:
        log.warning("the manifest was damaged: moved to %s", moved)
    with manifest:
        active = manifest.physical(name)
        files = manifest.files(active)
    live = {i for f in files.values() for i in f.chunk_ids}
    known = {f.fingerprint for f in files.values() if f.chunk_ids}
    fingerprint = known.pop() if len(known) == 1 else None
    rebuilt: list[FileUpdate] = []
    if not live:
        rebuilt, fingerprint = state_from_tables(data_dir, name)
        live = {i for r in rebuilt for i in r.chunk_ids}
    if not live:
        raise StoreError(
            f"nothing to restore: neither the manifest nor the tables hold chunks of {name!r}"
        )
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
    with Index.open(data_dir, physical, host, port) as new:
        new.vectors.collection(model, int(vectors.shape[1]))
        new.upsert(chunks, vectors)
        fingerprint = str(meta.get("content_fingerprint") or fingerprint or "")
        if fingerprint:
            new.vectors.update_metadata(content_fingerprint=fingerprint)
    with Manifest.open(data_dir) as manifest:
        manifest.switch(name, physical, run_id, move_from=active, rows=rebuilt)
    drop_versions(data_dir, name, physical, host, port)  # the old one (and any leftover)
    return RestoreResult(
        physical, len(chunks), len(live) - len(chunks), str(moved) if moved else None
    )


def state_from_tables(data_dir: Path, name: str) -> tuple[list[FileUpdate], str | None]:
    """Derive the manifest rows of collection ``name`` from the tables alone.

    Replays the completed runs of ``name`` (the ``runs`` table) in order, from its latest
    completed reingest (which rebuilt everything) on: a source's live chunks are those of
    the latest of these runs that loaded it (its ``documents`` and ``chunks`` parts), and a
    run's ``deleted_sources`` remove sources. Runs that failed are skipped: what they
    committed is lost, the source falls back to its previous completed version. Returns
    the rows and the content fingerprint of the latest completed run (None without one).
    """
    runs = [
        r
        for part in list_parts(data_dir, "runs")
        for r in read_part(part).to_pylist()
        if r.get("collection") == name and r.get("status") == "completed"
    ]
    runs.sort(key=lambda r: (str(r.get("started_at") or ""), str(r["run_id"])))
    resets = [i for i, r in enumerate(runs) if r.get("mode") == "reingest"]
    runs = runs[resets[-1] :] if resets else runs
    latest: dict[str, tuple[dict[str, Any], str]] = {}  # source -> (its run, its sha256)
    for run in runs:
        for part in list_parts(data_dir, "documents", str(run["run_id"])):
            for doc in read_part(part, ["source", "sha256", "status"]).to_pylist():
                if doc["status"] == "loaded":
                    latest[doc["source"]] = (run, doc["sha256"])
        for source in json.loads(run.get("deleted_sources") or "[]"):
            latest.pop(source, None)
    wanted: dict[str, set[str]] = defaultdict(set)  # run id -> its live sources
    for source, (run, _) in latest.items():
        wanted[str(run["run_id"])].add(source)
    ids: dict[str, list[str]] = defaultdict(list)
    for rid, sources in wanted.items():
        for part in list_parts(data_dir, "chunks", rid):
            for c in read_part(part, ["chunk_id", "source"]).to_pylist():
                if c["source"] in sources:
                    ids[c["source"]].append(c["chunk_id"])
    rows = [
        FileUpdate(
            source,
            str(run.get("root") or ""),
            sha,
            str(run.get("content_fingerprint") or ""),
            "done",
            tuple(sorted(ids[source])),
        )
        for source, (run, sha) in sorted(latest.items())
    ]
    fingerprint = runs[-1].get("content_fingerprint") if runs else None
    return rows, (str(fingerprint) if fingerprint else None)


def _parts_newest_first(data_dir: Path, table: str) -> list[str]:
    """Return a table's parts, newest run first (run ids sort by time)."""
    return list_parts(data_dir, table)[::-1]


def _newest_model(data_dir: Path) -> str:
    """Return the model of the newest embeddings part, or "" if there is none."""
    for part in _parts_newest_first(data_dir, "embeddings"):
        models = read_part(part, ["model"]).column("model")
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
        rows = read_part(part)
        rows = rows.filter(pc.is_in(rows.column("chunk_id"), value_set=wanted))
        if model is not None:
            rows = rows.filter(pc.equal(rows.column("model"), model))
        for row in rows.to_pylist():
            found.setdefault(row["chunk_id"], row)
    return list(found.values())


# --- Prefect edge ---
from prefect import get_run_logger, task  # noqa: E402

from tasks.index.sync import STORE_RETRIES, retry_transient  # noqa: E402


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

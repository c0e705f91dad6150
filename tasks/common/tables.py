"""Parquet tables at every hand-off: schemas, atomic part writers and readers.

Layout: ``<tables>/<table>/run_id=<run>/part-<batch>.parquet``, one part per batch (hive
partitioning by run, readable as one dataset by pyarrow, DuckDB, polars or pandas), and
``<tables>/runs/<run>.parquet``. ``<tables>`` is ``<data_dir>/tables`` unless the data dir
records another location (:func:`use_tables_url`): any folder or fsspec URL
(``s3://bucket/prefix``, ``gcs://...``, ``memory://...``). Every task finds it from the
data dir alone, so Dask workers that see the data dir see the tables.

A part is written to a hidden temporary file (fsynced, locally) and renamed into place,
so a crash never leaves a half-written part where a reader would see it (readers skip
names that start with ``.``). On an object store the rename is a server-side copy of a
complete object (atomic there), then the temporary key is removed.

Part locations are handed around as strings and may go through ``pathlib.Path``, which
folds ``scheme://`` into ``scheme:/``; every reader here accepts both spellings.

One module over ~400 lines on purpose: each table's schema, writer and reader sit side by
side, because a change to one is a change to the others, and every part of every table goes
through the same atomic writer and the same location rules.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import uuid
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, fields
from pathlib import Path
from typing import IO, Any

import fsspec
import numpy as np
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
from fsspec.implementations.local import LocalFileSystem
from pyarrow.fs import FSSpecHandler, PyFileSystem

from tasks.common.documents import Chunk, Document, Header
from tasks.common.errors import StateError
from tasks.common.failpoints import failpoint
from tasks.common.records import read_record, write_record

HEADER_TYPE = pa.struct([("level", pa.int8()), ("text", pa.string())])

DOCUMENTS_SCHEMA = pa.schema(
    [
        ("source", pa.string()),
        ("doc_id", pa.string()),
        ("sha256", pa.string()),
        ("loader", pa.string()),
        ("pages", pa.int32()),
        ("status", pa.string()),  # "loaded" | "failed"
        ("error", pa.string()),
        ("text", pa.large_string()),
        ("metadata", pa.string()),  # JSON object
    ]
)

CHUNKS_SCHEMA = pa.schema(
    [
        ("chunk_id", pa.string()),
        ("doc_id", pa.string()),
        ("source", pa.string()),
        ("chunk_index", pa.int32()),
        ("start_index", pa.int64()),
        ("end_index", pa.int64()),
        ("text", pa.large_string()),
        ("n_chars", pa.int32()),
        ("n_tokens", pa.int32()),
        ("headers", pa.list_(HEADER_TYPE)),
        ("metadata", pa.string()),  # JSON object, inherited from the document
    ]
)


def embeddings_schema(dimension: int) -> pa.Schema:
    """Return the ``embeddings`` schema for vectors of ``dimension`` floats."""
    return pa.schema(
        [
            ("chunk_id", pa.string()),
            ("model", pa.string()),
            ("vector", pa.list_(pa.float32(), dimension)),
        ]
    )


@dataclass(frozen=True, slots=True)
class DocumentRow:
    """One row of the ``documents`` table: a loaded Document, or a file that failed."""

    source: str
    sha256: str
    loader: str
    status: str
    error: str | None = None
    document: Document | None = None
    pages: int = 0


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)


# -- where the tables are -------------------------------------------------------------------

#: The file in the data dir that records a tables location other than ``<data_dir>/tables``.
TABLES_URL_FILE = "tables.url"
#: ``scheme:/rest`` or ``scheme://rest`` (two characters or more: not a Windows drive).
_URL = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]+):/+(.*)$", re.DOTALL)
_LOCAL_SCHEMES = {"file", "local"}


def _split_url(where: str | os.PathLike[str]) -> tuple[str, str] | None:
    """Return (scheme, rest) of an fsspec URL (either spelling), or None for a local path."""
    m = _URL.match(os.fspath(where))
    if m is None:
        return None
    scheme = m.group(1).lower()
    if scheme not in _LOCAL_SCHEMES and scheme not in fsspec.available_protocols():
        return None
    return scheme, m.group(2)


def _resolve(where: str | os.PathLike[str]) -> tuple[fsspec.AbstractFileSystem | None, str]:
    """Return (filesystem, path in it) of a part or folder; (None, path) when local."""
    url = _split_url(where)
    if url is None:
        return None, os.fspath(where)
    scheme, rest = url
    if scheme in _LOCAL_SCHEMES:
        return None, "/" + rest
    fs, path = fsspec.core.url_to_fs(f"{scheme}://{rest}")
    if isinstance(fs, LocalFileSystem):
        return None, path
    return fs, path


def normalize_tables_url(url: str) -> str:
    """Return ``url`` as stored: local folders (and file:// URLs) absolute, others as given."""
    split = _split_url(url)
    if split is None or split[0] in _LOCAL_SCHEMES:
        return str(Path(_resolve(url)[1]).expanduser().resolve())
    return f"{split[0]}://{split[1]}".rstrip("/")


def use_tables_url(data_dir: Path, url: str | None) -> None:
    """Record where the tables of ``data_dir`` live (None: keep what is recorded).

    The default, ``<data_dir>/tables``, is recorded by removing the record. Parts already
    written elsewhere are not moved.
    """
    if not url:
        return
    record = data_dir / TABLES_URL_FILE
    location = normalize_tables_url(url)
    if location == str((data_dir / "tables").resolve()):
        record.unlink(missing_ok=True)
        return
    write_record(record, location)


def tables_url(data_dir: Path) -> str:
    """Return where the tables of ``data_dir`` live: the recorded location or the default."""
    return read_record(data_dir / TABLES_URL_FILE) or str(data_dir / "tables")


def table_location(data_dir: Path, table: str, run_id: str | None = None) -> str:
    """Return the folder (URL or path) of ``table``, or of one run's parts of it."""
    location = f"{tables_url(data_dir).rstrip('/')}/{table}"
    if run_id is not None and table != "runs":
        location += f"/run_id={run_id}"
    return location


# -- writing --------------------------------------------------------------------------------


def part_path(data_dir: Path, table: str, run_id: str, batch: int) -> Path:
    """Return where batch ``batch`` of run ``run_id`` of ``table`` is stored.

    A Path even for a URL (``scheme:/...``): :func:`write_atomic` and the readers take it.
    """
    return Path(table_location(data_dir, table, run_id)) / f"part-{batch:05d}.parquet"


def write_atomic(table: pa.Table, path: Path) -> Path:
    """Write ``table`` to ``path`` atomically: hidden temp file, fsync, rename, fsync dir.

    On a remote filesystem: a hidden temporary key, then a move (an atomic copy on object
    stores) onto ``path``.
    """
    fs, where = _resolve(path)
    try:
        if fs is not None:
            _write_remote(fs, table, where)
            return path
        _write_local(table, Path(where))
    except OSError as exc:  # a full disk, a read-only mount...: one line that names the file
        raise StateError(f"cannot write {path}: {exc.strerror or exc}") from exc
    return Path(where)


def _write_local(table: pa.Table, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with tmp.open("wb") as fh:
            failpoint("tables:write")
            pq.write_table(table, fh, compression="zstd")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def _write_remote(fs: fsspec.AbstractFileSystem, table: pa.Table, path: str) -> None:
    parent, _, name = path.rpartition("/")
    tmp = f"{parent}/.{name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp"
    fs.makedirs(parent, exist_ok=True)
    try:
        with fs.open(tmp, "wb") as fh:
            pq.write_table(table, fh, compression="zstd")
        fs.mv(tmp, path)
    except BaseException:
        with suppress(Exception):
            fs.rm(tmp)
        raise


def documents_table(rows: Sequence[DocumentRow]) -> pa.Table:
    """Build the ``documents`` table for a batch."""
    cols: dict[str, list[Any]] = {name: [] for name in DOCUMENTS_SCHEMA.names}
    for r in rows:
        doc = r.document
        cols["source"].append(r.source)
        cols["doc_id"].append(doc.doc_id if doc else None)
        cols["sha256"].append(r.sha256)
        cols["loader"].append(r.loader)
        cols["pages"].append(r.pages)
        cols["status"].append(r.status)
        cols["error"].append(r.error)
        cols["text"].append(doc.page_content if doc else None)
        cols["metadata"].append(_json(dict(doc.metadata)) if doc else None)
    return pa.table(cols, schema=DOCUMENTS_SCHEMA)


def chunks_table(chunks: Sequence[Chunk]) -> pa.Table:
    """Build the ``chunks`` table for a batch."""
    return pa.table(
        {
            "chunk_id": [c.chunk_id for c in chunks],
            "doc_id": [c.doc_id for c in chunks],
            "source": [c.source for c in chunks],
            "chunk_index": [c.chunk_index for c in chunks],
            "start_index": [c.start_index for c in chunks],
            "end_index": [c.end_index for c in chunks],
            "text": [c.text for c in chunks],
            "n_chars": [c.n_chars for c in chunks],
            "n_tokens": [c.n_tokens for c in chunks],
            "headers": [[h.to_dict() for h in c.headers] for c in chunks],
            "metadata": [_json(dict(c.metadata)) for c in chunks],
        },
        schema=CHUNKS_SCHEMA,
    )


def embeddings_table(chunk_ids: Sequence[str], model: str, vectors: np.ndarray) -> pa.Table:
    """Build the ``embeddings`` table for a batch (``vectors``: float32, one row per id)."""
    dimension = int(vectors.shape[1]) if vectors.ndim == 2 else 0
    flat = pa.array(np.ascontiguousarray(vectors, dtype=np.float32).reshape(-1))
    return pa.table(
        {
            "chunk_id": pa.array(chunk_ids, pa.string()),
            "model": pa.array([model] * len(chunk_ids), pa.string()),
            "vector": pa.FixedSizeListArray.from_arrays(flat, dimension),
        },
        schema=embeddings_schema(dimension),
    )


# -- reading --------------------------------------------------------------------------------


@contextmanager
def _source(where: str | os.PathLike[str]) -> Iterator[str | IO[bytes]]:
    """Yield what pyarrow reads a part from: a local path or an open remote file."""
    fs, path = _resolve(where)
    if fs is None:
        yield path
        return
    with fs.open(path, "rb") as fh:
        yield fh


_REINGEST = "move it aside; docflow reingest rebuilds the collection from the source files"


def damaged_part(path: str | os.PathLike[str], exc: Exception, cure: str = _REINGEST) -> StateError:
    """Return the one-line error of a part Parquet cannot read (a copy cut short, a bad disk).

    docflow writes parts atomically, so a damaged one was changed outside it.
    """
    reason = " ".join(str(exc).split())[:200]
    return StateError(f"table part {path} is damaged ({reason}): {cure}")


def read_part(
    path: str | os.PathLike[str], columns: Iterable[str] | None = None, cure: str = _REINGEST
) -> pa.Table:
    """Read one part file, local or remote (``columns`` that the part lacks are left out).

    A part Parquet cannot read is a StateError naming it, with ``cure``.
    """
    try:
        with _source(path) as src:
            parquet = pq.ParquetFile(src)
            cols = None if columns is None else list(columns)
            if cols is not None:
                present = set(parquet.schema_arrow.names)
                cols = [c for c in cols if c in present]
            return parquet.read(columns=cols)
    except pa.ArrowInvalid as exc:
        raise damaged_part(path, exc, cure) from exc


def read_documents(path: Path, texts: bool = True) -> list[DocumentRow]:
    """Read back one ``documents`` part.

    ``texts`` False: each file's outcome only (source, hash, loader, status, error, pages),
    every ``document`` None: what the store needs, without decoding the batch's texts.
    """
    outcome = ["source", "sha256", "loader", "status", "error", "pages"]
    rows = []
    for r in read_part(path, None if texts else outcome).to_pylist():
        doc = None
        if texts and r["status"] == "loaded":
            doc = Document(r["text"], json.loads(r["metadata"]))
        rows.append(
            DocumentRow(
                source=r["source"],
                sha256=r["sha256"],
                loader=r["loader"],
                status=r["status"],
                error=r["error"],
                document=doc,
                pages=r["pages"],
            )
        )
    return rows


def read_chunks(path: Path) -> list[Chunk]:
    """Read back one ``chunks`` part."""
    return read_chunks_table(read_part(path))


def read_chunks_table(table: pa.Table) -> list[Chunk]:
    """Turn rows of the ``chunks`` schema into Chunks.

    Column by column: half the time of ``to_pylist()``'s dict per row, and the embed and
    store tasks read every batch's chunks on the flow's process (docs/performance.md).
    """
    cols = {name: table.column(name).to_pylist() for name in CHUNKS_SCHEMA.names}
    cols["headers"] = [tuple(Header(h["level"], h["text"]) for h in hs) for hs in cols["headers"]]
    cols["metadata"] = [json.loads(m) for m in cols["metadata"]]
    return [Chunk(*row) for row in zip(*(cols[f.name] for f in fields(Chunk)), strict=True)]


def read_vectors(path: Path) -> tuple[list[str], np.ndarray]:
    """Read back one ``embeddings`` part as (chunk ids, float32 matrix)."""
    table = read_part(path)
    vectors = table.column("vector").combine_chunks()
    dimension = vectors.type.list_size
    matrix = vectors.flatten().to_numpy(zero_copy_only=False).reshape(-1, dimension)
    return table.column("chunk_id").to_pylist(), matrix.astype(np.float32, copy=False)


def table_dir(data_dir: Path, table: str) -> Path:
    """Return the folder of ``table`` (a ``scheme:/...`` Path when the tables are remote)."""
    return Path(table_location(data_dir, table))


def read_table(
    data_dir: Path,
    table: str,
    columns: Iterable[str] | None = None,
    run_id: str | None = None,
) -> pa.Table:
    """Read every part of ``table`` (of one run if ``run_id``) as one Arrow table.

    Returns an empty table (no columns) if there are no parts yet.
    """
    parts = list_parts(data_dir, table, run_id)
    if not parts:
        return pa.table({})
    fs, folder = _resolve(table_location(data_dir, table, run_id))
    if table == "runs":  # one small file per run; later releases added columns
        cure = "move it aside (it is one past run's record)"
        records = [read_part(p, None, cure) for p in parts]
        rows = pa.concat_tables(records, promote_options="default")
        return rows.select(list(columns)) if columns is not None else rows
    filesystem = None if fs is None else PyFileSystem(FSSpecHandler(fs))
    try:
        dataset = ds.dataset(
            folder,
            filesystem=filesystem,
            format="parquet",
            partitioning="hive" if run_id is None else None,
        )
        return dataset.to_table(columns=list(columns) if columns is not None else None)
    except pa.ArrowInvalid as exc:
        for part in parts:  # name the part: pyarrow's message does not always
            read_part(part, [])
        raise damaged_part(folder, exc) from exc


def _find(data_dir: Path, table: str, run_id: str | None) -> list[tuple[str, int]]:
    """Return (location, bytes) of the visible parts of ``table``, sorted by location."""
    fs, folder = _resolve(table_location(data_dir, table, run_id))
    name = f"{run_id}.parquet" if table == "runs" and run_id is not None else None
    found: list[tuple[str, int]] = []
    if fs is None:
        root = Path(folder)
        if root.is_dir():
            for p in root.rglob(name or "*.parquet"):
                if not p.name.startswith(".") and p.is_file():
                    found.append((str(p), p.stat().st_size))
    elif fs.isdir(folder):
        for p, info in fs.find(folder, detail=True).items():
            base = p.rstrip("/").rsplit("/", 1)[-1]
            if base.startswith(".") or not base.endswith(".parquet"):
                continue
            if name is None or base == name:
                found.append((fs.unstrip_protocol(p), int(info.get("size") or 0)))
    return sorted(found)


def list_parts(data_dir: Path, table: str, run_id: str | None = None) -> list[str]:
    """Return the part files of ``table`` (of one run if ``run_id``), sorted by name.

    Run ids sort by time, so parts come oldest run first. Hidden (temporary) files are
    never listed. Locations are paths, or URLs when the tables are remote.
    """
    return [p for p, _ in _find(data_dir, table, run_id)]


def part_sizes(data_dir: Path, table: str) -> list[int]:
    """Return the size in bytes of every part of ``table``."""
    return [size for _, size in _find(data_dir, table, None)]


def remove_run(data_dir: Path, run_id: str) -> None:
    """Delete every part run ``run_id`` wrote, in every table (missing parts are fine)."""
    for table in ("documents", "chunks", "embeddings", "runs"):
        location = table_location(data_dir, table, run_id)
        if table == "runs":
            location += f"/{run_id}.parquet"
        fs, path = _resolve(location)
        if fs is None:
            target = Path(path)
            if target.is_dir():
                shutil.rmtree(target, ignore_errors=True)
            else:
                target.unlink(missing_ok=True)
        elif fs.exists(path):
            fs.rm(path, recursive=True)


def write_run(data_dir: Path, run_id: str, summary: dict[str, Any]) -> Path:
    """Append the one-row ``runs`` record of a finished run."""
    row = {k: (_json(v) if isinstance(v, list | dict) else v) for k, v in summary.items()}
    return write_atomic(
        pa.Table.from_pylist([row]), Path(table_location(data_dir, "runs")) / f"{run_id}.parquet"
    )


def mark_interrupted(data_dir: Path, collection: str, current: str) -> list[str]:
    """Record runs of ``collection`` left "running" as "interrupted"; return what it did.

    Call with the collection's lock held: no other run of it is alive, so a "running"
    record is one whose process died before it could record its end (killed, or its
    failure handler itself failed, on a full disk say). A damaged record is skipped (one
    unreadable file of one past run must not stop every run). Returns one warning line per
    interrupted run and per damaged record.
    """
    lines = []
    for part in list_parts(data_dir, "runs"):
        try:
            columns = ["run_id", "collection", "status"]
            head = read_part(part, columns, "skipped (one past run's record)").to_pylist()
        except StateError as exc:
            lines.append(str(exc))
            continue
        if not head or head[0]["collection"] != collection or head[0]["run_id"] == current:
            continue
        if head[0]["status"] == "running":
            row = read_part(part).to_pylist()[0] | {"status": "interrupted"}
            write_atomic(pa.Table.from_pylist([row]), Path(part))
            lines.append(f"run {row['run_id']} had died without ending: marked interrupted")
    return lines


@dataclass(frozen=True, slots=True)
class PartRef:
    """What stage tasks hand each other: where a batch's table part is, not its rows."""

    table: str
    path: str
    rows: int
    failures: tuple[tuple[str, str], ...] = ()
    cached: int = 0  # embeddings only: rows whose vector came from the cache
    changed: tuple[str, ...] = ()  # documents only: files read as other bytes than planned
    seconds: float = 0.0  # the stage's own work on this batch (loading, splitting...)
    table_seconds: float = 0.0  # reading and writing its Parquet parts

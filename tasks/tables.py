"""Parquet tables at every hand-off: schemas, atomic part writers and readers.

Layout: ``<data_dir>/tables/<table>/run_id=<run>/part-<batch>.parquet``, one part per batch
(hive partitioning by run, readable as one dataset by pyarrow, DuckDB, polars or pandas).
A part is written to a hidden temporary file, fsynced and renamed into place, so a crash
never leaves a half-written part where a reader would see it (readers skip names that
start with ``.``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from tasks.documents import Chunk, Document, Header

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


# -- writing --------------------------------------------------------------------------------


def part_path(data_dir: Path, table: str, run_id: str, batch: int) -> Path:
    """Return where batch ``batch`` of run ``run_id`` of ``table`` is stored."""
    return data_dir / "tables" / table / f"run_id={run_id}" / f"part-{batch:05d}.parquet"


def write_atomic(table: pa.Table, path: Path) -> Path:
    """Write ``table`` to ``path`` atomically: hidden temp file, fsync, rename, fsync dir."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with tmp.open("wb") as fh:
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
    return path


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


def read_documents(path: Path) -> list[DocumentRow]:
    """Read back one ``documents`` part."""
    rows = []
    for r in pq.read_table(path).to_pylist():
        doc = None
        if r["status"] == "loaded":
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
    return read_chunks_table(pq.read_table(path))


def read_chunks_table(table: pa.Table) -> list[Chunk]:
    """Turn rows of the ``chunks`` schema into Chunks."""
    return [
        Chunk(
            chunk_id=r["chunk_id"],
            doc_id=r["doc_id"],
            source=r["source"],
            chunk_index=r["chunk_index"],
            start_index=r["start_index"],
            end_index=r["end_index"],
            text=r["text"],
            n_chars=r["n_chars"],
            n_tokens=r["n_tokens"],
            headers=tuple(Header(h["level"], h["text"]) for h in r["headers"]),
            metadata=json.loads(r["metadata"]),
        )
        for r in table.to_pylist()
    ]


def read_vectors(path: Path) -> tuple[list[str], np.ndarray]:
    """Read back one ``embeddings`` part as (chunk ids, float32 matrix)."""
    table = pq.read_table(path)
    vectors = table.column("vector").combine_chunks()
    dimension = vectors.type.list_size
    matrix = vectors.flatten().to_numpy(zero_copy_only=False).reshape(-1, dimension)
    return table.column("chunk_id").to_pylist(), matrix.astype(np.float32, copy=False)


def table_dir(data_dir: Path, table: str) -> Path:
    """Return the folder of ``table``."""
    return data_dir / "tables" / table


def read_table(data_dir: Path, table: str, columns: Iterable[str] | None = None) -> pa.Table:
    """Read every part of ``table`` as one Arrow table (empty if it has no parts yet)."""
    folder = table_dir(data_dir, table)
    if not folder.exists() or not any(folder.rglob("*.parquet")):
        return pa.table({})
    dataset = ds.dataset(folder, format="parquet", partitioning="hive")
    return dataset.to_table(columns=list(columns) if columns is not None else None)


def write_run(data_dir: Path, run_id: str, summary: dict[str, Any]) -> Path:
    """Append the one-row ``runs`` record of a finished run."""
    row = {k: (_json(v) if isinstance(v, list | dict) else v) for k, v in summary.items()}
    return write_atomic(
        pa.Table.from_pylist([row]), table_dir(data_dir, "runs") / f"{run_id}.parquet"
    )


@dataclass(frozen=True, slots=True)
class PartRef:
    """What stage tasks hand each other: where a batch's table part is, not its rows."""

    table: str
    path: str
    rows: int
    failures: tuple[tuple[str, str], ...] = ()
    cached: int = 0  # embeddings only: rows whose vector came from the cache

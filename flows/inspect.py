"""What is in a data dir: table sizes, the collection, the last runs (no Prefect)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tasks.common.errors import StoreError
from tasks.common.tables import part_sizes, read_table, tables_url
from tasks.index.lexical import LexicalIndex, database_path
from tasks.index.manifest import serving_collection
from tasks.index.store import ChromaStore, chroma_server

TABLES = ("documents", "chunks", "embeddings", "runs")


def _lexical_count(data_dir: Path, physical: str) -> int | None:
    """Return the chunks in the collection's lexical index (None: it has none)."""
    path = database_path(data_dir, physical)
    if not path.is_file():
        return None
    with LexicalIndex(path, readonly=True) as words:
        return words.count()


#: Columns of the runs table that hold JSON (lists and dicts are stored as text).
JSON_COLUMNS = ("stage_seconds", "failures", "warnings", "deleted_sources")


def _decoded(run: dict[str, Any]) -> dict[str, Any]:
    """Return a runs row with its JSON columns as objects again (for ``--json``)."""
    out = dict(run)
    for key in JSON_COLUMNS:
        if isinstance(out.get(key), str):
            out[key] = json.loads(out[key])
    return out


def inspect_data(
    data_dir: Path,
    collection: str,
    last_runs: int = 5,
    host: str | None = None,
    port: int = 8000,
) -> dict[str, Any]:
    """Return counts and sizes of every table, the collection and its last runs (newest first).

    Reads only: the Chroma server is the one given, else the one the data dir recorded;
    an embedded store that does not exist is reported missing, not created.
    """
    host, port = chroma_server(data_dir, host, port)
    tables = {}
    for name in TABLES:
        sizes = part_sizes(data_dir, name)
        tables[name] = {
            "rows": read_table(data_dir, name).num_rows,
            "parts": len(sizes),
            "bytes": sum(sizes),
        }
    try:
        physical = serving_collection(data_dir, collection)
        col = ChromaStore.open(data_dir, physical, host, port, create=False).collection()
        info: dict[str, Any] = {
            "name": collection,
            "physical": physical,
            "store": f"{host}:{port}" if host else str(data_dir / "chroma"),
            "count": col.count(),
            "lexical_count": _lexical_count(data_dir, physical),
            **(col.metadata or {}),
        }
    except StoreError:
        info = {
            "name": collection,
            "store": f"{host}:{port}" if host else str(data_dir / "chroma"),
            "count": 0,
            "missing": True,
        }
    runs = [
        r for r in read_table(data_dir, "runs").to_pylist() if r.get("collection") == collection
    ]
    runs.sort(key=lambda r: str(r.get("run_id")), reverse=True)
    recent = [_decoded(r) for r in runs[:last_runs]]
    return {
        "data_dir": str(data_dir),
        "tables_url": tables_url(data_dir),
        "tables": tables,
        "collection": info,
        "runs": recent,
    }

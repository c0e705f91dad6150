"""What is in a data dir: table sizes, the collection, the last runs (no Prefect)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tasks.common.errors import StoreError
from tasks.common.tables import part_sizes, read_table, tables_url
from tasks.index.lexical import LexicalIndex, database_path
from tasks.index.manifest import serving_collection
from tasks.index.owners import describe_missing, owned, owner_of
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
    an embedded store that does not exist is reported missing, not created. What the data
    dir holds (tables, lexical index, runs) is read even when the Chroma server does not
    answer: then ``error`` says so (the CLI exits 1), and the collection's ``count`` is None.
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
    info, error = _collection(data_dir, collection, host, port)
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
        "error": error,
    }


def _collection(
    data_dir: Path, collection: str, host: str | None, port: int
) -> tuple[dict[str, Any], str | None]:
    """Return what the store says of the serving collection, and the error that stopped it.

    A collection that is not there (or, on a server, belongs to another data dir) is
    ``missing`` with a ``message`` saying so; a server that does not answer is an error.
    """
    physical = serving_collection(data_dir, collection)
    where = f"{host}:{port}" if host else str(data_dir / "chroma")
    info: dict[str, Any] = {
        "name": collection,
        "physical": physical,
        "store": where,
        "count": None,
        "lexical_count": _lexical_count(data_dir, physical),
    }
    try:
        store = ChromaStore.open(data_dir, physical, host, port, create=False)
        meta = (store.collection().metadata or {}) if store.exists() else None
        if host:
            info["owned"] = _owned(store, data_dir)
            if meta is not None and owner_of(meta, data_dir):
                meta = None  # another data dir's: not this one's collection
        if meta is None:  # named with those the data dir has, as query names them
            message = describe_missing(store.client, data_dir, collection, where)
            return {**info, "count": 0, "missing": True, "message": message}, None
        return {**info, "count": store.count(), **meta}, None
    except StoreError as exc:
        if not host:  # no embedded store yet
            message = f"no Chroma store in {where} yet: run docflow ingest"
            return {**info, "count": 0, "missing": True, "message": message}, None
        error = str(exc)
    except Exception as exc:  # noqa: BLE001 - a server that fails mid-way fails in many types
        if not host:
            raise
        error = f"the Chroma server {where} failed: {type(exc).__name__}: {exc}"
    first = error.splitlines()[0] if error else error
    return {**info, "unreadable": True}, (
        f"{first}; start it (chroma run --host {host} --port {port} --path DIR) and run "
        "docflow inspect again (the tables, lexical index and runs above are the data dir's)"
    )


def _owned(store: ChromaStore, data_dir: Path) -> dict[str, Any]:
    """Return the server's collections: this data dir's, and other data dirs' (by path)."""
    found = owned(store.client, data_dir)
    return {"this_data_dir": found.mine + found.unowned, "other_data_dirs": found.others}

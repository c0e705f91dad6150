"""Stage 5, index: what the index holds and how it stays true.

Where vectors are written, and everything that keeps them right:

- :mod:`~tasks.index.store`: the Chroma collection (embedded, or on a server the data dir
  remembers): upserts, deletes, queries;
- :mod:`~tasks.index.lexical`: the BM25 index beside it (SQLite FTS5), same chunk ids;
- :mod:`~tasks.index.collection`: both of one physical collection, written together;
- :mod:`~tasks.index.manifest`: the manifest (``data/state.db``): per source file, its
  hash, chunk ids and status, and which collection version serves;
- :mod:`~tasks.index.sync`: the store stage: a batch's crash-safe write (pending ids,
  upsert, stale deletes, manifest commit), with its Prefect task;
- :mod:`~tasks.index.held`: the index and manifest a run's store tasks share, held open;
- :mod:`~tasks.index.consistency`: before a run writes, manifest, store and lexical index
  are checked against each other and repaired;
- :mod:`~tasks.index.admin`: whole-collection operations (versions for zero-downtime
  reingest, clear, restore from the tables);
- :mod:`~tasks.index.lock`: one writer per collection;
- :mod:`~tasks.index.owners`: which data dir owns which collection on a shared Chroma server.

The names below are exported lazily: importing one module of the package (a query's
lexical index) does not import the others (the store stage's tables and Prefect tasks).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tasks.index.collection import Index
    from tasks.index.lexical import LexicalIndex
    from tasks.index.manifest import Manifest, serving_collection
    from tasks.index.store import ChromaStore, Hit, chroma_server, use_chroma_server
    from tasks.index.sync import delete_task, store_task

_EXPORTS = {
    "ChromaStore": "tasks.index.store",
    "Hit": "tasks.index.store",
    "Index": "tasks.index.collection",
    "LexicalIndex": "tasks.index.lexical",
    "Manifest": "tasks.index.manifest",
    "chroma_server": "tasks.index.store",
    "delete_task": "tasks.index.sync",
    "serving_collection": "tasks.index.manifest",
    "store_task": "tasks.index.sync",
    "use_chroma_server": "tasks.index.store",
}
__all__ = [
    "ChromaStore",
    "Hit",
    "Index",
    "LexicalIndex",
    "Manifest",
    "chroma_server",
    "delete_task",
    "serving_collection",
    "store_task",
    "use_chroma_server",
]


def __getattr__(name: str) -> Any:
    """Import an exported name's module when the name is first used."""
    if name not in _EXPORTS:
        raise AttributeError(f"module 'tasks.index' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)

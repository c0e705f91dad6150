"""What an index holds, read back for comparisons: the tests' definition of "the same index".

Used by the integration tests that compare an index after some sequence of runs, crashes
and repairs with a from-scratch ingest.
"""

from __future__ import annotations

from pathlib import Path

from tasks.index.collection import record_text
from tasks.index.lexical import LexicalIndex, database_path
from tasks.index.manifest import Manifest, serving_collection
from tasks.index.store import ChromaStore


def snapshot(data_dir: Path, collection: str = "docflow") -> dict[str, str]:
    """Return {chunk id: text} of the serving collection.

    Also checks its lexical index holds exactly the same chunks, each indexed as the text
    the model read (so every scenario below checks both indexes).
    """
    physical = serving_collection(data_dir, collection)
    store = ChromaStore.open(data_dir, physical)
    got = store.collection().get(include=["documents", "metadatas"])
    with LexicalIndex(database_path(data_dir, physical), readonly=True) as words:
        sql = "SELECT c.chunk_id, t.body FROM chunks c JOIN terms t ON t.rowid = c.id"
        bodies = dict(words.db.execute(sql).fetchall())
    expected = {
        cid: record_text(text, meta)
        for cid, text, meta in zip(got["ids"], got["documents"], got["metadatas"], strict=True)
    }
    assert bodies == expected, "the lexical index differs from the vector store"
    return dict(zip(got["ids"], got["documents"] or [], strict=True))


def manifest_ids(data_dir: Path, collection: str = "docflow") -> set[str]:
    with Manifest.open(data_dir) as m:
        return m.live_chunk_ids(m.physical(collection))


def warm_cache(data_dir: Path, like: Path) -> None:
    """Give the new ``data_dir`` a copy of ``like``'s embedding cache, and nothing else.

    For from-scratch references: :func:`snapshot` compares chunk ids and texts, which do
    not depend on where a vector came from, so a reference built on a warm cache is the same
    reference, without computing every vector of the corpus again (the suite's time).
    """
    from tasks.embed.cache import cache_path
    from tests.conftest import copy_sqlite

    target, cached = cache_path(data_dir), cache_path(like)
    assert cached.is_file() and not data_dir.exists(), (cached, data_dir)
    copy_sqlite(cached, target)

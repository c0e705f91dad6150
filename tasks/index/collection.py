"""The index of one physical collection: its vectors (Chroma) and its words (BM25).

Every write goes to both, before the manifest commits the batch (tasks/index/sync.py): a
crash during or between the two leaves the batch "pending" in the manifest, and the next run
rewrites it and deletes every id that may have reached either index. The two writes of an
upsert run at the same time (:meth:`Index.upsert`), so the store stage takes about the
slower of the two, not their sum. The lexical index lives in the data dir whether the
vectors are embedded or on a Chroma server.

:func:`reconcile` makes the lexical index hold exactly the vector store's ids, from the
store's own records (no embedding): for a collection built before the lexical index
existed, or whose lexical database was lost. Ingest and restore call it before writing.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tasks.common.documents import Chunk, model_input, text_with_context
from tasks.common.failpoints import failpoint
from tasks.index import lexical
from tasks.index.lexical import LexicalIndex
from tasks.index.store import ChromaStore, Scalar, flatten_metadata

log = logging.getLogger(__name__)


def chunk_record(
    chunk: Chunk, metadata: dict[str, Scalar] | None = None
) -> tuple[str, str, dict[str, Scalar]]:
    """Return the lexical record of a chunk: id, indexed text, flat metadata.

    ``metadata``: the chunk's flat metadata, if the caller has it already.
    """
    flat = flatten_metadata(chunk) if metadata is None else metadata
    return chunk.chunk_id, model_input(chunk), flat


def record_text(text: str, metadata: Mapping[str, Any]) -> str:
    """Return what the lexical index reads for a stored chunk (what the model read).

    ``metadata`` is the flat metadata the vector store keeps (``flatten_metadata``), so a
    record read back from Chroma gives the same string as its Chunk did.
    """
    headers = json.loads(str(metadata.get("headers") or "[]"))
    return text_with_context(
        text,
        str(metadata.get("source", "")),
        metadata.get("title"),
        metadata.get("description"),
        [str(h["text"]) for h in headers],
    )


@dataclass
class Index:
    """The vector store and the lexical index of one physical collection, written together."""

    vectors: ChromaStore
    words: LexicalIndex

    @classmethod
    def open(
        cls, data_dir: Path, physical: str, host: str | None = None, port: int = 8000
    ) -> Index:
        """Open both indexes of ``physical`` (the lexical one is created if missing)."""
        return cls(
            ChromaStore.open(data_dir, physical, host, port),
            LexicalIndex.open(data_dir, physical),
        )

    def close(self) -> None:
        """Close the lexical database (Chroma's client needs no closing)."""
        self.words.close()

    def __enter__(self) -> Index:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def exists(self) -> bool:
        """Return whether the vector collection exists."""
        return self.vectors.exists()

    def upsert(self, chunks: Sequence[Chunk], vectors: np.ndarray) -> int:
        """Write chunks to the vector store and the lexical index, both at once.

        The metadata is flattened once for both. The vectors go in while SQLite indexes
        the words (a statement that runs without the GIL, which an embedded Chroma holds
        for the whole of its upsert: docs/performance.md); the lexical transaction commits
        once both are written. Returns the chunks written; the vectors' error first.
        """
        metadatas = [flatten_metadata(c) for c in chunks]

        def vectors_in() -> None:
            self.vectors.upsert(chunks, vectors, metadatas)
            failpoint("lexical:before-upsert")  # vectors written, the words not committed

        self.words.upsert(
            (chunk_record(c, m) for c, m in zip(chunks, metadatas, strict=True)), vectors_in
        )
        return len(chunks)

    def delete(self, ids: Iterable[str]) -> int:
        """Delete chunks by id from both indexes; return how many were asked."""
        todo = sorted(set(ids))
        deleted = self.vectors.delete(todo) if self.vectors.exists() else 0
        self.words.delete(todo)
        return deleted


def stored_records(
    store: ChromaStore, ids: Sequence[str] | None = None
) -> Iterator[tuple[str, str, dict[str, Scalar]]]:
    """Yield the lexical record of every chunk in the store (or of ``ids``), page by page."""
    col = store.collection()
    step = max(1, store.client.get_max_batch_size())
    if ids is None:
        pages: Iterable[dict[str, Any]] = (
            dict(col.get(limit=step, offset=lo, include=["documents", "metadatas"]))
            for lo in range(0, col.count(), step)
        )
    else:
        pages = (
            dict(col.get(ids=list(ids[lo : lo + step]), include=["documents", "metadatas"]))
            for lo in range(0, len(ids), step)
        )
    for page in pages:
        for chunk_id, text, meta in zip(
            page["ids"], page["documents"] or [], page["metadatas"] or [], strict=True
        ):
            flat = dict(meta or {})
            yield chunk_id, record_text(text or "", flat), flat


@dataclass(frozen=True, slots=True)
class Reconciled:
    """What :func:`reconcile` changed in the lexical index."""

    added: int
    removed: int


def reconcile(index: Index) -> Reconciled:
    """Make the lexical index hold exactly the vector store's chunk ids.

    A no-op when the two agree (the usual case: checked by count, then by ids only when
    the counts differ). Missing records are rebuilt from the store's documents and
    metadata; ids the store lacks are removed.
    """
    have = index.words.count()
    if not index.vectors.exists():
        if have:
            index.words.delete(index.words.ids())
        return Reconciled(0, have)
    if have == index.vectors.count():
        return Reconciled(0, 0)
    stored, indexed = index.vectors.ids(), index.words.ids()
    missing, extra = sorted(stored - indexed), sorted(indexed - stored)
    if missing:
        index.words.upsert(stored_records(index.vectors, missing))
    if extra:
        index.words.delete(extra)
    log.info(
        "lexical index of %s: %d added, %d removed", index.vectors.name, len(missing), len(extra)
    )
    return Reconciled(len(missing), len(extra))


def drop(data_dir: Path, physical: str, host: str | None = None, port: int = 8000) -> None:
    """Drop both indexes of ``physical`` (the vector collection first)."""
    ChromaStore.open(data_dir, physical, host, port).drop()
    lexical.drop(data_dir, physical)

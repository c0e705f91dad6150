"""Chroma store: embedded PersistentClient (default) or HttpClient, cosine space.

We always pass our own embeddings: the collection is created with no embedding function,
because Chroma's default one downloads a model at first use. The collection records the
embedding model and dimension; opening it with another model is refused (mixing vector
spaces silently ruins retrieval).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from tasks.documents import Chunk, header_keys
from tasks.errors import StoreError

if TYPE_CHECKING:
    from chromadb.api import ClientAPI
    from chromadb.api.models.Collection import Collection

log = logging.getLogger(__name__)

Scalar = str | int | float | bool


@dataclass(frozen=True, slots=True)
class Hit:
    """One query result: the chunk, its source and a cosine similarity score."""

    chunk_id: str
    source: str
    score: float
    text: str
    metadata: Mapping[str, Any]


def flatten_metadata(chunk: Chunk) -> dict[str, Scalar]:
    """Return Chroma-safe scalar metadata for a chunk.

    Scalars of the document metadata are kept as they are, anything else becomes JSON;
    headers are stored both as JSON and as flat ``h1``..``h6`` keys for filtering.
    """
    meta: dict[str, Scalar] = {}
    for key, value in chunk.metadata.items():
        if value is None:
            continue
        meta[key] = value if isinstance(value, Scalar) else json.dumps(value, default=str)
    meta.update(
        source=chunk.source,
        doc_id=chunk.doc_id,
        chunk_index=chunk.chunk_index,
        start_index=chunk.start_index,
        end_index=chunk.end_index,
        headers=json.dumps([h.to_dict() for h in chunk.headers], ensure_ascii=False),
    )
    meta.update(header_keys(chunk.headers))
    return meta


def make_client(path: Path | None = None, host: str | None = None, port: int = 8000) -> ClientAPI:
    """Return a Chroma client: HttpClient when ``host`` is given, else PersistentClient."""
    import chromadb
    from chromadb.config import Settings

    settings = Settings(anonymized_telemetry=False)
    if host:
        return chromadb.HttpClient(host=host, port=port, settings=settings)
    if path is None:
        raise StoreError("a Chroma path or host is required")
    path.mkdir(parents=True, exist_ok=True)
    return chromadb.PersistentClient(path=str(path), settings=settings)


class ChromaStore:
    """One Chroma collection holding docflow chunks for one embedding model."""

    def __init__(self, client: ClientAPI, name: str):
        """Wrap collection ``name`` of ``client`` (opened lazily)."""
        self.client = client
        self.name = name
        self._collection: Collection | None = None

    @classmethod
    def open(cls, data_dir: Path, name: str, host: str | None = None) -> ChromaStore:
        """Open the store under ``data_dir/chroma`` (or on a server when ``host`` is set)."""
        return cls(make_client(path=data_dir / "chroma", host=host), name)

    def collection(self, model: str | None = None, dimension: int | None = None) -> Collection:
        """Return the collection, creating it for ``model``/``dimension`` if needed.

        Raises:
            StoreError: If it exists for another model or dimension, or does not exist and
                no model is given.

        """
        if self._collection is not None:
            return self._collection
        if model is None:
            try:
                self._collection = self.client.get_collection(self.name, embedding_function=None)
            except Exception as exc:  # noqa: BLE001 - chroma raises several types for "missing"
                raise StoreError(
                    f"collection {self.name!r} does not exist: run docflow ingest"
                ) from exc
            return self._collection
        col = self.client.get_or_create_collection(
            self.name,
            embedding_function=None,
            configuration={"hnsw": {"space": "cosine"}},
            metadata={"embedding_model": model, "dimension": dimension},
        )
        have = col.metadata or {}
        if have.get("embedding_model") != model or have.get("dimension") != dimension:
            raise StoreError(
                f"collection {self.name!r} holds vectors of model {have.get('embedding_model')!r} "
                f"(dimension {have.get('dimension')}), not {model!r} (dimension {dimension}); "
                "run docflow reingest to rebuild it with the new model"
            )
        self._collection = col
        return col

    def upsert(self, chunks: Sequence[Chunk], vectors: np.ndarray) -> int:
        """Upsert chunks with their vectors, in batches within the client's maximum."""
        col = self.collection()
        step = max(1, self.client.get_max_batch_size())
        for lo in range(0, len(chunks), step):
            part = chunks[lo : lo + step]
            col.upsert(
                ids=[c.chunk_id for c in part],
                embeddings=vectors[lo : lo + step],
                documents=[c.text for c in part],
                metadatas=[flatten_metadata(c) for c in part],
            )
        return len(chunks)

    def count(self) -> int:
        """Return the number of chunks in the collection."""
        return int(self.collection().count())

    def query(
        self, vector: np.ndarray, k: int = 5, where: Mapping[str, Scalar] | None = None
    ) -> list[Hit]:
        """Return the ``k`` nearest chunks to ``vector``, best first."""
        col = self.collection()
        clause: dict[str, Any] | None = None
        if where:
            terms = [{key: value} for key, value in where.items()]
            clause = terms[0] if len(terms) == 1 else {"$and": terms}
        res = col.query(
            query_embeddings=[vector],
            n_results=k,
            where=clause,
            include=["documents", "metadatas", "distances"],
        )
        ids, docs = res["ids"][0], (res["documents"] or [[]])[0]
        metas, dists = (res["metadatas"] or [[]])[0], (res["distances"] or [[]])[0]
        return [
            Hit(cid, str(m.get("source", "")), 1.0 - float(d), text, dict(m))
            for cid, text, m, d in zip(ids, docs, metas, dists, strict=True)
        ]


# --- Prefect edge ---
from prefect import get_run_logger, task  # noqa: E402

from tasks.tables import PartRef, read_chunks, read_vectors  # noqa: E402


@task(name="store")
def store_task(
    chunks: PartRef, embeddings: PartRef, data_dir: str, collection: str, model: str
) -> int:
    """Upsert a batch's chunks and vectors into the collection."""
    rows = read_chunks(Path(chunks.path))
    if not rows:
        return 0
    ids, vectors = read_vectors(Path(embeddings.path))
    if ids != [c.chunk_id for c in rows]:
        raise StoreError(f"embeddings part {embeddings.path} does not match {chunks.path}")
    store = ChromaStore.open(Path(data_dir), collection)
    store.collection(model, int(vectors.shape[1]))
    written = store.upsert(rows, vectors)
    get_run_logger().info("stored %d chunks in %s", written, collection)
    return written


@task(name="open-store")
def open_store_task(data_dir: str, collection: str, model: str, dimension: int) -> str:
    """Create or check the collection before any work: a model mismatch fails fast."""
    ChromaStore.open(Path(data_dir), collection).collection(model, dimension)
    return collection

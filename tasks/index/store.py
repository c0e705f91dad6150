"""Chroma store: embedded PersistentClient (default) or HttpClient, cosine space.

We always pass our own embeddings: the collection is created with no embedding function,
because Chroma's default one downloads a model at first use. The collection records the
embedding model and dimension; opening it with another model is refused (mixing vector
spaces silently ruins retrieval).

A data dir remembers the Chroma server its collections were written to
(``<data_dir>/chroma.server``, :func:`chroma_server`), as it remembers its tables URL: after
``docflow ingest --chroma-host H``, every later command on that data dir (query, inspect,
clear, reingest, restore, the next ingest) uses H without the flag, so a collection stored
on a server is never read from an empty embedded store. A command that only reads opens
no embedded store that is not there (Chroma would create its folder).
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, cast

import numpy as np

from tasks.common.documents import Chunk, header_keys
from tasks.common.errors import StateError, StoreError
from tasks.common.records import read_record, write_record

if TYPE_CHECKING:
    from chromadb.api import ClientAPI
    from chromadb.api.models.Collection import Collection
    from pydantic import BaseModel

log = logging.getLogger(__name__)

Scalar = str | int | float | bool


@dataclass(frozen=True, slots=True)
class Hit:
    """One query result: the chunk, its source, its score and each side's score.

    ``score`` is what the results are ranked by: the cosine similarity (dense), the
    relative BM25 (lexical) or the fused score (hybrid; see tasks/retrieval/ranking.py).
    ``dense_score`` is the cosine similarity, ``lexical_score`` the BM25 relative to the
    question's best possible (0.0: none of the question's words); None where not computed.
    """

    chunk_id: str
    source: str
    score: float
    text: str
    metadata: Mapping[str, Any]
    dense_score: float | None = None
    lexical_score: float | None = None


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


#: The file in the data dir that records the Chroma server (``host:port``) it writes to.
CHROMA_SERVER_FILE = "chroma.server"


def recorded_server(data_dir: Path) -> tuple[str, int] | None:
    """Return the Chroma server ``data_dir`` recorded, or None (the embedded store)."""
    record = data_dir / CHROMA_SERVER_FILE
    value = read_record(record)
    if value is None:
        return None
    host, _, port = value.rpartition(":")
    if not host or not port.isdigit():
        raise StateError(f"{record} does not hold a Chroma server as host:port")
    return host, int(port)


def chroma_server(data_dir: Path, host: str | None, port: int) -> tuple[str | None, int]:
    """Return the Chroma server a command on ``data_dir`` uses, as ``(host, port)``.

    ``host`` given: that server (``""``: the embedded store). Not given: the server the
    data dir recorded, else the embedded store (``(None, port)``).
    """
    if host is not None:
        return host or None, port
    return recorded_server(data_dir) or (None, port)


def remember_server(data_dir: Path, host: str | None, port: int) -> None:
    """Record the Chroma server that commands writing ``data_dir`` were given.

    ``None``: keep what is recorded; ``""``: back to the embedded store (the record goes).
    The server must answer first, so a mistyped host is an error, never a record.

    Raises:
        StoreError: If the server does not answer.

    """
    if host is None:
        return
    record = data_dir / CHROMA_SERVER_FILE
    if not host:
        record.unlink(missing_ok=True)
        return
    make_client(host=host, port=port).heartbeat()
    write_record(record, f"{host}:{port}")


_Params = TypeVar("_Params", bound="BaseModel")


def use_chroma_server(params: _Params) -> _Params:
    """Return settings with the data dir's Chroma server filled in (writers call this).

    A server given in ``params`` is recorded for later commands (after it answered); none
    given means the recorded one, else the embedded store. ``params`` has ``data_dir``,
    ``chroma_host`` and ``chroma_port`` (IngestParams, CollectionParams).

    Raises:
        ConfigError: If the collection on the server belongs to another data dir.
    """
    data_dir = Path(getattr(params, "data_dir"))  # noqa: B009 - any settings model
    given, port = getattr(params, "chroma_host"), getattr(params, "chroma_port")  # noqa: B009
    host, port = chroma_server(data_dir, given, port)
    name = getattr(params, "collection", None)
    if host and name:  # never write a collection another data dir owns on the server
        from tasks.index.owners import refuse_foreign

        refuse_foreign(make_client(host=host, port=port), data_dir, name, f"{host}:{port}")
    remember_server(data_dir, given, getattr(params, "chroma_port"))  # noqa: B009
    return params.model_copy(update={"chroma_host": host, "chroma_port": port})


def make_client(
    path: Path | None = None, host: str | None = None, port: int = 8000, create: bool = True
) -> ClientAPI:
    """Return a Chroma client: HttpClient when ``host`` is given, else PersistentClient.

    While a run of this process holds the embedded store at ``path``, the client is the
    store process's (tasks/index/store_process.py): every call runs in that child.

    Raises:
        StoreError: If the server does not answer, or (``create`` False) the embedded
            store at ``path`` does not exist yet: readers must not create it.
        StateError: If the embedded store cannot be opened (a full disk).

    """
    if host:
        try:
            return _http_client(host, port)
        except Exception as exc:  # noqa: BLE001 - connection errors come in many types
            raise StoreError(f"the Chroma server {host}:{port} does not answer: {exc}") from exc
    if path is None:
        raise StoreError("a Chroma path or host is required")
    if not create and not (path / "chroma.sqlite3").is_file():
        raise StoreError(f"no Chroma store in {path} yet: run docflow ingest")
    from tasks.index.store_process import client_for

    if (routed := client_for(path)) is not None:
        return cast("ClientAPI", routed)
    import chromadb
    from chromadb.config import Settings
    from chromadb.errors import ChromaError

    if not (path / "chroma.sqlite3").exists():
        # Chroma caches one system per path for the process; if the folder was deleted
        # under this process, that cached system points at files that are gone
        from chromadb.api.shared_system_client import SharedSystemClient

        SharedSystemClient.clear_system_cache()
    try:
        path.mkdir(parents=True, exist_ok=True)
        return chromadb.PersistentClient(str(path), Settings(anonymized_telemetry=False))
    except (ChromaError, OSError) as exc:  # Chroma writes on open: a full disk refuses it
        cure = ""
        if any(sign in str(exc) for sign in ("not a database", "malformed")):  # SQLite's words
            cure = (
                f" (damaged: move {path} aside, then docflow restore rebuilds each collection "
                "from the tables without embedding)"
            )
        raise StateError(f"cannot open the Chroma store {path}: {exc}{cure}") from exc


#: This process's client of each Chroma server, by (host, port): see :func:`_http_client`.
_http_clients: dict[tuple[str, int], ClientAPI] = {}
_http_lock = threading.Lock()


def _http_client(host: str, port: int) -> ClientAPI:
    """Return this process's client of the server, made on first use.

    Making one checks the server's tenant and database in a few requests (about 70 ms a
    time, beside an ingest on two cores: a store task per batch opened one); a kept one
    answers a heartbeat first, so a server that went away is reported as at first.
    """
    import chromadb

    with _http_lock:
        kept = _http_clients.pop((host, port), None)
    if kept is not None:
        with suppress(Exception):  # gone: make a new one, which reports why
            kept.heartbeat()
            with _http_lock:
                _http_clients[(host, port)] = kept
            return kept
    settings = chromadb.config.Settings(anonymized_telemetry=False)
    client = chromadb.HttpClient(host=host, port=port, settings=settings)
    with _http_lock:
        _http_clients[(host, port)] = client
    return client


class ChromaStore:
    """One Chroma collection holding docflow chunks for one embedding model."""

    def __init__(self, client: ClientAPI, name: str, owner: Path | None = None):
        """Wrap collection ``name`` of ``client`` (opened lazily).

        ``owner``: the data dir a collection created on a server is recorded to belong to
        (tasks/index/owners.py).
        """
        self.client = client
        self.name = name
        self.owner = owner
        self._collection: Collection | None = None

    @classmethod
    def open(
        cls,
        data_dir: Path,
        name: str,
        host: str | None = None,
        port: int = 8000,
        create: bool = True,
    ) -> ChromaStore:
        """Open the store under ``data_dir/chroma`` (or on a server when ``host`` is set).

        ``create`` False (readers): a missing embedded store raises StoreError instead of
        being created.
        """
        return cls(
            make_client(data_dir / "chroma", host, port, create), name, data_dir if host else None
        )

    def exists(self) -> bool:
        """Return whether the collection exists."""
        return self.name in collection_names(self.client)

    def collection(self, model: str | None = None, dimension: int | None = None) -> Collection:
        """Return the collection, creating it for ``model``/``dimension`` if needed.

        Raises:
            StoreError: If it exists for another model or dimension, or does not exist and
                no model is given.
        """
        if self._collection is not None and model is None:
            return self._collection
        if model is None:
            if not self.exists():
                raise StoreError(f"collection {self.name!r} does not exist: run docflow ingest")
            self._collection = self.client.get_collection(self.name, embedding_function=None)
            return self._collection
        from tasks.index.owners import owner_marks

        marks = owner_marks(self.owner) if self.owner is not None else {}
        col = self.client.get_or_create_collection(
            self.name,
            embedding_function=None,
            configuration={"hnsw": {"space": "cosine"}},
            metadata={"embedding_model": model, "dimension": dimension, **marks},
        )
        self._check(col, model, dimension)
        self._collection = col
        return col

    def ensure(self, model: str, dimension: Callable[[], int]) -> Collection:
        """Open the collection for ``model``, creating it if missing.

        ``dimension`` is called only to create it, so checking an existing collection never
        loads the model. Raises StoreError if it holds another model's vectors.
        """
        if self.exists():
            col = self.collection()
            self._check(col, model, None)
            return col
        return self.collection(model, dimension())

    def _check(self, col: Collection, model: str, dimension: int | None) -> None:
        have = col.metadata or {}
        same_dim = dimension is None or have.get("dimension") == dimension
        if have.get("embedding_model") != model or not same_dim:
            raise StoreError(
                f"collection {self.name!r} holds vectors of model {have.get('embedding_model')!r} "
                f"(dimension {have.get('dimension')}), not {model!r}"
                + (f" (dimension {dimension})" if dimension is not None else "")
                + "; run docflow reingest to rebuild it with the new model"
            )

    def metadata(self) -> dict[str, Any]:
        """Return the collection's metadata (model, dimension, splitter fingerprint)."""
        return dict(self.collection().metadata or {})

    def update_metadata(self, **values: Scalar) -> None:
        """Merge ``values`` into the collection's metadata."""
        col = self.collection()
        col.modify(metadata={**(col.metadata or {}), **values})

    def _step(self) -> int:
        return max(1, self.client.get_max_batch_size())

    def upsert(
        self,
        chunks: Sequence[Chunk],
        vectors: np.ndarray,
        metadatas: Sequence[dict[str, Scalar]] | None = None,
    ) -> int:
        """Upsert chunks with their vectors (and flat metadata, if the caller has it)."""
        col, step = self.collection(), self._step()
        metas = [flatten_metadata(c) for c in chunks] if metadatas is None else metadatas
        for lo in range(0, len(chunks), step):
            part, hi = chunks[lo : lo + step], lo + step
            col.upsert(
                ids=[c.chunk_id for c in part],
                embeddings=vectors[lo:hi],
                documents=[c.text for c in part],
                metadatas=list(metas[lo:hi]),
            )
        return len(chunks)

    def delete(self, ids: Iterable[str]) -> int:
        """Delete chunks by id (ids not present are ignored); return how many were asked."""
        todo = sorted(set(ids))
        if not todo:
            return 0
        col = self.collection()
        step = self._step()
        for lo in range(0, len(todo), step):
            col.delete(ids=todo[lo : lo + step])
        return len(todo)

    def ids(self) -> set[str]:
        """Return every chunk id in the collection."""
        col = self.collection()
        total, step, out = col.count(), self._step(), set()
        for offset in range(0, total, step):
            out.update(col.get(limit=step, offset=offset, include=[])["ids"])
        return out

    def drop(self) -> None:
        """Delete the whole collection if it exists."""
        if self.exists():
            self.client.delete_collection(self.name)
        self._collection = None

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
            Hit(cid, str(m.get("source", "")), 1.0 - float(d), text, dict(m), 1.0 - float(d))
            for cid, text, m, d in zip(ids, docs, metas, dists, strict=True)
        ]


def collection_names(client: ClientAPI) -> list[str]:
    """Return the names of every collection of a client."""
    return [c if isinstance(c, str) else c.name for c in client.list_collections()]

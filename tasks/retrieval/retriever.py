"""The Retriever: questions answered from one docflow collection (``docflow query``).

It opens the collection that serves a name (its vectors on the embedded store or the
Chroma server the data dir remembers, its BM25 index beside them), embeds the question
with the model the collection records, lets each side propose candidates and ranks them
with :mod:`tasks.retrieval.ranking`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from tasks.common.config import (
    DEFAULT_DENSE_WEIGHT,
    DEFAULT_FEEDBACK_WEIGHT,
    DEFAULT_FUSION,
    DEFAULT_RETRIEVAL,
    QueryParams,
    validated,
)
from tasks.common.errors import ConfigError, StateError, StoreError
from tasks.index.lexical import LexicalIndex, database_path
from tasks.index.manifest import serving_collection
from tasks.index.store import ChromaStore, Hit, Scalar, chroma_server
from tasks.retrieval.ranking import (
    ScoreOf,
    Scores,
    candidates,
    check_question,
    check_retrieval,
    cosine,
    rank,
    rocchio,
)

if TYPE_CHECKING:
    from tasks.embed.model import Embedder

log = logging.getLogger(__name__)


def _down(host: str, port: int) -> str:
    """Return what to say of a Chroma server that does not answer."""
    return f"the Chroma server {host}:{port} does not answer"


def _missing(
    data: Path, collection: str, host: str | None, port: int, store: ChromaStore | None
) -> str:
    """Return the one-line error for a collection the data dir does not have.

    On a server it names this data dir's collections and those of other data dirs.
    """
    if host and store is not None:
        from tasks.index.owners import describe_missing

        return describe_missing(store.client, data, collection, f"{host}:{port}")
    from tasks.index.admin import logical_names

    names = logical_names(data, host, port, create=False)
    have = f"it has {', '.join(names)}" if names else "it has none yet: run docflow ingest"
    return f"collection {collection!r} not found in {data / 'chroma'}; {have}"


def _serving(data_dir: Path, collection: str, host: str | None, port: int) -> str:
    """Return the version serving ``collection``; with a damaged manifest, the store's only one.

    A query needs only the store: when the manifest (which holds the pointer) cannot be
    read, the one version of the collection the store has is the one that serves.
    """
    try:
        return serving_collection(data_dir, collection)
    except StateError as exc:
        from tasks.index.admin import versions

        found = versions(data_dir, collection, host, port, create=False)
        if len(found) != 1:
            raise StateError(
                f"{exc}; the store holds {len(found)} versions of {collection!r}, so which one "
                "serves is unknown"
            ) from exc
        log.warning("%s; answering from %s, the only version in the store", exc, found[0])
        return found[0]


class Retriever:
    """Answer questions from one docflow collection (embed it in your own application).

    Opens the collection that serves ``collection`` (after a reingest, its newest version)
    once and keeps the model loaded between questions::

        from docflow import Retriever
        with Retriever("data", "docflow") as retriever:
            for hit in retriever.search("when do bees swarm?", k=3):
                print(hit.score, hit.source, hit.text[:80])

    After the ``with`` block (or :meth:`close`) it is closed, and a search says so.
    """

    def __init__(
        self,
        data_dir: Path | str = "data",
        collection: str = "docflow",
        retrieval: str = DEFAULT_RETRIEVAL,
        dense_weight: float = DEFAULT_DENSE_WEIGHT,
        host: str | None = None,
        port: int = 8000,
        fusion: str = DEFAULT_FUSION,
        stop_words: bool = True,
        per_source: int | None = None,
        feedback: int = 0,
        feedback_weight: float = DEFAULT_FEEDBACK_WEIGHT,
    ):
        """Open the serving collection's vector store and lexical index.

        The vectors are on the Chroma server ``host`` when given, else on the one the data
        dir recorded when it was written, else in its embedded store. ``per_source`` is
        the searches' default (see :meth:`search`); ``feedback`` hits move the question's
        vector before a second dense search (Rocchio, tasks/retrieval/ranking.py).

        Raises:
            ConfigError: For an unknown method or fusion, a bad weight or per_source, a
                data dir that
                does not exist, or a collection that does not exist (naming those that do).
            StoreError: If a lexical ranking is asked of a collection without a lexical
                index.

        """
        check_retrieval(retrieval, dense_weight)
        self.ranking = validated(
            QueryParams,
            {
                "retrieval": retrieval,
                "dense_weight": dense_weight,
                "fusion": fusion,
                "stop_words": stop_words,
                "per_source": per_source,
                "feedback": feedback,
                "feedback_weight": feedback_weight,
            },
        )
        self.closed = False
        data = Path(data_dir)
        if not data.is_dir():  # opening the store would create it
            raise ConfigError(
                f"data dir {data} does not exist: nothing was ingested there "
                "(docflow ingest --data-dir DIR builds an index)"
            )
        host, port = chroma_server(data, host, port)  # the flag's, else the data dir's
        self.physical = _serving(data, collection, host, port)
        path = database_path(data, self.physical)
        self.words = LexicalIndex(path, readonly=True) if path.is_file() else None
        self.store: ChromaStore | None = None
        self._embedder: Embedder | None = None
        try:
            self.store = ChromaStore.open(data, self.physical, host, port, create=False)
            found = self.store.exists()
        except StoreError:
            if host and retrieval == "lexical" and self.words is not None:
                # the words are local: a lexical query answers while the server is down
                log.warning("%s; answering from the lexical index alone", _down(host, port))
                self.store, self.model = None, ""
                return
            if host:
                if self.words is not None:
                    self.words.close()
                raise StoreError(
                    f"{_down(host, port)}: start it, or query with --retrieval lexical, "
                    "which needs only the data dir"
                ) from None
            found = False  # no embedded store yet (and opening it would create it)
        if found and host:  # a server's collection of another data dir is not this one's
            from tasks.index.owners import owner_of

            assert self.store is not None
            found = owner_of(self.store.collection().metadata, data) is None
        if not found:
            if self.words is not None:
                self.words.close()
            raise ConfigError(_missing(data, collection, host, port, self.store))
        assert self.store is not None  # found
        model = (self.store.collection().metadata or {}).get("embedding_model")
        if not model:
            raise StoreError(f"collection {collection!r} records no embedding model")
        self.model = str(model)
        if self.words is None and retrieval != "dense":
            raise StoreError(
                f"collection {collection!r} has no lexical index ({path}): run docflow ingest, "
                "which rebuilds it from the vector store, or query with --retrieval dense"
            )

    def close(self) -> None:
        """Close the lexical database; later searches raise StoreError."""
        self.closed = True
        if self.words is not None:
            self.words.close()

    def __enter__(self) -> Retriever:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _check_open(self) -> None:
        if self.closed:
            raise StoreError(
                "this Retriever is closed (its with block ended): search inside the block, "
                "or open a new Retriever"
            )

    def embed(self, text: str) -> np.ndarray:
        """Return the question's vector, from the model the collection records."""
        if self._embedder is None:
            from tasks.embed.model import Embedder

            self._embedder = Embedder(self.model)
        vector: np.ndarray = self._embedder.embed([text])[0]
        return vector

    def search(
        self,
        text: str,
        k: int = 5,
        where: Mapping[str, Scalar] | None = None,
        per_source: int | None = None,
    ) -> list[Hit]:
        """Return the ``k`` best chunks for ``text``, best first.

        ``where`` keeps only chunks whose metadata has these values (both sides); it never
        changes a chunk's score. ``per_source`` keeps at most that many chunks of one
        source file (its best; default: the Retriever's, else no limit), so the ``k``
        hits show more distinct documents. Each hit carries its final score and each
        side's score (cosine; BM25 relative to the question's words; None where the
        method did not compute it: the cosine of a ``lexical`` search).

        Raises:
            ValueError: For an empty (or whitespace-only) question, or a per_source below 1.
            StoreError: If the retriever is closed.

        """
        check_question(text)
        self._check_open()
        ranking = self.ranking
        if per_source is not None:
            if per_source < 1:
                raise ValueError(f"per_source must be at least 1, got {per_source}")
            ranking = ranking.model_copy(update={"per_source": per_source})
        n = candidates(k, ranking.per_source)
        stop_words = ranking.stop_words
        records: dict[str, tuple[str, dict[str, Any]]] = {}
        vector = self.embed(text) if ranking.retrieval != "lexical" else None
        dense_top: dict[str, float] = {}
        if vector is not None:
            for hit in self._vectors().query(vector, k=n, where=where):
                dense_top[hit.chunk_id] = hit.score
                records[hit.chunk_id] = (hit.text, dict(hit.metadata))
        words = self.words
        lexical_top = (
            words.search(text, n, where, stop_words)
            if words and ranking.retrieval != "dense"
            else {}
        )

        def exact(vector: np.ndarray) -> ScoreOf:
            def dense_of(ids: Sequence[str]) -> Scores:
                got = self._fetch(ids, embeddings=True, into=records)
                if not got:
                    return {}
                sims = cosine(vector, np.asarray(list(got.values())))
                return {i: float(s) for i, s in zip(got, sims, strict=True)}

            return dense_of

        def requery(ids: Sequence[str]) -> tuple[Scores, ScoreOf]:
            assert vector is not None
            hits = list(self._fetch(ids, embeddings=True, into=records).values())
            moved = rocchio(vector, np.asarray(hits), ranking.feedback_weight)
            top = {}
            for hit in self._vectors().query(moved.astype(np.float32), k=n, where=where):
                top[hit.chunk_id] = hit.score
                records[hit.chunk_id] = (hit.text, dict(hit.metadata))
            return top, exact(moved)

        def lexical_of(ids: Sequence[str]) -> Scores:
            assert words is not None
            return words.scores(text, ids, where, stop_words)

        def source_of(ids: Sequence[str]) -> dict[str, str]:
            self._fetch([i for i in ids if i not in records], into=records)
            return {i: str(records[i][1].get("source", "")) for i in ids if i in records}

        ranked = rank(
            ranking,
            k,
            dense_top,
            lexical_top,
            exact(vector) if vector is not None else None,
            lexical_of if words is not None else None,
            source_of,
            requery if vector is not None else None,
        )
        self._fetch([r.chunk_id for r in ranked if r.chunk_id not in records], into=records)
        return [
            Hit(
                r.chunk_id,
                str(records[r.chunk_id][1].get("source", "")),
                r.score,
                records[r.chunk_id][0],
                records[r.chunk_id][1],
                dense_score=r.dense,
                lexical_score=r.lexical,
            )
            for r in ranked
            if r.chunk_id in records  # a lexical id the store lacks is never shown
        ]

    def _vectors(self) -> ChromaStore:
        """Return the vector store (a lexical query while the server is down has none)."""
        if self.store is None:
            raise StoreError("the Chroma server does not answer: only lexical queries work")
        return self.store

    def metadata_keys(self) -> list[str]:
        """Return the metadata keys the collection's chunks have (to name a bad filter)."""
        self._check_open()
        if self.words is not None:
            return self.words.metadata_keys()
        got = self._vectors().collection().get(limit=1000, include=["metadatas"])
        return sorted({key for meta in got["metadatas"] or [] for key in (meta or {})})

    def _fetch(
        self,
        ids: Sequence[str],
        into: dict[str, tuple[str, dict[str, Any]]],
        embeddings: bool = False,
    ) -> dict[str, np.ndarray]:
        """Read chunks' text and metadata (and vectors) from the store into ``into``."""
        if not ids:
            return {}
        if self.store is None:  # the server is down: a lexical query reads the words
            assert self.words is not None and not embeddings
            into.update(self.words.records(ids))
            return {}
        include: list[Any] = ["documents", "metadatas"] + (["embeddings"] if embeddings else [])
        got = self.store.collection().get(ids=list(ids), include=include)
        vectors: dict[str, np.ndarray] = {}
        embedded = got.get("embeddings") if embeddings else None
        for n, chunk_id in enumerate(got["ids"]):
            text = (got["documents"] or [])[n] or ""
            into[chunk_id] = (text, dict((got["metadatas"] or [])[n] or {}))
            if embedded is not None:
                vectors[chunk_id] = np.asarray(embedded[n], dtype=np.float64)
        return vectors

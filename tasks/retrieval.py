"""Retrieval: rank chunks for a question by meaning (dense), by words (lexical) or both.

- ``dense``: cosine similarity of the question's embedding to each chunk's (Chroma).
- ``lexical``: BM25 over the words of the chunks (tasks/lexical.py); needs no model.
- ``hybrid`` (the default): a weighted sum of both scores, each min-max normalised over
  the candidates of this one question: ``w * dense + (1 - w) * lexical`` with
  ``w = dense_weight``. The candidates are the top :data:`CANDIDATES` of each side; a
  candidate found by one side gets its exact score from the other (its stored vector's
  cosine, its BM25 score, 0 when it has none of the question's words), so no candidate
  is ranked on a guess. Min-max puts two scales (cosine in [-1, 1], BM25 unbounded) on
  [0, 1] per question; the weight then says how much each side counts. Measured on every
  shared evaluation corpus (README, "Choosing the default"): on technical prose the words
  find what the embedding misses, on paraphrased questions the embedding does, and the
  weighted sum keeps the better of both; reciprocal-rank fusion, which ignores how far
  apart the scores are, did worse than BM25 alone in the issue's experiment.

The ranking functions here are pure (:func:`rank`), shared by the index
(:class:`Retriever`) and ``docflow evaluate``, so an evaluation scores exactly what a
query returns.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, get_args

import numpy as np

from tasks.config import DEFAULT_DENSE_WEIGHT, DEFAULT_RETRIEVAL, Retrieval
from tasks.errors import ConfigError, StateError, StoreError
from tasks.lexical import LexicalIndex, database_path
from tasks.manifest import serving_collection
from tasks.store import ChromaStore, Hit, Scalar

if TYPE_CHECKING:
    from tasks.embed import Embedder

log = logging.getLogger(__name__)

RETRIEVALS: tuple[str, ...] = get_args(Retrieval)
#: Candidates each side proposes for one question (at least ``k``).
CANDIDATES = 50

#: Scores of some chunks, by chunk id.
Scores = Mapping[str, float]
#: Scores of chosen chunk ids on one side.
ScoreOf = Callable[[Sequence[str]], Scores]


@dataclass(frozen=True, slots=True)
class Ranked:
    """One ranked chunk: its final score and each side's raw score (None: not computed)."""

    chunk_id: str
    score: float
    dense: float | None
    lexical: float | None


def check_retrieval(retrieval: str, dense_weight: float) -> None:
    """Raise ConfigError for an unknown method or a weight outside [0, 1]."""
    if retrieval not in RETRIEVALS:
        raise ConfigError(f"unknown retrieval {retrieval!r}; expected one of {RETRIEVALS}")
    if not 0.0 <= dense_weight <= 1.0:
        raise ConfigError(f"dense_weight must be between 0 and 1, got {dense_weight}")


def min_max(scores: Scores) -> dict[str, float]:
    """Return scores rescaled to [0, 1] over these ids (all equal: 1.0 if positive, else 0.0)."""
    if not scores:
        return {}
    lo, hi = min(scores.values()), max(scores.values())
    if hi > lo:
        return {i: (s - lo) / (hi - lo) for i, s in scores.items()}
    return {i: 1.0 if s > 0 else 0.0 for i, s in scores.items()}


def fuse(dense: Scores, lexical: Scores, dense_weight: float) -> list[Ranked]:
    """Return every id of either side ranked by the weighted sum of normalised scores.

    An id missing on one side counts as that side's lowest score. Ties go to the lower id.
    """
    d, w = min_max(dense), min_max(lexical)
    ranked = [
        Ranked(
            i,
            dense_weight * d.get(i, 0.0) + (1.0 - dense_weight) * w.get(i, 0.0),
            dense.get(i),
            lexical.get(i),
        )
        for i in set(dense) | set(lexical)
    ]
    ranked.sort(key=lambda r: (-r.score, r.chunk_id))
    return ranked


def _top(scores: Scores, k: int) -> list[str]:
    return sorted(scores, key=lambda i: (-scores[i], i))[:k]


def rank(
    retrieval: str,
    k: int,
    dense_top: Scores,
    lexical_top: Scores,
    dense_of: ScoreOf | None,
    lexical_of: ScoreOf | None,
    dense_weight: float = DEFAULT_DENSE_WEIGHT,
) -> list[Ranked]:
    """Return the ``k`` best chunks by ``retrieval`` from each side's candidates.

    Args:
        retrieval: ``dense``, ``lexical`` or ``hybrid``.
        k: How many to return.
        dense_top: The dense side's candidates (empty for ``lexical``).
        lexical_top: The lexical side's candidates (empty for ``dense``).
        dense_of: Exact dense scores of given ids (None: not available).
        lexical_of: Exact lexical scores of given ids (None: not available).
        dense_weight: ``w`` of ``hybrid``.

    """
    if retrieval == "hybrid":
        dense, lexical = dict(dense_top), dict(lexical_top)
        if dense_of is not None:
            dense.update(dense_of(sorted(set(lexical) - set(dense))))
        if lexical_of is not None:
            lexical.update(lexical_of(sorted(set(dense) - set(lexical))))
        return fuse(dense, lexical, dense_weight)[:k]
    own, other_of = (dense_top, lexical_of) if retrieval == "dense" else (lexical_top, dense_of)
    ids = _top(own, k)
    other = other_of(ids) if other_of is not None and ids else {}
    return [
        Ranked(
            i,
            own[i],
            own[i] if retrieval == "dense" else other.get(i),
            other.get(i) if retrieval == "dense" else own[i],
        )
        for i in ids
    ]


def cosine(vector: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Return the cosine similarity of ``vector`` to each row."""
    norms = np.linalg.norm(rows, axis=1) * max(float(np.linalg.norm(vector)), 1e-12)
    return np.asarray(rows @ vector / np.maximum(norms, 1e-12), dtype=np.float64)


def _serving(data_dir: Path, collection: str, host: str | None, port: int) -> str:
    """Return the version serving ``collection``; with a damaged manifest, the store's only one.

    A query needs only the store: when the manifest (which holds the pointer) cannot be
    read, the one version of the collection the store has is the one that serves.
    """
    try:
        return serving_collection(data_dir, collection)
    except StateError as exc:
        from tasks.admin import versions

        found = versions(data_dir, collection, host, port)
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
        retriever = Retriever("data", "docflow")
        for hit in retriever.search("when do bees swarm?", k=3):
            print(hit.score, hit.source, hit.text[:80])
    """

    def __init__(
        self,
        data_dir: Path | str = "data",
        collection: str = "docflow",
        retrieval: str = DEFAULT_RETRIEVAL,
        dense_weight: float = DEFAULT_DENSE_WEIGHT,
        host: str | None = None,
        port: int = 8000,
    ):
        """Open the serving collection's vector store and lexical index.

        Raises:
            ConfigError: For an unknown method or a bad weight, or a collection that does
                not exist (naming those that do).
            StoreError: If a lexical ranking is asked of a collection without a lexical
                index.

        """
        check_retrieval(retrieval, dense_weight)
        self.retrieval = retrieval
        self.dense_weight = dense_weight
        data = Path(data_dir)
        self.physical = _serving(data, collection, host, port)
        self.store = ChromaStore.open(data, self.physical, host, port)
        if not self.store.exists():
            from tasks.admin import logical_names

            where = f"{host}:{port}" if host else str(data / "chroma")
            names = logical_names(data, host, port)
            have = f"it has {', '.join(names)}" if names else "it has none yet: run docflow ingest"
            raise ConfigError(f"collection {collection!r} not found in {where}; {have}")
        model = (self.store.collection().metadata or {}).get("embedding_model")
        if not model:
            raise StoreError(f"collection {collection!r} records no embedding model")
        self.model = str(model)
        self._embedder: Embedder | None = None
        path = database_path(data, self.physical)
        self.words = LexicalIndex(path, readonly=True) if path.is_file() else None
        if self.words is None and retrieval != "dense":
            raise StoreError(
                f"collection {collection!r} has no lexical index ({path}): run docflow ingest, "
                "which rebuilds it from the vector store, or query with --retrieval dense"
            )

    def close(self) -> None:
        """Close the lexical database."""
        if self.words is not None:
            self.words.close()

    def __enter__(self) -> Retriever:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def embed(self, text: str) -> np.ndarray:
        """Return the question's vector, from the model the collection records."""
        if self._embedder is None:
            from tasks.embed import Embedder

            self._embedder = Embedder(self.model)
        vector: np.ndarray = self._embedder.embed([text])[0]
        return vector

    def search(self, text: str, k: int = 5, where: Mapping[str, Scalar] | None = None) -> list[Hit]:
        """Return the ``k`` best chunks for ``text``, best first.

        ``where`` keeps only chunks whose metadata has these values (both sides). Each hit
        carries its final score and each side's raw score (cosine, BM25; None where the
        method did not compute it: the cosine of a ``lexical`` search).
        """
        n = max(k, CANDIDATES)
        records: dict[str, tuple[str, dict[str, Any]]] = {}
        vector = self.embed(text) if self.retrieval != "lexical" else None
        dense_top: dict[str, float] = {}
        if vector is not None:
            for hit in self.store.query(vector, k=n, where=where):
                dense_top[hit.chunk_id] = hit.score
                records[hit.chunk_id] = (hit.text, dict(hit.metadata))
        words = self.words
        lexical_top = words.search(text, n, where) if words and self.retrieval != "dense" else {}

        def dense_of(ids: Sequence[str]) -> Scores:
            assert vector is not None
            got = self._fetch(ids, embeddings=True, into=records)
            if not got:
                return {}
            sims = cosine(vector, np.asarray(list(got.values())))
            return {i: float(s) for i, s in zip(got, sims, strict=True)}

        def lexical_of(ids: Sequence[str]) -> Scores:
            assert words is not None
            return words.scores(text, ids, where)

        ranked = rank(
            self.retrieval,
            k,
            dense_top,
            lexical_top,
            dense_of if vector is not None else None,
            lexical_of if words is not None else None,
            self.dense_weight,
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

    def _fetch(
        self,
        ids: Sequence[str],
        into: dict[str, tuple[str, dict[str, Any]]],
        embeddings: bool = False,
    ) -> dict[str, np.ndarray]:
        """Read chunks' text and metadata (and vectors) from the store into ``into``."""
        if not ids:
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

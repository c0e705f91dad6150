"""Retrieval: rank chunks for a question by meaning (dense), by words (lexical) or both.

- ``dense``: cosine similarity of the question's embedding to each chunk's (Chroma).
- ``lexical``: BM25 over the words of the chunks (tasks/lexical.py), relative to the
  best BM25 the question could get, in [0, 1); needs no model.
- ``hybrid`` (the default): both. Each side proposes its top :data:`CANDIDATES`; a
  candidate found by one side gets its exact score from the other (its stored vector's
  cosine, its relative BM25, 0 when it has none of the question's words), so no candidate
  is ranked on a guess. Then a *fusion* puts the two scores on one scale
  (:data:`FUSIONS`):

  - ``absolute`` (the default): ``w * max(cosine, 0) + (1 - w) * relative BM25`` with
    ``w = dense_weight``. Both scores keep their own meaning, so a side that matches the
    question well (a chunk holding its rare words, or a close paraphrase) outweighs a side
    that only matches it weakly, question by question, with no knowledge of the corpus.
    The score does not depend on the other candidates: it is comparable across questions
    and the same whatever a ``where`` filter keeps, and junk questions score low.
  - ``minmax`` (the default before): each side rescaled to [0, 1] over this question's
    candidates, then weighted. It hands the weaker side the same say whatever its
    scores are: on technical prose, where the embedding is far behind BM25, it lost to
    BM25 alone.
  - ``zscore``: each side standardised over the candidates, then weighted.
  - ``confidence``: ``minmax`` with the weight moved, per question, toward the side whose
    best candidate stands further above its next ten.
  - ``rrf``: weighted reciprocal-rank fusion, ``w / (60 + rank)`` per side.

  Measured on every shared evaluation set (README, "Choosing the default"), ``absolute``
  is within a point of the better side on every corpus and above both on the mean for
  every ``w`` from 0.2 to 0.3 (the default is their middle, 0.25), and it beats the others
  on the mean and on the worst corpus; they are kept for ``docflow evaluate`` to compare.

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

from tasks.config import (
    DEFAULT_DENSE_WEIGHT,
    DEFAULT_FUSION,
    DEFAULT_RETRIEVAL,
    Fusion,
    QueryParams,
    Retrieval,
    validated,
)
from tasks.errors import ConfigError, StateError, StoreError
from tasks.lexical import LexicalIndex, database_path
from tasks.manifest import serving_collection
from tasks.store import ChromaStore, Hit, Scalar, chroma_server

if TYPE_CHECKING:
    from tasks.embed import Embedder

log = logging.getLogger(__name__)

RETRIEVALS: tuple[str, ...] = get_args(Retrieval)
#: Candidates each side proposes for one question (at least ``k``).
CANDIDATES = 50
#: ``rrf``: the constant of reciprocal-rank fusion (Cormack et al., 2009).
RRF_K = 60
#: ``confidence``: a side's margin is its best score over the mean of its next this many.
CONFIDENCE_DEPTH = 10

#: Scores of some chunks, by chunk id.
Scores = Mapping[str, float]
#: Scores of chosen chunk ids on one side.
ScoreOf = Callable[[Sequence[str]], Scores]


@dataclass(frozen=True, slots=True)
class Ranked:
    """One ranked chunk: its final score and each side's score (None: not computed)."""

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


# --- putting two scores on one scale -----------------------------------------------------


def min_max(scores: Scores) -> dict[str, float]:
    """Return scores rescaled to [0, 1] over these ids (all equal: 1.0 if positive, else 0.0)."""
    if not scores:
        return {}
    lo, hi = min(scores.values()), max(scores.values())
    if hi > lo:
        return {i: (s - lo) / (hi - lo) for i, s in scores.items()}
    return {i: 1.0 if s > 0 else 0.0 for i, s in scores.items()}


def z_scores(scores: Scores) -> dict[str, float]:
    """Return each score's distance from the mean in standard deviations (0.0 if all equal)."""
    if not scores:
        return {}
    values = np.fromiter(scores.values(), dtype=np.float64)
    mean, std = float(values.mean()), float(values.std())
    return {i: (s - mean) / std if std > 0 else 0.0 for i, s in scores.items()}


def reciprocal_ranks(scores: Scores) -> dict[str, float]:
    """Return ``1 / (RRF_K + rank)`` of each id, rank 1 for the best (ties: the lower id)."""
    order = sorted(scores, key=lambda i: (-scores[i], i))
    return {i: 1.0 / (RRF_K + n) for n, i in enumerate(order, start=1)}


def margin(scores: Scores) -> float:
    """Return how far the best of min-max scores stands above the mean of the next ones."""
    ordered = sorted(min_max(scores).values(), reverse=True)
    if len(ordered) < 2:
        return 0.0
    return ordered[0] - float(np.mean(ordered[1 : 1 + CONFIDENCE_DEPTH]))


def _weighted(
    dense: Scores, lexical: Scores, dense_weight: float, scale: Callable[[Scores], Scores]
) -> dict[str, float]:
    d, w = scale(dense), scale(lexical)
    return {i: dense_weight * d[i] + (1.0 - dense_weight) * w[i] for i in dense}


def _absolute(dense: Scores, lexical: Scores, dense_weight: float) -> dict[str, float]:
    return {i: dense_weight * max(dense[i], 0.0) + (1.0 - dense_weight) * lexical[i] for i in dense}


def _confidence(dense: Scores, lexical: Scores, dense_weight: float) -> dict[str, float]:
    d, w = dense_weight * margin(dense), (1.0 - dense_weight) * margin(lexical)
    moved = d / (d + w) if d + w > 0 else dense_weight
    return _weighted(dense, lexical, moved, min_max)


#: The fusions by name: each takes both sides' scores of the same ids and the dense weight.
FUSIONS: dict[str, Callable[[Scores, Scores, float], dict[str, float]]] = {
    "absolute": _absolute,
    "minmax": lambda d, w, x: _weighted(d, w, x, min_max),
    "zscore": lambda d, w, x: _weighted(d, w, x, z_scores),
    "confidence": _confidence,
    "rrf": lambda d, w, x: _weighted(d, w, x, reciprocal_ranks),
}
assert set(FUSIONS) == set(get_args(Fusion))


def fuse(
    dense: Scores, lexical: Scores, dense_weight: float, fusion: str = "absolute"
) -> list[Ranked]:
    """Return every id of either side ranked by the fused score, best first.

    An id missing on one side scores 0.0 there (no word of the question; a cosine of 0)
    and is reported as None. Ties go to the lower id.
    """
    ids = set(dense) | set(lexical)
    full_dense = {i: dense.get(i, 0.0) for i in ids}
    full_lexical = {i: lexical.get(i, 0.0) for i in ids}
    fused = FUSIONS[fusion](full_dense, full_lexical, dense_weight)
    ranked = [Ranked(i, fused[i], dense.get(i), lexical.get(i)) for i in ids]
    ranked.sort(key=lambda r: (-r.score, r.chunk_id))
    return ranked


def _top(scores: Scores, k: int) -> list[str]:
    return sorted(scores, key=lambda i: (-scores[i], i))[:k]


def rank(
    ranking: QueryParams,
    k: int,
    dense_top: Scores,
    lexical_top: Scores,
    dense_of: ScoreOf | None,
    lexical_of: ScoreOf | None,
) -> list[Ranked]:
    """Return the ``k`` best chunks by ``ranking`` from each side's candidates.

    Args:
        ranking: The retrieval (``dense``, ``lexical`` or ``hybrid``), and for ``hybrid``
            its fusion and dense weight.
        k: How many to return.
        dense_top: The dense side's candidates: cosine by id (empty for ``lexical``).
        lexical_top: The lexical side's candidates: relative BM25 (empty for ``dense``).
        dense_of: Exact dense scores of given ids (None: not available).
        lexical_of: Exact lexical scores of given ids (None: not available).

    """
    retrieval = ranking.retrieval
    if retrieval == "hybrid":
        dense, lexical = dict(dense_top), dict(lexical_top)
        if dense_of is not None:
            dense.update(dense_of(sorted(set(lexical) - set(dense))))
        if lexical_of is not None:
            lexical.update(lexical_of(sorted(set(dense) - set(lexical))))
        return fuse(dense, lexical, ranking.dense_weight, ranking.fusion)[:k]
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


def describe_score(ranking: QueryParams) -> str:
    """Return what a result's score is under ``ranking``, in a few words (CLI, README)."""
    if ranking.retrieval == "dense":
        return "dense: cosine similarity"
    if ranking.retrieval == "lexical":
        return "lexical: BM25 relative to the question's words"
    w = ranking.dense_weight
    if ranking.fusion == "absolute":
        return f"hybrid: {w:g} x cosine + {1 - w:g} x relative BM25"
    return f"hybrid ({ranking.fusion}, dense weight {w:g}; scores relative to this question)"


def check_question(text: str) -> None:
    """Raise ValueError for a question with nothing to search for (empty, or spaces)."""
    if not text.strip():
        raise ValueError("the question is empty: give the words to search for")


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
    ):
        """Open the serving collection's vector store and lexical index.

        The vectors are on the Chroma server ``host`` when given, else on the one the data
        dir recorded when it was written, else in its embedded store.

        Raises:
            ConfigError: For an unknown method or fusion, a bad weight, a data dir that
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
        try:
            self.store = ChromaStore.open(data, self.physical, host, port, create=False)
            found = self.store.exists()
        except StoreError:
            if host:
                raise
            found = False  # no embedded store yet (and opening it would create it)
        if not found:
            from tasks.admin import logical_names

            where = f"{host}:{port}" if host else str(data / "chroma")
            names = logical_names(data, host, port, create=False)
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

    @property
    def retrieval(self) -> str:
        """Return the ranking: hybrid, dense or lexical."""
        return self.ranking.retrieval

    @property
    def dense_weight(self) -> float:
        """Return the dense side's weight in hybrid ranking."""
        return self.ranking.dense_weight

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
            from tasks.embed import Embedder

            self._embedder = Embedder(self.model)
        vector: np.ndarray = self._embedder.embed([text])[0]
        return vector

    def search(self, text: str, k: int = 5, where: Mapping[str, Scalar] | None = None) -> list[Hit]:
        """Return the ``k`` best chunks for ``text``, best first.

        ``where`` keeps only chunks whose metadata has these values (both sides); it never
        changes a chunk's score. Each hit carries its final score and each side's score
        (cosine; BM25 relative to the question's words; None where the method did not
        compute it: the cosine of a ``lexical`` search).

        Raises:
            ValueError: For an empty (or whitespace-only) question.
            StoreError: If the retriever is closed.

        """
        check_question(text)
        self._check_open()
        n = max(k, CANDIDATES)
        stop_words = self.ranking.stop_words
        records: dict[str, tuple[str, dict[str, Any]]] = {}
        vector = self.embed(text) if self.retrieval != "lexical" else None
        dense_top: dict[str, float] = {}
        if vector is not None:
            for hit in self.store.query(vector, k=n, where=where):
                dense_top[hit.chunk_id] = hit.score
                records[hit.chunk_id] = (hit.text, dict(hit.metadata))
        words = self.words
        lexical_top = (
            words.search(text, n, where, stop_words) if words and self.retrieval != "dense" else {}
        )

        def dense_of(ids: Sequence[str]) -> Scores:
            assert vector is not None
            got = self._fetch(ids, embeddings=True, into=records)
            if not got:
                return {}
            sims = cosine(vector, np.asarray(list(got.values())))
            return {i: float(s) for i, s in zip(got, sims, strict=True)}

        def lexical_of(ids: Sequence[str]) -> Scores:
            assert words is not None
            return words.scores(text, ids, where, stop_words)

        ranked = rank(
            self.ranking,
            k,
            dense_top,
            lexical_top,
            dense_of if vector is not None else None,
            lexical_of if words is not None else None,
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

    def metadata_keys(self) -> list[str]:
        """Return the metadata keys the collection's chunks have (to name a bad filter)."""
        self._check_open()
        if self.words is not None:
            return self.words.metadata_keys()
        got = self.store.collection().get(limit=1000, include=["metadatas"])
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

"""Retrieval: rank chunks for a question by meaning (dense), by words (lexical) or both.

- ``dense``: cosine similarity of the question's embedding to each chunk's (Chroma).
- ``lexical``: BM25 over the words of the chunks (tasks/index/lexical.py), relative to the
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

  Measured on every shared evaluation set (docs/retrieval.md, "Choosing the default"), ``absolute``
  is within a point of the better side on every corpus and above both on the mean for
  every ``w`` from 0.2 to 0.3 (the default is their middle, 0.25), and it beats the others
  on the mean and on the worst corpus; they are kept for ``docflow evaluate`` to compare.

``per_source`` (off by default) keeps at most that many chunks of one source (a file, a
document) in the results, collapsing the ranked list after fusion: a source keeps its best
chunks, the places of the others go to the next sources, so ``k`` results show more distinct
documents. With it, each side proposes :data:`SOURCE_DEPTH` times as many candidates.

``feedback`` (off by default) is dense-side pseudo-relevance feedback, Rocchio's: the
first ranking's top ``feedback`` hits are taken as relevant, the question's vector moves
toward their mean (:func:`rocchio`, the hits' mean weighing ``feedback_weight``), and the
dense side searches again with it; the lexical side is unchanged. It costs one more
nearest-neighbour search per question.

The ranking functions here are pure (:func:`rank`), shared by the
:class:`~tasks.retrieval.retriever.Retriever` and ``docflow evaluate``, so an evaluation
scores exactly what a query returns.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import get_args

import numpy as np

from tasks.common.config import Fusion, QueryParams, Retrieval
from tasks.common.documents import printable_name
from tasks.common.errors import ConfigError

RETRIEVALS: tuple[str, ...] = get_args(Retrieval)
#: Candidates each side proposes for one question (at least ``k``).
CANDIDATES = 50
#: With ``per_source``, each side proposes this many times more candidates (a source has
#: several chunks, and the collapsed list must still hold ``k``).
SOURCE_DEPTH = 3
#: ``rrf``: the constant of reciprocal-rank fusion (Cormack et al., 2009).
RRF_K = 60
#: ``confidence``: a side's margin is its best score over the mean of its next this many.
CONFIDENCE_DEPTH = 10

#: Scores of some chunks, by chunk id.
Scores = Mapping[str, float]
#: Scores of chosen chunk ids on one side.
ScoreOf = Callable[[Sequence[str]], Scores]
#: The source (file, document) of chosen chunk ids.
SourceOf = Callable[[Sequence[str]], Mapping[str, str]]
#: Dense feedback: from the ids of the first ranking's top hits, the dense side searched
#: again with the moved vector (its candidates, and exact scores of given ids).
Requery = Callable[[Sequence[str]], tuple[Scores, ScoreOf]]


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


def candidates(k: int, per_source: int | None = None) -> int:
    """Return how many candidates each side proposes for ``k`` results."""
    return max(k, CANDIDATES) * (SOURCE_DEPTH if per_source else 1)


def collapse(ids: Sequence[str], per_source: int, source_of: Mapping[str, str]) -> list[str]:
    """Return ``ids`` in order with at most ``per_source`` of each source (the first ones)."""
    seen: dict[str, int] = {}
    kept = []
    for i in ids:
        source = source_of.get(i, i)  # an id without a known source is its own
        seen[source] = seen.get(source, 0) + 1
        if seen[source] <= per_source:
            kept.append(i)
    return kept


def rocchio(vector: np.ndarray, hits: np.ndarray, weight: float) -> np.ndarray:
    """Return ``(1 - weight) * vector + weight * mean(hits)``, each row unit length first.

    The result has unit length (0 vector: returned as is). No hits: ``vector``, unit length.
    """

    def unit(rows: np.ndarray) -> np.ndarray:
        norms = np.linalg.norm(rows, axis=-1, keepdims=True)
        return np.asarray(rows / np.maximum(norms, 1e-12), dtype=np.float64)

    moved = unit(np.asarray(vector, dtype=np.float64))
    if len(hits):
        moved = (1.0 - weight) * moved + weight * unit(np.asarray(hits)).mean(axis=0)
    return unit(moved)


def rank(
    ranking: QueryParams,
    k: int,
    dense_top: Scores,
    lexical_top: Scores,
    dense_of: ScoreOf | None,
    lexical_of: ScoreOf | None,
    source_of: SourceOf | None = None,
    requery: Requery | None = None,
) -> list[Ranked]:
    """Return the ``k`` best chunks by ``ranking`` from each side's candidates.

    Args:
        ranking: The retrieval (``dense``, ``lexical`` or ``hybrid``), for ``hybrid`` its
            fusion and dense weight, and ``per_source``.
        k: How many to return.
        dense_top: The dense side's candidates: cosine by id (empty for ``lexical``).
        lexical_top: The lexical side's candidates: relative BM25 (empty for ``dense``).
        dense_of: Exact dense scores of given ids (None: not available).
        lexical_of: Exact lexical scores of given ids (None: not available).
        source_of: The sources of given ids; needed for ``per_source`` (None: each id is
            its own source).
        requery: The dense side searched again after feedback (``ranking.feedback``;
            None: no feedback).

    """
    retrieval = ranking.retrieval
    if ranking.feedback and requery is not None and retrieval != "lexical":
        first = ranking.model_copy(update={"feedback": 0})
        top = rank(
            first, max(k, ranking.feedback), dense_top, lexical_top, dense_of, lexical_of, source_of
        )
        dense_top, dense_of = requery([r.chunk_id for r in top[: ranking.feedback]])
        return rank(first, k, dense_top, lexical_top, dense_of, lexical_of, source_of)
    per_source = ranking.per_source

    def collapsed(ids: list[str]) -> list[str]:
        if not per_source:
            return ids[:k]
        sources = source_of(ids) if source_of is not None else {}
        return collapse(ids, per_source, sources)[:k]

    if retrieval == "hybrid":
        dense, lexical = dict(dense_top), dict(lexical_top)
        if dense_of is not None:
            dense.update(dense_of(sorted(set(lexical) - set(dense))))
        if lexical_of is not None:
            lexical.update(lexical_of(sorted(set(dense) - set(lexical))))
        fused = fuse(dense, lexical, ranking.dense_weight, ranking.fusion)
        by_id = {r.chunk_id: r for r in fused}
        return [by_id[i] for i in collapsed([r.chunk_id for r in fused])]
    own, other_of = (dense_top, lexical_of) if retrieval == "dense" else (lexical_top, dense_of)
    ids = collapsed(sorted(own, key=lambda i: (-own[i], i)))
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
    """Return what a result's score is under ``ranking``, in a few words (the CLI's line)."""
    if ranking.retrieval == "dense":
        return "dense: cosine similarity"
    if ranking.retrieval == "lexical":
        return "lexical: BM25 relative to the question's words"
    w = ranking.dense_weight
    if ranking.fusion == "absolute":
        return f"hybrid: {w:g} x cosine + {1 - w:g} x relative BM25"
    return f"hybrid ({ranking.fusion}, dense weight {w:g}; scores relative to this question)"


def check_question(text: str) -> None:
    """Raise ValueError for a question with nothing to search for (empty, or spaces).

    Or one that is not valid Unicode: bytes a terminal in another encoding passed on the
    command line (Python keeps them as lone surrogates, which the tokenizer and SQLite
    refuse with errors that name neither the question nor the cause).
    """
    if not text.strip():
        raise ValueError("the question is empty: give the words to search for")
    shown = printable_name(text)
    if shown != text:
        raise ValueError(
            f"the question '{shown}' is not valid UTF-8: is the terminal set to another encoding?"
        )


def cosine(vector: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Return the cosine similarity of ``vector`` to each row."""
    norms = np.linalg.norm(rows, axis=1) * max(float(np.linalg.norm(vector)), 1e-12)
    return np.asarray(rows @ vector / np.maximum(norms, 1e-12), dtype=np.float64)

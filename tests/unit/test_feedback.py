"""Unit tests of dense-side pseudo-relevance feedback (Rocchio; ``feedback`` in QueryParams).

The ranking (tasks/retrieval/ranking.py) with stated scores; the Retriever over a real
embedded Chroma and a real lexical index (the bag-of-words HashEncoder, as in
test_retrieval.py); ``docflow evaluate``'s ranking of a BEIR set with given vectors.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from tasks.common.config import QueryParams, resolve_query_params
from tasks.common.errors import ConfigError
from tasks.evaluate import chunk_dataset, load_dataset, parse_spec, retrieve
from tasks.retrieval import Retriever, rank, rocchio
from tasks.retrieval.ranking import ScoreOf, cosine
from tests.beir_sets import write_beir
from tests.unit.test_retrieval import collection  # noqa: F401 (a fixture)


def test_rocchio_moves_the_unit_question_toward_the_mean_of_unit_hits() -> None:
    moved = rocchio(np.array([2.0, 0.0]), np.array([[0.0, 3.0], [0.0, 1.0]]), 0.6)
    expected = np.array([0.4, 0.6]) / np.hypot(0.4, 0.6)
    assert moved == pytest.approx(expected)
    assert rocchio(np.array([3.0, 4.0]), np.empty((0, 2)), 0.6) == pytest.approx([0.6, 0.8])
    assert rocchio(np.array([1.0, 0.0]), np.array([[0.0, 1.0]]), 0.0) == pytest.approx([1, 0])


def test_rank_searches_again_from_the_first_rankings_top_hits() -> None:
    dense, lexical = {"a": 0.9, "b": 0.8, "c": 0.1}, {"c": 0.9, "b": 0.5}
    moved = {"c": 0.95, "d": 0.9, "a": 0.2, "b": 0.1}
    asked: list[list[str]] = []

    def exact(ids: Sequence[str]) -> dict[str, float]:
        return {i: dense.get(i, 0.0) for i in ids}

    def lexical_of(ids: Sequence[str]) -> dict[str, float]:
        return {i: lexical.get(i, 0.0) for i in ids}

    def requery(ids: Sequence[str]) -> tuple[dict[str, float], ScoreOf]:
        asked.append(list(ids))
        return {"c": 0.95, "d": 0.9}, lambda got: {i: moved[i] for i in got}

    plain = QueryParams(dense_weight=0.5)
    first = rank(plain, 3, dense, lexical, exact, lexical_of, None, requery)
    assert not asked  # feedback is off by default
    with_feedback = plain.model_copy(update={"feedback": 2})
    got = rank(with_feedback, 3, dense, lexical, exact, lexical_of, None, requery)
    assert asked == [[r.chunk_id for r in first[:2]]] == [["b", "c"]]
    # the dense side is the moved question's (d is new, a lost its place), lexical unchanged
    assert [(r.chunk_id, r.dense, r.lexical) for r in got] == [
        ("c", 0.95, 0.9),
        ("d", 0.9, 0.0),
        ("b", 0.1, 0.5),
    ]
    assert got[1].score == pytest.approx(0.5 * 0.9)
    lexical_only = with_feedback.model_copy(update={"retrieval": "lexical"})
    rank(lexical_only, 3, {}, lexical, None, lexical_of, None, requery)
    assert len(asked) == 1  # the lexical side has no vector to move


def test_the_retriever_ranks_by_the_moved_vector(collection: Path) -> None:  # noqa: F811
    question = "winter colony brood varroa mites"
    with Retriever(collection, dense_weight=0.5) as r:
        first = r.search(question, k=3)
    with Retriever(collection, dense_weight=0.5, feedback=3, feedback_weight=0.6) as r:
        got = r.search(question, k=6)
        ids = list(dict.fromkeys([h.chunk_id for h in first + got]))
        stored = r.store.collection().get(ids=ids, include=["embeddings"])
        vectors = dict(zip(stored["ids"], np.asarray(stored["embeddings"]), strict=True))
        moved = rocchio(r.embed(question), np.array([vectors[h.chunk_id] for h in first]), 0.6)
    for h in got:
        expected = float(cosine(moved, vectors[h.chunk_id][None, :])[0])
        assert h.dense_score == pytest.approx(expected, abs=1e-5)
        assert h.score == pytest.approx(0.5 * max(expected, 0.0) + 0.5 * h.lexical_score)
    assert [h.score for h in got] == sorted((h.score for h in got), reverse=True)
    with pytest.raises(ConfigError, match="feedback"):
        Retriever(collection, feedback=-1)


def test_feedback_in_a_spec_and_in_the_query_settings(tmp_path: Path) -> None:
    beir = load_dataset(write_beir(tmp_path / "b"))
    spec = "recursive:chunk_size=200,chunk_overlap=0,length_unit=chars,retrieval=dense"
    plain, moved = parse_spec(spec), parse_spec(f"{spec},feedback=2,feedback_weight=0.5")
    assert (moved.ranking.feedback, moved.ranking.feedback_weight) == (2, 0.5)
    assert (plain.ranking.feedback, plain.ranking.feedback_weight) == (0, 0.6)
    chunks = chunk_dataset(beir, plain.params)
    rng = np.random.default_rng(0)
    vectors = rng.normal(size=(len(chunks), 8))
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    questions = rng.normal(size=(len(beir.questions), 8))
    questions /= np.linalg.norm(questions, axis=1, keepdims=True)
    top = retrieve(beir, chunks, vectors, questions, ranking=plain.ranking)
    got = retrieve(beir, chunks, vectors, questions, ranking=moved.ranking)
    for q, (first, second) in enumerate(zip(top, got, strict=True)):
        again = rocchio(questions[q], vectors[first[:2]], 0.5)
        assert second == list(np.argsort(-(vectors @ again), kind="stable")[: len(second)])
    env = {"DOCFLOW_FEEDBACK": "5"}
    assert resolve_query_params(None, None, env).feedback == 5

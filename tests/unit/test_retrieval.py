"""Unit tests for tasks/retrieval.py: normalisation, fusion, ranking and the Retriever.

The Retriever runs over a real embedded Chroma and a real lexical index; its encoder is the
bag-of-words HashEncoder (the subject here is ranking; the CLI and API tests in
tests/integration/test_query.py use the real model).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tasks.documents import Chunk, make_chunk_id
from tasks.embed import Embedder, register_encoder
from tasks.errors import ConfigError, StoreError
from tasks.index import Index
from tasks.lexical import LexicalIndex
from tasks.retrieval import Ranked, Retriever, cosine, fuse, min_max, rank
from tests.fake_encoder import HashEncoder

MODEL = "hash-retrieval-64"


def test_min_max_rescales_to_the_unit_interval() -> None:
    assert min_max({"a": 2.0, "b": 4.0, "c": 3.0}) == {"a": 0.0, "b": 1.0, "c": 0.5}
    assert min_max({"a": 0.7, "b": 0.7}) == {"a": 1.0, "b": 1.0}
    assert min_max({"a": 0.0, "b": 0.0}) == {"a": 0.0, "b": 0.0}
    assert min_max({}) == {}


def test_fuse_is_the_weighted_sum_of_normalised_scores() -> None:
    dense = {"a": 0.9, "b": 0.5, "c": 0.1}
    lexical = {"a": 0.0, "b": 10.0, "c": 5.0}
    got = {r.chunk_id: r for r in fuse(dense, lexical, dense_weight=0.25)}
    assert got["a"].score == pytest.approx(0.25 * 1.0 + 0.75 * 0.0)
    assert got["b"].score == pytest.approx(0.25 * 0.5 + 0.75 * 1.0)
    assert got["c"].score == pytest.approx(0.25 * 0.0 + 0.75 * 0.5)
    assert [r.chunk_id for r in fuse(dense, lexical, 0.25)] == ["b", "c", "a"]
    assert [r.chunk_id for r in fuse(dense, lexical, 1.0)] == ["a", "b", "c"]  # dense alone
    assert [r.chunk_id for r in fuse(dense, lexical, 0.0)] == ["b", "c", "a"]  # lexical alone
    assert (got["b"].dense, got["b"].lexical) == (0.5, 10.0)


def test_fuse_breaks_ties_by_id_and_counts_a_missing_side_as_its_lowest() -> None:
    assert [r.chunk_id for r in fuse({"b": 1.0, "a": 1.0}, {}, 0.5)] == ["a", "b"]
    got = {r.chunk_id: r for r in fuse({"a": 1.0, "b": 0.0}, {"a": 2.0}, 0.5)}
    assert got["b"].lexical is None and got["b"].score == 0.0


def test_rank_hybrid_fills_each_sides_missing_scores_exactly() -> None:
    asked: dict[str, list[str]] = {}

    def dense_of(ids: list[str]) -> dict[str, float]:
        asked["dense"] = list(ids)
        return {"x": 0.2}

    def lexical_of(ids: list[str]) -> dict[str, float]:
        asked["lexical"] = list(ids)
        return {i: 0.0 for i in ids}

    got = rank("hybrid", 2, {"a": 0.9, "b": 0.8}, {"x": 7.0, "a": 3.0}, dense_of, lexical_of, 0.5)
    assert asked == {"dense": ["x"], "lexical": ["b"]}
    assert [r.chunk_id for r in got] == ["a", "x"]
    assert got[0] == Ranked("a", pytest.approx(0.5 + 0.5 * 3 / 7), 0.9, 3.0)


@pytest.mark.parametrize("method", ["dense", "lexical"])
def test_rank_one_side_orders_by_its_own_score_and_reports_the_other(method: str) -> None:
    dense, lexical = {"a": 0.9, "b": 0.8, "c": 0.1}, {"c": 9.0, "b": 1.0}
    got = rank(method, 2, dense, lexical, lambda ids: dict.fromkeys(ids, 0.5), None)
    if method == "dense":
        assert [(r.chunk_id, r.score, r.dense, r.lexical) for r in got] == [
            ("a", 0.9, 0.9, None),
            ("b", 0.8, 0.8, None),
        ]
    else:
        assert [(r.chunk_id, r.score, r.dense, r.lexical) for r in got] == [
            ("c", 9.0, 0.5, 9.0),
            ("b", 1.0, 0.5, 1.0),
        ]


def test_cosine() -> None:
    rows = np.array([[1.0, 0.0], [0.0, 2.0], [1.0, 1.0]])
    assert cosine(np.array([2.0, 0.0]), rows) == pytest.approx([1.0, 0.0, 2**-0.5])


TEXTS = {
    "guide.md": [
        "Oxalic acid kills varroa mites when the colony has no brood in winter.",
        "Open the hive only on warm days; cold air chills the brood.",
    ],
    "notes.md": [
        "The colony forms a winter cluster around the queen to stay warm.",
        "Treatment thresholds: three mites per hundred bees in August.",
    ],
}


@pytest.fixture
def collection(data_dir: Path) -> Path:
    register_encoder(MODEL, lambda: HashEncoder(64))
    chunks = []
    for source, texts in TEXTS.items():
        for i, text in enumerate(texts):
            chunks.append(
                Chunk(
                    make_chunk_id(source, "fp", i, text),
                    source,
                    source,
                    i,
                    i,
                    i + len(text),
                    text,
                    len(text),
                    metadata={"source": source, "title": "Bees", "part": i},
                )
            )
    with Index.open(data_dir, "docflow") as index:
        index.vectors.collection(MODEL, 64)
        vectors = Embedder(MODEL).embed([c.text for c in chunks])
        index.upsert(chunks, vectors)
    return data_dir


def test_retriever_ranks_with_each_method_and_reports_both_scores(collection: Path) -> None:
    question = "how do I treat varroa mites?"
    with Retriever(collection, retrieval="lexical") as r:
        lexical = r.search(question, k=4)
    assert lexical[0].text.startswith("Oxalic acid kills varroa")  # "varroa", "mites"
    assert all(h.dense_score is None and h.score == h.lexical_score for h in lexical)
    assert [h.lexical_score for h in lexical] == sorted(
        (h.lexical_score for h in lexical), reverse=True
    )
    with Retriever(collection, retrieval="dense") as r:
        dense = r.search(question, k=4)
    assert all(h.score == h.dense_score and h.lexical_score is not None for h in dense)
    with Retriever(collection, retrieval="hybrid", dense_weight=0.5) as r:
        hybrid = r.search(question, k=4)
    assert {h.chunk_id for h in hybrid} == {h.chunk_id for h in dense}  # 4 of 4
    for h in hybrid:
        d = min_max({x.chunk_id: x.dense_score for x in dense})[h.chunk_id]  # type: ignore[misc]
        w = min_max({x.chunk_id: x.lexical_score for x in lexical + dense})  # type: ignore[misc]
        assert h.score == pytest.approx(0.5 * d + 0.5 * w[h.chunk_id])
    assert hybrid[0].metadata["source"] == hybrid[0].source and hybrid[0].text


def test_where_filters_both_sides(collection: Path) -> None:
    for method in ("hybrid", "dense", "lexical"):
        with Retriever(collection, retrieval=method) as r:
            hits = r.search("winter colony varroa", k=4, where={"source": "notes.md"})
            assert hits and {h.source for h in hits} == {"notes.md"}, method
            where = {"source": "notes.md", "part": 1}
            typed = r.search("winter colony varroa mites", k=4, where=where)
            assert [h.text[:9] for h in typed] == ["Treatment"], method


def test_retriever_refuses_bad_settings_and_missing_indexes(collection: Path) -> None:
    with pytest.raises(ConfigError, match="unknown retrieval"):
        Retriever(collection, retrieval="sparse")
    with pytest.raises(ConfigError, match="between 0 and 1"):
        Retriever(collection, dense_weight=1.5)
    with pytest.raises(ConfigError, match="'nothing-here' not found.*it has docflow"):
        Retriever(collection, "nothing-here")
    (collection / "lexical" / "docflow.sqlite").unlink()
    with pytest.raises(StoreError, match="has no lexical index.*--retrieval dense"):
        Retriever(collection)
    with Retriever(collection, retrieval="dense") as r:  # dense needs no lexical index
        assert r.search("varroa", k=1)[0].lexical_score is None


def test_a_lexical_hit_the_store_lacks_is_never_returned(collection: Path) -> None:
    with LexicalIndex.open(collection, "docflow") as words:
        words.upsert([("ghost", "varroa varroa varroa mites", {"source": "ghost.md"})])
    with Retriever(collection, retrieval="lexical") as r:
        assert "ghost" not in {h.chunk_id for h in r.search("varroa mites", k=5)}

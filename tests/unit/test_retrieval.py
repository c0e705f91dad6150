"""Unit tests for tasks/retrieval/ranking.py: normalisation, fusion, ranking and the Retriever.

The Retriever runs over a real embedded Chroma and a real lexical index; its encoder is the
bag-of-words HashEncoder (the subject here is ranking; the CLI and API tests in
tests/integration/test_query.py use the real model).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from tasks.common.config import QueryParams
from tasks.common.documents import Chunk, make_chunk_id
from tasks.common.errors import ConfigError, StoreError
from tasks.embed.model import Embedder, register_encoder
from tasks.index.collection import Index
from tasks.index.lexical import LexicalIndex
from tasks.retrieval import Retriever
from tasks.retrieval.ranking import (
    CANDIDATES,
    FUSIONS,
    SOURCE_DEPTH,
    Ranked,
    candidates,
    collapse,
    cosine,
    describe_score,
    fuse,
    margin,
    min_max,
    rank,
    reciprocal_ranks,
    z_scores,
)
from tests.fake_encoder import HashEncoder

MODEL = "hash-retrieval-64"


def hybrid(fusion: str = "absolute", dense_weight: float = 0.5) -> QueryParams:
    return QueryParams(retrieval="hybrid", fusion=fusion, dense_weight=dense_weight)


def test_min_max_rescales_to_the_unit_interval() -> None:
    assert min_max({"a": 2.0, "b": 4.0, "c": 3.0}) == {"a": 0.0, "b": 1.0, "c": 0.5}
    assert min_max({"a": 0.7, "b": 0.7}) == {"a": 1.0, "b": 1.0}
    assert min_max({"a": 0.0, "b": 0.0}) == {"a": 0.0, "b": 0.0}
    assert min_max({}) == {}


def test_z_scores_reciprocal_ranks_and_margin() -> None:
    assert z_scores({"a": 1.0, "b": 3.0}) == {"a": -1.0, "b": 1.0}
    assert z_scores({"a": 2.0, "b": 2.0}) == {"a": 0.0, "b": 0.0}
    assert reciprocal_ranks({"a": 0.1, "b": 0.9, "c": 0.9}) == {
        "b": 1 / 61,
        "c": 1 / 62,  # a tie goes to the lower id
        "a": 1 / 63,
    }
    assert margin({"a": 1.0, "b": 0.0, "c": 0.0}) == 1.0  # one clear winner
    assert margin({"a": 1.0, "b": 1.0, "c": 0.0}) == pytest.approx(0.5)
    assert margin({"a": 1.0}) == 0.0


def test_absolute_fusion_keeps_each_score_on_its_own_scale() -> None:
    dense = {"a": 0.9, "b": 0.5, "c": -0.2}
    lexical = {"a": 0.0, "b": 1.2, "c": 0.5}
    got = {r.chunk_id: r for r in fuse(dense, lexical, 0.25, "absolute")}
    assert got["a"].score == pytest.approx(0.25 * 0.9)
    assert got["b"].score == pytest.approx(0.25 * 0.5 + 0.75 * 1.2)
    assert got["c"].score == pytest.approx(0.75 * 0.5)  # a negative cosine counts as 0
    # adding a candidate changes no other score (min-max would rescale them all)
    more = {r.chunk_id: r.score for r in fuse({**dense, "d": 0.99}, {**lexical, "d": 3}, 0.25)}
    assert {i: more[i] for i in "abc"} == {i: r.score for i, r in got.items()}


def test_minmax_fusion_is_the_weighted_sum_of_rescaled_scores() -> None:
    dense = {"a": 0.9, "b": 0.5, "c": 0.1}
    lexical = {"a": 0.0, "b": 10.0, "c": 5.0}
    got = {r.chunk_id: r for r in fuse(dense, lexical, 0.25, "minmax")}
    assert got["a"].score == pytest.approx(0.25 * 1.0 + 0.75 * 0.0)
    assert got["b"].score == pytest.approx(0.25 * 0.5 + 0.75 * 1.0)
    assert got["c"].score == pytest.approx(0.25 * 0.0 + 0.75 * 0.5)
    assert [r.chunk_id for r in fuse(dense, lexical, 0.25, "minmax")] == ["b", "c", "a"]
    assert [r.chunk_id for r in fuse(dense, lexical, 1.0, "minmax")] == ["a", "b", "c"]
    assert [r.chunk_id for r in fuse(dense, lexical, 0.0, "minmax")] == ["b", "c", "a"]
    assert (got["b"].dense, got["b"].lexical) == (0.5, 10.0)


@pytest.mark.parametrize("fusion", sorted(FUSIONS))
def test_every_fusion_ranks_by_one_side_at_the_extreme_weights(fusion: str) -> None:
    dense = {"a": 0.9, "b": 0.5, "c": 0.1, "d": 0.3}
    lexical = {"a": 0.1, "b": 2.0, "c": 1.0, "d": 0.0}
    assert [r.chunk_id for r in fuse(dense, lexical, 1.0, fusion)] == ["a", "b", "d", "c"]
    assert [r.chunk_id for r in fuse(dense, lexical, 0.0, fusion)] == ["b", "c", "a", "d"]


def test_zscore_rrf_and_confidence_fusions() -> None:
    dense = {"a": 0.9, "b": 0.5, "c": 0.1}
    lexical = {"a": 0.0, "b": 2.0, "c": 1.0}
    z = {r.chunk_id: r.score for r in fuse(dense, lexical, 0.5, "zscore")}
    zd, zl = z_scores(dense), z_scores(lexical)
    assert z == {i: pytest.approx(0.5 * zd[i] + 0.5 * zl[i]) for i in dense}
    rrf = {r.chunk_id: r.score for r in fuse(dense, lexical, 0.5, "rrf")}
    assert rrf["b"] == pytest.approx(0.5 / 62 + 0.5 / 61)
    # confidence: the lexical side has the clearer winner, so it gets more than 0.5
    conf = {r.chunk_id: r.score for r in fuse(dense, {**lexical, "b": 9.0}, 0.5, "confidence")}
    d, w = min_max(dense), min_max({**lexical, "b": 9.0})
    md, ml = 0.5 * margin(dense), 0.5 * margin({**lexical, "b": 9.0})
    moved = md / (md + ml)
    assert moved < 0.5
    assert conf == {i: pytest.approx(moved * d[i] + (1 - moved) * w[i]) for i in dense}


def test_fuse_breaks_ties_by_id_and_counts_a_missing_side_as_zero() -> None:
    assert [r.chunk_id for r in fuse({"b": 1.0, "a": 1.0}, {}, 0.5)] == ["a", "b"]
    got = {r.chunk_id: r for r in fuse({"a": 1.0, "b": 0.0}, {"a": 2.0}, 0.5, "minmax")}
    assert got["b"].lexical is None and got["b"].score == 0.0


def test_rank_hybrid_fills_each_sides_missing_scores_exactly() -> None:
    asked: dict[str, list[str]] = {}

    def dense_of(ids: list[str]) -> dict[str, float]:
        asked["dense"] = list(ids)
        return {"x": 0.2}

    def lexical_of(ids: list[str]) -> dict[str, float]:
        asked["lexical"] = list(ids)
        return {i: 0.0 for i in ids}

    got = rank(hybrid(), 2, {"a": 0.9, "b": 0.8}, {"x": 0.7, "a": 0.3}, dense_of, lexical_of)
    assert asked == {"dense": ["x"], "lexical": ["b"]}
    assert [r.chunk_id for r in got] == ["a", "x"]
    assert got[0] == Ranked("a", pytest.approx(0.5 * 0.9 + 0.5 * 0.3), 0.9, 0.3)
    assert got[1] == Ranked("x", pytest.approx(0.5 * 0.2 + 0.5 * 0.7), 0.2, 0.7)


@pytest.mark.parametrize("method", ["dense", "lexical"])
def test_rank_one_side_orders_by_its_own_score_and_reports_the_other(method: str) -> None:
    dense, lexical = {"a": 0.9, "b": 0.8, "c": 0.1}, {"c": 9.0, "b": 1.0}
    ranking = QueryParams(retrieval=method)
    got = rank(ranking, 2, dense, lexical, lambda ids: dict.fromkeys(ids, 0.5), None)
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


def test_collapse_keeps_the_first_chunks_of_each_source_in_order() -> None:
    source = {"a1": "a", "a2": "a", "a3": "a", "b1": "b", "c1": "c"}
    order = ["a1", "a2", "b1", "a3", "x", "c1"]
    assert collapse(order, 1, source) == ["a1", "b1", "x", "c1"]  # x: its own source
    assert collapse(order, 2, source) == ["a1", "a2", "b1", "x", "c1"]
    assert candidates(5) == CANDIDATES and candidates(5, 1) == CANDIDATES * SOURCE_DEPTH
    assert candidates(100) == 100


@pytest.mark.parametrize("method", ["hybrid", "dense", "lexical"])
def test_rank_per_source_collapses_after_ranking(method: str) -> None:
    dense = {"a1": 0.9, "a2": 0.8, "b1": 0.5, "c1": 0.1}
    lexical = {"a1": 0.9, "a2": 0.8, "b1": 0.3, "c1": 0.2}
    asked: list[list[str]] = []

    def source_of(ids: list[str]) -> dict[str, str]:
        asked.append(list(ids))
        return {i: i[0] for i in ids}

    def scores(ids: list[str]) -> dict[str, float]:
        return {i: dense[i] for i in ids}

    plain = QueryParams(retrieval=method)
    one = plain.model_copy(update={"per_source": 1})
    got = rank(plain, 3, dense, lexical, scores, scores)
    assert [r.chunk_id for r in got] == ["a1", "a2", "b1"] and not asked
    got = rank(one, 3, dense, lexical, scores, scores, source_of)
    assert [r.chunk_id for r in got] == ["a1", "b1", "c1"]  # a2 gives its place to c1
    assert got[0].score == rank(plain, 1, dense, lexical, scores, scores)[0].score
    # without sources every id is its own: nothing collapses
    assert [r.chunk_id for r in rank(one, 2, dense, lexical, scores, scores)] == ["a1", "a2"]


def test_describe_score_names_the_ranking() -> None:
    assert describe_score(QueryParams(retrieval="dense")) == "dense: cosine similarity"
    assert "relative BM25" in describe_score(QueryParams())
    assert "0.25 x cosine" in describe_score(QueryParams())
    assert "rrf" in describe_score(hybrid("rrf"))


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
        fused = r.search(question, k=4)
    assert {h.chunk_id for h in fused} == {h.chunk_id for h in dense}  # 4 of 4
    for h in fused:
        assert h.dense_score is not None and h.lexical_score is not None
        assert h.score == pytest.approx(0.5 * max(h.dense_score, 0) + 0.5 * h.lexical_score)
    assert fused[0].metadata["source"] == fused[0].source and fused[0].text
    with Retriever(collection, dense_weight=0.5, fusion="minmax") as r:
        rescaled = r.search(question, k=4)
    for h in rescaled:
        d = min_max({x.chunk_id: x.dense_score for x in dense})[h.chunk_id]  # type: ignore[misc]
        w = min_max({x.chunk_id: x.lexical_score for x in lexical + dense})  # type: ignore[misc]
        assert h.score == pytest.approx(0.5 * d + 0.5 * w[h.chunk_id])


def test_per_source_returns_distinct_sources(collection: Path) -> None:
    question = "winter colony brood varroa mites"
    for method in ("hybrid", "dense", "lexical"):
        with Retriever(collection, retrieval=method) as r:
            every = r.search(question, k=4)
            one = r.search(question, k=4, per_source=1)
            assert len({h.source for h in every}) == 2 and len(every) == 4, method
            sources = list(dict.fromkeys(h.source for h in every))
            best = [next(h.chunk_id for h in every if h.source == s) for s in sources]
            assert [h.chunk_id for h in one] == best, method  # each source's best, in order
            with pytest.raises(ValueError, match="per_source must be at least 1"):
                r.search(question, per_source=0)
        with Retriever(collection, retrieval=method, per_source=1) as r:  # the default
            assert [h.chunk_id for h in r.search(question, k=4)] == [h.chunk_id for h in one]
            assert len(r.search(question, k=4, per_source=2)) == 4
    with pytest.raises(ConfigError, match="per_source"):
        Retriever(collection, per_source=0)


def test_per_source_from_the_cli_and_the_api(
    collection: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import json

    import docflow
    from flows.cli import main

    question = "winter colony brood varroa mites"
    args = ["query", question, "-k", "4", "--data-dir", str(collection), "--json"]
    assert main([*args, "--per-source", "1"]) == 0
    payload = json.loads(capsys.readouterr().out)
    sources = [r["source"] for r in payload["results"]]
    assert payload["per_source"] == 1 and sorted(sources) == ["guide.md", "notes.md"]
    monkeypatch.setenv("DOCFLOW_PER_SOURCE", "1")
    assert main(args) == 0
    assert [r["source"] for r in json.loads(capsys.readouterr().out)["results"]] == sources
    monkeypatch.delenv("DOCFLOW_PER_SOURCE")
    assert main([*args, "--per-source", "0"]) == 2
    assert "--per-source" in capsys.readouterr().err
    hits = docflow.query(question, data_dir=collection, k=4, per_source=1)
    assert [h.source for h in hits] == sources


def test_where_filters_both_sides(collection: Path) -> None:
    for method in ("hybrid", "dense", "lexical"):
        with Retriever(collection, retrieval=method) as r:
            hits = r.search("winter colony varroa", k=4, where={"source": "notes.md"})
            assert hits and {h.source for h in hits} == {"notes.md"}, method
            where = {"source": "notes.md", "part": 1}
            typed = r.search("winter colony varroa mites", k=4, where=where)
            assert [h.text[:9] for h in typed] == ["Treatment"], method


def test_a_chunks_score_does_not_depend_on_the_where_filter(collection: Path) -> None:
    for method in ("hybrid", "dense", "lexical"):
        with Retriever(collection, retrieval=method) as r:
            everywhere = {h.chunk_id: h.score for h in r.search("winter varroa mites", k=6)}
            narrowed = r.search("winter varroa mites", k=6, where={"source": "notes.md"})
            assert narrowed, method
            for h in narrowed:
                assert h.score == pytest.approx(everywhere[h.chunk_id]), method


def test_empty_questions_and_closed_retrievers_fail_clearly(collection: Path) -> None:
    with Retriever(collection) as r:
        for empty in ("", "   ", "\n\t"):
            with pytest.raises(ValueError, match="question is empty"):
                r.search(empty)
        # bytes from a terminal in Latin-1, as Python decodes argv: named, not a tokenizer error
        with pytest.raises(ValueError, match=r"question 'caf\\xe9 hives' is not valid UTF-8"):
            r.search(os.fsdecode(b"caf\xe9 hives"))
    with pytest.raises(StoreError, match="Retriever is closed"):
        r.search("varroa")
    with pytest.raises(StoreError, match="Retriever is closed"):
        r.metadata_keys()


def test_metadata_keys_come_from_either_index(collection: Path) -> None:
    with Retriever(collection) as r:
        keys = r.metadata_keys()
    assert {"source", "title", "part"} <= set(keys)
    (collection / "lexical" / "docflow.sqlite").unlink()
    with Retriever(collection, retrieval="dense") as r:  # from the vector store
        assert {"source", "title", "part"} <= set(r.metadata_keys())


def test_a_missing_data_dir_is_refused_and_left_uncreated(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere"
    with pytest.raises(ConfigError, match="does not exist"):
        Retriever(missing)
    assert not missing.exists()


def test_retriever_refuses_bad_settings_and_missing_indexes(collection: Path) -> None:
    with pytest.raises(ConfigError, match="unknown retrieval"):
        Retriever(collection, retrieval="sparse")
    with pytest.raises(ConfigError, match="between 0 and 1"):
        Retriever(collection, dense_weight=1.5)
    with pytest.raises(ConfigError, match="fusion"):
        Retriever(collection, fusion="borda")
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

"""docflow evaluate, the pure core: metrics and retrieval by hand, precision_Ω against a
naive count, summaries per corpus and over corpora."""

from __future__ import annotations

import csv
import json
import math
import re
import string
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import pytest

from flows.cli import main
from tasks.common.config import IngestParams, QueryParams
from tasks.common.errors import ConfigError
from tasks.evaluate import (
    Chunks,
    Dataset,
    EvalConfig,
    Question,
    chunk_dataset,
    default_spec,
    evaluate_config,
    evaluate_configs,
    find_datasets,
    format_table,
    load_dataset,
    overlap,
    parse_spec,
    plot_recall_iou,
    precision_omega,
    precision_omega_scores,
    retrieval_scores,
    retrieve,
    score_questions,
    size,
    summarize,
    touches,
    union,
    write_results,
)
from tasks.split.factory import SPLITTERS, build_splitter
from tests.conftest import EVAL

# --- (a) every metric on a case small enough to check by hand ----------------------------

# E = [10, 20) and [30, 35): |E| = 15
REFS = [(10, 20), (30, 35)]


def test_interval_helpers() -> None:
    assert union([(5, 15), (12, 32), (40, 40), (32, 33)]) == [(5, 33)]
    assert size([(5, 15), (12, 32)]) == 27
    assert overlap(REFS, [(5, 15), (12, 32)]) == 10 + 2
    assert touches((24, 30), (30, 35))  # sharing an end point is touching (closed test)
    assert not touches((0, 8), (10, 20))


def test_recall_precision_iou_by_hand() -> None:
    # retrieved: [5, 15) and [12, 32) of the question's corpus, [30, 35) of another corpus
    # N: reference characters under the same-corpus chunks: 10..19 (10) + 30..31 (2) = 12;
    # the other corpus's [30, 35) covers nothing of E, but its 5 characters count as retrieved
    retrieved = [(True, (5, 15)), (True, (12, 32)), (False, (30, 35))]
    scores = retrieval_scores(REFS, retrieved)
    assert scores["recall"] == pytest.approx(12 / 15)  # 0.8
    assert scores["precision"] == pytest.approx(12 / 35)  # lengths 10 + 20 + 5
    assert scores["iou"] == pytest.approx(12 / 38)  # 12 / (35 + 15 - 12)


def test_retrieved_overlap_counts_twice_in_the_lengths() -> None:
    # two retrieved chunks that both cover [10, 20): N = 10 once, lengths 10 + 10
    scores = retrieval_scores([(10, 20)], [(True, (10, 20)), (True, (10, 20))])
    assert (scores["recall"], scores["precision"], scores["iou"]) == (1.0, 0.5, 0.5)


def test_precision_omega_by_hand() -> None:
    chunks = [(0, 8), (8, 16), (16, 24), (24, 30), (35, 40), (40, 50)]
    # touching E: [8,16), [16,24) (reference 1), [24,30) and [35,40) (end points of reference 2)
    # union of H: [8, 30) + [35, 40) = 27 characters; N_H = 10 (all of [10, 20), none of [30, 35))
    assert precision_omega(REFS, chunks) == pytest.approx(10 / (27 + 15 - 10))  # 0.3125
    assert precision_omega(REFS, [(0, 8), (40, 50)]) == 0.0  # H empty
    assert precision_omega(REFS, [(10, 20), (30, 35)]) == 1.0


def test_mean_and_population_std_times_100_per_corpus() -> None:
    config = parse_spec("recursive:chunk_size=10,chunk_overlap=0,length_unit=chars")
    chunks = Chunks(("a", "a"), np.array([0, 10]), np.array([10, 30]), ("x", "y"))
    rows = [
        {"recall": 0.8, "precision": 0.1, "iou": 0.0, "precision_omega": 0.5},
        {"recall": 0.2, "precision": 0.3, "iou": 1.0, "precision_omega": 0.5},
    ]
    rows = [{"dataset": "d", "corpus_id": "a", **r} for r in rows]
    out = summarize(config, {"d": chunks}, rows)
    [corpus] = out["corpora"]
    assert corpus["recall_mean"] == pytest.approx(50.0)
    assert corpus["recall_std"] == pytest.approx(30.0)
    assert corpus["precision_mean"] == pytest.approx(20.0)
    assert corpus["precision_std"] == pytest.approx(10.0)
    assert corpus["iou_mean"] == pytest.approx(50.0) and corpus["iou_std"] == pytest.approx(50.0)
    assert corpus["precision_omega_std"] == 0.0
    assert (corpus["n_chunks"], corpus["mean_chunk_chars"], corpus["n_questions"]) == (2, 15.0, 2)
    assert (out["n_chunks"], out["mean_chunk_chars"], out["n_questions"]) == (2, 15.0, 2)
    assert out["recall_mean"] == out["recall_min"] == pytest.approx(50.0)


def test_over_corpora_each_corpus_counts_once_and_the_worst_is_named() -> None:
    config = parse_spec("recursive")
    chunks = {
        "one": Chunks(("a", "b"), np.array([0, 0]), np.array([10, 30]), ("x", "y")),
        "two": Chunks(("c",), np.array([0]), np.array([40]), ("z",)),
    }
    metrics = {"precision": 0.0, "iou": 0.0, "precision_omega": 0.0}
    rows = [{"dataset": "one", "corpus_id": "a", "recall": 1.0, **metrics}] * 3
    rows += [{"dataset": "one", "corpus_id": "b", "recall": 0.4, **metrics}]
    rows += [{"dataset": "two", "corpus_id": "c", "recall": 0.7, **metrics}] * 2
    out = summarize(config, chunks, rows)
    assert [(c["dataset"], c["corpus_id"], c["n_questions"]) for c in out["corpora"]] == [
        ("one", "a", 3),
        ("one", "b", 1),
        ("two", "c", 2),
    ]
    assert out["recall_mean"] == pytest.approx((100 + 40 + 70) / 3)  # not (300+40+140)/6
    assert out["recall_min"] == pytest.approx(40.0)
    assert out["worst_corpus"] == "one/b" and out["n_corpora"] == 3
    assert (out["n_chunks"], out["n_questions"]) == (3, 6)
    table = format_table([out])
    assert "one/b *" in table and "(recall@5): 70.0; * worst corpus: one/b (40.0)" in table
    assert "mean of 3 corpora" in table


def _tiny_dataset() -> tuple[Dataset, Chunks]:
    a, b = string.ascii_letters[:50], string.digits * 2
    question = Question("q", "a", ((5, 15),))
    chunks = Chunks(
        ("a", "a", "a", "b"),
        np.array([0, 10, 25, 0]),
        np.array([10, 25, 50, 20]),
        (a[0:10], a[10:25], a[25:50], b),
    )
    return Dataset({"a": a, "b": b}, (question,)), chunks


def test_retrieval_end_to_end_by_hand() -> None:
    dataset, chunks = _tiny_dataset()
    e1, e2 = np.array([1.0, 0.0]), np.array([0.0, 1.0])
    vectors = {
        "q": e1,
        chunks.texts[0]: e2,  # cosine 0
        chunks.texts[1]: e1,  # cosine 1: first
        chunks.texts[2]: -e1,  # cosine -1
        chunks.texts[3]: (e1 + e2) / math.sqrt(2),  # cosine 0.71: second (another corpus)
    }

    def embed(texts: Sequence[str]) -> np.ndarray:
        return np.array([vectors[t] for t in texts], dtype=np.float32)

    [row] = score_questions(dataset, chunks, embed, k=2, ranking=QueryParams(retrieval="dense"))
    # retrieved a[10,25) and b[0,20): N = |[5,15) ∩ [10,25)| = 5, |E| = 10, lengths 15 + 20
    assert row["recall"] == pytest.approx(0.5)
    assert row["precision"] == pytest.approx(5 / 35)
    assert row["iou"] == pytest.approx(5 / 40)  # 5 / (35 + 10 - 5)
    # H = a[0,10) and a[10,25): union 25 characters, N_H = 10 → 10 / (25 + 10 - 10)
    assert row["precision_omega"] == pytest.approx(0.4)


def _word_dataset() -> tuple[Dataset, Chunks]:
    """Three chunks of one corpus; the question shares a rare word with the middle one."""
    text = "bees make honey in summer. varroa mites harm bees. bees sleep in winter."
    spans = [(0, 26), (27, 50), (51, len(text))]
    chunks = Chunks(
        ("c",) * 3,
        np.array([s for s, _ in spans]),
        np.array([e for _, e in spans]),
        tuple(text[s:e] for s, e in spans),
    )
    return Dataset({"c": text}, (Question("what harms bees? varroa", "c", (spans[1],)),)), chunks


def test_lexical_and_hybrid_retrieval_by_hand() -> None:
    dataset, chunks = _word_dataset()
    # dense prefers chunk 0 (0.9), then 2 (0.5), then 1 (0.1)
    dense = np.array([[0.9, 0.0], [0.1, 0.0], [0.5, 0.0]])
    question = np.array([[1.0, 0.0]])

    def top(retrieval: str, weight: float = 0.5, fusion: str = "absolute") -> list[list[int]]:
        ranking = QueryParams(retrieval=retrieval, dense_weight=weight, fusion=fusion)
        return retrieve(dataset, chunks, dense, question, 1, ranking)

    assert top("dense") == [[0]]
    # lexical: only chunk 1 has "varroa" and "harm(s)"; "bees" is in all three (no weight)
    assert top("lexical") == [[1]]
    # absolute: chunk 1 scores 0.1 w + 0.47 (1 - w) (its relative BM25: both rare words
    # once, a little shorter than average: 1.03 / 2.2), chunk 0 scores 0.9 w: 1 wins
    # below w = 0.37
    assert top("hybrid", 0.25) == [[1]]
    assert top("hybrid", 0.5) == [[0]]
    # minmax with equal weights: chunk 1 = 0.5 * 0 + 0.5 * 1 ties chunk 0 = 0.5 * 1 + 0.5 * x
    # where chunk 0's rescaled BM25 x is 0: it is the lowest BM25 of the three
    assert top("hybrid", 0.5, "minmax") == [[0]]  # tie: the lower id
    assert top("hybrid", 0.4, "minmax") == [[1]]
    assert top("hybrid", 0.6, "minmax") == [[0]]
    [row] = score_questions(dataset, chunks, _ones, k=1, ranking=QueryParams(retrieval="lexical"))
    assert row["recall"] == 1.0 and row["precision"] == 1.0


def test_configurations_of_one_chunking_embed_once() -> None:
    dataset, _ = _tiny_dataset()
    calls: list[int] = []

    def embed(texts: Sequence[str]) -> np.ndarray:
        calls.append(len(texts))
        return _ones(texts)

    configs = [
        parse_spec(f"recursive:chunk_size=10,chunk_overlap=0,length_unit=chars,{r}")
        for r in (
            "retrieval=dense",
            "retrieval=hybrid,dense_weight=0.2",
            "fusion=rrf",
            "retrieval=lexical,stop_words=false",
        )
    ]
    results = evaluate_configs([dataset], configs, embed)
    assert len(calls) == 2  # chunks once, questions once, for all four configurations
    assert [s["retrieval"] for s, _ in results] == ["dense", "hybrid", "hybrid", "lexical"]
    assert [(s["fusion"], s["stop_words"]) for s, _ in results][2:] == [
        ("rrf", True),
        ("absolute", False),
    ]
    assert all(len(rows) == len(dataset.questions) for _, rows in results)
    with pytest.raises(ValueError, match="one chunking"):
        evaluate_configs([dataset], [configs[0], parse_spec("recursive:chunk_size=90")], embed)


# --- specs, the data set, outputs ------------------------------------------------------


def test_parse_spec() -> None:
    config = parse_spec("recursive:chunk_size=800,chunk_overlap=100,length_unit=chars")
    p = config.params
    assert (p.splitter, p.chunk_size, p.chunk_overlap, p.length_unit) == (
        "recursive",
        800,
        100,
        "chars",
    )
    assert parse_spec("token:chunk_size=278,chunk_overlap=139", "my-model").params.model == (
        "my-model"
    )
    assert parse_spec("token").params.splitter == "token"
    for bad in (
        "nope:chunk_size=3",
        "token:size=3",
        "token:chunk_size=x",
        "token:chunk_size",
        "token:length_unit=furlongs",
        "token:splitter=recursive",
    ):
        with pytest.raises(ConfigError):
            parse_spec(bad)


def test_parse_spec_takes_retrieval_settings_and_defaults() -> None:
    config = parse_spec("auto:chunk_size=300,retrieval=dense")
    assert (config.retrieval, config.params.chunk_size) == ("dense", 300)
    config = parse_spec(
        "auto:dense_weight=0.3", embed_backend="onnx", ranking={"retrieval": "lexical"}
    )
    assert (config.retrieval, config.dense_weight, config.params.embed_backend) == (
        "lexical",
        0.3,
        "onnx",
    )
    assert parse_spec("auto:retrieval=hybrid", ranking={"retrieval": "dense"}).retrieval == (
        "hybrid"
    )
    config = parse_spec("auto:fusion=zscore,stop_words=false")
    assert (config.ranking.fusion, config.ranking.stop_words) == ("zscore", False)
    for bad in (
        "auto:retrieval=sparse",
        "auto:dense_weight=1.5",
        "auto:dense_weight=x",
        "auto:fusion=borda",
        "auto:stop_words=maybe",
    ):
        with pytest.raises(ConfigError):
            parse_spec(bad)


def test_the_default_spec_is_docflows_defaults() -> None:
    config = parse_spec(default_spec())
    ingest, query = IngestParams(), QueryParams()
    assert config.params.content_fingerprint() == ingest.content_fingerprint()
    assert config.ranking == query
    assert config.params.embed_backend == ingest.embed_backend


def test_a_splitter_added_to_the_factory_parses(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(SPLITTERS, "newfangled", "a splitter added later")
    assert parse_spec("newfangled:chunk_size=200").params.splitter == "newfangled"


def _write_dataset(root: Path, content: str = "answer") -> Path:
    (root / "corpora").mkdir(parents=True)
    (root / "corpora" / "c.md").write_text("the answer is here", encoding="utf-8")
    refs = json.dumps([{"content": content, "start_index": 4, "end_index": 10}])
    with (root / "questions.csv").open("w", encoding="utf-8", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["question", "references", "corpus_id"])
        writer.writerow(["what?", refs, "c"])
    return root


def test_load_dataset(tmp_path: Path) -> None:
    dataset = load_dataset(_write_dataset(tmp_path / "ok"))
    assert dataset.corpora == {"c": "the answer is here"}
    assert dataset.questions == (Question("what?", "c", ((4, 10),)),)
    with pytest.raises(ConfigError, match="not its span"):
        load_dataset(_write_dataset(tmp_path / "bad", content="answe"))
    with pytest.raises(ConfigError, match="not found"):
        load_dataset(tmp_path / "absent")


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda r: (r / "corpora" / "old.md").write_bytes(b"caf\xe9"), "old.md: not UTF-8 text"),
        (lambda r: (r / "questions.csv").write_bytes(b"question\n\xff\n"), "not UTF-8 text"),
        (
            lambda r: (r / "questions.csv").write_text("question,references,corpus_id\nq,[{,c\n"),
            "questions.csv:2: not a question row (JSONDecodeError",
        ),
        (
            lambda r: (r / "questions.csv").write_text("question,refs\nq,[]\n"),
            "questions.csv:2: not a question row (KeyError",
        ),
    ],
)
def test_a_damaged_span_set_is_one_line_naming_the_file(
    tmp_path: Path, damage: Callable[[Path], object], message: str
) -> None:
    """Each failed as a bare UnicodeDecodeError, JSONDecodeError or KeyError."""
    root = _write_dataset(tmp_path / "d")
    damage(root)
    with pytest.raises(ConfigError, match=re.escape(message)) as caught:
        load_dataset(root)
    assert "\n" not in str(caught.value)


def test_chunks_are_spans_of_their_corpus(tmp_path: Path) -> None:
    dataset = load_dataset(_write_dataset(tmp_path / "d"))
    chunks = chunk_dataset(
        dataset, parse_spec("recursive:chunk_size=8,chunk_overlap=0,length_unit=chars").params
    )
    assert len(chunks) > 1
    for corpus, start, end, text in zip(
        chunks.corpus, chunks.starts, chunks.ends, chunks.texts, strict=True
    ):
        assert dataset.corpora[corpus][start:end] == text


def test_outputs(tmp_path: Path) -> None:
    import pyarrow.parquet as pq
    from PIL import Image

    dataset, chunks = _tiny_dataset()
    config = EvalConfig("tiny", IngestParams(splitter="recursive"))
    rows = [{"config": "tiny", **r} for r in score_questions(dataset, chunks, _ones, k=1)]
    summary = [summarize(config, {dataset.name: chunks}, rows, k=1)]
    s_path, q_path = write_results(tmp_path / "out", summary, rows)
    written = pq.read_table(s_path).to_pylist()
    assert [(r["dataset"], r["corpus_id"]) for r in written] == [
        ("dataset", "a"),
        ("(all)", "(mean)"),
    ]
    assert written[0]["recall_mean"] == summary[0]["corpora"][0]["recall_mean"]
    assert written[1]["recall_min"] == summary[0]["recall_min"]
    assert pq.read_table(q_path).num_rows == 1
    png = plot_recall_iou(summary, tmp_path / "out" / "plot.png")
    pixels = np.asarray(Image.open(png).convert("L"))
    assert pixels.min() < 128 < pixels.max()  # dark marks on a light ground
    table = format_table(summary + [summary[0] | {"config": "tiny again"}])
    lines = table.splitlines()
    assert lines[0].startswith("tiny  [retrieval hybrid, fusion absolute, dense_weight 0.25")
    assert lines[1].split()[:3] == ["corpus", "questions", "chunks"]
    assert "mean and minimum over corpora" in table and "tiny again" in lines[-1]


def _ones(texts: Sequence[str]) -> np.ndarray:
    return np.ones((len(texts), 2), dtype=np.float32) / math.sqrt(2)


def test_cli_usage_errors_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["evaluate", "--dataset", str(tmp_path / "absent")]) == 2
    assert "evaluation data set not found" in capsys.readouterr().err
    dataset = _write_dataset(tmp_path / "d")
    assert main(["evaluate", "--dataset", str(dataset), "--splitter", "nope"]) == 2
    assert "unknown splitter" in capsys.readouterr().err
    assert main(["evaluate", "--dataset", str(dataset), "--splitter", "auto:dense_weight=2"]) == 2
    assert "dense_weight" in capsys.readouterr().err
    assert main(["evaluate", "--dataset", str(dataset), "--retrieval", "sparse"]) == 2
    assert "sparse" in capsys.readouterr().err


def test_find_datasets(tmp_path: Path) -> None:
    one, two = _write_dataset(tmp_path / "sets" / "one"), _write_dataset(tmp_path / "sets" / "two")
    (tmp_path / "sets" / "not-a-set").mkdir()
    assert find_datasets(tmp_path / "sets") == [one, two]
    assert find_datasets(one) == [one]
    assert find_datasets(tmp_path / "absent") == []


# --- (b) precision_Ω on the real set, against a naive count over characters -------------


def _naive_precision_omega(corpus_spans: dict[str, list[tuple[int, int]]]) -> list[float]:
    """README step 3, precision_Ω, literally: sets of character positions, plain loops."""
    values = []
    for question in load_dataset(EVAL).questions:
        e_chars = set()
        for start, end in question.references:
            for i in range(start, end):
                e_chars.add(i)
        h = []
        for c_start, c_end in corpus_spans[question.corpus_id]:
            for r_start, r_end in question.references:
                if max(c_start, r_start) <= min(c_end, r_end):
                    h.append((c_start, c_end))
                    break
        if not h:
            values.append(0.0)
            continue
        h_chars = set()
        for start, end in h:
            for i in range(start, end):
                h_chars.add(i)
        n_h = 0
        for i in e_chars:
            if i in h_chars:
                n_h += 1
        values.append(n_h / (len(h_chars) + len(e_chars) - n_h))
    return values


def test_precision_omega_of_token_windows_matches_a_naive_count() -> None:
    if not EVAL.exists():
        pytest.skip(f"{EVAL} is absent")
    dataset = load_dataset(EVAL)
    config = parse_spec("token:chunk_size=278,chunk_overlap=139,length_unit=tokens")
    splitter = build_splitter(config.params)
    spans = {}
    for corpus_id, text in dataset.corpora.items():
        spans[corpus_id] = [(s.start, s.end) for s in splitter.split_spans(text)]
    expected = _naive_precision_omega(spans)

    chunks = chunk_dataset(dataset, config.params)
    assert precision_omega_scores(dataset, chunks) == pytest.approx(expected, abs=1e-12)
    # and through the whole per-configuration path, with a free stand-in embedding
    summary, rows = evaluate_config(dataset, config, _ones)
    assert [r["precision_omega"] for r in rows] == pytest.approx(expected, abs=1e-12)
    assert summary["n_questions"] == 132
    for corpus in summary["corpora"]:  # per corpus: mean and population std of its questions
        mine = [
            x
            for x, q in zip(expected, dataset.questions, strict=True)
            if q.corpus_id == corpus["corpus_id"]
        ]
        mean = sum(mine) / len(mine)
        std = math.sqrt(sum((x - mean) ** 2 for x in mine) / len(mine))
        assert corpus["precision_omega_mean"] == pytest.approx(mean * 100, abs=1e-9)
        assert corpus["precision_omega_std"] == pytest.approx(std * 100, abs=1e-9)


def test_a_bare_evaluate_reads_every_shared_data_set() -> None:
    from flows.evaluate import EVAL_ROOT, default_datasets

    if not EVAL_ROOT.exists():
        pytest.skip(f"{EVAL_ROOT} is absent")
    found = [Path(p).relative_to(EVAL_ROOT) for p in default_datasets()]
    names = [p.name for p in found]
    assert {"chunking", "retrieval", "covidqa", "scifact-train"} <= set(names)
    assert found == sorted(found)  # beir/scifact-train: one folder down

"""docflow evaluate, the pure core: metrics by hand, precision_Ω against a naive count."""

from __future__ import annotations

import csv
import json
import math
import string
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from flows.cli import main
from tasks.config import IngestParams
from tasks.errors import ConfigError
from tasks.evaluate import (
    Chunks,
    Dataset,
    EvalConfig,
    Question,
    chunk_dataset,
    evaluate_config,
    format_table,
    load_dataset,
    overlap,
    parse_spec,
    plot_recall_iou,
    precision_omega,
    precision_omega_scores,
    retrieval_scores,
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


def test_mean_and_population_std_times_100() -> None:
    config = parse_spec("recursive:chunk_size=10,chunk_overlap=0,length_unit=chars")
    chunks = Chunks(("a", "a"), np.array([0, 10]), np.array([10, 30]), ("x", "y"))
    rows = [
        {"recall": 0.8, "precision": 0.1, "iou": 0.0, "precision_omega": 0.5},
        {"recall": 0.2, "precision": 0.3, "iou": 1.0, "precision_omega": 0.5},
    ]
    out = summarize(config, chunks, rows)
    assert out["recall_mean"] == pytest.approx(50.0) and out["recall_std"] == pytest.approx(30.0)
    assert out["precision_mean"] == pytest.approx(20.0)
    assert out["precision_std"] == pytest.approx(10.0)
    assert out["iou_mean"] == pytest.approx(50.0) and out["iou_std"] == pytest.approx(50.0)
    assert out["precision_omega_std"] == 0.0
    assert (out["n_chunks"], out["mean_chunk_chars"], out["n_questions"]) == (2, 15.0, 2)


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

    [row] = score_questions(dataset, chunks, embed, k=2)
    # retrieved a[10,25) and b[0,20): N = |[5,15) ∩ [10,25)| = 5, |E| = 10, lengths 15 + 20
    assert row["recall"] == pytest.approx(0.5)
    assert row["precision"] == pytest.approx(5 / 35)
    assert row["iou"] == pytest.approx(5 / 40)  # 5 / (35 + 10 - 5)
    # H = a[0,10) and a[10,25): union 25 characters, N_H = 10 → 10 / (25 + 10 - 10)
    assert row["precision_omega"] == pytest.approx(0.4)


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
    summary = [summarize(config, chunks, rows, k=1)]
    s_path, q_path = write_results(tmp_path / "out", summary, rows)
    assert pq.read_table(s_path).to_pylist() == summary
    assert pq.read_table(q_path).num_rows == 1
    png = plot_recall_iou(summary, tmp_path / "out" / "plot.png")
    pixels = np.asarray(Image.open(png).convert("L"))
    assert pixels.min() < 128 < pixels.max()  # dark marks on a light ground
    table = format_table(summary)
    assert table.splitlines()[0].split()[:2] == ["config", "chunks"]
    assert "tiny" in table.splitlines()[1]


def _ones(texts: Sequence[str]) -> np.ndarray:
    return np.ones((len(texts), 2), dtype=np.float32) / math.sqrt(2)


def test_cli_usage_errors_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["evaluate", "--dataset", str(tmp_path / "absent")]) == 2
    assert "evaluation data set not found" in capsys.readouterr().err
    dataset = _write_dataset(tmp_path / "d")
    assert main(["evaluate", "--dataset", str(dataset), "--splitter", "nope"]) == 2
    assert "unknown splitter" in capsys.readouterr().err


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
    n = len(expected)
    mean = sum(expected) / n
    std = math.sqrt(sum((x - mean) ** 2 for x in expected) / n)

    chunks = chunk_dataset(dataset, config.params)
    assert precision_omega_scores(dataset, chunks) == pytest.approx(expected, abs=1e-12)
    # and through the whole per-configuration path, with a free stand-in embedding
    summary, rows = evaluate_config(dataset, config, _ones)
    assert [r["precision_omega"] for r in rows] == pytest.approx(expected, abs=1e-12)
    assert summary["precision_omega_mean"] == pytest.approx(mean * 100, abs=1e-9)
    assert summary["precision_omega_std"] == pytest.approx(std * 100, abs=1e-9)
    assert summary["n_questions"] == 132

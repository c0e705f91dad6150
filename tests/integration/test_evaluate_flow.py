"""docflow evaluate end to end: the real model, the flow, its artifact, Parquet and plot.

The chunking data set (../shared/eval/chunking: two corpora, the smallest shared set; the
subject here is the command, not the corpora), dense and hybrid ranking of one chunking
(so one embedding pass); a hand-written BEIR set whose nDCG@10 is computed by hand, and a
slice of ../shared's scifact-train (the whole set runs in the evaluation commands of
docs/retrieval.md only). Which sets a bare ``docflow evaluate`` reads is a unit test.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

from flows.cli import main
from tasks.evaluate import DOC_METRICS, METRICS
from tests.beir_sets import SCIFACT, expected_lexical_ndcg, scifact_slice, write_beir
from tests.conftest import EVAL

CHUNKING = "token:chunk_size=278,chunk_overlap=139,length_unit=tokens"
SPECS = [f"{CHUNKING},retrieval=dense", f"{CHUNKING},retrieval=hybrid"]
CONFIG_KEYS = {
    "config",
    "splitter",
    "chunk_size",
    "chunk_overlap",
    "length_unit",
    "model",
    "embed_backend",
    "retrieval",
    "dense_weight",
    "fusion",
    "stop_words",
    "per_source",
    "k",
    "n_chunks",
    "mean_chunk_chars",
    "n_questions",
    "n_corpora",
    "worst_corpus",
    "corpora",
    "score_metric",
    "score_mean",
    "score_min",
} | {f"{m}_{s}" for m in (*METRICS, *DOC_METRICS) for s in ("mean", "min")}
CORPORA = {("chunking", "chatlogs"), ("chunking", "state_of_the_union")}


def test_evaluate_cli_json_parquet_plot(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not EVAL.exists():
        pytest.skip(f"{EVAL} is absent")
    import pyarrow.parquet as pq
    from PIL import Image

    monkeypatch.setenv("DOCFLOW_EMBED_BACKEND", "onnx")  # evaluate reads it
    out = tmp_path / "eval"
    args = ["evaluate", "--json", "--out", str(out), "--dataset", str(EVAL)]
    args += ["--data-dir", str(tmp_path / "data")]
    code = main([*args, *(x for spec in SPECS for x in ("--splitter", spec))])
    stdout, stderr = capsys.readouterr()
    assert code == 0, stderr
    result = json.loads(stdout)  # exactly one JSON object on stdout
    assert {
        "datasets",
        "k",
        "n_questions",
        "configs",
        "parquet",
        "questions_parquet",
        "plot",
    } <= set(result)
    assert [Path(d).name for d in result["datasets"]] == ["chunking"]
    assert result["k"] == 5 and result["n_questions"] == 132
    dense, hybrid = result["configs"]
    for config, spec in zip((dense, hybrid), SPECS, strict=True):
        assert set(config) == CONFIG_KEYS
        assert config["config"] == spec and config["splitter"] == "token"
        assert config["model"] == "all-MiniLM-L6-v2" and config["embed_backend"] == "onnx"
        assert {(c["dataset"], c["corpus_id"]) for c in config["corpora"]} == CORPORA
        recalls = [c["recall_mean"] for c in config["corpora"]]
        assert config["recall_mean"] == pytest.approx(sum(recalls) / 2)
        assert config["recall_min"] == min(recalls)
        worst = min(config["corpora"], key=lambda c: c["recall_mean"])
        assert config["worst_corpus"] == f"{worst['dataset']}/{worst['corpus_id']}"
        for metric in METRICS:
            assert 0.0 <= config[f"{metric}_min"] <= config[f"{metric}_mean"] <= 100.0
        assert config["recall_mean"] > 30.0  # the real model retrieves; a broken one would not
    assert (dense["retrieval"], hybrid["retrieval"]) == ("dense", "hybrid")
    assert dense["n_chunks"] == hybrid["n_chunks"]  # one chunking, one embedding pass
    # the same chunks: precision_Ω does not depend on the ranking
    assert dense["precision_omega_mean"] == hybrid["precision_omega_mean"]
    assert hybrid["recall_mean"] >= dense["recall_mean"] - 1.0

    summary = pq.read_table(out / "evaluation.parquet").to_pylist()
    assert len(summary) == 2 * (2 + 1)  # per corpus and the mean, per configuration
    means = [r for r in summary if r["corpus_id"] == "(mean)"]
    assert [r["recall_mean"] for r in means] == [dense["recall_mean"], hybrid["recall_mean"]]
    questions = pq.read_table(out / "evaluation_questions.parquet")
    assert questions.num_rows == 2 * 132
    rows = questions.to_pylist()
    chat = [r["recall"] for r in rows if r["config"] == SPECS[1] and r["corpus_id"] == "chatlogs"]
    chat_row = next(c for c in hybrid["corpora"] if c["corpus_id"] == "chatlogs")
    assert np.mean(chat) * 100 == pytest.approx(chat_row["recall_mean"])

    png = out / "recall_vs_iou.png"
    assert Path(result["plot"]) == png
    with Image.open(png) as image:
        assert image.format == "PNG"
        pixels = np.asarray(image.convert("L"))
    assert pixels.std() > 1.0 and pixels.min() < 128 < pixels.max()  # not a blank image

    with get_client(sync_client=True) as client:
        found = client.read_artifacts(
            artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=[result["artifact"]]))
        )
    assert found and found[0].type == "table"
    data = found[0].data
    table = json.loads(data) if isinstance(data, str) else data
    assert [r["config"] for r in table] == SPECS
    assert table[1]["recall_mean"] == pytest.approx(hybrid["recall_mean"], abs=0.01)
    assert table[1]["worst_corpus"] == hybrid["worst_corpus"]


def test_evaluate_prints_one_row_per_corpus_and_marks_the_worst(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    if not EVAL.exists():
        pytest.skip(f"{EVAL} is absent")
    spec = "recursive:chunk_size=800,chunk_overlap=100,length_unit=chars,retrieval=lexical"
    args = ["--splitter", spec, "--out", str(tmp_path), "--data-dir", str(tmp_path / "data")]
    code = main(["evaluate", "--dataset", str(EVAL), *args])
    out = capsys.readouterr().out
    assert code == 0
    lines = out.splitlines()
    assert any(line.startswith(f"{spec}  [retrieval lexical") for line in lines)
    assert sum("chunking/" in line for line in lines) >= 3  # two corpus rows and the worst line
    assert any("mean of 2 corpora" in line for line in lines)
    assert any("(recall@5): " in line and "* worst corpus: chunking/" in line for line in lines)


def test_a_hand_written_beir_set_gives_the_hand_computed_ndcg(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    folder = write_beir(tmp_path / "bees")
    args = ["evaluate", "--json", "--dataset", str(folder), "--data-dir", str(tmp_path / "data")]
    code = main([*args, "--splitter", "auto:retrieval=lexical", "--splitter", "auto"])
    stdout, stderr = capsys.readouterr()
    assert code == 0, stderr
    result = json.loads(stdout)
    # no --out: the results go beside the rest of the data dir's, not to ./data/eval
    assert Path(result["parquet"]).parent == tmp_path / "data" / "eval"
    assert Path(result["plot"]).is_file()
    lexical, hybrid = result["configs"]
    expected = expected_lexical_ndcg()
    assert lexical["ndcg_10_mean"] == pytest.approx(sum(expected) / 3 * 100)
    assert lexical["score_metric"] == "nDCG@10" and lexical["worst_corpus"] == "bees/corpus"
    assert lexical["recall_10_mean"] == pytest.approx(200 / 3)  # 1/2, 1, 1/2
    # hybrid: the real model's side puts every document in the ranking
    assert hybrid["recall_100_mean"] == 100.0 and hybrid["ndcg_10_mean"] > 80.0


def test_a_slice_of_scifact_train_end_to_end(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    if not SCIFACT.exists():
        pytest.skip(f"../shared is absent here ({SCIFACT} not found)")
    import pyarrow.parquet as pq

    folder = scifact_slice(tmp_path / "scifact-slice", queries=20, documents=100)
    specs = ["auto:retrieval=dense", "auto:retrieval=lexical", "auto"]
    args = ["evaluate", "--json", "--dataset", str(folder), "--out", str(tmp_path / "out")]
    args += ["--data-dir", str(tmp_path / "data"), "--embed-backend", "onnx"]
    code = main([*args, *(x for spec in specs for x in ("--splitter", spec))])
    stdout, stderr = capsys.readouterr()
    assert code == 0, stderr
    result = json.loads(stdout)
    assert [Path(d).name for d in result["datasets"]] == ["scifact-slice"]
    for config in result["configs"]:
        [corpus] = config["corpora"]
        assert corpus["n_questions"] == 20 and corpus["n_chunks"] > corpus["n_documents"] > 100
        assert 30.0 < config["ndcg_10_mean"] <= config["recall_100_mean"] <= 100.0
        assert config["score_mean"] == config["ndcg_10_mean"]
    rows = pq.read_table(result["questions_parquet"]).to_pylist()
    assert len(rows) == 3 * 20 and all(r["query_id"] for r in rows)
    assert Path(result["plot"]).is_file()
    # the vectors are in the data dir's embedding cache, for the next run over these chunks
    from tasks.embed.cache import EmbeddingCache

    with EmbeddingCache.open(tmp_path / "data") as cache:
        stored = cache.db.execute("SELECT count(*) FROM vectors").fetchone()[0]
    assert stored >= corpus["n_chunks"] + 20

"""docflow evaluate end to end: the real model, the flow, its artifact, Parquet and plot."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

from flows.cli import main
from tasks.evaluate import METRICS
from tests.conftest import EVAL

SPEC = "token:chunk_size=278,chunk_overlap=139,length_unit=tokens"
CONFIG_KEYS = {
    "config",
    "splitter",
    "chunk_size",
    "chunk_overlap",
    "length_unit",
    "model",
    "k",
    "n_chunks",
    "mean_chunk_chars",
    "n_questions",
} | {f"{m}_{s}" for m in METRICS for s in ("mean", "std")}


def test_evaluate_cli_json_parquet_plot(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    if not EVAL.exists():
        pytest.skip(f"{EVAL} is absent")
    import pyarrow.parquet as pq
    from PIL import Image

    out = tmp_path / "eval"
    code = main(["evaluate", "--splitter", SPEC, "--json", "--out", str(out)])
    stdout, stderr = capsys.readouterr()
    assert code == 0, stderr
    result = json.loads(stdout)  # exactly one JSON object on stdout
    assert {
        "dataset",
        "k",
        "n_questions",
        "configs",
        "parquet",
        "questions_parquet",
        "plot",
    } <= set(result)
    assert result["k"] == 5 and result["n_questions"] == 132
    [config] = result["configs"]
    assert set(config) == CONFIG_KEYS
    assert config["config"] == SPEC and config["splitter"] == "token"
    assert config["model"] == "all-MiniLM-L6-v2"
    for metric in METRICS:
        assert 0.0 <= config[f"{metric}_mean"] <= 100.0
        assert config[f"{metric}_std"] >= 0.0
    assert config["recall_mean"] > 30.0  # the real model retrieves; a broken one would not

    summary = pq.read_table(out / "evaluation.parquet").to_pylist()
    assert summary == [config]
    questions = pq.read_table(out / "evaluation_questions.parquet")
    assert questions.num_rows == 132
    assert np.mean(questions.column("recall").to_numpy()) * 100 == pytest.approx(
        config["recall_mean"]
    )

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
    rows = json.loads(data) if isinstance(data, str) else data
    assert rows[0]["config"] == SPEC
    assert rows[0]["recall_mean"] == pytest.approx(config["recall_mean"], abs=0.01)

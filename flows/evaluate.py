"""The ``evaluate`` flow: score splitter configurations on a span-annotated retrieval set.

One task loads the data set, one task per configuration chunks, embeds, retrieves and
scores it (:mod:`tasks.evaluate`), and a last task writes the Parquet files and the
recall-vs-IoU plot. The summary is also published as a Prefect table artifact.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger, task
from prefect.artifacts import create_table_artifact
from prefect.cache_policies import NO_CACHE

from flows.artifacts import artifact_key
from tasks.embed import DEFAULT_MODEL, Embedder
from tasks.evaluate import (
    DEFAULT_K,
    DEFAULT_SPECS,
    METRICS,
    PLOT_FILE,
    Dataset,
    EvalConfig,
    evaluate_config,
    load_dataset,
    parse_spec,
    plot_recall_iou,
    write_results,
)

#: The evaluation data set, beside the repository: ../shared/eval/chunking.
DEFAULT_DATASET = Path(__file__).resolve().parents[1].parent / "shared" / "eval" / "chunking"
DEFAULT_OUT = "data/eval"


@task(name="load-eval-dataset", cache_policy=NO_CACHE)
def load_dataset_task(path: str) -> Dataset:
    """Read the corpora and questions."""
    return load_dataset(Path(path))


@task(name="evaluate-config", cache_policy=NO_CACHE)
def evaluate_config_task(
    dataset: Dataset, config: EvalConfig, k: int, batch_size: int
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Chunk, embed, retrieve and score one configuration."""
    embedder = Embedder(
        config.params.model, batch_size=batch_size, backend=config.params.embed_backend
    )
    summary, rows = evaluate_config(dataset, config, embedder.embed, k)
    get_run_logger().info(
        "%s: %d chunks, recall %.1f, IoU %.1f",
        config.label,
        summary["n_chunks"],
        summary["recall_mean"],
        summary["iou_mean"],
    )
    return summary, rows


@task(name="write-eval-results", cache_policy=NO_CACHE)
def write_results_task(
    out: str, summary: list[dict[str, Any]], questions: list[dict[str, Any]]
) -> dict[str, str]:
    """Write the Parquet files and the plot; return their paths."""
    summary_path, questions_path = write_results(Path(out), summary, questions)
    plot = plot_recall_iou(summary, Path(out) / PLOT_FILE)
    return {
        "parquet": str(summary_path),
        "questions_parquet": str(questions_path),
        "plot": str(plot),
    }


def _artifact_rows(summary: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for r in summary:
        row = {k: r[k] for k in ("config", "n_chunks")}
        for m in METRICS:
            for stat in ("mean", "std"):
                value = r[f"{m}_{stat}"]
                row[f"{m}_{stat}"] = None if math.isnan(value) else round(value, 2)
        rows.append(row)
    return rows


@flow(name="evaluate")
def evaluate(
    dataset: str = str(DEFAULT_DATASET),
    splitters: list[str] | None = None,
    model: str = DEFAULT_MODEL,
    k: int = DEFAULT_K,
    out: str = DEFAULT_OUT,
    batch_size: int = 32,
) -> dict[str, Any]:
    """Evaluate each splitter spec (``NAME:KEY=VALUE,...``) on the data set.

    Returns:
        The data set, k, one summary row per configuration (mean and population std × 100
        of recall, precision, IoU and precision_Ω) and the paths of the files written.

    """
    configs = [parse_spec(s, model) for s in (splitters or DEFAULT_SPECS)]
    data = load_dataset_task(dataset)
    summary: list[dict[str, Any]] = []
    questions: list[dict[str, Any]] = []
    for config in configs:
        row, rows = evaluate_config_task(data, config, k, batch_size)
        summary.append(row)
        questions.extend(rows)
    paths = write_results_task(out, summary, questions)
    key = artifact_key("evaluate-chunking", Path(dataset).name)
    create_table_artifact(
        _artifact_rows(summary),
        key=key,
        description=f"Chunking evaluation on {dataset}: {len(data.questions)} questions, "
        f"k = {k}; mean and population std × 100",
    )
    return {
        "dataset": dataset,
        "k": k,
        "n_questions": len(data.questions),
        "configs": summary,
        **paths,
        "artifact": key,
    }

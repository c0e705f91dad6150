"""The ``evaluate`` flow: score configurations on span-annotated retrieval data sets.

One task loads the data sets, one task per chunking (configurations that differ only in
how they retrieve share its chunks and vectors) chunks, embeds, retrieves and scores
(:mod:`tasks.evaluate`), and a last task writes the Parquet files and the recall-vs-IoU
plot. The summary is also published as a Prefect table artifact.
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
from tasks.embed.model import DEFAULT_MODEL, Embedder
from tasks.evaluate import (
    DEFAULT_K,
    METRICS,
    PLOT_FILE,
    Dataset,
    EvalConfig,
    default_spec,
    evaluate_configs,
    find_datasets,
    load_dataset,
    parse_spec,
    plot_recall_iou,
    write_results,
)

#: Where the shared evaluation data sets live, beside the repository: ../shared/eval.
EVAL_ROOT = Path(__file__).resolve().parents[1].parent / "shared" / "eval"
DEFAULT_OUT = "data/eval"


def default_datasets() -> list[str]:
    """Return every data set under ../shared/eval (chunking, retrieval...)."""
    return [str(p) for p in find_datasets(EVAL_ROOT)]


@task(name="load-eval-datasets", cache_policy=NO_CACHE)
def load_datasets_task(paths: list[str]) -> list[Dataset]:
    """Read the corpora and questions of every data set."""
    return [load_dataset(Path(p)) for p in paths]


@task(name="evaluate-chunking", cache_policy=NO_CACHE)
def evaluate_configs_task(
    datasets: list[Dataset], configs: list[EvalConfig], k: int, batch_size: int
) -> list[tuple[dict[str, Any], list[dict[str, Any]]]]:
    """Chunk and embed once, then retrieve and score with each configuration."""
    params = configs[0].params
    embedder = Embedder(params.model, batch_size=batch_size, backend=params.embed_backend)
    results = evaluate_configs(datasets, configs, embedder.embed, k)
    for summary, _ in results:
        if params.embed_backend == "auto":  # say what auto chose on this machine
            summary["embed_backend"] = f"auto ({embedder.backend})"
        get_run_logger().info(
            "%s: %d chunks, recall %.1f (worst %.1f, %s), IoU %.1f",
            summary["config"],
            summary["n_chunks"],
            summary["recall_mean"],
            summary["recall_min"],
            summary["worst_corpus"],
            summary["iou_mean"],
        )
    return results


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
        row = {k: r[k] for k in ("config", "n_chunks", "worst_corpus")}
        for m in METRICS:
            for stat in ("mean", "min"):
                value = r[f"{m}_{stat}"]
                row[f"{m}_{stat}"] = None if math.isnan(value) else round(value, 2)
        rows.append(row)
    return rows


def _groups(configs: Sequence[EvalConfig]) -> list[list[EvalConfig]]:
    """Return the configurations grouped by chunking, in the order first seen."""
    groups: dict[tuple[str, ...], list[EvalConfig]] = {}
    for config in configs:
        groups.setdefault(config.chunking(), []).append(config)
    return list(groups.values())


@flow(name="evaluate")
def evaluate(
    datasets: list[str] | None = None,
    splitters: list[str] | None = None,
    model: str = DEFAULT_MODEL,
    embed_backend: str | None = None,
    k: int = DEFAULT_K,
    out: str = DEFAULT_OUT,
    batch_size: int = 32,
    retrieval: str | None = None,
    dense_weight: float | None = None,
    fusion: str | None = None,
    stop_words: bool | None = None,
) -> dict[str, Any]:
    """Evaluate each configuration (``NAME:KEY=VALUE,...``) on every data set.

    ``embed_backend`` and the query settings (``retrieval``, ``dense_weight``, ``fusion``,
    ``stop_words``) are the defaults of configurations that do not set them (else
    docflow's own defaults).

    Returns:
        The data sets, k, one summary per configuration (per corpus: mean and population
        std × 100 of recall, precision, IoU and precision_Ω; over corpora: their mean and
        minimum, and the worst corpus) and the paths of the files written.

    """
    paths = datasets or default_datasets()
    ranking = {
        "retrieval": retrieval,
        "dense_weight": dense_weight,
        "fusion": fusion,
        "stop_words": stop_words,
    }
    configs = [
        parse_spec(s, model, embed_backend, {k: v for k, v in ranking.items() if v is not None})
        for s in (splitters or [default_spec()])
    ]
    data = load_datasets_task(paths)
    by_label: dict[str, tuple[dict[str, Any], list[dict[str, Any]]]] = {}
    for group in _groups(configs):
        for summary, rows in evaluate_configs_task(data, group, k, batch_size):
            by_label[summary["config"]] = (summary, rows)
    summaries = [by_label[c.label][0] for c in configs]
    questions = [row for c in configs for row in by_label[c.label][1]]
    files = write_results_task(out, summaries, questions)
    names = "+".join(d.name for d in data)
    n_questions = sum(len(d.questions) for d in data)
    key = artifact_key("evaluate-retrieval", names)
    create_table_artifact(
        _artifact_rows(summaries),
        key=key,
        description=f"Retrieval evaluation on {', '.join(paths)}: "
        f"{n_questions} questions, k = {k}; mean and minimum over "
        "corpora × 100",
    )
    return {
        "datasets": paths,
        "k": k,
        "n_questions": n_questions,
        "configs": summaries,
        **files,
        "artifact": key,
    }

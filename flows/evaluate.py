"""The ``evaluate`` flow: score configurations on span-annotated and BEIR-format data sets.

One task loads the data sets, one task per chunking (configurations that differ only in
how they retrieve share its chunks and vectors) chunks, embeds, retrieves and scores
(:mod:`tasks.evaluate`), and a last task writes the Parquet files and the plot. Vectors go
through the embedding cache of a data dir, so a later evaluation of the same chunks (another
ranking, a rerun) embeds nothing again. The summary is also published as a Prefect table
artifact.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from prefect import flow, get_run_logger, task
from prefect.artifacts import create_table_artifact
from prefect.cache_policies import NO_CACHE

from flows.artifacts import artifact_key
from tasks.embed.cache import EmbeddingCache
from tasks.embed.model import DEFAULT_MODEL, Embedder, embed_with_cache
from tasks.evaluate import (
    DEFAULT_K,
    DOC_METRICS,
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
#: The results' folder in a data dir (``--out`` where not given), and without one.
EVAL_FOLDER = "eval"
DEFAULT_OUT = "data/eval"


def default_datasets() -> list[str]:
    """Return every data set under ../shared/eval (chunking, retrieval, beir/scifact-train...)."""
    return [str(p) for p in find_datasets(EVAL_ROOT)]


@task(name="load-eval-datasets", cache_policy=NO_CACHE)
def load_datasets_task(paths: list[str]) -> list[Dataset]:
    """Read the corpora and questions of every data set."""
    return [load_dataset(Path(p)) for p in paths]


@task(name="evaluate-chunking", cache_policy=NO_CACHE)
def evaluate_configs_task(
    datasets: list[Dataset],
    configs: list[EvalConfig],
    k: int,
    batch_size: int,
    data_dir: str | None,
) -> list[tuple[dict[str, Any], list[dict[str, Any]]]]:
    """Chunk and embed once (through the cache of ``data_dir``), then retrieve and score."""
    params = configs[0].params
    embedder = Embedder(params.model, batch_size=batch_size, backend=params.embed_backend)
    cache = EmbeddingCache.open(Path(data_dir)) if data_dir else None

    def embed(texts: Sequence[str]) -> np.ndarray:
        if cache is None:
            return embedder.embed(texts)
        return embed_with_cache(embedder, cache, texts)[0]

    try:
        results = evaluate_configs(datasets, configs, embed, k)
    finally:
        if cache is not None:
            cache.close()
    for summary, _ in results:
        if params.embed_backend == "auto":  # say what auto chose on this machine
            summary["embed_backend"] = f"auto ({embedder.backend})"
        get_run_logger().info(
            "%s: %d chunks, %s %.1f (worst %.1f, %s)",
            summary["config"],
            summary["n_chunks"],
            summary["score_metric"],
            summary["score_mean"],
            summary["score_min"],
            summary["worst_corpus"],
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
        row = {k: r[k] for k in ("config", "n_chunks", "score_metric", "worst_corpus")}
        for m in ("score", *METRICS, *DOC_METRICS):
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
    out: str | None = None,
    batch_size: int = 32,
    retrieval: str | None = None,
    dense_weight: float | None = None,
    fusion: str | None = None,
    stop_words: bool | None = None,
    per_source: int | None = None,
    data_dir: str | None = "data",
) -> dict[str, Any]:
    """Evaluate each configuration (``NAME:KEY=VALUE,...``) on every data set.

    ``embed_backend`` and the query settings (``retrieval``, ``dense_weight``, ``fusion``,
    ``stop_words``, ``per_source``) are the defaults of configurations that do not set them
    (else docflow's own defaults). Vectors are read from and written to the embedding
    cache of ``data_dir`` (None: no cache). The results go to ``out``, by default the
    data dir's ``eval`` folder, beside the rest of what a run over it writes.

    Returns:
        The data sets, k, one summary per configuration (per span corpus: mean and
        population std × 100 of recall, precision, IoU and precision_Ω; per BEIR set:
        nDCG@10, recall@10, recall@100, MRR@10; over corpora: each metric's mean and
        minimum, the score's (recall@k or nDCG@10, per corpus) and the worst corpus) and
        the paths of the files written.

    """
    paths = datasets or default_datasets()
    ranking = {
        "retrieval": retrieval,
        "dense_weight": dense_weight,
        "fusion": fusion,
        "stop_words": stop_words,
        "per_source": per_source,
    }
    configs = [
        parse_spec(s, model, embed_backend, {k: v for k, v in ranking.items() if v is not None})
        for s in (splitters or [default_spec()])
    ]
    data = load_datasets_task(paths)
    by_label: dict[str, tuple[dict[str, Any], list[dict[str, Any]]]] = {}
    for group in _groups(configs):
        for summary, rows in evaluate_configs_task(data, group, k, batch_size, data_dir):
            by_label[summary["config"]] = (summary, rows)
    summaries = [by_label[c.label][0] for c in configs]
    questions = [row for c in configs for row in by_label[c.label][1]]
    if out is None:
        out = str(Path(data_dir) / EVAL_FOLDER) if data_dir else DEFAULT_OUT
    files = write_results_task(out, summaries, questions)
    names = "+".join(d.name for d in data)
    n_questions = sum(len(d.questions) for d in data)
    key = artifact_key("evaluate-retrieval", names)
    create_table_artifact(
        _artifact_rows(summaries),
        key=key,
        description=f"Retrieval evaluation on {', '.join(paths)}: "
        f"{n_questions} questions, k = {k}; mean and minimum over "
        "corpora × 100 (score: recall@k on span corpora, nDCG@10 on BEIR sets)",
    )
    return {
        "datasets": paths,
        "k": k,
        "n_questions": n_questions,
        "configs": summaries,
        **files,
        "artifact": key,
    }

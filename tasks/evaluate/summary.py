"""Summaries of configurations: per corpus, over corpora, and the runs that produce them.

Each metric is reported per corpus as the mean and the population standard deviation of its
questions, times 100, and over the corpora as the mean of the corpus means and the worst
corpus's value: a default must hold on every corpus, not on average. A BEIR set is one
corpus. The *score* of a corpus is its headline metric (recall@k on a span corpus, nDCG@10 on
a BEIR set), so one mean and one worst corpus cover every set of both kinds.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from tasks.evaluate.configs import EvalConfig
from tasks.evaluate.dataset import Dataset
from tasks.evaluate.metrics import DOC_METRICS, METRICS
from tasks.evaluate.scoring import (
    DEFAULT_K,
    Chunks,
    Embed,
    chunk_dataset,
    embed_dataset,
    retrieve,
    score_retrieved,
)

# --- summaries ---------------------------------------------------------------------------


def _mean_std(values: Sequence[float]) -> tuple[float, float]:
    if not values:
        return math.nan, math.nan
    arr = np.asarray(values, dtype=np.float64)
    return float(arr.mean() * 100), float(arr.std(ddof=0) * 100)


#: The headline metric of each kind of set: what the mean and the worst corpus are taken of.
SPAN_SCORE, DOC_SCORE = "recall", "ndcg_10"


def metric_name(metric: str, k: int = DEFAULT_K) -> str:
    """Return a headline metric's name as people write it (``recall@5``, ``nDCG@10``)."""
    return f"recall@{k}" if metric == SPAN_SCORE else "nDCG@10"


def corpus_rows(
    config: EvalConfig, chunks: Mapping[str, Chunks], rows: Sequence[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """Return one row per (data set, corpus) with questions: counts, mean and std × 100.

    A span corpus has :data:`METRICS`, a BEIR set (one row) :data:`DOC_METRICS`; ``score``
    is the row's headline metric (``metric``: recall or nDCG@10).
    """
    by_corpus: dict[tuple[str, str], list[Mapping[str, Any]]] = defaultdict(list)
    for question in rows:
        by_corpus[(str(question["dataset"]), str(question["corpus_id"]))].append(question)
    out: list[dict[str, Any]] = []
    for (dataset, corpus_id), mine in sorted(by_corpus.items()):
        beir = DOC_SCORE in mine[0]
        mine_chunks = chunks[dataset]
        if beir:
            lengths = (mine_chunks.ends - mine_chunks.starts).tolist()
        else:
            lengths = [e - s for s, e in mine_chunks.of_corpus(corpus_id)]
        row: dict[str, Any] = {
            "config": config.label,
            "dataset": dataset,
            "corpus_id": corpus_id,
            "n_questions": len(mine),
            "n_chunks": len(lengths),
            "mean_chunk_chars": float(np.mean(lengths)) if lengths else 0.0,
        }
        if beir:
            row["n_documents"] = len(set(mine_chunks.corpus))
        for metric in DOC_METRICS if beir else METRICS:
            row[f"{metric}_mean"], row[f"{metric}_std"] = _mean_std([r[metric] for r in mine])
        row["metric"] = DOC_SCORE if beir else SPAN_SCORE
        row["score"] = row[f"{row['metric']}_mean"]
        out.append(row)
    return out


def _mean_min(values: Sequence[float]) -> tuple[float, float]:
    if not values:
        return math.nan, math.nan
    return float(np.mean(values)), float(np.min(values))


def summarize(
    config: EvalConfig,
    chunks: Mapping[str, Chunks],
    rows: Sequence[Mapping[str, Any]],
    k: int = DEFAULT_K,
) -> dict[str, Any]:
    """Return the configuration's summary: settings, the mean and minimum over corpora.

    ``<metric>_mean`` is the mean of the corpus means (each corpus counts once, whatever
    its number of questions), ``<metric>_min`` the lowest corpus mean, over the corpora
    that have the metric (NaN where none has). ``score_mean`` and ``score_min`` are over
    every corpus of both kinds, each by its headline metric (recall@k on a span corpus,
    nDCG@10 on a BEIR set: ``score_metric`` names them), and ``worst_corpus`` is the
    corpus of the lowest. ``corpora`` holds the per-corpus rows.
    """
    corpora = corpus_rows(config, chunks, rows)
    lengths = np.concatenate([c.ends - c.starts for c in chunks.values()] or [np.zeros(0)])
    out: dict[str, Any] = {
        **config.describe(),
        "k": k,
        "n_chunks": int(sum(len(c) for c in chunks.values())),
        "mean_chunk_chars": float(lengths.mean()) if len(lengths) else 0.0,
        "n_questions": len(rows),
        "n_corpora": len(corpora),
    }
    for metric in (*METRICS, *DOC_METRICS):
        means = [c[f"{metric}_mean"] for c in corpora if f"{metric}_mean" in c]
        out[f"{metric}_mean"], out[f"{metric}_min"] = _mean_min(means)
    out["score_mean"], out["score_min"] = _mean_min([c["score"] for c in corpora])
    kinds = [m for m in (SPAN_SCORE, DOC_SCORE) if any(c["metric"] == m for c in corpora)]
    out["score_metric"] = " / ".join(metric_name(m, k) for m in kinds)
    worst = min(corpora, key=lambda c: c["score"], default=None)
    out["worst_corpus"] = f"{worst['dataset']}/{worst['corpus_id']}" if worst else ""
    out["corpora"] = corpora
    return out


# --- configurations ----------------------------------------------------------------------


def evaluate_configs(
    datasets: Sequence[Dataset], configs: Sequence[EvalConfig], embed: Embed, k: int = DEFAULT_K
) -> list[tuple[dict[str, Any], list[dict[str, Any]]]]:
    """Chunk, embed, retrieve and score configurations that share one chunking.

    Every configuration must have the same :meth:`EvalConfig.chunking` (and ``embed`` is
    its model): chunks and vectors are computed once per data set and reused by each
    retrieval setting.

    Returns:
        Per configuration, its summary and its per-question rows (with the config label).

    """
    if len({c.chunking() for c in configs}) > 1:
        raise ValueError("evaluate_configs takes configurations of one chunking")
    if not configs:
        return []
    needs_vectors = any(c.retrieval != "lexical" for c in configs)
    results: list[tuple[dict[str, Any], list[dict[str, Any]]]] = []
    prepared = []
    for dataset in datasets:
        chunks = chunk_dataset(dataset, configs[0].params)
        vectors, questions = embed_dataset(dataset, chunks, embed if needs_vectors else None)
        prepared.append((dataset, chunks, vectors, questions))
    for config in configs:
        rows: list[dict[str, Any]] = []
        for dataset, chunks, vectors, questions in prepared:
            top = retrieve(dataset, chunks, vectors, questions, k, config.ranking)
            rows += [{"config": config.label, **r} for r in score_retrieved(dataset, chunks, top)]
        by_name = {dataset.name: chunks for dataset, chunks, _, _ in prepared}
        results.append((summarize(config, by_name, rows, k), rows))
    return results


def evaluate_config(
    datasets: Sequence[Dataset] | Dataset, config: EvalConfig, embed: Embed, k: int = DEFAULT_K
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Chunk, embed, retrieve and score one configuration on one or more data sets."""
    sets = [datasets] if isinstance(datasets, Dataset) else list(datasets)
    return evaluate_configs(sets, [config], embed, k)[0]

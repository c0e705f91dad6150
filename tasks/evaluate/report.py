"""What ``docflow evaluate`` writes and prints: Parquet files, a plot, plain-text tables."""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tasks.evaluate.metrics import DOC_METRICS, METRICS
from tasks.evaluate.scoring import DEFAULT_K

SUMMARY_FILE = "evaluation.parquet"
QUESTIONS_FILE = "evaluation_questions.parquet"
PLOT_FILE = "recall_vs_iou.png"
#: Column heads of the metrics.
HEADS = {
    "recall": "recall",
    "precision": "precision",
    "iou": "IoU",
    "precision_omega": "prec_Ω",
    "ndcg_10": "nDCG@10",
    "recall_10": "R@10",
    "recall_100": "R@100",
    "mrr_10": "MRR@10",
}


def summary_rows(summary: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Return the flat rows of ``evaluation.parquet``: per corpus, then the mean over corpora.

    A configuration's mean row has ``dataset`` "(all)" and ``corpus_id`` "(mean)", and the
    minimum over corpora in ``<metric>_min``; a corpus row has only its own metrics.
    """
    out: list[dict[str, Any]] = []
    for s in summary:
        settings = {k: v for k, v in s.items() if k != "corpora"}
        own = {
            k: v
            for k, v in settings.items()
            if not k.endswith(("_mean", "_min")) and k not in ("score_metric", "worst_corpus")
        }
        out.extend({**own, **c} for c in s["corpora"])
        out.append(
            {**settings, "dataset": "(all)", "corpus_id": "(mean)"}
            | {f"{m}_std": None for m in (*METRICS, *DOC_METRICS)}
        )
    return out


def _write_parquet(rows: Sequence[Mapping[str, Any]], path: Path) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    columns = list(dict.fromkeys(key for row in rows for key in row))  # rows of both kinds
    table = pa.Table.from_pylist([{c: r.get(c) for c in columns} for r in rows])
    tmp = path.with_name(f".{path.name}.tmp")
    pq.write_table(table, tmp)
    os.replace(tmp, path)
    return path


def write_results(
    out: Path, summary: Sequence[Mapping[str, Any]], questions: Sequence[Mapping[str, Any]]
) -> tuple[Path, Path]:
    """Write the per-corpus summary rows and the per-question rows as Parquet files."""
    out.mkdir(parents=True, exist_ok=True)
    return (
        _write_parquet(summary_rows(summary), out / SUMMARY_FILE),
        _write_parquet(questions, out / QUESTIONS_FILE),
    )


def _has(summary: Sequence[Mapping[str, Any]], metric: str) -> bool:
    """Return whether some configuration has a value of ``metric`` (a set of its kind)."""
    return any(not math.isnan(float(s.get(f"{metric}_mean", math.nan))) for s in summary)


def plot_recall_iou(summary: Sequence[Mapping[str, Any]], path: Path) -> Path:
    """Draw the configurations, one numbered point each (PNG).

    Span sets: mean recall against mean IoU (over corpora); BEIR sets, on a second panel:
    mean nDCG@10 against mean recall@100.
    """
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    panels = [("iou", "IoU", "recall", "recall")] if _has(summary, "recall") else []
    if _has(summary, "ndcg_10"):
        panels.append(("recall_100", "recall@100, BEIR sets", "ndcg_10", "nDCG@10"))
    panels = panels or [("iou", "IoU", "recall", "recall")]
    fig = Figure(figsize=(7 * len(panels), 5), dpi=100)
    k = summary[0]["k"] if summary else DEFAULT_K
    for n, (x_key, x_name, y_key, y_name) in enumerate(panels, start=1):
        ax = fig.add_subplot(1, len(panels), n)
        # one point per configuration, numbered on the plot and named in the legend below the
        # axes (colours repeat after ten, so the number is what tells points apart)
        for number, row in enumerate(summary, start=1):
            x, y = float(row[f"{x_key}_mean"]), float(row[f"{y_key}_mean"])
            marker = "osD^v"[(number - 1) // 10 % 5]
            ax.scatter([x], [y], s=40, marker=marker, label=f"{number}. {row['config']}")
            ax.annotate(str(number), (x, y), xytext=(4, 4), textcoords="offset points", fontsize=8)
        if summary and n == 1:
            ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.14), fontsize=7, frameon=False)
        ax.set_xlabel(f"{x_name} (mean over corpora × 100)")
        ax.set_ylabel(f"{y_name} (mean over corpora × 100)")
        ax.set_title(f"Span sets, k = {k}" if x_key == "iou" else "BEIR sets")
        ax.grid(True, alpha=0.3)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png", bbox_inches="tight")
    return path


def _columns(rows: Sequence[Sequence[str]], left: int = 1) -> list[str]:
    """Return rows as aligned lines: the first ``left`` columns to the left, the rest right."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return [
        "  ".join(
            c.ljust(w) if i < left else c.rjust(w)
            for i, (c, w) in enumerate(zip(row, widths, strict=True))
        ).rstrip()
        for row in rows
    ]


def _corpus_table(summary: Mapping[str, Any], metrics: Sequence[str]) -> list[str]:
    """Return the lines of one kind of corpora (those with ``metrics``), worst marked ``*``."""
    head = ["corpus", "questions", "chunks", *(HEADS[m] for m in metrics)]
    body = []
    for c in summary["corpora"]:
        if f"{metrics[0]}_mean" not in c:
            continue
        mark = " *" if f"{c['dataset']}/{c['corpus_id']}" == summary["worst_corpus"] else ""
        body.append(
            [f"{c['dataset']}/{c['corpus_id']}{mark}", str(c["n_questions"]), str(c["n_chunks"])]
            + [f"{c[f'{m}_mean']:.1f} ± {c[f'{m}_std']:.1f}" for m in metrics]
        )
    return _columns([head, *body]) if body else []


def format_config(summary: Mapping[str, Any]) -> str:
    """Return one configuration's tables: a row per corpus of each kind, then the means."""
    spans = _corpus_table(summary, METRICS)
    if spans:
        n = sum("recall_mean" in c for c in summary["corpora"])
        spans.append(
            f"mean of {n} span corpora: "
            + ", ".join(f"{HEADS[m]} {summary[f'{m}_mean']:.1f}" for m in METRICS)
        )
    documents = _corpus_table(summary, DOC_METRICS)
    ranking = summary["retrieval"]
    settings = (
        f"{summary['config']}  [retrieval {ranking}"
        + (
            f", fusion {summary['fusion']}, dense_weight {summary['dense_weight']}"
            if ranking == "hybrid"
            else ""
        )
        + ("" if summary["stop_words"] or ranking == "dense" else ", stop words kept")
        + (f", per_source {summary['per_source']}" if summary.get("per_source") else "")
        + f", embed backend {summary['embed_backend']}, k = {summary['k']}]"
    )
    lines = [settings, *("  " + line for line in [*spans, *documents])]
    lines.append(
        f"  mean of {summary['n_corpora']} corpora ({summary['score_metric']}): "
        f"{summary['score_mean']:.1f}; * worst corpus: {summary['worst_corpus']} "
        f"({summary['score_min']:.1f})"
    )
    return "\n".join(lines)


def format_comparison(summary: Sequence[Mapping[str, Any]]) -> str:
    """Return one line per configuration: chunks, the score and each metric's mean and min."""
    metrics = [m for m in (*METRICS, *DOC_METRICS) if _has(summary, m)]
    head = ["config", "chunks", "chars", "score mean", "min"]
    for m in metrics:
        head += [f"{HEADS[m]} mean", "min"]
    head.append("worst corpus")
    body = []
    for s in summary:
        row = [str(s["config"]), str(s["n_chunks"]), f"{s['mean_chunk_chars']:.0f}"]
        row += [f"{s['score_mean']:.1f}", f"{s['score_min']:.1f}"]
        for m in metrics:
            row += [f"{s[f'{m}_mean']:.1f}", f"{s[f'{m}_min']:.1f}"]
        body.append([*row, str(s["worst_corpus"])])
    return "\n".join(_columns([head, *body]))


def format_table(summary: Sequence[Mapping[str, Any]]) -> str:
    """Return every configuration's table, then (for several) the comparison of means."""
    blocks = [format_config(s) for s in summary]
    if len(summary) > 1:
        named = summary[0]["score_metric"]
        blocks.append(
            f"mean and minimum over corpora, × 100 (score: {named}):\n" + format_comparison(summary)
        )
    return "\n\n".join(blocks)

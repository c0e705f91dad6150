"""What ``docflow evaluate`` writes and prints: Parquet files, a plot, plain-text tables."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tasks.evaluate.metrics import METRICS
from tasks.evaluate.scoring import DEFAULT_K

SUMMARY_FILE = "evaluation.parquet"
QUESTIONS_FILE = "evaluation_questions.parquet"
PLOT_FILE = "recall_vs_iou.png"
#: Column heads of the metrics.
HEADS = {"recall": "recall", "precision": "precision", "iou": "IoU", "precision_omega": "prec_Ω"}


def summary_rows(summary: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Return the flat rows of ``evaluation.parquet``: per corpus, then the mean over corpora.

    A configuration's mean row has ``dataset`` "(all)" and ``corpus_id`` "(mean)", and the
    minimum over corpora in ``<metric>_min``.
    """
    out: list[dict[str, Any]] = []
    for s in summary:
        settings = {k: v for k, v in s.items() if k != "corpora"}
        out.extend({**settings, **c} for c in s["corpora"])
        out.append(
            {**settings, "dataset": "(all)", "corpus_id": "(mean)"}
            | {f"{m}_std": None for m in METRICS}
        )
    return out


def _write_parquet(rows: Sequence[Mapping[str, Any]], path: Path) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.Table.from_pylist([dict(r) for r in rows])
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


def plot_recall_iou(summary: Sequence[Mapping[str, Any]], path: Path) -> Path:
    """Draw mean recall against mean IoU (over corpora), one point per configuration (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7, 5), dpi=100)
    ax = fig.add_subplot()
    # one point per configuration, numbered on the plot and named in the legend below the axes
    # (colours repeat after ten, so the number is what tells points apart)
    for number, row in enumerate(summary, start=1):
        x, y = float(row["iou_mean"]), float(row["recall_mean"])
        marker = "osD^v"[(number - 1) // 10 % 5]
        ax.scatter([x], [y], s=40, marker=marker, label=f"{number}. {row['config']}")
        ax.annotate(str(number), (x, y), xytext=(4, 4), textcoords="offset points", fontsize=8)
    if summary:
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.14), fontsize=7, frameon=False)
    ax.set_xlabel("IoU (mean over corpora × 100)")
    ax.set_ylabel("recall (mean over corpora × 100)")
    ax.set_title(f"Retrieval evaluation, k = {summary[0]['k'] if summary else DEFAULT_K}")
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


def format_config(summary: Mapping[str, Any]) -> str:
    """Return one configuration's table: a row per corpus (worst marked ``*``), the mean."""
    head = ["corpus", "questions", "chunks", *HEADS.values()]
    body = []
    for c in summary["corpora"]:
        mark = " *" if f"{c['dataset']}/{c['corpus_id']}" == summary["worst_corpus"] else ""
        body.append(
            [f"{c['dataset']}/{c['corpus_id']}{mark}", str(c["n_questions"]), str(c["n_chunks"])]
            + [f"{c[f'{m}_mean']:.1f} ± {c[f'{m}_std']:.1f}" for m in METRICS]
        )
    body.append(
        [f"mean of {summary['n_corpora']} corpora", str(summary["n_questions"])]
        + [str(summary["n_chunks"])]
        + [f"{summary[f'{m}_mean']:.1f}" for m in METRICS]
    )
    settings = (
        f"{summary['config']}  [retrieval {summary['retrieval']}"
        + (
            f", fusion {summary['fusion']}, dense_weight {summary['dense_weight']}"
            if summary["retrieval"] == "hybrid"
            else ""
        )
        + ("" if summary["stop_words"] or summary["retrieval"] == "dense" else ", stop words kept")
        + f", embed backend {summary['embed_backend']}, k = {summary['k']}]"
    )
    lines = [settings, *("  " + line for line in _columns([head, *body]))]
    lines.append(f"  * worst corpus by recall: {summary['worst_corpus']}")
    return "\n".join(lines)


def format_comparison(summary: Sequence[Mapping[str, Any]]) -> str:
    """Return one line per configuration: chunks, and each metric's mean and minimum."""
    head = ["config", "chunks", "chars"]
    for m in METRICS:
        head += [f"{HEADS[m]} mean", "min"]
    head.append("worst corpus")
    body = []
    for s in summary:
        row = [str(s["config"]), str(s["n_chunks"]), f"{s['mean_chunk_chars']:.0f}"]
        for m in METRICS:
            row += [f"{s[f'{m}_mean']:.1f}", f"{s[f'{m}_min']:.1f}"]
        body.append([*row, str(s["worst_corpus"])])
    return "\n".join(_columns([head, *body]))


def format_table(summary: Sequence[Mapping[str, Any]]) -> str:
    """Return every configuration's table, then (for several) the comparison of means."""
    blocks = [format_config(s) for s in summary]
    if len(summary) > 1:
        blocks.append("mean and minimum over corpora, × 100:\n" + format_comparison(summary))
    return "\n\n".join(blocks)

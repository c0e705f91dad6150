"""Retrieval evaluation (``docflow evaluate``): character-level metrics per configuration.

- :mod:`tasks.evaluate.dataset`: data sets (corpora + span-annotated questions);
- :mod:`tasks.evaluate.configs`: configurations (``NAME[:KEY=VALUE,...]``);
- :mod:`tasks.evaluate.metrics`: recall, precision, IoU, precision_Ω of one question;
- :mod:`tasks.evaluate.scoring`: chunk, embed, retrieve (dense, lexical or hybrid, as a
  query does) and score, per corpus and over corpora;
- :mod:`tasks.evaluate.report`: Parquet files, the plot and the printed tables.

This package is the pure core; the Prefect flow is :mod:`flows.evaluate`.
"""

from __future__ import annotations

from tasks.evaluate.configs import EvalConfig, default_spec, parse_spec
from tasks.evaluate.dataset import Dataset, Question, find_datasets, load_dataset
from tasks.evaluate.metrics import (
    METRICS,
    overlap,
    precision_omega,
    retrieval_scores,
    size,
    touches,
    union,
)
from tasks.evaluate.report import (
    PLOT_FILE,
    format_table,
    plot_recall_iou,
    summary_rows,
    write_results,
)
from tasks.evaluate.scoring import (
    DEFAULT_K,
    Chunks,
    Embed,
    chunk_dataset,
    evaluate_config,
    evaluate_configs,
    precision_omega_scores,
    retrieve,
    score_questions,
    summarize,
)

__all__ = [
    "DEFAULT_K",
    "METRICS",
    "PLOT_FILE",
    "Chunks",
    "Dataset",
    "Embed",
    "EvalConfig",
    "Question",
    "chunk_dataset",
    "default_spec",
    "evaluate_config",
    "evaluate_configs",
    "find_datasets",
    "format_table",
    "load_dataset",
    "overlap",
    "parse_spec",
    "plot_recall_iou",
    "precision_omega",
    "precision_omega_scores",
    "retrieval_scores",
    "retrieve",
    "score_questions",
    "size",
    "summarize",
    "summary_rows",
    "touches",
    "union",
    "write_results",
]

"""Retrieval evaluation (``docflow evaluate``): span and document metrics per configuration.

- :mod:`tasks.evaluate.dataset`: data sets (corpora + span-annotated questions);
- :mod:`tasks.evaluate.beir`: BEIR-format sets (documents, queries, graded judgements);
- :mod:`tasks.evaluate.configs`: configurations (``NAME[:KEY=VALUE,...]``);
- :mod:`tasks.evaluate.metrics`: recall, precision, IoU, precision_Ω of one question;
  nDCG@10, recall@10 and @100, MRR@10 of one BEIR query;
- :mod:`tasks.evaluate.scoring`: chunk, embed, retrieve (dense, lexical or hybrid, as a
  query does) and score each question;
- :mod:`tasks.evaluate.summary`: per corpus and over corpora, the runs of configurations;
- :mod:`tasks.evaluate.report`: Parquet files, the plot and the printed tables.

This package is the pure core; the Prefect flow is :mod:`flows.evaluate`.
"""

from __future__ import annotations

from tasks.evaluate.beir import is_beir, load_beir
from tasks.evaluate.configs import EvalConfig, default_spec, parse_spec
from tasks.evaluate.dataset import Dataset, Question, find_datasets, load_dataset
from tasks.evaluate.metrics import (
    DOC_DEPTH,
    DOC_METRICS,
    METRICS,
    document_scores,
    documents_in_order,
    ndcg,
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
    precision_omega_scores,
    retrieve,
    score_questions,
)
from tasks.evaluate.summary import evaluate_config, evaluate_configs, summarize

__all__ = [
    "DEFAULT_K",
    "DOC_DEPTH",
    "DOC_METRICS",
    "METRICS",
    "PLOT_FILE",
    "Chunks",
    "Dataset",
    "Embed",
    "EvalConfig",
    "Question",
    "chunk_dataset",
    "default_spec",
    "document_scores",
    "documents_in_order",
    "evaluate_config",
    "evaluate_configs",
    "find_datasets",
    "format_table",
    "is_beir",
    "load_beir",
    "load_dataset",
    "ndcg",
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

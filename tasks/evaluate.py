"""Chunking evaluation (``docflow evaluate``): character-level retrieval metrics per splitter.

The data set is a folder with ``corpora/<corpus_id>.md`` and ``questions.csv`` (columns
``question``, ``references``, ``corpus_id``; references are half-open character spans).
For one configuration (a splitter and its sizes, see :func:`parse_spec`):

1. every corpus is chunked; every chunk is a character span of its corpus;
2. all chunks of all corpora are embedded, every question too, and each question retrieves
   the top ``k`` chunks by cosine similarity over all chunks (no corpus filter);
3. per question, with reference spans E and retrieved spans R (see the data set's README):
   N = reference characters covered by a retrieved chunk of the question's corpus;
   recall = N / |E|; precision = N / sum of the k retrieved lengths;
   IoU = N / (sum of retrieved lengths + |E| - N); precision_Ω = the IoU of E with the union
   of every chunk of the corpus that touches a reference (closed test), 0 if there is none;
4. each metric is reported as the mean and the population standard deviation, times 100.

precision_Ω needs no embeddings: :func:`precision_omega_scores` computes it from the chunks
alone. This module is the pure core; the Prefect flow is :mod:`flows.evaluate`.
"""

from __future__ import annotations

import csv
import json
import math
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from tasks.config import IngestParams
from tasks.errors import ConfigError

#: Chunks retrieved per question.
DEFAULT_K = 5
#: The metrics, in report order.
METRICS: tuple[str, ...] = ("recall", "precision", "iou", "precision_omega")
#: IngestParams fields a splitter spec may set.
SPEC_FIELDS: tuple[str, ...] = ("chunk_size", "chunk_overlap", "length_unit", "model")
#: The configuration used when none is given.
DEFAULT_SPECS: tuple[str, ...] = ("auto:chunk_size=200,chunk_overlap=50,length_unit=model_tokens",)

Interval = tuple[int, int]


# --- data set --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Question:
    """One question with the reference spans (half-open, disjoint) that answer it."""

    text: str
    corpus_id: str
    references: tuple[Interval, ...]


@dataclass(frozen=True)
class Dataset:
    """The corpora (id to text) and the questions over them."""

    corpora: Mapping[str, str]
    questions: tuple[Question, ...]
    path: str = ""


def load_dataset(path: Path) -> Dataset:
    """Read ``path/corpora/*.md`` and ``path/questions.csv``.

    Raises:
        ConfigError: If the folder or its files are missing, or a reference does not match
            its corpus text.

    """
    corpora_dir, questions_file = path / "corpora", path / "questions.csv"
    if not corpora_dir.is_dir() or not questions_file.is_file():
        raise ConfigError(
            f"evaluation data set not found: {path} (needs corpora/*.md and questions.csv)"
        )
    corpora = {p.stem: p.read_text(encoding="utf-8") for p in sorted(corpora_dir.glob("*.md"))}
    questions = []
    with questions_file.open(encoding="utf-8", newline="") as fh:
        for line, row in enumerate(csv.DictReader(fh), start=2):
            corpus_id = row["corpus_id"]
            if corpus_id not in corpora:
                raise ConfigError(f"{questions_file}:{line}: unknown corpus {corpus_id!r}")
            text = corpora[corpus_id]
            refs = []
            for ref in json.loads(row["references"]):
                start, end = int(ref["start_index"]), int(ref["end_index"])
                if text[start:end] != ref["content"]:
                    raise ConfigError(f"{questions_file}:{line}: a reference is not its span")
                refs.append((start, end))
            questions.append(Question(row["question"], corpus_id, tuple(sorted(refs))))
    return Dataset(corpora, tuple(questions), str(path))


# --- configurations --------------------------------------------------------------------


@dataclass(frozen=True)
class EvalConfig:
    """One configuration to evaluate: a label and the ingest parameters of its splitter."""

    label: str
    params: IngestParams

    def describe(self) -> dict[str, Any]:
        """Return the splitter settings as plain values (the table's leading columns)."""
        p = self.params
        return {
            "config": self.label,
            "splitter": p.splitter,
            "chunk_size": p.chunk_size,
            "chunk_overlap": p.chunk_overlap,
            "length_unit": p.length_unit,
            "model": p.model,
        }


def _coerce(name: str, value: str) -> Any:
    return int(value) if name in ("chunk_size", "chunk_overlap") else value


def parse_spec(spec: str, model: str | None = None) -> EvalConfig:
    """Parse ``NAME[:KEY=VALUE,...]``, e.g. ``token:chunk_size=278,length_unit=tokens``.

    NAME is any splitter ``build_splitter`` knows (semantic ones too); keys are IngestParams
    fields (``chunk_size``, ``chunk_overlap``, ``length_unit``, ``model`` and any other
    field a splitter reads). ``model`` is the default embedding model of the spec.

    Raises:
        ConfigError: For an unknown splitter or key, or a bad value.

    """
    from pydantic import ValidationError

    from tasks.split.factory import SEMANTIC_SPLITTERS, SPLITTERS

    known = {**SPLITTERS, **SEMANTIC_SPLITTERS}
    name, _, rest = spec.strip().partition(":")
    name = name.strip()
    if name not in known:
        raise ConfigError(
            f"unknown splitter {name!r} in {spec!r}; expected one of {', '.join(known)}"
        )
    fields: dict[str, Any] = {} if model is None else {"model": model}
    for item in filter(None, (s.strip() for s in rest.split(","))):
        key, sep, value = item.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not key:
            raise ConfigError(f"bad splitter spec {spec!r}: expected KEY=VALUE, got {item!r}")
        if key not in IngestParams.model_fields or key == "splitter":
            raise ConfigError(f"bad splitter spec {spec!r}: unknown setting {key!r}")
        try:
            fields[key] = _coerce(key, value)
        except ValueError as exc:
            raise ConfigError(f"bad splitter spec {spec!r}: {key} must be a number") from exc
    try:
        params = IngestParams(**fields)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(x) for x in first["loc"])
        raise ConfigError(f"bad splitter spec {spec!r}: {where}: {first['msg']}") from exc
    params = params.model_copy(update={"splitter": name})
    return EvalConfig(spec.strip(), params)


# --- chunking --------------------------------------------------------------------------


@dataclass(frozen=True)
class Chunks:
    """All chunks of all corpora: parallel arrays of corpus id, start and end."""

    corpus: tuple[str, ...]
    starts: np.ndarray
    ends: np.ndarray
    texts: tuple[str, ...] = field(repr=False)

    def __len__(self) -> int:
        return len(self.corpus)

    def of_corpus(self, corpus_id: str) -> list[Interval]:
        """Return the spans of one corpus's chunks, in order."""
        return [
            (int(s), int(e))
            for c, s, e in zip(self.corpus, self.starts, self.ends, strict=True)
            if c == corpus_id
        ]


def chunk_dataset(dataset: Dataset, params: IngestParams) -> Chunks:
    """Chunk every corpus with the splitter of ``params`` (empty chunks are dropped).

    Raises:
        ConfigError: For bad splitter settings.

    """
    from tasks.split.factory import build_splitter

    splitter = build_splitter(params)
    corpus: list[str] = []
    starts: list[int] = []
    ends: list[int] = []
    texts: list[str] = []
    for corpus_id, text in dataset.corpora.items():
        try:
            spans = splitter.split_spans(text)
        except ValueError as exc:
            raise ConfigError(f"{params.splitter}: {exc}") from exc
        for span in spans:
            if span.end > span.start:
                corpus.append(corpus_id)
                starts.append(span.start)
                ends.append(span.end)
                texts.append(text[span.start : span.end])
    return Chunks(
        tuple(corpus),
        np.asarray(starts, dtype=np.int64),
        np.asarray(ends, dtype=np.int64),
        tuple(texts),
    )


# --- interval arithmetic and the metrics -----------------------------------------------


def union(intervals: Iterable[Interval]) -> list[Interval]:
    """Return the union of half-open intervals as sorted, disjoint, non-empty intervals."""
    merged: list[Interval] = []
    for start, end in sorted(i for i in intervals if i[1] > i[0]):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def size(intervals: Iterable[Interval]) -> int:
    """Return the number of characters in the union of the intervals."""
    return sum(end - start for start, end in union(intervals))


def overlap(a: Iterable[Interval], b: Iterable[Interval]) -> int:
    """Return the number of characters in both unions (``|∪a ∩ ∪b|``)."""
    ua, ub = union(a), union(b)
    total, i, j = 0, 0, 0
    while i < len(ua) and j < len(ub):
        lo, hi = max(ua[i][0], ub[j][0]), min(ua[i][1], ub[j][1])
        total += max(0, hi - lo)
        if ua[i][1] < ub[j][1]:
            i += 1
        else:
            j += 1
    return total


def touches(chunk: Interval, reference: Interval) -> bool:
    """Return whether a chunk touches a reference (closed test: max(starts) <= min(ends))."""
    return max(chunk[0], reference[0]) <= min(chunk[1], reference[1])


def retrieval_scores(
    references: Sequence[Interval],
    retrieved: Sequence[tuple[bool, Interval]],
) -> dict[str, float]:
    """Return recall, precision and IoU of one question.

    Args:
        references: The question's reference spans E.
        retrieved: The k retrieved chunks, each ``(same_corpus, span)``; only chunks of the
            question's corpus cover reference characters, all count in the retrieved length.

    """
    e = size(references)
    n = overlap(references, [span for same, span in retrieved if same])
    retrieved_len = sum(end - start for _, (start, end) in retrieved)
    return {
        "recall": n / e if e else 0.0,
        "precision": n / retrieved_len if retrieved_len else 0.0,
        "iou": n / (retrieved_len + e - n) if retrieved_len + e - n else 0.0,
    }


def precision_omega(references: Sequence[Interval], chunks: Sequence[Interval]) -> float:
    """Return precision_Ω of one question from every chunk span of its corpus."""
    hit = [c for c in chunks if any(touches(c, r) for r in references)]
    if not hit:
        return 0.0
    n_h = overlap(references, hit)
    denominator = size(hit) + size(references) - n_h
    return n_h / denominator if denominator else 0.0


def precision_omega_scores(dataset: Dataset, chunks: Chunks) -> list[float]:
    """Return precision_Ω of every question, in order (no embeddings needed)."""
    by_corpus = {c: chunks.of_corpus(c) for c in dataset.corpora}
    return [precision_omega(q.references, by_corpus[q.corpus_id]) for q in dataset.questions]


def top_k(question_vectors: np.ndarray, chunk_vectors: np.ndarray, k: int) -> np.ndarray:
    """Return, per question, the indices of the ``k`` chunks of highest cosine similarity.

    The vectors are unit length, so cosine is the dot product; ties go to the lower index.
    """
    scores = question_vectors @ chunk_vectors.T
    k = min(k, chunk_vectors.shape[0])
    return np.argsort(-scores, axis=1, kind="stable")[:, :k]


# --- one configuration -----------------------------------------------------------------

Embed = Callable[[Sequence[str]], np.ndarray]


def score_questions(
    dataset: Dataset, chunks: Chunks, embed: Embed, k: int = DEFAULT_K
) -> list[dict[str, Any]]:
    """Return one row per question: its corpus and the four metrics."""
    omega = precision_omega_scores(dataset, chunks)
    if len(chunks) == 0:
        top = np.zeros((len(dataset.questions), 0), dtype=np.int64)
    else:
        chunk_vectors = embed(list(chunks.texts))
        question_vectors = embed([q.text for q in dataset.questions])
        top = top_k(question_vectors, chunk_vectors, k)
    rows = []
    for index, (question, hits, om) in enumerate(zip(dataset.questions, top, omega, strict=True)):
        retrieved = [
            (
                chunks.corpus[i] == question.corpus_id,
                (int(chunks.starts[i]), int(chunks.ends[i])),
            )
            for i in hits
        ]
        rows.append(
            {
                "question_index": index,
                "corpus_id": question.corpus_id,
                **retrieval_scores(question.references, retrieved),
                "precision_omega": om,
            }
        )
    return rows


def _mean_std(values: Sequence[float]) -> tuple[float, float]:
    if not values:
        return math.nan, math.nan
    arr = np.asarray(values, dtype=np.float64)
    return float(arr.mean() * 100), float(arr.std(ddof=0) * 100)


def summarize(
    config: EvalConfig, chunks: Chunks, rows: Sequence[Mapping[str, Any]], k: int = DEFAULT_K
) -> dict[str, Any]:
    """Return the configuration's summary row: settings, counts, mean and std × 100."""
    lengths = chunks.ends - chunks.starts
    out: dict[str, Any] = {
        **config.describe(),
        "k": k,
        "n_chunks": len(chunks),
        "mean_chunk_chars": float(lengths.mean()) if len(chunks) else 0.0,
        "n_questions": len(rows),
    }
    for metric in METRICS:
        mean, std = _mean_std([float(r[metric]) for r in rows])
        out[f"{metric}_mean"], out[f"{metric}_std"] = mean, std
    return out


def evaluate_config(
    dataset: Dataset, config: EvalConfig, embed: Embed, k: int = DEFAULT_K
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Chunk, embed, retrieve and score one configuration.

    Returns:
        The summary row and the per-question rows (each with the config label).

    """
    chunks = chunk_dataset(dataset, config.params)
    rows = [{"config": config.label, **r} for r in score_questions(dataset, chunks, embed, k)]
    return summarize(config, chunks, rows, k), rows


# --- outputs ---------------------------------------------------------------------------

SUMMARY_FILE = "evaluation.parquet"
QUESTIONS_FILE = "evaluation_questions.parquet"
PLOT_FILE = "recall_vs_iou.png"


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
    """Write the summary (one row per configuration) and per-question Parquet files."""
    out.mkdir(parents=True, exist_ok=True)
    return (
        _write_parquet(summary, out / SUMMARY_FILE),
        _write_parquet(questions, out / QUESTIONS_FILE),
    )


def plot_recall_iou(summary: Sequence[Mapping[str, Any]], path: Path) -> Path:
    """Draw mean recall against mean IoU, one labelled point per configuration (PNG)."""
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
    ax.set_xlabel("IoU (mean × 100)")
    ax.set_ylabel("recall (mean × 100)")
    ax.set_title(f"Chunking evaluation, k = {summary[0]['k'] if summary else DEFAULT_K}")
    ax.grid(True, alpha=0.3)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png", bbox_inches="tight")
    return path


def format_table(summary: Sequence[Mapping[str, Any]]) -> str:
    """Return the summary as a plain-text table (mean ± std, both × 100)."""
    head = ["config", "chunks", "recall", "precision", "IoU", "precision_Ω"]
    body = [
        [str(r["config"]), str(r["n_chunks"])]
        + [f"{r[f'{m}_mean']:.1f} ± {r[f'{m}_std']:.1f}" for m in METRICS]
        for r in summary
    ]
    widths = [max(len(row[i]) for row in [head, *body]) for i in range(len(head))]
    lines = [
        "  ".join(
            c.ljust(w) if i == 0 else c.rjust(w)
            for i, (c, w) in enumerate(zip(row, widths, strict=True))
        )
        for row in [head, *body]
    ]
    return "\n".join(lines)

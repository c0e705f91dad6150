"""Score configurations: chunk, embed, retrieve as docflow does, then the metrics.

For one configuration and one data set (see ../shared/eval/chunking/README.md):

1. every corpus is chunked; every chunk is a character span of its corpus;
2. all chunks of all corpora of the data set are embedded, every question too, and each
   question retrieves the top ``k`` chunks over all of them (no corpus filter), ranked by
   the configuration's retrieval (dense, lexical or hybrid) with the very function a query
   uses (:func:`tasks.retrieval.rank`), the lexical side from an in-memory lexical index;
3. each question is scored (:mod:`tasks.evaluate.metrics`);
4. each metric is reported per corpus as the mean and the population standard deviation
   of its questions, times 100, and over the corpora as the mean of the corpus means and
   the worst corpus's value: a default must hold on every corpus, not on average.

A BEIR set (one corpus per document) is ranked as deep as :data:`DOC_DEPTH` chunks, the
chunks are mapped to their document (best rank kept) and each query is scored by
:data:`DOC_METRICS` against its judgements; the set counts as one corpus.

The span sets' chunks are embedded and indexed as the exact spans (the ingest adds the
document's context block before each chunk; those corpora are single files with no title).
A BEIR document has a title: its chunks are embedded and indexed with the context block, as
the ingest does (:func:`tasks.common.documents.text_with_context`), so both sides see it.
precision_Ω needs no embeddings: :func:`precision_omega_scores` computes it from the chunks.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tasks.common.config import IngestParams, QueryParams
from tasks.common.errors import ConfigError
from tasks.evaluate.configs import EvalConfig
from tasks.evaluate.dataset import Dataset, Interval
from tasks.evaluate.metrics import (
    DOC_DEPTH,
    DOC_METRICS,
    METRICS,
    document_scores,
    documents_in_order,
    precision_omega,
    retrieval_scores,
)
from tasks.index.lexical import LexicalIndex
from tasks.retrieval import candidates, rank

#: Chunks retrieved per question.
DEFAULT_K = 5

Embed = Callable[[Sequence[str]], np.ndarray]


@dataclass(frozen=True)
class Chunks:
    """All chunks of all corpora of a data set: parallel arrays of corpus id, start, end.

    ``texts`` are what is embedded and indexed: the spans, after the context block for a
    BEIR set's documents.
    """

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

    Each corpus is split as the ingest splits its file, ``<corpus_id>.md``: ``auto`` then
    takes Markdown header sections where a corpus has headers, and splits recursively where
    it has none. A BEIR document's chunks get its context block (title, header path).

    Raises:
        ConfigError: For bad splitter settings.

    """
    from tasks.common.documents import Document, text_with_context
    from tasks.split.factory import build_splitter

    splitter = build_splitter(params)
    corpus: list[str] = []
    starts: list[int] = []
    ends: list[int] = []
    texts: list[str] = []
    for corpus_id, text in dataset.corpora.items():
        source = f"{corpus_id}.md"
        document = Document(text, {"source": source, "file_type": "markdown"})
        try:
            spans = splitter.document_spans(document)
        except ValueError as exc:
            raise ConfigError(f"{params.splitter}: {exc}") from exc
        for span in spans:
            if span.end > span.start:
                corpus.append(corpus_id)
                starts.append(span.start)
                ends.append(span.end)
                piece = text[span.start : span.end]
                if dataset.is_beir:
                    headers = [h.text for h in span.headers]
                    title = dataset.titles.get(corpus_id)
                    piece = text_with_context(piece, source, title, None, headers)
                texts.append(piece)
    return Chunks(
        tuple(corpus),
        np.asarray(starts, dtype=np.int64),
        np.asarray(ends, dtype=np.int64),
        tuple(texts),
    )


def precision_omega_scores(dataset: Dataset, chunks: Chunks) -> list[float]:
    """Return precision_Ω of every question of a span set, in order (no embeddings needed)."""
    by_corpus = {c: chunks.of_corpus(c) for c in dataset.corpora}
    return [precision_omega(q.references, by_corpus[q.corpus_id]) for q in dataset.questions]


# --- retrieval ---------------------------------------------------------------------------


def _chunk_id(index: int) -> str:
    """Return the id of chunk ``index`` (zero-padded: ties go to the earlier chunk)."""
    return f"{index:09d}"


def retrieve(
    dataset: Dataset,
    chunks: Chunks,
    chunk_vectors: np.ndarray | None,
    question_vectors: np.ndarray | None,
    k: int = DEFAULT_K,
    ranking: QueryParams | None = None,
) -> list[list[int]]:
    """Return, per question, the indices of the ``k`` chunks ``ranking`` puts first.

    A BEIR set is ranked :data:`DOC_DEPTH` chunks deep, whatever ``k``. A chunk's source
    (for ``per_source``) is its corpus, a BEIR set's document. The vectors are unit length
    (cosine is the dot product); ``lexical`` needs none.
    """
    ranking = ranking or QueryParams()
    retrieval = ranking.retrieval
    k = DOC_DEPTH if dataset.is_beir else k
    if len(chunks) == 0:
        return [[] for _ in dataset.questions]
    words: LexicalIndex | None = None
    if retrieval != "dense":
        words = LexicalIndex(":memory:")
        words.upsert((_chunk_id(i), text, {}) for i, text in enumerate(chunks.texts))
    n = candidates(k, ranking.per_source)

    def source_of(ids: Sequence[str]) -> dict[str, str]:
        return {i: chunks.corpus[int(i)] for i in ids}

    out = []
    for q, question in enumerate(dataset.questions):
        dense_top: dict[str, float] = {}
        dense_of = None
        if retrieval != "lexical" and chunk_vectors is not None and question_vectors is not None:
            scores = chunk_vectors @ question_vectors[q]
            best = np.argsort(-scores, kind="stable")[:n]
            dense_top = {_chunk_id(int(i)): float(scores[i]) for i in best}

            def dense_of(ids: Sequence[str], s: np.ndarray = scores) -> dict[str, float]:
                return {i: float(s[int(i)]) for i in ids}

        lexical_top: dict[str, float] = {}
        lexical_of = None
        if words is not None:
            lexical_top = words.search(question.text, n, stop_words=ranking.stop_words)

            def lexical_of(ids: Sequence[str], text: str = question.text) -> dict[str, float]:
                assert words is not None
                return words.scores(text, ids, stop_words=ranking.stop_words)

        ranked = rank(ranking, k, dense_top, lexical_top, dense_of, lexical_of, source_of)
        out.append([int(r.chunk_id) for r in ranked])
    if words is not None:
        words.close()
    return out


def score_retrieved(
    dataset: Dataset, chunks: Chunks, top: Sequence[Sequence[int]]
) -> list[dict[str, Any]]:
    """Return one row per question: its data set, corpus and its metrics."""
    if dataset.is_beir:
        return score_documents(dataset, chunks, top)
    omega = precision_omega_scores(dataset, chunks)
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
                "dataset": dataset.name,
                "question_index": index,
                "corpus_id": question.corpus_id,
                **retrieval_scores(question.references, retrieved),
                "precision_omega": om,
            }
        )
    return rows


def score_documents(
    dataset: Dataset, chunks: Chunks, top: Sequence[Sequence[int]]
) -> list[dict[str, Any]]:
    """Return one row per query of a BEIR set: its id and :data:`DOC_METRICS`."""
    from tasks.evaluate.beir import CORPUS_ID

    rows = []
    for index, (question, qrels, hits) in enumerate(
        zip(dataset.questions, dataset.qrels, top, strict=True)
    ):
        ranked = documents_in_order(chunks.corpus[i] for i in hits)
        rows.append(
            {
                "dataset": dataset.name,
                "question_index": index,
                "corpus_id": CORPUS_ID,
                "query_id": question.query_id,
                **document_scores(ranked, qrels),
            }
        )
    return rows


def score_questions(
    dataset: Dataset,
    chunks: Chunks,
    embed: Embed,
    k: int = DEFAULT_K,
    ranking: QueryParams | None = None,
) -> list[dict[str, Any]]:
    """Embed, retrieve and score every question of a data set."""
    ranking = ranking or QueryParams()
    lexical_only = ranking.retrieval == "lexical"
    vectors, questions = _embedded(dataset, chunks, None if lexical_only else embed)
    top = retrieve(dataset, chunks, vectors, questions, k, ranking)
    return score_retrieved(dataset, chunks, top)


def _embedded(
    dataset: Dataset, chunks: Chunks, embed: Embed | None
) -> tuple[np.ndarray | None, np.ndarray | None]:
    """Return the vectors of the chunks and of the questions (None without ``embed``)."""
    if embed is None or not len(chunks):
        return None, None
    return embed(list(chunks.texts)), embed([q.text for q in dataset.questions])


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
        vectors, questions = _embedded(dataset, chunks, embed if needs_vectors else None)
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

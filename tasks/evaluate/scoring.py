"""Score configurations: chunk, embed, retrieve as docflow does, then the metrics.

For one configuration and one data set (see ../shared/eval/chunking/README.md):

1. every corpus is chunked; every chunk is a character span of its corpus;
2. all chunks of all corpora of the data set are embedded, every question too, and each
   question retrieves the top ``k`` chunks over all of them (no corpus filter), ranked by
   the configuration's retrieval (dense, lexical or hybrid) with the very function a query
   uses (:func:`tasks.retrieval.rank`), the lexical side from an in-memory lexical index;
3. each question is scored (:mod:`tasks.evaluate.metrics`); the summaries per corpus and
   over corpora, and the runs of configurations, are :mod:`tasks.evaluate.summary`'s.

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

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tasks.common.config import IngestParams, QueryParams
from tasks.common.errors import ConfigError
from tasks.evaluate.dataset import Dataset, Interval
from tasks.evaluate.metrics import (
    DOC_DEPTH,
    document_scores,
    documents_in_order,
    precision_omega,
    retrieval_scores,
)
from tasks.index.lexical import LexicalIndex
from tasks.retrieval import candidates, rank, rocchio
from tasks.retrieval.ranking import ScoreOf

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

    def dense_side(scores: np.ndarray) -> tuple[dict[str, float], ScoreOf]:
        """Return the dense side's candidates and its exact scores, from every chunk's."""
        best = np.argsort(-scores, kind="stable")[:n]

        def dense_of(ids: Sequence[str]) -> dict[str, float]:
            return {i: float(scores[int(i)]) for i in ids}

        return {_chunk_id(int(i)): float(scores[i]) for i in best}, dense_of

    out = []
    for q, question in enumerate(dataset.questions):
        dense_top: dict[str, float] = {}
        dense_of: ScoreOf | None = None
        if retrieval != "lexical" and chunk_vectors is not None and question_vectors is not None:
            dense_top, dense_of = dense_side(chunk_vectors @ question_vectors[q])

        requery = None
        if dense_of is not None and chunk_vectors is not None and question_vectors is not None:

            def requery(ids: Sequence[str], q: int = q) -> tuple[dict[str, float], ScoreOf]:
                assert chunk_vectors is not None and question_vectors is not None
                hits = chunk_vectors[[int(i) for i in ids]]
                moved = rocchio(question_vectors[q], hits, ranking.feedback_weight)
                return dense_side(chunk_vectors @ moved)

        lexical_top: dict[str, float] = {}
        lexical_of = None
        if words is not None:
            lexical_top = words.search(question.text, n, stop_words=ranking.stop_words)

            def lexical_of(ids: Sequence[str], text: str = question.text) -> dict[str, float]:
                assert words is not None
                return words.scores(text, ids, stop_words=ranking.stop_words)

        ranked = rank(ranking, k, dense_top, lexical_top, dense_of, lexical_of, source_of, requery)
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
    vectors, questions = embed_dataset(dataset, chunks, None if lexical_only else embed)
    top = retrieve(dataset, chunks, vectors, questions, k, ranking)
    return score_retrieved(dataset, chunks, top)


def embed_dataset(
    dataset: Dataset, chunks: Chunks, embed: Embed | None
) -> tuple[np.ndarray | None, np.ndarray | None]:
    """Return the vectors of the chunks and of the questions (None without ``embed``)."""
    if embed is None or not len(chunks):
        return None, None
    return embed(list(chunks.texts)), embed([q.text for q in dataset.questions])

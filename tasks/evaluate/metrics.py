"""The metrics of one question: character-level (span sets), document-level (BEIR sets).

Span sets (../shared/eval/chunking/README.md), with reference spans E and the k retrieved
chunk spans R of one question: N = reference characters covered by a retrieved chunk of the
question's corpus; recall = N / |E|; precision = N / sum of the k retrieved lengths;
IoU = N / (sum of retrieved lengths + |E| - N); precision_Ω = the IoU of E with the union
of every chunk of the corpus that touches a reference (closed test), 0 if there is none.

BEIR sets, over the ranked documents (each at the rank of its best chunk) and the graded
judgements, as pytrec_eval (trec_eval) and BEIR compute them: nDCG@10 = DCG / ideal DCG,
DCG = sum of ``grade / log2(rank + 1)`` over the first 10, the ideal from the judgements'
grades sorted; recall@k = relevant documents (grade > 0) in the first k / all relevant;
MRR@10 = 1 / the rank of the first relevant one (0 if none in the first 10).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

from tasks.evaluate.dataset import Interval

#: The metrics of span sets, in report order.
METRICS: tuple[str, ...] = ("recall", "precision", "iou", "precision_omega")
#: The metrics of BEIR sets, in report order (column names: ``ndcg_10`` is nDCG@10).
DOC_METRICS: tuple[str, ...] = ("ndcg_10", "recall_10", "recall_100", "mrr_10")
#: How deep a BEIR query's documents are ranked (the deepest cut-off of DOC_METRICS).
DOC_DEPTH = 100


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


def documents_in_order(ranked: Iterable[str]) -> list[str]:
    """Return the documents of ranked chunks, each once, at the rank of its best chunk."""
    return list(dict.fromkeys(ranked))


def ndcg(ranked: Sequence[str], qrels: Mapping[str, int], k: int) -> float:
    """Return nDCG@k of a document ranking (gain = grade, log2 discount; 0 if none relevant)."""
    dcg = sum(qrels.get(d, 0) / math.log2(i + 2) for i, d in enumerate(ranked[:k]))
    ideal = sorted((g for g in qrels.values() if g > 0), reverse=True)[:k]
    best = sum(g / math.log2(i + 2) for i, g in enumerate(ideal))
    return dcg / best if best > 0 else 0.0


def recall_at(ranked: Sequence[str], qrels: Mapping[str, int], k: int) -> float:
    """Return the share of relevant documents (grade > 0) among the first ``k``."""
    relevant = {d for d, g in qrels.items() if g > 0}
    return len(relevant.intersection(ranked[:k])) / len(relevant) if relevant else 0.0


def reciprocal_rank(ranked: Sequence[str], qrels: Mapping[str, int], k: int) -> float:
    """Return 1 / the rank of the first relevant document in the first ``k`` (else 0)."""
    return next((1.0 / (i + 1) for i, d in enumerate(ranked[:k]) if qrels.get(d, 0) > 0), 0.0)


def document_scores(ranked: Sequence[str], qrels: Mapping[str, int]) -> dict[str, float]:
    """Return :data:`DOC_METRICS` of one query's ranked documents."""
    return {
        "ndcg_10": ndcg(ranked, qrels, 10),
        "recall_10": recall_at(ranked, qrels, 10),
        "recall_100": recall_at(ranked, qrels, 100),
        "mrr_10": reciprocal_rank(ranked, qrels, 10),
    }

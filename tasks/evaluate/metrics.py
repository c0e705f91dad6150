"""The character-level metrics of ../shared/eval/chunking/README.md, per question.

With reference spans E and the k retrieved chunk spans R of one question:
N = reference characters covered by a retrieved chunk of the question's corpus;
recall = N / |E|; precision = N / sum of the k retrieved lengths;
IoU = N / (sum of retrieved lengths + |E| - N); precision_Ω = the IoU of E with the union
of every chunk of the corpus that touches a reference (closed test), 0 if there is none.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from tasks.evaluate.dataset import Interval

#: The metrics, in report order.
METRICS: tuple[str, ...] = ("recall", "precision", "iou", "precision_omega")


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

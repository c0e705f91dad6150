"""`ClusterSemanticChunker`: chunk boundaries that maximise within-chunk similarity.

After the ClusterSemanticChunker of Chroma's 2024 chunking report: the text is split into
small pieces (:class:`RecursiveCharacterTextSplitter`, ``piece_size``: 200 characters or 50
tokens by default), the pieces are embedded, and dynamic programming over the piece
boundaries picks the segmentation with the largest total reward, where a chunk's reward is
the sum, over its pairs of pieces, of their cosine similarity minus the mean similarity of
all pairs of pieces of the document (so merging dissimilar pieces costs, and merging is
never free). A chunk may hold any run of pieces whose span fits in ``chunk_size``.

Differences from Chroma's: the size limit is measured on the chunk's own span (not a count
of pieces), chunks are exact spans of the text, and only pairs of pieces that can share a
chunk are compared, so time and memory grow linearly with the document (Chroma builds the
full similarity matrix).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from tasks.split.base import Span, TextSplitter
from tasks.split.recursive import RecursiveCharacterTextSplitter
from tasks.split.semantic import EmbedFn, Vectors
from tasks.split.units import counts_tokens, span_counter

if TYPE_CHECKING:
    from tasks.embed.cache import EmbeddingCache
    from tasks.embed.model import Embedder

#: Default piece size in characters, and in tokens for a token length unit.
PIECE_CHARS = 200
PIECE_TOKENS = 50


class ClusterSemanticChunker(TextSplitter):
    """Runs of small pieces grouped to maximise their similarity, capped at ``chunk_size``."""

    def __init__(
        self,
        embed: Embedder | EmbedFn | str | None = None,
        chunk_size: int = 1024,
        piece_size: int | None = None,
        length_function: Callable[[str], int] = len,
        add_start_index: bool = False,
        cache: EmbeddingCache | None = None,
    ) -> None:
        """Create the chunker.

        Args:
            embed: An Embedder, a callable ``list[str] -> array (n, dim)``, a model name, or
                None for the bundled all-MiniLM-L6-v2.
            chunk_size: The cap on every chunk, in the unit of ``length_function``.
            piece_size: The size of the pieces chunks are made of (same unit); default 200
                for characters, 50 for a token unit (at most ``chunk_size``).
            length_function: Measures a chunk (``len``, or a unit of :mod:`tasks.split.units`).
            add_start_index: Put ``start_index`` in the metadata of created Documents.
            cache: Embedding cache, used when ``embed`` is an Embedder or a model name.

        Raises:
            ValueError: For a size that is not positive.

        """
        super().__init__(
            chunk_size=chunk_size,
            chunk_overlap=0,
            length_function=length_function,
            add_start_index=add_start_index,
        )
        if piece_size is None:
            piece_size = PIECE_TOKENS if counts_tokens(length_function) else PIECE_CHARS
        if piece_size <= 0:
            raise ValueError(f"piece_size must be > 0, got {piece_size}")
        self.piece_size = min(piece_size, chunk_size)
        self.vectors = Vectors(embed, cache)
        self._pieces = RecursiveCharacterTextSplitter(
            chunk_size=self.piece_size, chunk_overlap=0, length_function=length_function
        )

    def settings(self) -> dict[str, Any]:
        """Return the settings that change the output, for the fingerprint."""
        return {**super().settings(), "model": self.vectors.name, "piece_size": self.piece_size}

    def split_spans(self, text: str) -> list[Span]:
        """Return the chunks of ``text`` as exact spans, each within ``chunk_size``."""
        measure = span_counter(self._length_function, text)
        pieces = self._pieces.split_range(text, 0, len(text), measure)
        if len(pieces) <= 1:
            return [Span(p.start, p.end) for p in pieces]
        vectors = self.vectors([text[p.start : p.end] for p in pieces]).astype(np.float64)
        cap = self._chunk_size

        def size(a: int, b: int) -> int:
            start, end = pieces[a].start, pieces[b].end
            return end - start if measure is None else measure(start, end)

        lo, first = [], 0  # lo[i]: the first piece a chunk ending with piece i may start with
        for i in range(len(pieces)):
            while first < i and size(first, i) > cap:
                first += 1
            lo.append(first)
        return [Span(pieces[a].start, pieces[b].end) for a, b in segment(vectors, lo)]


def mean_similarity(vectors: np.ndarray) -> float:
    """Return the mean dot product over all pairs of distinct rows (O(n d))."""
    n = len(vectors)
    if n < 2:
        return 0.0
    total = vectors.sum(axis=0)
    pairs = float(total @ total) - float(np.einsum("ij,ij->", vectors, vectors))
    return pairs / (n * (n - 1))


def segment(vectors: np.ndarray, lo: list[int]) -> list[tuple[int, int]]:
    """Return the ``(first, last)`` piece runs that maximise the total within-run reward.

    A run's reward is the sum over its pairs of pieces of ``similarity - mean similarity``;
    a run ending at piece ``i`` may start no earlier than ``lo[i]`` (non-decreasing). Ties
    go to the longest last run, so the result is deterministic.
    """
    n = len(vectors)
    baseline = mean_similarity(vectors)
    best = np.zeros(n + 1)  # best[i]: the best total over pieces 0..i-1
    start = [0] * n  # start[i]: the first piece of the last run in the best split of 0..i
    reward = np.zeros(n)  # reward[a]: the reward of the run a..i (for the current i)
    for i in range(n):
        a0 = lo[i]
        if a0 < i:
            sims = vectors[a0:i] @ vectors[i] - baseline
            reward[a0:i] += np.cumsum(sims[::-1])[::-1]  # pairs (j, i) for j in a..i-1
        reward[i] = 0.0
        totals = best[a0 : i + 1] + reward[a0 : i + 1]
        k = int(np.argmax(totals))
        best[i + 1], start[i] = totals[k], a0 + k
    runs = []
    i = n - 1
    while i >= 0:
        runs.append((start[i], i))
        i = start[i] - 1
    return runs[::-1]

"""`SemanticChunker`: break where the meaning shifts (Kamradt's level 4), with a size cap.

The text is cut into sentences (a regex; each sentence is an exact span), each sentence is
embedded together with ``buffer_size`` neighbours on either side, and the cosine distance
between consecutive windows says how far the topic moved. Breakpoints are the distances
above a threshold (LangChain-experimental's ``breakpoint_threshold_type`` and
``breakpoint_threshold_amount``), or the ``number_of_chunks - 1`` largest distances.

Unlike LangChain's (and every other) semantic chunker, this one keeps the docflow splitter
invariants:

- every chunk is an exact span of the text (a :class:`~tasks.split.base.SpanSplitter`);
- no chunk is longer than ``chunk_size`` in the unit of ``length_function``: a sentence over
  the cap is split beforehand with :class:`RecursiveCharacterTextSplitter` (and cut if it
  must be), and a group of sentences over the cap is split again at its largest distance;
- groups under ``min_chunk_size`` merge into the more similar neighbour when the merged
  chunk stays under the cap;
- all the non-whitespace text is covered, and the output is deterministic for a
  deterministic encoder.

Embeddings come from a :class:`tasks.embed.model.Embedder` (batched; with an
:class:`~tasks.embed.cache.EmbeddingCache` the vectors are cached) or from any callable that maps a
list of texts to one vector per text (tests use a fast deterministic fake).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Literal, cast

import numpy as np

from tasks.split.base import Span, TextSplitter
from tasks.split.counting import SpanCounter
from tasks.split.recursive import RecursiveCharacterTextSplitter
from tasks.split.units import span_counter

if TYPE_CHECKING:
    from tasks.embed.cache import EmbeddingCache
    from tasks.embed.model import Embedder

BreakpointThresholdType = Literal["percentile", "standard_deviation", "interquartile", "gradient"]
#: LangChain-experimental's default amount for each threshold type.
BREAKPOINT_DEFAULTS: dict[str, float] = {
    "percentile": 95,
    "standard_deviation": 3,
    "interquartile": 1.5,
    "gradient": 95,
}
#: Sentence ends: ``.?!`` (then closing quotes or brackets) and whitespace, or a blank line.
#: A sentence runs up to the end of a match, so the spans between matches cover the text.
DEFAULT_SENTENCE_REGEX = r"(?<=[.?!])[\"'\u201d\u2019)\]]*\s+|\n[ \t]*\n\s*"
#: Texts per call of a plain embedding callable.
EMBED_BATCH = 256

EmbedFn = Callable[[list[str]], np.ndarray]


class Vectors:
    """Normalised embeddings of texts from an Embedder (cached or not) or a callable."""

    def __init__(
        self,
        embed: Embedder | EmbedFn | str | None = None,
        cache: EmbeddingCache | None = None,
        batch_size: int = EMBED_BATCH,
    ) -> None:
        """Wrap the embedding source.

        Args:
            embed: An Embedder, a callable ``list[str] -> array (n, dim)``, a model name, or
                None for the bundled all-MiniLM-L6-v2.
            cache: Optional embedding cache (used with an Embedder or a model name).
            batch_size: Texts per call of a plain callable.

        """
        from tasks.embed.model import DEFAULT_MODEL, Embedder

        if embed is None or isinstance(embed, str):
            embed = Embedder(embed or DEFAULT_MODEL)
        self._embedder = embed if isinstance(embed, Embedder) else None
        self._fn: EmbedFn = cast("EmbedFn", embed)
        self._cache = cache
        self._batch_size = batch_size

    @property
    def name(self) -> str:
        """Return a stable name of the encoder (part of the splitter fingerprint)."""
        if self._embedder is not None:
            return self._embedder.model_id
        fn = self._fn
        return str(
            getattr(fn, "model_id", None)
            or getattr(fn, "__qualname__", None)
            or type(fn).__qualname__
        )

    def __call__(self, texts: Sequence[str]) -> np.ndarray:
        """Return one unit-length float32 row per text (zero rows stay zero)."""
        if not texts:
            return np.zeros((0, 1), dtype=np.float32)
        if self._embedder is not None:
            if self._cache is not None:
                from tasks.embed.model import embed_with_cache

                vectors, _ = embed_with_cache(self._embedder, self._cache, list(texts))
            else:
                vectors = self._embedder.embed(list(texts))
        else:
            parts = [
                np.asarray(self._fn(list(texts[i : i + self._batch_size])), dtype=np.float32)
                for i in range(0, len(texts), self._batch_size)
            ]
            vectors = np.concatenate(parts, axis=0)
        vectors = np.asarray(vectors, dtype=np.float32).reshape(len(texts), -1)
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        norms[norms == 0] = 1.0
        return cast("np.ndarray", vectors / norms)


def capped_sentences(
    text: str,
    pattern: str | re.Pattern[str],
    cap: int,
    pieces: RecursiveCharacterTextSplitter,
    measure: SpanCounter | None,
) -> list[Span]:
    """Return the sentences of ``text``, each longer than ``cap`` split by ``pieces``.

    ``measure`` counts a span in the length unit (None: characters). The semantic and the
    agentic chunker both start from these units, so no unit alone exceeds the cap.
    """
    out: list[Span] = []
    for s in sentence_spans(text, pattern):
        n = s.end - s.start if measure is None else measure(s.start, s.end)
        if n <= cap:
            out.append(s)
        else:
            out += [Span(p.start, p.end) for p in pieces.split_range(text, s.start, s.end, measure)]
    return out


def sentence_spans(
    text: str, pattern: str | re.Pattern[str] = DEFAULT_SENTENCE_REGEX
) -> list[Span]:
    """Return the sentences of ``text`` as stripped, non-empty exact spans, in order.

    A sentence ends where a match of ``pattern`` ends, so the sentences cover every
    non-whitespace character of the text.
    """
    regex = re.compile(pattern) if isinstance(pattern, str) else pattern
    bounds = [0, *(m.end() for m in regex.finditer(text) if m.end() > m.start()), len(text)]
    out = []
    for start, end in zip(bounds, bounds[1:], strict=False):
        while start < end and text[start].isspace():
            start += 1
        while end > start and text[end - 1].isspace():
            end -= 1
        if end > start:
            out.append(Span(start, end))
    return out


def cosine_distances(vectors: np.ndarray) -> np.ndarray:
    """Return ``1 - cos`` between each row of unit vectors and the next (length n - 1)."""
    if len(vectors) < 2:
        return np.zeros(0, dtype=np.float64)
    sims = np.einsum("ij,ij->i", vectors[:-1], vectors[1:]).astype(np.float64)
    return cast("np.ndarray", 1.0 - np.clip(sims, -1.0, 1.0))


class SemanticChunker(TextSplitter):
    """Chunks of consecutive sentences whose meaning stays close, capped at ``chunk_size``."""

    def __init__(
        self,
        embed: Embedder | EmbedFn | str | None = None,
        buffer_size: int = 1,
        add_start_index: bool = False,
        breakpoint_threshold_type: BreakpointThresholdType = "percentile",
        breakpoint_threshold_amount: float | None = None,
        number_of_chunks: int | None = None,
        sentence_split_regex: str = DEFAULT_SENTENCE_REGEX,
        min_chunk_size: int | None = None,
        chunk_size: int = 1024,
        length_function: Callable[[str], int] = len,
        cache: EmbeddingCache | None = None,
    ) -> None:
        """Create the chunker (LangChain-experimental's parameter names, plus the sizes).

        Args:
            embed: An Embedder, a callable ``list[str] -> array (n, dim)``, a model name, or
                None for the bundled all-MiniLM-L6-v2.
            buffer_size: Sentences on each side embedded with a sentence.
            add_start_index: Put ``start_index`` in the metadata of created Documents.
            breakpoint_threshold_type: "percentile", "standard_deviation", "interquartile"
                or "gradient".
            breakpoint_threshold_amount: The threshold's amount; defaults 95 / 3 / 1.5 / 95.
            number_of_chunks: Break at the ``number_of_chunks - 1`` largest distances
                instead of at a threshold (before the size cap and the minimum apply).
            sentence_split_regex: Where sentences end (a sentence runs to the match's end).
            min_chunk_size: Merge smaller chunks into a neighbour while under the cap.
            chunk_size: The cap on every chunk, in the unit of ``length_function``.
            length_function: Measures a chunk (``len``, or a unit of :mod:`tasks.split.units`).
            cache: Embedding cache, used when ``embed`` is an Embedder or a model name.

        Raises:
            ValueError: For an unknown threshold type or inconsistent sizes.

        """
        super().__init__(
            chunk_size=chunk_size,
            chunk_overlap=0,
            length_function=length_function,
            add_start_index=add_start_index,
        )
        if breakpoint_threshold_type not in BREAKPOINT_DEFAULTS:
            raise ValueError(
                f"unknown breakpoint_threshold_type {breakpoint_threshold_type!r}; expected "
                f"one of {', '.join(BREAKPOINT_DEFAULTS)}"
            )
        if buffer_size < 0:
            raise ValueError(f"buffer_size must be >= 0, got {buffer_size}")
        if number_of_chunks is not None and number_of_chunks < 1:
            raise ValueError(f"number_of_chunks must be >= 1, got {number_of_chunks}")
        if min_chunk_size is not None and not 0 <= min_chunk_size <= chunk_size:
            raise ValueError(f"min_chunk_size must be in [0, chunk_size], got {min_chunk_size}")
        self.vectors = Vectors(embed, cache)
        self.buffer_size = buffer_size
        self.breakpoint_threshold_type: BreakpointThresholdType = breakpoint_threshold_type
        self.breakpoint_threshold_amount = (
            BREAKPOINT_DEFAULTS[breakpoint_threshold_type]
            if breakpoint_threshold_amount is None
            else float(breakpoint_threshold_amount)
        )
        self.number_of_chunks = number_of_chunks
        self.sentence_split_regex = sentence_split_regex
        self._sentence_pattern = re.compile(sentence_split_regex)
        self.min_chunk_size = min_chunk_size
        self._pieces = RecursiveCharacterTextSplitter(
            chunk_size=chunk_size, chunk_overlap=0, length_function=length_function
        )

    def settings(self) -> dict[str, Any]:
        """Return the settings that change the output, for the fingerprint."""
        return {
            **super().settings(),
            "model": self.vectors.name,
            "buffer_size": self.buffer_size,
            "threshold_type": self.breakpoint_threshold_type,
            "threshold_amount": self.breakpoint_threshold_amount,
            "number_of_chunks": self.number_of_chunks,
            "sentence_split_regex": self.sentence_split_regex,
            "min_chunk_size": self.min_chunk_size,
        }

    # -- the algorithm ------------------------------------------------------------------

    def split_spans(self, text: str) -> list[Span]:
        """Return the chunks of ``text`` as exact spans, each within ``chunk_size``."""
        measure = span_counter(self._length_function, text)
        units = self.units(text, measure)
        if not units:
            return []
        distances = self.distances(text, units)
        groups = self.groups(distances)
        size = _Sizer(units, measure)
        groups = _cap_groups(groups, distances, size, self._chunk_size)
        if self.min_chunk_size:
            groups = _merge_small(groups, distances, size, self.min_chunk_size, self._chunk_size)
        return [Span(units[a].start, units[b].end) for a, b in groups]

    def units(self, text: str, measure: SpanCounter | None) -> list[Span]:
        """Return the sentences, each over the cap split into recursive pieces."""
        return capped_sentences(
            text, self._sentence_pattern, self._chunk_size, self._pieces, measure
        )

    def distances(self, text: str, units: Sequence[Span]) -> np.ndarray:
        """Return the cosine distance between each unit's buffer window and the next's."""
        if len(units) < 2:
            return np.zeros(0, dtype=np.float64)
        pieces = [text[u.start : u.end] for u in units]
        k = self.buffer_size
        windows = [" ".join(pieces[max(0, i - k) : i + k + 1]) for i in range(len(pieces))]
        return cosine_distances(self.vectors(windows))

    def breakpoints(self, distances: np.ndarray) -> list[int]:
        """Return the indices ``i`` at which to break (between unit ``i`` and ``i + 1``)."""
        n = len(distances)
        if n == 0:
            return []
        if self.number_of_chunks is not None:
            k = min(self.number_of_chunks - 1, n)
            order = sorted(range(n), key=lambda i: (-distances[i], i))
            return sorted(order[:k])
        scores, threshold = self.threshold(distances)
        return [i for i in range(n) if scores[i] > threshold]

    def threshold(self, distances: np.ndarray) -> tuple[np.ndarray, float]:
        """Return the scores compared with the threshold, and the threshold (LangChain's)."""
        amount, kind = self.breakpoint_threshold_amount, self.breakpoint_threshold_type
        if kind == "percentile":
            return distances, float(np.percentile(distances, amount))
        if kind == "standard_deviation":
            return distances, float(np.mean(distances) + amount * np.std(distances))
        if kind == "interquartile":
            q1, q3 = np.percentile(distances, [25, 75])
            return distances, float(np.mean(distances) + amount * (q3 - q1))
        gradient = np.gradient(distances) if len(distances) > 1 else distances
        return gradient, float(np.percentile(gradient, amount))

    def groups(self, distances: np.ndarray) -> list[tuple[int, int]]:
        """Return ``(first, last)`` unit indices of the groups the breakpoints make."""
        out, first = [], 0
        for i in self.breakpoints(distances):
            out.append((first, i))
            first = i + 1
        out.append((first, len(distances)))
        return out


class _Sizer:
    """The size of the span from unit ``a`` to unit ``b`` (memoised)."""

    def __init__(self, units: Sequence[Span], measure: SpanCounter | None) -> None:
        self.units, self.measure = units, measure
        self.memo: dict[tuple[int, int], int] = {}

    def __call__(self, a: int, b: int) -> int:
        start, end = self.units[a].start, self.units[b].end
        if self.measure is None:
            return end - start
        key = (a, b)
        if key not in self.memo:
            self.memo[key] = self.measure(start, end)
        return self.memo[key]


def _cap_groups(
    groups: list[tuple[int, int]], distances: np.ndarray, size: _Sizer, cap: int
) -> list[tuple[int, int]]:
    """Split every group over the cap at its largest inner distance, until all fit.

    Every single unit fits (see :meth:`SemanticChunker.units`), so this terminates.
    """
    out: list[tuple[int, int]] = []
    for group in groups:
        stack = [group]
        while stack:
            a, b = stack.pop()
            if a == b or size(a, b) <= cap:
                out.append((a, b))
                continue
            i = a + int(np.argmax(distances[a:b]))  # the first of the largest distances
            stack += [(i + 1, b), (a, i)]  # left first
    return out


def _merge_small(
    groups: list[tuple[int, int]],
    distances: np.ndarray,
    size: _Sizer,
    minimum: int,
    cap: int,
) -> list[tuple[int, int]]:
    """Merge each group under ``minimum`` into a neighbour, the closer one first, under the cap."""
    groups = list(groups)
    i = 0
    while i < len(groups):
        a, b = groups[i]
        if size(a, b) >= minimum:
            i += 1
            continue
        options = []
        if i > 0:
            options.append((distances[a - 1], -1))
        if i + 1 < len(groups):
            options.append((distances[b], 1))
        for _, side in sorted(options):
            if side < 0 and size(groups[i - 1][0], b) <= cap:
                groups[i - 1 : i + 1] = [(groups[i - 1][0], b)]
                i -= 1
                break
            if side > 0 and size(a, groups[i + 1][1]) <= cap:
                groups[i : i + 2] = [(a, groups[i + 1][1])]
                break
        else:
            i += 1
    return groups

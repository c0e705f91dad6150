"""`RecursiveCharacterTextSplitter`: LangChain's recursive algorithm, on exact offsets.

Try the separators in order; split on the first one that occurs; merge the small pieces
into chunks up to ``chunk_size``; recurse into pieces that are still too large with the
remaining separators. The chunks are those of langchain-text-splitters for the same
parameters (a differential test checks it on real corpora), with three deliberate
differences, all about exactness:

- chunk text is always a slice of the source, and ``start_index`` is its exact offset;
- with ``keep_separator=False`` the length between two pieces is that of the text really
  between them (LangChain re-inserts one separator, even when it dropped several, and for a
  regex separator inserts the pattern itself);
- a chunk still over ``chunk_size`` (a piece left when the separators run out, or, with a token
  unit, pieces whose tokens add up but whose joined text has more) is cut into windows
  instead of being returned whole with a warning.

Speed: lengths in characters are span arithmetic (no slicing), literal separators are found
with ``str.split`` on the range, and a run of single characters (the ``""`` separator) is cut
into windows in closed form. Token units measure spans from one tokenization per document
(:mod:`tasks.split.units`).
"""

from __future__ import annotations

import re
from bisect import bisect_left, bisect_right
from collections.abc import Callable
from itertools import accumulate
from typing import Any

from tasks.split.base import KeepSeparator, Span, TextSplitter
from tasks.split.counting import SpanCounter
from tasks.split.languages import SEPARATORS, as_language
from tasks.split.units import span_counter

#: LangChain's default separators, most to least preferred.
DEFAULT_SEPARATORS: tuple[str, ...] = ("\n\n", "\n", " ", "")
#: Characters that make a separator a real regular expression (otherwise: a literal).
_REGEX_SYNTAX = frozenset(".^$*+?{}[]\\|()")


def split_with_regex(
    text: str, start: int, end: int, pattern: str, keep_separator: KeepSeparator
) -> list[tuple[int, int]]:
    """Split ``text[start:end]`` on ``pattern`` and return the non-empty pieces as offsets.

    Same pieces as LangChain's ``_split_text_with_regex``: with ``keep_separator`` the
    separator is glued to the start (``True``/"start") or the end ("end") of a piece;
    otherwise it is dropped. An empty pattern splits into single characters.
    """
    if not pattern:
        return [(i, i + 1) for i in range(start, end)]
    sub = text[start:end]
    pieces: list[tuple[int, int]] = []
    last = 0  # end of the previous match, relative to sub
    sep_start = 0  # start of the separator that precedes the current piece (for "start")
    for match in re.finditer(pattern, sub):
        m_start, m_end = match.span()
        if keep_separator == "end":
            pieces.append((last, m_end))
        elif keep_separator:
            pieces.append((sep_start, m_start))
            sep_start = m_start
        else:
            pieces.append((last, m_start))
        last = m_end
    pieces.append((sep_start if keep_separator and keep_separator != "end" else last, len(sub)))
    return [(start + s, start + e) for s, e in pieces if e > s]


def literal_bounds(
    text: str, start: int, end: int, separator: str, keep_separator: KeepSeparator
) -> list[int]:
    """Return the boundaries of the pieces of ``text[start:end]`` split on a literal separator.

    Only for ``keep_separator`` true or "end", where pieces are contiguous: piece ``i`` is
    ``[bounds[i], bounds[i + 1])``; an empty first (or, for "end", last) piece is dropped.
    """
    lengths = list(map(len, text[start:end].split(separator)))
    if len(lengths) == 1:  # the separator does not occur: one piece
        return [start, end]
    width = len(separator)
    if keep_separator == "end":
        bounds = list(accumulate((n + width for n in lengths[:-1]), initial=start))
        if bounds[-1] < end:
            bounds.append(end)
    else:
        bounds = list(accumulate((width + n for n in lengths[1:-1]), initial=start + lengths[0]))
        bounds.append(end)
        if lengths[0]:
            bounds.insert(0, start)
    return bounds


class RecursiveCharacterTextSplitter(TextSplitter):
    """Split text by trying separators in order, recursively (langchain-text-splitters API)."""

    def __init__(
        self,
        separators: list[str] | None = None,
        keep_separator: KeepSeparator = True,
        is_separator_regex: bool = False,
        chunk_size: int = 4000,
        chunk_overlap: int = 200,
        length_function: Callable[[str], int] = len,
        add_start_index: bool = False,
        strip_whitespace: bool = True,
    ) -> None:
        """Create the splitter; parameters and defaults as in LangChain.

        Args:
            separators: Separators to try, most preferred first (default paragraphs, lines,
                words, characters).
            keep_separator: Keep separators at the start (``True``/"start") or end of pieces.
            is_separator_regex: Treat separators as regular expressions.
            chunk_size: Maximum chunk size in the unit of ``length_function``.
            chunk_overlap: Target overlap between neighbouring chunks.
            length_function: Measures a piece of text (``len`` counts characters).
            add_start_index: Put ``start_index`` in created Documents' metadata.
            strip_whitespace: Strip whitespace from both ends of every chunk.

        """
        super().__init__(
            chunk_size=chunk_size,
            chunk_overlap=chunk_overlap,
            length_function=length_function,
            keep_separator=keep_separator,
            add_start_index=add_start_index,
            strip_whitespace=strip_whitespace,
        )
        self._separators = list(separators) if separators else list(DEFAULT_SEPARATORS)
        self._is_separator_regex = is_separator_regex
        # (separator, literal text or None for a real regex, compiled pattern)
        self._compiled = [self._compile(s) for s in self._separators]

    @classmethod
    def from_language(cls, language: Any, **kwargs: Any) -> RecursiveCharacterTextSplitter:
        """Return a splitter with the separators of ``language`` (regular expressions).

        Args:
            language: A :class:`~tasks.split.languages.Language`, LangChain's, or its value.
            **kwargs: Other constructor parameters (``chunk_size``, ``length_function``...).

        """
        separators = cls.get_separators_for_language(language)
        return cls(separators=separators, is_separator_regex=True, **kwargs)

    @staticmethod
    def get_separators_for_language(language: Any) -> list[str]:
        """Return the separators of ``language`` (see :mod:`tasks.split.languages`)."""
        return list(SEPARATORS[as_language(language)])

    def settings(self) -> dict[str, object]:
        """Return the settings that change the output, for the fingerprint."""
        return {
            **super().settings(),
            "separators": self._separators,
            "is_separator_regex": self._is_separator_regex,
        }

    def split_spans(self, text: str) -> list[Span]:
        """Return the chunks of ``text`` as exact spans."""
        short = self._short_text(text)
        if short is not None:
            return short
        return self.split_range(text, 0, len(text), span_counter(self._length_function, text))

    def _short_text(self, text: str) -> list[Span] | None:
        """Return the one chunk of a text with fewer bytes than ``chunk_size`` tokens, or None.

        A byte-level BPE token holds at least one byte, so every piece, and all of them
        together, are under the limit: the merge keeps the whole (stripped) text, with the
        separators kept. One encode of the chunk instead of binding a span counter.
        """
        unit, size = self._length_function, self._chunk_size
        if (
            not getattr(unit, "tokens_at_most_bytes", False)
            or not self._keep_separator
            or len(text) >= size
            or len(text.encode("utf-8", "surrogatepass")) >= size
        ):
            return None
        start, end = self._strip(text, 0, len(text))
        return [Span(start, end, n_tokens=unit(text[start:end]))] if end > start else []

    def split_range(
        self, text: str, start: int, end: int, measure: SpanCounter | None
    ) -> list[Span]:
        """Split ``text[start:end]`` (other splitters use this for sections of a document).

        Args:
            text: The whole document text (spans are offsets into it).
            start: Start of the range to split.
            end: End of the range.
            measure: The document's span counter, or None for characters.

        """
        out: list[Span] = []
        if end > start:
            self._split(text, start, end, 0, measure, out)
        return self._finish(text, out, measure)

    # -- internals --------------------------------------------------------------------

    def _compile(self, separator: str) -> tuple[str, str | None, re.Pattern[str] | None]:
        if not separator:
            return separator, "", None
        if not self._is_separator_regex:
            return separator, separator, None
        if not _REGEX_SYNTAX.intersection(separator):
            return separator, separator, None  # a regex that can only match itself
        return separator, None, re.compile(separator)

    def _choose(self, text: str, start: int, end: int, first: int) -> int:
        """Return the index of the first separator that occurs (LangChain's choice)."""
        compiled = self._compiled
        last = len(compiled) - 1
        for i in range(first, last + 1):
            separator, literal, pattern = compiled[i]
            if not separator:
                return i
            if literal is not None:
                if text.find(literal, start, end) >= 0:
                    return i
            elif pattern is not None and pattern.search(text[start:end]):
                return i
        return last

    def _split(
        self,
        text: str,
        start: int,
        end: int,
        first: int,
        measure: SpanCounter | None,
        out: list[Span],
    ) -> None:
        """Split ``text[start:end]`` with separators ``first..`` (LangChain's ``_split_text``)."""
        index = self._choose(text, start, end, first)
        separator, literal, _ = self._compiled[index]
        remaining = index + 1 if separator and index + 1 < len(self._compiled) else -1
        keep = self._keep_separator
        if literal == "" and (
            measure is None or (getattr(measure, "ascii_is_one_token", False) and text.isascii())
        ):
            self._char_windows(text, start, end, measure, out)
            return
        if keep and literal:
            bounds = literal_bounds(text, start, end, literal, keep)
            if measure is None:
                prefix = bounds  # piece lengths are bound differences
            else:
                many = getattr(measure, "counts", None)
                counts = (
                    many(bounds)
                    if many is not None
                    else [measure(bounds[i], bounds[i + 1]) for i in range(len(bounds) - 1)]
                )
                prefix = list(accumulate(counts, initial=0))
            self._run(text, bounds, prefix, remaining, measure, out)
            return
        pattern = re.escape(literal) if literal is not None else separator
        pieces = split_with_regex(text, start, end, pattern, keep)
        if measure is None:
            lengths = [e - s for s, e in pieces]
        else:
            many = getattr(measure, "count_spans", None)
            starts, ends = [s for s, _ in pieces], [e for _, e in pieces]
            lengths = many(starts, ends) if many else [measure(s, e) for s, e in pieces]
        size = self._chunk_size
        good: list[tuple[int, int, int]] = []
        for (p_start, p_end), n in zip(pieces, lengths, strict=True):
            if n < size:
                good.append((p_start, p_end, n))
                continue
            if good:
                self._merge(text, good, measure, out)
                good = []
            if remaining >= 0:
                self._split(text, p_start, p_end, remaining, measure, out)
            else:
                self._cut(text, p_start, p_end, measure, out)
        if good:
            self._merge(text, good, measure, out)

    def _run(
        self,
        text: str,
        bounds: list[int],
        prefix: list[int],
        remaining: int,
        measure: SpanCounter | None,
        out: list[Span],
    ) -> None:
        """Merge contiguous pieces (the hot path: separators kept).

        Piece ``i`` is ``[bounds[i], bounds[i + 1])`` and pieces ``i..j-1`` measure
        ``prefix[j] - prefix[i]`` (for characters ``prefix`` is ``bounds`` itself). Pieces as
        large as ``chunk_size`` are split further; the runs between them are merged.
        """
        size = self._chunk_size
        first = 0
        for i in range(len(bounds) - 1):
            if prefix[i + 1] - prefix[i] >= size:
                if i > first:
                    self._merge_run(text, bounds, prefix, first, i, out)
                if remaining >= 0:
                    self._split(text, bounds[i], bounds[i + 1], remaining, measure, out)
                else:
                    self._cut(text, bounds[i], bounds[i + 1], measure, out)
                first = i + 1
        if len(bounds) - 1 > first:
            self._merge_run(text, bounds, prefix, first, len(bounds) - 1, out)

    def _merge_run(
        self,
        text: str,
        bounds: list[int],
        prefix: list[int],
        first: int,
        stop: int,
        out: list[Span],
    ) -> None:
        """``_merge_splits`` over pieces ``first..stop-1``, one step per chunk (bisection).

        LangChain adds pieces while the window fits, emits it, then pops pieces from its
        front while it is longer than ``chunk_overlap`` or the next piece would not fit;
        both conditions only weaken as the front advances, so each jump is a bisection.
        """
        size, overlap = self._chunk_size, self._chunk_overlap
        emit = self._emit
        head = first
        while True:
            # the first piece that does not fit in the window starting at head
            j = bisect_right(prefix, prefix[head] + size, head + 1, stop + 1) - 1
            if j >= stop:
                emit(text, bounds[head], bounds[stop], out)
                return
            emit(text, bounds[head], bounds[j], out)
            keep_overlap = bisect_left(prefix, prefix[j] - overlap, head, j)
            fits = bisect_left(prefix, prefix[j + 1] - size, head, j)
            nonempty = bisect_left(prefix, prefix[j], head, j)
            head = max(keep_overlap, min(fits, nonempty))

    def _char_windows(
        self, text: str, start: int, end: int, measure: SpanCounter | None, out: list[Span]
    ) -> None:
        """Merge single characters (the ``""`` separator) of length 1 each, in closed form.

        ``_merge_splits`` on pieces of length 1 emits ``chunk_size`` windows that start
        ``chunk_size - min(chunk_overlap, chunk_size - 1)`` apart, then the rest. (Every
        ASCII character is one tiktoken token, so this serves tiktoken units too.)
        """
        size = self._chunk_size
        if size == 1:  # every character is a piece too large to merge
            self._cut(text, start, end, measure, out)
            return
        step = size - min(self._chunk_overlap, size - 1)
        s = start
        while s + size < end:
            self._emit(text, s, s + size, out)
            s += step
        self._emit(text, s, end, out)

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
- a piece still over ``chunk_size`` after the last separator is cut into ``chunk_size``
  windows instead of being returned whole with a warning.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from tasks.split.base import KeepSeparator, Span, TextSplitter

#: LangChain's default separators, most to least preferred.
DEFAULT_SEPARATORS: tuple[str, ...] = ("\n\n", "\n", " ", "")


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

    def settings(self) -> dict[str, object]:
        """Return the settings that change the output, for the fingerprint."""
        return {
            **super().settings(),
            "separators": self._separators,
            "is_separator_regex": self._is_separator_regex,
        }

    def split_spans(self, text: str) -> list[Span]:
        """Return the chunks of ``text`` as exact spans."""
        return self._split(text, 0, len(text), self._separators)

    def _pattern(self, separator: str) -> str:
        return separator if self._is_separator_regex else re.escape(separator)

    def _split(self, text: str, start: int, end: int, separators: list[str]) -> list[Span]:
        """Split ``text[start:end]`` with ``separators`` (LangChain's ``_split_text``)."""
        separator, remaining = separators[-1], []
        sub = text[start:end]
        for i, candidate in enumerate(separators):
            if not candidate:
                separator = candidate
                break
            if re.search(self._pattern(candidate), sub):
                separator, remaining = candidate, separators[i + 1 :]
                break
        pieces = split_with_regex(text, start, end, self._pattern(separator), self._keep_separator)

        spans: list[Span] = []
        good: list[tuple[int, int]] = []
        length = self._length_function
        for p_start, p_end in pieces:
            if length(text[p_start:p_end]) < self._chunk_size:
                good.append((p_start, p_end))
                continue
            if good:
                spans.extend(self._merge_spans(text, good))
                good = []
            if remaining:
                spans.extend(self._split(text, p_start, p_end, remaining))
            else:
                spans.extend(self._cut(text, p_start, p_end))
        if good:
            spans.extend(self._merge_spans(text, good))
        return spans

    def _cut(self, text: str, start: int, end: int) -> list[Span]:
        """Cut an indivisible piece into windows of at most ``chunk_size`` (no overlap).

        Reached only when the separators run out without an empty one; LangChain returns
        such a piece whole, over the limit.
        """
        spans: list[Span] = []
        length = self._length_function
        while start < end:
            if length(text[start:end]) <= self._chunk_size:
                stop = end
            else:  # the longest prefix within the limit (binary search: works for any unit)
                lo, hi = start + 1, end
                while lo < hi:
                    mid = (lo + hi + 1) // 2
                    if length(text[start:mid]) <= self._chunk_size:
                        lo = mid
                    else:
                        hi = mid - 1
                stop = lo
            self._emit(text, start, stop, spans)
            start = stop
        return spans

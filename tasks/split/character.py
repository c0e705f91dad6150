"""`CharacterTextSplitter`: split on one separator, merge the pieces (LangChain's API).

The pieces and merging decisions are LangChain's, on exact offsets, with the differences of
the whole suite (see :mod:`tasks.split.recursive`): without ``keep_separator`` the length
between two pieces is that of the text really between them (LangChain counts one separator,
for a regex the length of the pattern itself), and a piece still over ``chunk_size`` is cut
into windows instead of being returned whole with a warning.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from tasks.split.base import KeepSeparator, Span, TextSplitter
from tasks.split.recursive import split_with_regex
from tasks.split.units import span_counter


class CharacterTextSplitter(TextSplitter):
    """Split text on one separator (a string or a regular expression) and merge the pieces."""

    def __init__(
        self,
        separator: str = "\n\n",
        is_separator_regex: bool = False,
        chunk_size: int = 4000,
        chunk_overlap: int = 200,
        length_function: Callable[[str], int] = len,
        keep_separator: KeepSeparator = False,
        add_start_index: bool = False,
        strip_whitespace: bool = True,
    ) -> None:
        """Create the splitter; parameters and defaults as in LangChain.

        Args:
            separator: Where to split (default: blank lines).
            is_separator_regex: Treat ``separator`` as a regular expression.
            chunk_size: Maximum chunk size in the unit of ``length_function``.
            chunk_overlap: Target overlap between neighbouring chunks.
            length_function: Measures a piece of text (``len`` counts characters).
            keep_separator: Keep the separator at the start (``True``/"start") or end of
                pieces.
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
        self._separator = separator
        self._is_separator_regex = is_separator_regex

    def settings(self) -> dict[str, object]:
        """Return the settings that change the output, for the fingerprint."""
        return {
            **super().settings(),
            "separator": self._separator,
            "is_separator_regex": self._is_separator_regex,
        }

    def split_spans(self, text: str) -> list[Span]:
        """Return the chunks of ``text`` as exact spans."""
        if not text:
            return []
        pattern = self._separator if self._is_separator_regex else re.escape(self._separator)
        pieces = split_with_regex(text, 0, len(text), pattern, self._keep_separator)
        measure = span_counter(self._length_function, text)
        if measure is None:
            lengths = [end - start for start, end in pieces]
        else:
            many = getattr(measure, "count_spans", None)
            starts, ends = [s for s, _ in pieces], [e for _, e in pieces]
            lengths = many(starts, ends) if many else [measure(s, e) for s, e in pieces]
        out: list[Span] = []
        self._merge(
            text, [(s, e, n) for (s, e), n in zip(pieces, lengths, strict=True)], measure, out
        )
        return self._finish(text, out, measure)
